import Foundation

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
        let name = ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let pool = name.hasSuffix("-qos") || name.hasSuffix("qos.overcommit") || name.hasPrefix("com.apple.root")
        poolNames.value = ThreadLocalBox(pool ? name : "")
        return pool ? name : nil
    }

    /// Where a report also goes (`TERMIND_BLOCKING_CHECK_LOG`, appended): a test's server
    /// writes its standard error into a folder the test removes.
    static let logPath = ProcessInfo.processInfo.environment["TERMIND_BLOCKING_CHECK_LOG"]

    private static func report(_ what: StaticString, _ thread: String) {
        let stack = Thread.callStackSymbols.dropFirst(2).prefix(40).joined(separator: "\n  ")
        let text = Data("termind: blocking work (\(what)) on a thread of Swift's cooperative pool (\(thread)):\n  \(stack)\n".utf8)
        FileHandle.standardError.write(text)
        if let logPath, let log = FileHandle(forWritingAtPath: logPath) ?? (FileManager.default.createFile(atPath: logPath, contents: nil) ? FileHandle(forWritingAtPath: logPath) : nil) {
            log.seekToEndOfFile()
            log.write(text)
            try? log.close()
        }
        if mode == .abort { abort() }
    }
}
