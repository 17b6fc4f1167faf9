/// Bytes waiting to move one way through a pump, at most `capacity` of them, in one buffer
/// that is never grown: filled at its tail straight from a `read`, drained from its head,
/// and compacted in place when the tail reaches the end.
///
/// `Data` was used here before, with `removeFirst` after a partial write and `append` after
/// a read; `removeFirst` only moves a slice's start, so under steady traffic that never
/// drains to empty (an upload faster than the channel's window) the storage behind the
/// slice grew without bound — 34 MiB for eight forwarded uploads (heaptrack, issue 40).
///
/// The buffer is allocated when a read first brings bytes (an empty queue reads into the
/// engine's scratch buffer, so a read that finds nothing allocates nothing) and let go by
/// `release()` once empty, so an idle flow holds nothing. A bridge keeps one each way, a
/// channel pump one for each local descriptor it serves (engine thread only).
final class ByteQueue {
    let capacity: Int
    private var storage: UnsafeMutableRawPointer?
    private var head = 0
    private var tail = 0

    /// `initial` waits first (a SOCKS reply, or what a client sent with its SOCKS request);
    /// the queue is at least as big as it.
    init(capacity: Int, initial: some Collection<UInt8> = EmptyCollection<UInt8>()) {
        self.capacity = max(capacity, initial.count)
        if !initial.isEmpty {
            let buffer = UnsafeMutableRawBufferPointer(start: Self.allocate(self.capacity), count: self.capacity)
            buffer.copyBytes(from: initial)
            tail = initial.count
            storage = buffer.baseAddress
        }
    }

    var count: Int { tail - head }
    var isEmpty: Bool { head == tail }
    /// Bytes that may still be added.
    var room: Int { capacity - count }
    /// Whether it has a buffer now.
    var holdsBuffer: Bool { storage != nil }

    /// Adds what `read` writes into at most `limit` (and at most `room`) free bytes; returns
    /// what `read` returned (the bytes added when positive, nothing added otherwise). With
    /// no buffer yet, `read` writes into `scratch` and the buffer is made only for bytes.
    func fill(atMost limit: Int, scratch: UnsafeMutableRawBufferPointer, _ read: (UnsafeMutableRawPointer, Int) -> Int) -> Int {
        let wanted = min(limit, room)
        guard wanted > 0 else { return 0 }
        if storage == nil {
            guard let base = scratch.baseAddress else { return 0 }
            let n = read(base, min(wanted, scratch.count))
            if n > 0 {
                storage = Self.allocate(capacity)
                storage!.copyMemory(from: base, byteCount: n)
                head = 0
                tail = n
            }
            return n
        }
        if capacity - tail < wanted {
            // Compact: the unsent bytes move to the front.
            if head < tail { (storage! + 0).copyMemory(from: storage! + head, byteCount: tail - head) }
            tail -= head
            head = 0
        }
        let n = read(storage! + tail, wanted)
        if n > 0 { tail += n }
        return n
    }

    /// Offers the waiting bytes to `write`, which returns how many it took (positive) or
    /// why not (zero or negative, returned as is); those taken leave the queue.
    func drain(_ write: (UnsafeRawPointer, Int) -> Int) -> Int {
        guard let storage, head < tail else { return 0 }
        let n = write(storage + head, tail - head)
        if n > 0 {
            head += n
            if head == tail { head = 0; tail = 0 }
        }
        return n
    }

    /// Lets the buffer go when nothing waits in it (the next fill allocates it again).
    func release() {
        guard isEmpty, let storage else { return }
        storage.deallocate()
        self.storage = nil
    }

    /// Frees the buffer, whatever waits in it (the flow is over).
    func discard() {
        storage?.deallocate()
        storage = nil
        head = 0
        tail = 0
    }

    deinit { storage?.deallocate() }

    private static func allocate(_ count: Int) -> UnsafeMutableRawPointer {
        UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 16)
    }
}
