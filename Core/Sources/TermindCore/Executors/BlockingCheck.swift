import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Checks that blocking work stays off Swift's cooperative pool. Each blocking primitive (an
/// SQLite statement, a name lookup, a connect, a local file's read or write in a transfer, a
/// key derivation) calls `BlockingCheck.blocking(_:)` first. On Linux the pool is
/// libdispatch's worker threads, which also run Dispatch's global queues; they carry their
/// root queue's name, cut to its last 15 bytes ("r-initiated-qos", "-qos.overcommit"). A
/// thread of a `BlockingExecutor` is never an offence, whatever name it inherited.
///
/// Debug builds only, and only when `TERMIND_BLOCKING_CHECK` is set: `log` writes each
/// offence to standard error (and `TERMIND_BLOCKING_CHECK_LOG`) with the stack; `abort`
/// writes it and ends the process (the
/// tests' servers run so, so a test of exec, a transfer or metrics inside `serve` fails on
/// the first one). Release builds compile the check away.
public enum BlockingCheck {
    public enum Mode: String, Sendable { case log, abort }

    /// What `TERMIND_BLOCKING_CHECK` asks for (nil: no check).
    public static let mode: Mode? = ProcessInfo.processInfo.environment["TERMIND_BLOCKING_CHECK"].flatMap(Mode.init(rawValue:))

    /// Says that `what` may block: an offence on a thread of the cooperative pool.
    @inline(__always)
    public static func blocking(_ what: StaticString) {
        #if DEBUG
        guard mode != nil, let pool = offendingThread else { return }
        report(what, pool)
        #endif
    }

    /// The calling thread's name when blocking here would be an offence (a worker of the
    /// pool that is not a BlockingExecutor's or a dedicated thread), else nil.
    public static var offendingThread: String? {
        BlockingExecutor.currentExecutorName == nil ? poolThreadName() : nil
    }

    /// Says that the calling thread is a thread of its own (a command's invocation thread, a
    /// task executor's), where blocking is its purpose: a thread started from a worker of the
    /// pool carries the worker's name, so the name alone cannot tell.
    public static func dedicatedThread() {
        poolNames.value = ThreadLocalBox("")
    }

    /// This thread's name if it is a worker of the pool, "" if not (once known).
    private static let poolNames = ThreadLocal<ThreadLocalBox<String>>()

    /// The name of this thread when it is one of libdispatch's workers (read once per thread).
    static func poolThreadName() -> String? {
        if let known = poolNames.value?.value { return known.isEmpty ? nil : known }
        let name = ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmedWhitespaceAndNewlines
        let pool = name.hasSuffix("-qos") || name.hasSuffix("qos.overcommit") || name.hasPrefix("com.apple.root")
        poolNames.value = ThreadLocalBox(pool ? name : "")
        return pool ? name : nil
    }

    /// Where a report also goes (`TERMIND_BLOCKING_CHECK_LOG`, appended): a test's server
    /// writes its standard error into a folder the test removes.
    static let logPath = ProcessInfo.processInfo.environment["TERMIND_BLOCKING_CHECK_LOG"]

    private static func report(_ what: StaticString, _ thread: String) {
        let stack = callStack().dropFirst(2).prefix(40).joined(separator: "\n  ")
        let text = Array("termind: blocking work (\(what)) on a thread of Swift's cooperative pool (\(thread)):\n  \(stack)\n".utf8)
        FileText.write(text, to: STDERR_FILENO)
        if let logPath {
            let fd = open(logPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            if fd >= 0 {
                FileText.write(text, to: fd)
                close(fd)
            }
        }
        if mode == .abort { abort() }
    }

    /// This thread's stack as glibc's `backtrace_symbols` names it (what Foundation's
    /// `Thread.callStackSymbols` gives on Linux), found at run time: Swift's Glibc does not
    /// import execinfo.h.
    private static func callStack() -> [String] {
        typealias Backtrace = @convention(c) (UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32) -> Int32
        typealias Symbols = @convention(c) (UnsafePointer<UnsafeMutableRawPointer?>?, Int32) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        guard let take = dlsym(nil, "backtrace"), let name = dlsym(nil, "backtrace_symbols") else { return [] }
        var frames = [UnsafeMutableRawPointer?](repeating: nil, count: 64)
        let count = unsafeBitCast(take, to: Backtrace.self)(&frames, Int32(frames.count))
        guard count > 0, let symbols = unsafeBitCast(name, to: Symbols.self)(&frames, count) else { return [] }
        defer { free(symbols) }
        return (0..<Int(count)).map { symbols[$0].map { String(cString: $0) } ?? "?" }
    }
}
