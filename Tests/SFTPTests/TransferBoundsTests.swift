import SFTPWire
import Synchronization
import TransferRules
import XCTest

/// Issue 40: bytes in flight bounded per file and per process, and extra channels only where
/// a channel's window is the limit.
final class TransferBoundsTests: XCTestCase {
    func testTheAllowanceServesWaitersInTurnAndTakesNothingForACancelledOne() async throws {
        let allowance = ByteAllowance(capacity: 100)
        XCTAssertTrue(allowance.tryTake(60))
        XCTAssertFalse(allowance.tryTake(50), "only 40 are left")
        let order = Order()
        let first = Task { if await allowance.take(50) { order.add("first") } }
        try await waitForWaiters { allowance.waiting == 1 }
        let second = Task { if await allowance.take(10) { order.add("second") } }
        // 10 are there, but the second waits behind the first: turns are kept.
        try await waitForWaiters { allowance.waiting == 2 }
        XCTAssertEqual(order.names, [])
        let cancelled = Task { await allowance.take(30) }
        try await waitForWaiters { allowance.waiting == 3 }
        cancelled.cancel()
        let cancelledGot = await cancelled.value
        XCTAssertFalse(cancelledGot, "a cancelled wait takes nothing")
        allowance.give(60)
        _ = await (first.value, second.value)
        XCTAssertEqual(order.names, ["first", "second"])
        XCTAssertEqual(allowance.available, 40, "100 - 50 - 10: the cancelled wait took nothing")
        allowance.give(60)
        XCTAssertEqual(allowance.available, 100)
    }

    /// Two files at once through one allowance of three chunks: never more than three
    /// chunks are being read or written together, and both arrive whole.
    func testFilesSharingTheProcessAllowanceNeverHoldMoreThanIt() async throws {
        let chunk = 4096
        let allowance = ByteAllowance(capacity: 3 * chunk)
        let flight = Flight()
        let sources = (0..<2).map { n in (0..<(40 * chunk + 100)).map { UInt8(truncatingIfNeeded: $0 &* (n + 3)) } }
        let targets = (0..<2).map { _ in Sink(40 * chunk + 100) }
        try await withThrowingTaskGroup(of: UInt64.self) { group in
            for n in 0..<2 {
                let source = sources[n], target = targets[n]
                group.addTask {
                    try await SFTPTransfer.pipe(size: UInt64(source.count), chunk: chunk, window: 64, allowance: allowance,
                                                read: { offset, length in
                                                    flight.enter(length)
                                                    try await Task.sleep(for: .milliseconds(2))
                                                    return source[Int(offset)..<min(source.count, Int(offset) + length)]
                                                },
                                                write: { offset, data in
                                                    target.put(offset, data)
                                                    flight.leave(data.count)
                                                })
                }
            }
            for try await end in group { XCTAssertEqual(end, UInt64(40 * chunk + 100)) }
        }
        for n in 0..<2 { XCTAssertEqual(targets[n].bytes, sources[n]) }
        XCTAssertLessThanOrEqual(flight.most, 3 * chunk, "bytes in flight across both files")
        XCTAssertGreaterThan(flight.most, chunk, "requests did overlap (else the bound was not tested)")
        XCTAssertEqual(allowance.available, 3 * chunk, "every byte given back")
    }

    /// One file alone: at most `fileBytesInFlight` of it in flight, whatever window is asked.
    func testOneFileKeepsAtMostItsOwnShareInFlight() async throws {
        let chunk = SFTPTransfer.fileBytesInFlight / 4
        let size = 12 * chunk
        let flight = Flight()
        let end = try await SFTPTransfer.pipe(size: UInt64(size), chunk: chunk, window: 64, allowance: nil,
                                              read: { offset, length in
                                                  flight.enter(length)
                                                  try await Task.sleep(for: .milliseconds(2))
                                                  return ArraySlice(repeating: 1, count: min(length, size - Int(offset)))
                                              },
                                              write: { _, data in flight.leave(data.count) })
        XCTAssertEqual(end, UInt64(size))
        XCTAssertEqual(flight.most, 4 * chunk, "four requests of a quarter each, not 64")
    }

    func testExtraChannelsOnlyWhereTheWindowPerRoundTripIsTheLimit() {
        // Loopback (a limits request answered in 0.2 ms): one channel carries GB/s.
        XCTAssertEqual(Striping.channels(upTo: 4, roundTrip: 0.000_2, window: Striping.serverWindow), 1)
        XCTAssertEqual(Striping.channels(upTo: 4, roundTrip: 0.000_2, window: 8 << 20), 1)
        // 20 ms: sshd's 2 MiB window moves 100 MiB/s per channel, so uploads take all four;
        // termind's own 8 MiB window for downloads needs two.
        XCTAssertEqual(Striping.channels(upTo: 4, roundTrip: 0.020, window: Striping.serverWindow), 4)
        XCTAssertEqual(Striping.channels(upTo: 4, roundTrip: 0.020, window: 8 << 20), 2)
        // Not measured: as many as asked. One asked: one.
        XCTAssertEqual(Striping.channels(upTo: 4, roundTrip: nil, window: 8 << 20), 4)
        XCTAssertEqual(Striping.channels(upTo: 1, roundTrip: 0.5, window: 1), 1)
    }

    private func waitForWaiters(_ condition: () -> Bool, line: UInt = #line) async throws {
        for _ in 0..<400 where !condition() { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertTrue(condition(), "the waiters expected by line \(line) never came", line: line)
    }
}

/// Bytes being read or written now, and the most at once.
private final class Flight: Sendable {
    private let state = Mutex((now: 0, most: 0))
    func enter(_ bytes: Int) { state.withLock { $0.now += bytes; $0.most = max($0.most, $0.now) } }
    func leave(_ bytes: Int) { state.withLock { $0.now -= bytes } }
    var most: Int { state.withLock { $0.most } }
}

/// Where a test file's bytes land.
private final class Sink: Sendable {
    private let state: Mutex<[UInt8]>
    init(_ count: Int) { state = Mutex([UInt8](repeating: 0, count: count)) }
    func put(_ offset: UInt64, _ data: ArraySlice<UInt8>) { state.withLock { $0.replaceSubrange(Int(offset)..<(Int(offset) + data.count), with: data) } }
    var bytes: [UInt8] { state.withLock { $0 } }
}

private final class Order: Sendable {
    private let state = Mutex<[String]>([])
    func add(_ name: String) { state.withLock { $0.append(name) } }
    var names: [String] { state.withLock { $0 } }
}
