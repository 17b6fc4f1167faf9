import Synchronization

/// Bytes a process lets be in flight at once, shared by every transfer in it (issue 40:
/// "bounded per file and per process, not per channel times channels"). A data request
/// takes its length before it is sent and gives it back once its bytes are where they go;
/// requests that must wait are served first come, first served, so one busy file cannot
/// starve another.
public final class ByteAllowance: Sendable {
    public let capacity: Int
    private struct Waiter {
        let id: UInt64
        let bytes: Int
        let continuation: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
    }
    private let state: Mutex<State>

    public init(capacity: Int) {
        self.capacity = max(1, capacity)
        state = Mutex(State(available: max(1, capacity)))
    }

    /// Bytes not taken now.
    public var available: Int { state.withLock { $0.available } }
    /// Requests waiting for their turn now.
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Takes `bytes` (at most the capacity) when they are there and nobody waits before.
    public func tryTake(_ bytes: Int) -> Bool {
        let bytes = min(bytes, capacity)
        return state.withLock { s in
            guard s.waiters.isEmpty, s.available >= bytes else { return false }
            s.available -= bytes
            return true
        }
    }

    /// Waits for `bytes` (at most the capacity), in turn; false when the task was cancelled
    /// first (then nothing was taken).
    public func take(_ bytes: Int) async -> Bool {
        let bytes = min(bytes, capacity)
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now = state.withLock { s -> Bool? in
                    if Task.isCancelled { return false }
                    if s.waiters.isEmpty, s.available >= bytes {
                        s.available -= bytes
                        return true
                    }
                    s.waiters.append(Waiter(id: id, bytes: bytes, continuation: continuation))
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> Waiter? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index)
            }
            waiter?.continuation.resume(returning: false)
        }
    }

    /// Gives back what `tryTake` or `take` took; waiters whose turn it is are let go.
    public func give(_ bytes: Int) {
        let bytes = min(bytes, capacity)
        let ready = state.withLock { s -> [Waiter] in
            s.available = min(capacity, s.available + bytes)
            var ready: [Waiter] = []
            while let first = s.waiters.first, s.available >= first.bytes {
                s.available -= first.bytes
                ready.append(s.waiters.removeFirst())
            }
            return ready
        }
        for waiter in ready { waiter.continuation.resume(returning: true) }
    }
}
