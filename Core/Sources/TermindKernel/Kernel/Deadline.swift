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
            // One task for the work and a dispatch timer, not a sleeping task: this runs for
            // every decision of the policy hook.
            let working = Mutex<Task<Void, Never>?>(nil)
            // DispatchWorkItem's cancel may be called from any thread (libdispatch's contract).
            nonisolated(unsafe) let timer = DispatchWorkItem {
                resume(.success(nil))
                working.withLock { $0 }?.cancel()
            }
            let task = Task {
                let result = await Result(catching: work)
                timer.cancel()
                resume(result.map(Optional.some))
            }
            working.withLock { $0 = task }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: timer)
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
