import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// Waits for work that may never return (a plugin's `start` or `stop` blocked in C) for at
/// most a bound: `nil` when the time ran out first. The work is not cancelled — a blocked C
/// thread cannot be — only no longer waited for; what it returns afterwards is dropped.
///
/// `immediate`: the work starts on the caller's thread (`Task.immediate`) and goes on as a
/// task of its own from its first suspension. Work that never suspends (the policy hook,
/// whose facts are kept in memory) is then done with no other thread woken to pick a new
/// task up; only what suspends is bounded. So it is for Swift work that waits by
/// suspending, never for code that may block its thread (a C plugin's start or stop).
enum Deadline {
    static func run<T: Sendable>(seconds: Double, immediate: Bool = false, _ work: @escaping @Sendable () async throws -> T) async throws -> T? {
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
            let body: @Sendable () async -> Void = {
                let result = await Result(catching: work)
                DeadlineTimer.shared.remove(entry)
                resume(result.map(Optional.some))
            }
            let task = immediate ? Task.immediate(operation: body) : Task(operation: body)
            working.withLock { $0 = task }
        }
    }
}

/// The deadlines of `Deadline.run`: one thread (started with the first) asleep until the
/// earliest is due, running the action of each that comes due; an entry removed before
/// then is forgotten at once. The thread is woken only for an entry due before the time it
/// sleeps until (a call after call, each with the same 10 s, wakes it once per 10 s).
final class DeadlineTimer: Sendable {
    static let shared = DeadlineTimer()

    private struct State: Sendable {
        var entries: [UInt64: (due: Date, action: @Sendable () -> Void)] = [:]
        var next: UInt64 = 0
        var started = false
        /// When the thread wakes next by itself.
        var wakeAt = Date.distantFuture
    }
    private let state = ConditionLock(State())

    func add(after seconds: Double, _ action: @escaping @Sendable () -> Void) -> UInt64 {
        let (entry, start, wake) = state.withLock { s -> (UInt64, Bool, Bool) in
            s.next += 1
            let due = Date(timeIntervalSinceNow: seconds)
            s.entries[s.next] = (due, action)
            if !s.started {
                s.started = true
                return (s.next, true, false)
            }
            return (s.next, false, due < s.wakeAt)
        }
        if start {
            SystemThread.named("termind.deadline") { [self] in loop() }.start()
        } else if wake {
            state.signal()
        }
        return entry
    }

    func remove(_ entry: UInt64) {
        state.withLock { _ = $0.entries.removeValue(forKey: entry) }
    }

    private func loop() -> Never {
        while true {
            let due: [@Sendable () -> Void] = state.wait { s, _ in
                let now = Date()
                let ready = s.entries.filter { $0.value.due <= now }
                if !ready.isEmpty {
                    for key in ready.keys { s.entries.removeValue(forKey: key) }
                    return .done(ready.values.map(\.action))
                }
                if let earliest = s.entries.values.map(\.due).min() {
                    s.wakeAt = earliest
                    return .waitAtMost(seconds: earliest.timeIntervalSince(now))
                }
                s.wakeAt = .distantFuture
                return .wait
            }
            for action in due { action() }
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
