import Foundation
import Synchronization
import TermindCore

/// Waits for work that may never return (a plugin's `start` or `stop` blocked in C) for at
/// most a bound: `nil` when the time ran out first. The work is not cancelled — a blocked C
/// thread cannot be — only no longer waited for; what it returns afterwards is dropped.
enum Deadline {
    static func run<T: Sendable>(seconds: Double, _ work: @escaping @Sendable () async throws -> T) async throws -> T? {
        let settled = Mutex(false)
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T?, any Error>) in
            // Whichever comes first resumes the caller; the other finds it settled.
            let resume: @Sendable (Result<T?, any Error>) -> Void = { result in
                guard settled.withLock({ done in defer { done = true }; return !done }) else { return }
                continuation.resume(with: result)
            }
            // One task for the work and an entry in the shared timer (forgotten when the work
            // ends), not a sleeping task and two more: this runs for every decision of the
            // policy hook.
            let working = Mutex<Task<Void, Never>?>(nil)
            let entry = DeadlineTimer.shared.add(after: seconds) {
                resume(.success(nil))
                working.withLock { $0 }?.cancel()
            }
            let task = Task {
                let result = await Result(catching: work)
                DeadlineTimer.shared.remove(entry)
                resume(result.map(Optional.some))
            }
            working.withLock { $0 = task }
        }
    }
}

/// The deadlines of `Deadline.run`: one thread (started with the first) asleep until the
/// earliest is due, running the action of each that comes due; an entry removed before
/// then is forgotten at once. The thread is woken only for an entry due before the time it
/// sleeps until (a call after call, each with the same 10 s, wakes it once per 10 s).
final class DeadlineTimer: @unchecked Sendable {
    static let shared = DeadlineTimer()

    /// `entries`, `next`, `started` and `wakeAt` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var entries: [UInt64: (due: Date, action: @Sendable () -> Void)] = [:]
    private var next: UInt64 = 0
    private var started = false
    /// When the thread wakes next by itself.
    private var wakeAt = Date.distantFuture

    func add(after seconds: Double, _ action: @escaping @Sendable () -> Void) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        next += 1
        let due = Date(timeIntervalSinceNow: seconds)
        entries[next] = (due, action)
        if !started {
            started = true
            Thread.named("termind.deadline") { [self] in loop() }.start()
        } else if due < wakeAt {
            condition.signal()
        }
        return next
    }

    func remove(_ entry: UInt64) {
        condition.lock()
        entries.removeValue(forKey: entry)
        condition.unlock()
    }

    private func loop() -> Never {
        condition.lock()
        while true {
            let now = Date()
            let due = entries.filter { $0.value.due <= now }
            if !due.isEmpty {
                for key in due.keys { entries.removeValue(forKey: key) }
                condition.unlock()
                for entry in due.values { entry.action() }
                condition.lock()
                continue
            }
            if let earliest = entries.values.map(\.due).min() {
                wakeAt = earliest
                _ = condition.wait(until: earliest)
            } else {
                wakeAt = .distantFuture
                condition.wait()
            }
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
