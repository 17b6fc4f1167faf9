@testable import TermindSSH
import TermindHarness
import XCTest

/// The bounded buffer a bridge keeps for each direction (issue 40: `Data` with `removeFirst`
/// grew its storage without bound under steady traffic).
final class ByteQueueTests: XCTestCase {
    /// The engine's shared read buffer, in the tests one of their own.
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
    deinit { scratch.deallocate() }

    /// A read that finds nothing allocates nothing (an idle flow is stepped on every pass of
    /// its engine); the buffer comes with the first bytes and goes with `release` once empty.
    func testOnlyBytesMakeABufferAndAnEmptyQueueLetsItGo() {
        let queue = ByteQueue(capacity: 1 << 20)
        XCTAssertEqual(queue.fill(atMost: 1 << 20, scratch: scratch) { _, _ in -1 }, -1)
        XCTAssertFalse(queue.holdsBuffer, "EAGAIN: nothing allocated")
        XCTAssertEqual(queue.fill(atMost: 1 << 20, scratch: scratch) { pointer, length in
            XCTAssertEqual(length, 64 << 10, "an empty queue reads at most what the scratch holds")
            pointer.storeBytes(of: 7, as: UInt8.self)
            return 1
        }, 1)
        XCTAssertTrue(queue.holdsBuffer)
        queue.release()
        XCTAssertTrue(queue.holdsBuffer, "a byte still waits")
        var out: [UInt8] = []
        _ = queue.drain { pointer, length in out += UnsafeRawBufferPointer(start: pointer, count: length); return length }
        XCTAssertEqual(out, [7])
        queue.release()
        XCTAssertFalse(queue.holdsBuffer)
    }

    /// Reads of uneven sizes and writes that take part of what is offered, interleaved:
    /// every byte comes out once, in order, and no more than `capacity` ever wait.
    func testBytesComeOutInOrderThroughUnevenReadsAndPartialWrites() {
        let queue = ByteQueue(capacity: 1000)
        let source = (0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        var read = 0
        var written: [UInt8] = []
        var generator = SeededGenerator(seed: 42)
        while written.count < source.count {
            let asked = Int(generator.next() % 700) + 1
            let got = queue.fill(atMost: asked, scratch: scratch) { pointer, length in
                XCTAssertLessThanOrEqual(length, asked)
                let n = min(length, source.count - read, Int(generator.next() % 400))
                guard n > 0 else { return read == source.count ? 0 : -1 }
                source[read..<(read + n)].withUnsafeBytes { pointer.copyMemory(from: $0.baseAddress!, byteCount: n) }
                read += n
                return n
            }
            XCTAssertLessThanOrEqual(queue.count, 1000)
            XCTAssertLessThanOrEqual(got, asked)
            let take = Int(generator.next() % 900)
            _ = queue.drain { pointer, length in
                let n = min(length, take)
                guard n > 0 else { return -11 }
                written += UnsafeRawBufferPointer(start: pointer, count: n)
                return n
            }
        }
        XCTAssertEqual(written, source)
        XCTAssertTrue(queue.isEmpty)
    }

    func testAFullQueueReadsNothingMoreUntilSomethingIsWritten() {
        let queue = ByteQueue(capacity: 8)
        XCTAssertEqual(queue.fill(atMost: 100, scratch: scratch) { pointer, length in
            XCTAssertEqual(length, 8)
            pointer.initializeMemory(as: UInt8.self, repeating: 1, count: length)
            return length
        }, 8)
        XCTAssertEqual(queue.room, 0)
        var asked = false
        XCTAssertEqual(queue.fill(atMost: 100, scratch: scratch) { _, _ in asked = true; return 1 }, 0)
        XCTAssertFalse(asked, "a full queue must not read")
        XCTAssertEqual(queue.drain { _, _ in 3 }, 3)
        XCTAssertEqual(queue.room, 3)
        // What a failed read or write returns is passed on and changes nothing.
        XCTAssertEqual(queue.fill(atMost: 100, scratch: scratch) { _, _ in -1 }, -1)
        XCTAssertEqual(queue.drain { _, _ in -37 }, -37)
        XCTAssertEqual(queue.count, 5)
    }

    func testInitialBytesGoFirstAndMayExceedTheCapacity() {
        let queue = ByteQueue(capacity: 4, initial: Array("greeting".utf8))
        XCTAssertEqual(queue.capacity, 8)
        XCTAssertEqual(queue.count, 8)
        var out: [UInt8] = []
        _ = queue.drain { pointer, length in out += UnsafeRawBufferPointer(start: pointer, count: length); return length }
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "greeting")
    }

    /// `release` lets the buffer go only when nothing waits; the queue works on after it.
    func testReleaseKeepsWaitingBytesAndTheQueueWorksAfterwards() {
        let queue = ByteQueue(capacity: 16)
        _ = queue.fill(atMost: 3, scratch: scratch) { pointer, _ in
            pointer.copyMemory(from: [UInt8]([1, 2, 3]), byteCount: 3)
            return 3
        }
        queue.release()
        var out: [UInt8] = []
        _ = queue.drain { pointer, length in out += UnsafeRawBufferPointer(start: pointer, count: length); return length }
        XCTAssertEqual(out, [1, 2, 3], "bytes waiting survive a release")
        queue.release()
        XCTAssertEqual(queue.drain { _, _ in XCTFail("nothing waits"); return 0 }, 0)
        _ = queue.fill(atMost: 2, scratch: scratch) { pointer, _ in
            pointer.copyMemory(from: [UInt8]([9, 8]), byteCount: 2)
            return 2
        }
        out = []
        _ = queue.drain { pointer, length in out += UnsafeRawBufferPointer(start: pointer, count: length); return length }
        XCTAssertEqual(out, [9, 8])
    }
}
