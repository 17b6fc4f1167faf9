import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A value one side sets once and any number of tasks await.
final class Promise<Value: Sendable>: Sendable {
    private struct State {
        var result: Value?
        var waiters: [@Sendable (Value) -> Void] = []
    }
    private let state = Mutex(State())

    init() {}

    /// Sets the value (the first call wins) and wakes every waiter.
    func fulfill(_ value: Value) {
        let waiters: [@Sendable (Value) -> Void] = state.withLock { state in
            guard state.result == nil else { return [] }
            state.result = value
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter(value) }
    }

    var isFulfilled: Bool { state.withLock { $0.result != nil } }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let now: Value? = state.withLock { state in
                    if let result = state.result { return result }
                    state.waiters.append { continuation.resume(returning: $0) }
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        }
    }

    /// The value, or nil when it is not set within `seconds`.
    func value(within seconds: Double) async -> Value? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
            let once = Once()
            let resume: @Sendable (Value?) -> Void = { value in
                if once.claim() { continuation.resume(returning: value) }
            }
            let now: Value? = state.withLock { state in
                if let result = state.result { return result }
                state.waiters.append { resume($0) }
                return nil
            }
            if let now { return resume(now) }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { resume(nil) }
        }
    }
}

/// True for the first caller of `claim()` only.
private final class Once: Sendable {
    private let claimed = Atomic<Bool>(false)
    func claim() -> Bool { !claimed.exchange(true, ordering: .acquiringAndReleasing) }
}
