import Foundation
import MetricsRules
import TermindHarness
import XCTest

/// The remote script, run here by real shells as a login shell would run the command.
final class ScriptTests: XCTestCase {
    func testTheCommandIsOneLineWithoutSingleQuotesInside() {
        let command = RemoteScript.command
        XCTAssertTrue(command.hasPrefix("exec /bin/sh -c '"))
        XCTAssertFalse(command.contains("\n"))
        XCTAssertEqual(command.filter { $0 == "'" }.count, 2)
    }

    /// Each login shell present passes the command through to /bin/sh unchanged; the loop
    /// answers one snapshot per request line and ends at EOF.
    func testShellsRunTheLoopOneSnapshotPerRequest() throws {
        let shells = ["/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/zsh", "/usr/bin/fish", "/usr/bin/tcsh"].filter { FileManager.default.isExecutableFile(atPath: $0) }
        XCTAssertTrue(shells.contains("/bin/sh"))
        for shell in shells {
            let requests = RemoteScript.request(detail: false, gpu: false) + RemoteScript.request(detail: true, gpu: true) + RemoteScript.request(detail: false, gpu: true)
            let result = try ProcessRunner.run(shell, ["-c", RemoteScript.command], stdin: requests)
            XCTAssertEqual(result.status, 0, "\(shell): \(result.stderr)")
            var reader = SnapshotReader()
            let events = reader.feed(Array(result.stdout.utf8))
            guard case .header(let header)? = events.first else { XCTFail("\(shell): no header in \(result.stdout.prefix(200))"); continue }
            XCTAssertEqual(header.pageSize, UInt64(sysconf(Int32(_SC_PAGESIZE))))
            XCTAssertEqual(header.clockTicks, UInt64(sysconf(Int32(_SC_CLK_TCK))))
            let snapshots = events.compactMap { if case .snapshot(let raw) = $0 { raw } else { nil } }
            XCTAssertEqual(snapshots.count, 3, "\(shell): \(events.count) events")
            guard snapshots.count == 3 else { continue }
            for raw in snapshots {
                for section in [RemoteScript.Section.uptime, .loadavg, .stat, .meminfo, .netdev, .diskstats] {
                    XCTAssertFalse((raw.sections[section] ?? []).isEmpty, "\(shell): \(section) is empty")
                }
                XCTAssertTrue(raw.oversized.isEmpty)
            }
            XCTAssertNil(snapshots[0].sections[.procs], "detail only when asked")
            XCTAssertNotNil(snapshots[1].sections[.procs])
            XCTAssertNotNil(snapshots[1].sections[.df])
            XCTAssertTrue(snapshots[1].text(.procs)?.contains("(") == true)
            // No nvidia-smi here: the GPU section is never printed, even when asked.
            XCTAssertFalse(header.hasNvidiaSMI && !FileManager.default.isExecutableFile(atPath: "/usr/bin/nvidia-smi"))
            XCTAssertNil(snapshots[2].sections[.gpu])
            var builder = SampleBuilder(header: header)
            let first = builder.sample(snapshots[0], host: "h", label: "h", takenAt: 0)
            let second = builder.sample(snapshots[1], host: "h", label: "h", takenAt: 1)
            XCTAssertEqual(first.problems, [], shell)
            XCTAssertEqual(second.problems, [], shell)
            XCTAssertNotNil(second.processes)
            XCTAssertTrue(second.filesystems?.contains { $0.mount == "/" } == true, "\(second.filesystems ?? [])")
        }
    }

    /// A probe that hangs (a wedged driver's nvidia-smi, a dead NFS mount's df) never holds up
    /// the loop: every request gets its snapshot with the base data, the hanging probe is not
    /// started twice, and at EOF the loop ends and removes its temporary folder. Before, each
    /// snapshot waited for nvidia-smi.
    func testAHangingProbeNeverHoldsUpTheLoop() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let bin = directory.file("bin")
        let temporary = directory.file("tmp")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        // It hangs for a while, counting how often it was started.
        try "#!/bin/sh\necho started >>\(directory.file("starts"))\nsleep 20\necho \"<nvidia_smi_log/>\"\n".write(toFile: bin + "/nvidia-smi", atomically: true, encoding: .utf8)
        chmod(bin + "/nvidia-smi", 0o755)
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = bin + ":/usr/bin:/bin"
        environment["TMPDIR"] = temporary
        let requests = String(repeating: RemoteScript.request(detail: true, gpu: true), count: 3)
        let result = try ProcessRunner.run("/bin/sh", ["-c", RemoteScript.command], environment: environment, stdin: requests)
        XCTAssertEqual(result.status, 0, result.stderr)
        var reader = SnapshotReader()
        let events = reader.feed(Array(result.stdout.utf8))
        guard case .header(let header)? = events.first else { return XCTFail("no header in \(result.stdout.prefix(200))") }
        XCTAssertTrue(header.hasNvidiaSMI)
        let snapshots = events.compactMap { if case .snapshot(let raw) = $0 { raw } else { nil } }
        XCTAssertEqual(snapshots.count, 3)
        for raw in snapshots {
            XCTAssertFalse((raw.sections[.meminfo] ?? []).isEmpty, "no base data")
            XCTAssertNotNil(raw.sections[.procs])
            XCTAssertNil(raw.sections[.gpu], "a GPU section while nvidia-smi hangs")
        }
        XCTAssertTrue(snapshots.contains { $0.sections[.df] != nil }, "df, which answers, never came")
        let starts = (try? String(contentsOfFile: directory.file("starts"), encoding: .utf8)) ?? ""
        XCTAssertEqual(starts.split(separator: "\n").count, 1, "nvidia-smi was started again while it hung")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: temporary), [], "the probes' folder is left behind")
    }
}
