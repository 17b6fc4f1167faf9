import Foundation
import MetricsAPI
import MetricsRules
import TermindCore
import XCTest

/// The text of `metrics watch` and `show`.
final class ViewsTests: XCTestCase {
    func testAmountsAndPercentages() {
        XCTAssertEqual(MetricsViews.bytes(415_805_440), "397M")
        XCTAssertEqual(MetricsViews.bytes(1536), "1.5K")
        XCTAssertEqual(MetricsViews.bytes(512), "512B")
        XCTAssertEqual(MetricsViews.bytes(nil), "-")
        XCTAssertEqual(MetricsViews.bytes(.nan), "-")
        XCTAssertEqual(MetricsViews.percent(12.6), "13%")
        XCTAssertEqual(MetricsViews.percent(nil), "-")
    }

    func testARowShowsUsedMemoryAndUnknownsAsDashes() {
        let sample = MetricsSample(host: "h1", label: "web", takenAt: 0, memory: .init(total: 24 << 30, available: 20 << 30, used: 4 << 30, cached: nil, swapTotal: nil, swapUsed: nil),
                                   network: [.init(name: "eth0", virtual: false, receive: nil, transmit: nil)],
                                   gpus: [.init(id: "0", name: "T4", utilization: 50, memoryUsed: 1 << 30, memoryTotal: 16 << 30)])
        let row = MetricsViews.overviewRow(host: "h1", label: "web", state: .sampling, sample: sample, history: [])
        XCTAssertEqual(row["memory"]?.stringValue?.hasPrefix("4.0G/24G"), true, "\(row)")
        XCTAssertEqual(row["net"], .string("-"), "unknown rates are not zero")
        XCTAssertEqual(row["cpu"]?.stringValue?.hasPrefix("-"), true)
        XCTAssertEqual(row["gpu"], .string("50% 1.0G/16G"))
        XCTAssertEqual(row["host"], .string("web"))
    }
}
