import SFTPWire
import Synchronization
import TransferRules
import XCTest

/// Issue 40: bytes in flight bounded per file and per process, and extra channels only where
/// a channel's window is the limit.
final class TransferBoundsTests: XCTestCase {
    func testTheAllowanceGivesWhatIsLeftAndLetsAFilesOnlyRequestOverdrawIt() {
        let allowance = ByteAllowance(capacity: 100)
        XCTAssertTrue(allowance.tryTake(60))
        XCTAssertFalse(allowance.tryTake(50), "only 40 are left")
        XCTAssertTrue(allowance.tryTake(40))
        XCTAssertEqual(allowance.available, 0)
        allowance.overdraw(30)
        XCTAssertEqual(allowance.available, -30, "a file's only request goes anyway")
        XCTAssertFalse(allowance.tryTake(1))
        allowance.give(60)
        XCTAssertTrue(allowance.tryTake(30))
        allowance.give(40); allowance.give(30); allowance.give(30)
        XCTAssertEqual(allowance.available, 100)
    }

    /// One file's requests stall (a host that stopped answering) holding the whole allowance:
    /// another file still moves, one request at a time, to its end.
    func testAStalledFileHoldingTheAllowanceDoesNotStopAnother() async throws {
        let chunk = 4096
        let allowance = ByteAllowance(capacity: 2 * chunk)
        let stalled = Gate()
        let stuck = Task {
            try await SFTPTransfer.pipe(size: UInt64(10 * chunk), chunk: chunk, window: 64, allowance: allowance,
                                        read: { _, length in
                                            await stalled.wait()
                                            return ArraySlice(repeating: 0, count: length)
                                        },
                                        write: { _, _ in })
        }
        for _ in 0..<400 where allowance.available > 0 { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertLessThanOrEqual(allowance.available, 0, "the stalled file holds the allowance")
        let flight = Flight()
        let size = 20 * chunk
        let end = try await SFTPTransfer.pipe(size: UInt64(size), chunk: chunk, window: 64, allowance: allowance,
                                              read: { offset, length in
                                                  flight.enter(length)
                                                  return ArraySlice(repeating: 1, count: min(length, size - Int(offset)))
                                              },
                                              write: { _, data in flight.leave(data.count) })
        XCTAssertEqual(end, UInt64(size))
        XCTAssertEqual(flight.most, chunk, "one request at a time while the allowance is held")
        await stalled.open()
        _ = try await stuck.value
        XCTAssertEqual(allowance.available, 2 * chunk, "every byte given back")
    }

    /// Two files at once through one allowance of three chunks: never more than that and a
    /// request of each file are being read or written together, and both arrive whole.
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
        // The allowance, and at most one more request per file (its only one, let go anyway).
        XCTAssertLessThanOrEqual(flight.most, 5 * chunk, "bytes in flight across both files")
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

/// Holds readers until opened.
private actor Gate {
    private var isOpen = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiting.append($0) }
    }
    func open() {
        isOpen = true
        for waiter in waiting { waiter.resume() }
        waiting = []
    }
}
