import Foundation

/// Output on its way to one attached client, in order: at most `limit` bytes held, a
/// producer waits for room (so a client that stops reading holds the remote side back, as
/// a plain session does) until the outbox is finished.
final class Outbox: @unchecked Sendable {
    private let limit: Int
    private let lock = NSLock()
    private var chunks: [Data] = []
    private var held = 0
    private var finished = false
    private var reader: CheckedContinuation<Data?, Never>?
    private var writers: [CheckedContinuation<Void, Never>] = []

    init(limit: Int = 1 << 20) { self.limit = limit }

    /// Queues `data`, waiting while the outbox is full; false once it is finished.
    func put(_ data: Data) async -> Bool {
        while true {
            let outcome: Bool? = lock.withLock {
                if finished { return false }
                if held > 0 && held + data.count > limit { return nil }
                if let reader {
                    self.reader = nil
                    reader.resume(returning: data)
                } else {
                    chunks.append(data)
                    held += data.count
                }
                return true
            }
            if let outcome { return outcome }
            await withCheckedContinuation { continuation in
                let now: Bool = lock.withLock {
                    if finished || held == 0 || held + data.count <= limit { return true }
                    writers.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

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

    /// The next chunk (what is queued, joined), or nil once finished and drained.
    func next() async -> Data? {
        await withCheckedContinuation { continuation in
            let (value, done, wake): (Data?, Bool, [CheckedContinuation<Void, Never>]) = lock.withLock {
                if !chunks.isEmpty {
                    var joined = Data()
                    joined.reserveCapacity(held)
                    for chunk in chunks { joined.append(chunk) }
                    chunks.removeAll(keepingCapacity: true)
                    held = 0
                    defer { writers.removeAll() }
                    return (joined, true, writers)
                }
                if finished { return (nil, true, []) }
                reader = continuation
                return (nil, false, [])
            }
            for writer in wake { writer.resume() }
            if value != nil, let drained = lock.withLock({ drained }) { drained() }
            if done { continuation.resume(returning: value) }
        }
    }

    /// No more output: the reader gets what is queued, then nil; producers stop waiting.
    func finish() {
        let (reader, writers): (CheckedContinuation<Data?, Never>?, [CheckedContinuation<Void, Never>]) = lock.withLock {
            finished = true
            defer { self.reader = nil; self.writers.removeAll() }
            return (self.reader, self.writers)
        }
        reader?.resume(returning: nil)
        for writer in writers { writer.resume() }
    }
}
