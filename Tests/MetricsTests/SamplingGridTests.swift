import MetricsRules
import XCTest

/// Monitors of one interval sample on the same instants, whenever each started, and never
/// much sooner or later than an interval after its last sample.
final class SamplingGridTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000

    func testMonitorsThatStartedApartMeetOnTheSameInstants() {
        // Two monitors a third of a second apart: from their second sample on, the same instants.
        var a: UInt64 = 5 * second + 100_000_000, b: UInt64 = 5 * second + 433_000_000
        a = SamplingGrid.next(after: a, period: second)
        b = SamplingGrid.next(after: b, period: second)
        XCTAssertEqual(a, 6 * second)
        XCTAssertEqual(b, 6 * second)
        // A sample that took 40 ms: the next instant is one period on.
        XCTAssertEqual(SamplingGrid.next(after: a + 40_000_000, period: second), 7 * second)
        // Other periods have grids of their own.
        XCTAssertEqual(SamplingGrid.next(after: 3 * second, period: 5 * second), 10 * second)
    }

    func testTheGapStaysWithinHalfAPeriodOfTheInterval() {
        let period = 2 * second
        for started in stride(from: UInt64(0), to: 20 * second, by: 37_000_000) {
            let next = SamplingGrid.next(after: started, period: period)
            XCTAssertEqual(next % period, 0, "off the grid after \(started)")
            XCTAssertGreaterThanOrEqual(next, started + period / 2, "too soon after \(started)")
            XCTAssertLessThanOrEqual(next, started + period + period / 2, "too late after \(started)")
        }
        XCTAssertEqual(SamplingGrid.next(after: UInt64.max - 5, period: second), UInt64.max)
        XCTAssertEqual(SamplingGrid.next(after: 42, period: 0), 42)
    }
}
