import Foundation

/// Runs blocking work (C plugin calls, anything that may sleep in the kernel or wait on
/// I/O) on dedicated threads of its own, never on Swift's cooperative pool or
/// Dispatch's shared worker threads, so that work which blocks never delays anything
/// else. Bounded both ways: at most `threadLimit` jobs run at once (threads are started
/// on demand and then kept), at most `queueLimit` more wait in FIFO order, and a job
/// beyond that is refused at once rather than queued without bound.
public final class BlockingExecutor: @unchecked Sendable {
    public let name: String
    public let threadLimit: Int
    public let queueLimit: Int

    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var threads = 0
    private var idle = 0
    private var active = 0

    public init(name: String, threadLimit: Int, queueLimit: Int) {
        precondition(threadLimit >= 1 && queueLimit >= 0)
        self.name = name
        self.threadLimit = threadLimit
        self.queueLimit = queueLimit
    }

    /// Jobs running now and jobs waiting for a thread.
    public var load: (running: Int, queued: Int) {
        condition.withLock { (active, jobs.count - head) }
    }

    /// Queues `job`; false (and nothing queued) when `threadLimit` jobs run and
    /// `queueLimit` wait already.
    public func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let waiting = jobs.count - head
        guard active + waiting < threadLimit + queueLimit else { return false }
        jobs.append(job)
        if idle > 0 { condition.signal() }
        // More jobs waiting than idle threads to take them: start another thread.
        if jobs.count - head > idle && threads < threadLimit {
            threads += 1
            let thread = Thread { [self] in work() }
            thread.name = name
            thread.start()
        }
        return true
    }

    /// Runs `body` on one of the executor's threads and returns its result; throws
    /// `busy()` at once when the executor is full.
    public func run<T: Sendable>(busy: @autoclosure () -> any Error, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let error = busy()
        return try await withCheckedThrowingContinuation { continuation in
            let accepted = submit { continuation.resume(with: Result { try body() }) }
            if !accepted { continuation.resume(throwing: error) }
        }
    }

    private func work() {
        while true {
            condition.lock()
            while head == jobs.count {
                idle += 1
                condition.wait()
                idle -= 1
            }
            let job = jobs[head]
            head += 1
            // Drop consumed slots once they dominate, so the array does not grow.
            if head >= 64 && head * 2 >= jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            active += 1
            condition.unlock()
            job()
            condition.withLock { active -= 1 }
        }
    }

    /// Runs `body` on a new thread of its own (a plugin's start and stop, which must not
    /// wait behind its calls).
    public static func detached<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = name
            thread.start()
        }
    }
}
