import Foundation

/// A value one side sets once and any number of tasks await.
final class Promise<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Value?
    private var waiters: [@Sendable (Value) -> Void] = []

    init() {}

    /// Sets the value (the first call wins) and wakes every waiter.
    func fulfill(_ value: Value) {
        let waiters: [@Sendable (Value) -> Void] = lock.withLock {
            guard result == nil else { return [] }
            result = value
            defer { self.waiters.removeAll() }
            return self.waiters
        }
        for waiter in waiters { waiter(value) }
    }

    var isFulfilled: Bool { lock.withLock { result != nil } }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let now: Value? = lock.withLock {
                    if let result { return result }
                    waiters.append { continuation.resume(returning: $0) }
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
            let now: Value? = lock.withLock {
                if let result { return result }
                waiters.append { resume($0) }
                return nil
            }
            if let now { return resume(now) }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { resume(nil) }
        }
    }
}

/// True for the first caller of `claim()` only.
private final class Once: @unchecked Sendable {
    private let lock = NSLock()
    private var claimed = false
    func claim() -> Bool {
        lock.withLock {
            defer { claimed = true }
            return !claimed
        }
    }
}
