import Foundation

/// Output on its way to one attached client, in order: the SSH engine's tap pushes it and
/// stops reading the channel while `limit` bytes are held (so a client that stops reading
/// holds the remote side back, as a plain session does), until the outbox is finished.
final class Outbox: @unchecked Sendable {
    private let limit: Int
    private let lock = NSLock()
    private var chunks: [Data] = []
    private var held = 0
    private var finished = false
    private var reader: CheckedContinuation<Data?, Never>?

    init(limit: Int = 1 << 20) { self.limit = limit }

    /// Queues `data` without waiting (the SSH engine's tap, which cannot wait: it stops reading
    /// the channel while `hasRoom` is false instead). Dropped once finished.
    func push(_ data: Data) {
        let waiting: CheckedContinuation<Data?, Never>? = lock.withLock {
            if finished { return nil }
            if let waiting = reader {
                reader = nil
                return waiting
            }
            chunks.append(data)
            held += data.count
            return nil
        }
        waiting?.resume(returning: data)
    }

    /// Whether more may be pushed (or the outbox is finished and takes nothing).
    var hasRoom: Bool { lock.withLock { finished || held < limit } }

    /// Called each time the reader took what was queued (the engine then reads on).
    func whenDrained(_ wake: @escaping @Sendable () -> Void) { lock.withLock { drained = wake } }
    private var drained: (@Sendable () -> Void)?

    /// The next chunk (what is queued, joined), or nil once finished and drained; the
    /// drained callback runs each time it took something (the engine reads on).
    func next() async -> Data? {
        await withCheckedContinuation { continuation in
            let (value, done, wake): (Data?, Bool, (@Sendable () -> Void)?) = lock.withLock {
                if !chunks.isEmpty {
                    var joined = Data()
                    joined.reserveCapacity(held)
                    for chunk in chunks { joined.append(chunk) }
                    chunks.removeAll(keepingCapacity: true)
                    held = 0
                    return (joined, true, drained)
                }
                if finished { return (nil, true, nil) }
                reader = continuation
                return (nil, false, nil)
            }
            wake?()
            if done { continuation.resume(returning: value) }
        }
    }

    /// No more output: the reader gets what is queued, then nil.
    func finish() {
        let reader: CheckedContinuation<Data?, Never>? = lock.withLock {
            finished = true
            defer { self.reader = nil }
            return self.reader
        }
        reader?.resume(returning: nil)
    }
}
