import Dispatch
import Foundation

/// A descriptor (standard input) as an async sequence of chunks of up to 64 KiB, read as
/// they arrive — one read per `next()`, so a consumer that waits before asking for the next
/// chunk holds the producer back (nothing is read ahead, memory stays one chunk). Reads
/// block a thread of their own, never the cooperative pool. A negative `fd` is empty input.
struct DescriptorReader: AsyncSequence, Sendable {
    typealias Element = Data
    let fd: Int32

    private static let queue = DispatchQueue(label: "termind.descriptor-reader")

    struct AsyncIterator: AsyncIteratorProtocol {
        let fd: Int32
        var finished = false

        mutating func next() async -> Data? {
            guard !finished, fd >= 0 else { return nil }
            let fd = self.fd
            let chunk: Data? = await withCheckedContinuation { continuation in
                DescriptorReader.queue.async {
                    var buffer = [UInt8](repeating: 0, count: 64 << 10)
                    while true {
                        let n = read(fd, &buffer, buffer.count)
                        if n < 0 && errno == EINTR { continue }
                        if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                            // A non-blocking descriptor handed over by someone: wait for data.
                            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                            _ = poll(&ready, 1, -1)
                            continue
                        }
                        continuation.resume(returning: n > 0 ? Data(buffer[0..<n]) : nil)
                        return
                    }
                }
            }
            if chunk == nil { finished = true }
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(fd: fd) }
}
