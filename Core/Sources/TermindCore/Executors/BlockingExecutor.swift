import Dispatch
import FoundationEssentials
import Synchronization

/// Runs blocking work (C plugin calls, anything that may sleep in the kernel or wait on
/// I/O) on dedicated threads of its own, never on Swift's cooperative pool or
/// Dispatch's shared worker threads, so that work which blocks never delays anything
/// else. Bounded both ways: at most `threadLimit` jobs run at once (threads are started
/// on demand and end after `idleSeconds` without work), at most `queueLimit` more wait in
/// FIFO order, and a job beyond that is refused at once rather than queued without bound.
/// A caller of `run` resumes only after its job's place is free again.
///
public final class BlockingExecutor: Sendable {
    public let name: String
    public let threadLimit: Int
    public let queueLimit: Int

    /// A job, and what to do once its place is given back (resume its caller).
    private typealias Job = @Sendable () -> (@Sendable () -> Void)?
    /// What a taken job's slot holds until the slots are dropped.
    private static let consumed: Job = { nil }

    /// An idle thread ends after this long without work.
    public let idleSeconds: TimeInterval
    private let queue = ConditionLock(Queue())

    /// The jobs waiting (from `head` on), and the threads: started, idle, running a job.
    private struct Queue {
        var jobs: [Job] = []
        var head = 0
        var threads = 0
        var idle = 0
        var active = 0
        var waiting: Int { jobs.count - head }
    }

    /// Core's executor for blocking work no other executor owns (features' blocking
    /// handlers, file reads). Each kind of work that can stall for long has its own, so one
    /// kind piling up never starves another: `store` (SQLite), `crypto` (key derivation and
    /// generation), and the SSH transport's resolver and connector (name lookups that hang
    /// for glibc's 60 s, connects). 16 threads, 1,024 waiting; beyond that a job is refused
    /// with `blocking.busy`.
    public static let core = BlockingExecutor(name: "termind.blocking", threadLimit: 16, queueLimit: 1024)

    /// The store's executor: SQLite statements (one connection a database, serialized by
    /// its lock, so a few threads suffice), never behind a key derivation or a lookup.
    public static let store = BlockingExecutor(name: "termind.store", threadLimit: 4, queueLimit: 4096)

    /// Key derivation (scrypt, bcrypt_pbkdf) and key generation: CPU for tens to hundreds of
    /// milliseconds each, two at a time on this many cores.
    public static let crypto = BlockingExecutor(name: "termind.crypto", threadLimit: 2, queueLimit: 256)

    /// Runs `body` on `core`, failing with `blocking.busy` when it is full.
    @discardableResult
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await core.run(body)
    }

    /// Runs `body` on this executor, failing with `blocking.busy` when it is full.
    @discardableResult
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await run(busy: TermindError(.blockingBusy, "termind has too much blocking work queued (\(name): \(queueLimit) jobs wait); try again."), body)
    }

    public init(name: String, threadLimit: Int, queueLimit: Int, idleSeconds: TimeInterval = 30) {
        precondition(threadLimit >= 1 && queueLimit >= 0)
        self.name = name
        self.threadLimit = threadLimit
        self.queueLimit = queueLimit
        self.idleSeconds = idleSeconds
    }

    /// Threads the executor has now (busy or idle).
    public var threadCount: Int { queue.withLock { $0.threads } }

    /// Jobs running now and jobs waiting for a thread.
    public var load: (running: Int, queued: Int) {
        queue.withLock { ($0.active, $0.waiting) }
    }

    /// Queues `job`; false (and nothing queued) when `threadLimit` jobs run and
    /// `queueLimit` wait already.
    public func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        enqueue { job(); return nil }
    }

    private func enqueue(_ job: @escaping Job) -> Bool {
        let (accepted, startThread) = queue.withLock { q in
            guard q.active + q.waiting < threadLimit + queueLimit else { return (false, false) }
            q.jobs.append(job)
            if q.idle > 0 { queue.signal() }
            // More jobs waiting than idle threads to take them: start another thread.
            guard q.waiting > q.idle && q.threads < threadLimit else { return (true, false) }
            q.threads += 1
            return (true, true)
        }
        if startThread {
            SystemThread.named(name) { [self] in work() }.start()
        }
        return accepted
    }

    /// Runs `body` on one of the executor's threads and returns its result; throws
    /// `busy()` at once when the executor is full.
    /// The caller's task being cancelled (its client went away) is seen by the job through
    /// `checkCancellation()`; a job that never asks runs to its end.
    public func run<T: Sendable>(busy: @autoclosure () -> any Error, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let error = busy()
        let token = CancellationToken()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let accepted = enqueue {
                    Self.currentToken = token
                    defer { Self.currentToken = nil }
                    let result = Result { try body() }
                    return { continuation.resume(with: result) }
                }
                if !accepted { continuation.resume(throwing: error) }
            }
        } onCancel: {
            token.cancel()
        }
    }

    /// Throws `CancellationError` when the task that queued the running job was cancelled:
    /// for long blocking work to call between steps (a no-op outside an executor's job).
    public static func checkCancellation() throws {
        if currentToken?.isCancelled == true { throw CancellationError() }
    }

    /// The job this thread runs now.
    private static var currentToken: CancellationToken? {
        get { tokens.value }
        set { tokens.value = newValue }
    }
    private static let tokens = ThreadLocal<CancellationToken>()

    /// The name of the executor whose thread runs the caller, or nil (a cooperative-pool
    /// thread, the main thread): lets code and tests check where blocking work runs.
    public static var currentExecutorName: String? {
        names.value?.value
    }
    private static let names = ThreadLocal<ThreadLocalBox<String>>()

    private func work() {
        Self.names.value = ThreadLocalBox(name)
        while true {
            var waited = false
            let next: Job? = queue.wait { q, timedOut in
                if waited { q.idle -= 1; waited = false }
                if q.waiting == 0 {
                    // Idle for `idleSeconds` with nothing to do: this thread ends.
                    if timedOut { q.threads -= 1; return .done(nil) }
                    q.idle += 1
                    waited = true
                    return .waitAtMost(seconds: idleSeconds)
                }
                let job = q.jobs[q.head]
                // The slot lets go of the job at once: a consumed slot stays in the array until
                // the slots are dropped below, and a job holds what its body captured (a
                // transfer's 255 KiB reply on its way to the disk, up to 64 of them).
                q.jobs[q.head] = Self.consumed
                q.head += 1
                // Drop consumed slots once they dominate, so the array does not grow.
                if q.head >= 64 && q.head * 2 >= q.jobs.count {
                    q.jobs.removeFirst(q.head)
                    q.head = 0
                }
                q.active += 1
                return .done(job)
            }
            guard let job = next else { return }
            let completion = job()
            queue.withLock { $0.active -= 1 }
            completion?()
        }
    }

    /// Runs `body` on a new thread of its own (a plugin's start and stop, which must not
    /// wait behind its calls).
    public static func detached<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            SystemThread.named(name) {
                BlockingCheck.dedicatedThread()
                continuation.resume(with: Result { try body() })
            }.start()
        }
    }
}

/// A job's cancellation, set by its caller's task and read on the executor's thread.
final class CancellationToken: Sendable {
    private let cancelled = Atomic(false)
    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    func cancel() { cancelled.store(true, ordering: .releasing) }
}
