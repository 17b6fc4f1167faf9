import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// The one log writer of a process. It owns a single file descriptor behind a lock so
/// lines from concurrent features never interleave. A disabled sink writes nothing and
/// costs one comparison per call. There is no global instance: the host creates one and
/// hands `Logger`s derived from it to the kernel and to each feature.
public final class LogSink: Sendable {
    /// Held while a line is written, so that lines never interleave.
    private let writing = Mutex(())
    private let fd: Int32
    private let ownsDescriptor: Bool
    public let minimumLevel: LogLevel?

    /// A sink that drops everything (the default: debug logging is off).
    public static func disabled() -> LogSink { LogSink(fd: -1, owns: false, level: nil) }

    /// Writes lines at `level` and above to an already open descriptor (e.g. stderr).
    public static func descriptor(_ fd: Int32, level: LogLevel) -> LogSink {
        LogSink(fd: fd, owns: false, level: level)
    }

    /// Appends to `path`, creating it with mode 0600.
    public static func file(at path: String, level: LogLevel) throws -> LogSink {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw TermindError(.logOpenFailed, "Cannot open the log file named by TERMIND_LOG_FILE or --log-file: \(String(cString: strerror(errno))).")
        }
        return LogSink(fd: fd, owns: true, level: level)
    }

    private init(fd: Int32, owns: Bool, level: LogLevel?) {
        self.fd = fd
        self.ownsDescriptor = owns
        self.minimumLevel = level
    }

    deinit { if ownsDescriptor { close(fd) } }

    public func isEnabled(_ level: LogLevel) -> Bool {
        guard let minimumLevel else { return false }
        return level >= minimumLevel
    }

    func write(level: LogLevel, label: String, code: LogCode, metadata: KeyValuePairs<String, LogValue>) {
        guard isEnabled(level) else { return }
        var line = "\(LogSink.timestamp()) \(level.name) \(LogValue.sanitizeIdentifier(label)) \(code.description)"
        for (key, value) in metadata {
            line += " \(LogValue.sanitizeIdentifier(key))=\(value.description)"
        }
        line += "\n"
        writing.withLock { _ in FileText.write(line, to: fd) }
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(printf: "%04ld-%02ld-%02ldT%02ld:%02ld:%02ld.%03ldZ",
                      Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                      Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(now.tv_nsec / 1_000_000))
    }
}
