import Foundation
import WorkspacesRules
import XCTest

/// What waits for a durable session's screen model: bounded however fast output comes, the
/// oldest output dropped as gaps, order kept with the other operations.
final class ScreenBacklogTests: XCTestCase {
    private func chunk(_ byte: UInt8, _ count: Int = 32 << 10) -> Data { Data(repeating: byte, count: count) }

    func testOutputFasterThanItIsDrawnStaysBoundedWithTheNewestKept() {
        var backlog = ScreenBacklog<Int>()
        // 100 MiB in 32 KiB reads with nothing drawn: the flood a fast channel delivers.
        for index in 0..<3200 { backlog.feed(chunk(UInt8(index % 251)), modesBefore: TerminalModes()) }
        XCTAssertLessThanOrEqual(backlog.outputBytes, backlog.highWater)
        XCTAssertGreaterThanOrEqual(backlog.outputBytes, backlog.lowWater)
        // Entries hold at most a chunk's worth each, so the oldest can go.
        for case .output(let data, _) in backlog.entries { XCTAssertLessThanOrEqual(data.count, backlog.chunk) }
        guard case .output(let newest, _)? = backlog.entries.last else { return XCTFail("the newest output is not last") }
        XCTAssertEqual(newest.last, UInt8(3199 % 251), "the newest output is kept")
        // What was dropped is accounted for, byte for byte.
        var dropped = 0, kept = 0
        while let entry = backlog.next() {
            switch entry {
            case .gap(let count, _): dropped += count
            case .output(let data, _): kept += data.count
            case .other: XCTFail("no other operation was queued")
            }
        }
        XCTAssertEqual(dropped + kept, 3200 * (32 << 10))
        XCTAssertEqual(backlog.outputBytes, 0)
    }

    func testSmallReadsAreCoalescedAndOtherOperationsKeepTheirPlace() {
        var backlog = ScreenBacklog<String>()
        for _ in 0..<100 { backlog.feed(chunk(1, 10), modesBefore: TerminalModes()) }
        backlog.append("redraw")
        backlog.feed(chunk(2, 10), modesBefore: TerminalModes())
        XCTAssertEqual(backlog.entries.count, 3, "a hundred tiny reads make one entry")
        guard case .output(let first, _)? = backlog.next(), case .other(let other)? = backlog.next(), case .output(let last, _)? = backlog.next() else {
            return XCTFail("the order is output, redraw, output")
        }
        XCTAssertEqual(first.count, 1000)
        XCTAssertEqual(other, "redraw")
        XCTAssertEqual(last, chunk(2, 10))
    }

    func testDiscardingOutputKeepsTheOtherOperations() {
        var backlog = ScreenBacklog<String>()
        backlog.feed(chunk(1), modesBefore: TerminalModes())
        backlog.append("lines")
        backlog.feed(chunk(2), modesBefore: TerminalModes())
        backlog.discardOutput()
        XCTAssertEqual(backlog.outputBytes, 0)
        guard case .other(let other)? = backlog.next() else { return XCTFail("the operation went too") }
        XCTAssertEqual(other, "lines")
        XCTAssertNil(backlog.next())
    }
}
