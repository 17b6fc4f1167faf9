import Foundation
import WorkspacesRules
import XCTest

/// When a durable session's screen model draws: once output pauses, or when it went undrawn
/// too long — never held back behind an operation that needs the screen.
final class DrawingPaceTests: XCTestCase {
    private let ms: UInt64 = 1_000_000

    func testAFloodIsNotDrawnUntilItPausesOrWentUndrawnTooLong() {
        var pace = DrawingPace(quietNanoseconds: 20 * ms, staleNanoseconds: 1000 * ms)
        XCTAssertTrue(pace.mayDraw(at: 0, operationWaiting: false), "nothing was ever fed")
        // A chunk every millisecond for 900 ms: never quiet, not yet stale.
        var now: UInt64 = 5 * ms
        while now < 905 * ms {
            pace.fed(at: now)
            XCTAssertFalse(pace.mayDraw(at: now + ms / 2, operationWaiting: false), "drawn during the flood at \(now / ms) ms")
            now += ms
        }
        // Still pouring in a second after the flood began: one draw, and the clock starts again.
        pace.fed(at: 1005 * ms)
        XCTAssertTrue(pace.mayDraw(at: 1005 * ms, operationWaiting: false), "a second undrawn")
        pace.drew(at: 1005 * ms)
        pace.fed(at: 1006 * ms)
        XCTAssertFalse(pace.mayDraw(at: 1006 * ms, operationWaiting: false))
        // The flood ends: once it has been quiet for 20 ms, everything may be drawn.
        XCTAssertFalse(pace.mayDraw(at: 1025 * ms, operationWaiting: false))
        XCTAssertTrue(pace.mayDraw(at: 1026 * ms, operationWaiting: false))
    }

    func testAnOperationWaitingBehindTheOutputIsNeverHeldBack() {
        var pace = DrawingPace(quietNanoseconds: 20 * ms, staleNanoseconds: 1000 * ms)
        pace.fed(at: 100 * ms)
        XCTAssertFalse(pace.mayDraw(at: 101 * ms, operationWaiting: false))
        XCTAssertTrue(pace.mayDraw(at: 101 * ms, operationWaiting: true), "a redraw waits behind the output")
    }

    func testTypingIsDrawnBetweenKeys() {
        // Keys 40 ms apart: each echo is quiet after 20 ms, so the screen keeps up.
        var pace = DrawingPace()
        for key in 0..<10 {
            let at = UInt64(key) * 40 * ms
            pace.fed(at: at)
            XCTAssertFalse(pace.mayDraw(at: at + 10 * ms, operationWaiting: false))
            XCTAssertTrue(pace.mayDraw(at: at + 25 * ms, operationWaiting: false))
        }
    }

    func testTheBacklogCountsTheOperationsWaitingInIt() {
        var backlog = ScreenBacklog<Int>()
        backlog.feed(Data("a".utf8), modesBefore: TerminalModes())
        XCTAssertEqual(backlog.operationsWaiting, 0)
        backlog.append(1)
        backlog.feed(Data("b".utf8), modesBefore: TerminalModes())
        backlog.append(2)
        XCTAssertEqual(backlog.operationsWaiting, 2)
        backlog.discardOutput()
        XCTAssertEqual(backlog.operationsWaiting, 2, "discarding output keeps the operations")
        guard case .other(1)? = backlog.next() else { return XCTFail("the first operation is not next") }
        XCTAssertEqual(backlog.operationsWaiting, 1)
        guard case .other(2)? = backlog.next() else { return XCTFail("the second operation is not next") }
        XCTAssertEqual(backlog.operationsWaiting, 0)
        XCTAssertNil(backlog.next())
    }
}
