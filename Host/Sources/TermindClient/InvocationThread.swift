import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// A thread for one launcher's command inside `termind serve`, as a task executor: the
/// generic client was written as a process's main program and waits where a process may —
/// for a person at a prompt, a full pipe, the launcher's answer — so its task (and the tasks
/// it starts) prefer this thread, and the cooperative pool never waits for a person.
///
/// Threads are kept and reused (`take`, `release`), never ended: a task holds its executor
/// unowned, so one must outlive any job a finished command's leftovers may still enqueue.
/// Their number is bounded by the most commands the server ran at once (the control socket
/// takes 128 clients).
final class InvocationThread: TaskExecutor, Sendable {
    private let jobs = ConditionLock<[UnownedJob]>([])

    private static let idle = Mutex<[InvocationThread]>([])
    /// Every thread made, so that none is ever deallocated.
    private static let made = Mutex<[InvocationThread]>([])

    /// An idle thread, or a new one.
    static func take() -> InvocationThread {
        if let thread = idle.withLock({ $0.popLast() }) { return thread }
        let thread = InvocationThread()
        made.withLock { $0.append(thread) }
        return thread
    }

    /// The command it ran has ended: the next one may use it.
    func release() { Self.idle.withLock { $0.append(self) } }

    private init() {
        let thread = SystemThread.named("termind.invocation") { [self] in
            BlockingCheck.dedicatedThread()
            loop()
        }
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
        jobs.signal()
    }

    private func loop() {
        while true {
            let batch = jobs.withLock(whenever: { !$0.isEmpty }) { jobs in
                defer { jobs.removeAll(keepingCapacity: true) }
                return jobs
            }
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }
}
