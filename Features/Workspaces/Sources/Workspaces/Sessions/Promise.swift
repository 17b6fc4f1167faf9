import Foundation

/// A value one side sets once and any number of tasks await.
final class Promise<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Value?
    private var waiters: [CheckedContinuation<Value, Never>] = []

    init() {}

    /// Sets the value (the first call wins) and wakes every waiter.
    func fulfill(_ value: Value) {
        let waiters: [CheckedContinuation<Value, Never>] = lock.withLock {
            guard result == nil else { return [] }
            result = value
            defer { self.waiters.removeAll() }
            return self.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    var isFulfilled: Bool { lock.withLock { result != nil } }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let now: Value? = lock.withLock {
                    if let result { return result }
                    waiters.append(continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        }
    }
}
