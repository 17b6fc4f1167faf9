import Foundation
import MetricsAPI
import SettingsAPI
import XCTest

/// The rules of `metrics.preferences` that need no host directory.
final class PreferencesTests: XCTestCase {
    /// Hosts are named by id as in `order`: an interfaces key or a paused entry that is a
    /// label or unknown is refused, named (it was kept and never used).
    func testInterfacesAndPausedNameMonitoredHostsByID() {
        let good = MetricsSettings.Preferences(order: ["host_a", "host_b"], paused: ["host_b"], interfaces: ["host_a": ["eth0", "docker0"]])
        XCTAssertEqual(good.problems(), [])

        let bad = MetricsSettings.Preferences(order: ["host_a"], paused: ["web"], interfaces: ["box": ["eth0"], "host_a": ["eth1"], "host_zz": ["eth0"]])
        let problems = bad.problems()
        XCTAssertEqual(problems.map(\.path), ["metrics.preferences.interfaces.box", "metrics.preferences.interfaces.host_zz", "metrics.preferences.paused"])
        guard problems.count == 3 else { return }
        XCTAssertTrue(problems[0].message.contains("'box' is not the id of a monitored host"), problems[0].message)
        XCTAssertTrue(problems[0].message.contains("not label"), problems[0].message)
        XCTAssertTrue(problems[2].message.contains("'web'"), problems[2].message)
    }
}
