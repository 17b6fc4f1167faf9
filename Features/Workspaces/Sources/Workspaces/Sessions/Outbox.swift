import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Output on its way to one attached client, in order: the SSH engine's tap pushes it and
/// stops reading the channel while `limit` bytes are held (so a client that stops reading
/// holds the remote side back, as a plain session does), until the outbox is finished.
final class Outbox: Sendable {
    private let limit: Int
    private struct State {
        var chunks: [Data] = []
        var held = 0
        var finished = false
        var reader: CheckedContinuation<Data?, Never>?
        var drained: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())

    init(limit: Int = 1 << 20) { self.limit = limit }

    /// Queues `data` without waiting (the SSH engine's tap, which cannot wait: it stops reading
    /// the channel while `hasRoom` is false instead). Dropped once finished.
    func push(_ data: Data) {
        let waiting: CheckedContinuation<Data?, Never>? = state.withLock { state in
            if state.finished { return nil }
            if let waiting = state.reader {
                state.reader = nil
                return waiting
            }
            state.chunks.append(data)
            state.held += data.count
            return nil
        }
        waiting?.resume(returning: data)
    }

    /// Whether more may be pushed (or the outbox is finished and takes nothing).
    var hasRoom: Bool { state.withLock { $0.finished || $0.held < limit } }

    /// Called each time the reader took what was queued (the engine then reads on).
    func whenDrained(_ wake: @escaping @Sendable () -> Void) { state.withLock { $0.drained = wake } }

    /// The next chunk (what is queued, joined), or nil once finished and drained; the
    /// drained callback runs each time it took something (the engine reads on).
    func next() async -> Data? {
        await withCheckedContinuation { continuation in
            let (value, done, wake): (Data?, Bool, (@Sendable () -> Void)?) = state.withLock { state in
                if !state.chunks.isEmpty {
                    var joined = Data()
                    joined.reserveCapacity(state.held)
                    for chunk in state.chunks { joined.append(chunk) }
                    state.chunks.removeAll(keepingCapacity: true)
                    state.held = 0
                    return (joined, true, state.drained)
                }
                if state.finished { return (nil, true, nil) }
                state.reader = continuation
                return (nil, false, nil)
            }
            wake?()
            if done { continuation.resume(returning: value) }
        }
    }

    /// No more output: the reader gets what is queued, then nil.
    func finish() {
        let reader: CheckedContinuation<Data?, Never>? = state.withLock { state in
            state.finished = true
            defer { state.reader = nil }
            return state.reader
        }
        reader?.resume(returning: nil)
    }
}
