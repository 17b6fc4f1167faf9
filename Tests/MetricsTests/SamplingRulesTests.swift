import Foundation
import MetricsAPI
import MetricsRules
import TermindHarness
import XCTest

/// The remote script's framing, the procfs parsers and the rates, on this machine's own
/// /proc and on crafted and mutated input.
final class SamplingRulesTests: XCTestCase {
    private let header = RemoteHeader(pageSize: 4096, clockTicks: 100, hasNvidiaSMI: false)

    /// A snapshot as the script prints it.
    private func snapshot(_ sections: [(RemoteScript.Section, String)]) -> [UInt8] {
        var text = "\u{1E}snapshot\n"
        for (section, body) in sections {
            text += "\u{1E}\(section.rawValue)\n" + body + (body.hasSuffix("\n") || body.isEmpty ? "" : "\n")
        }
        return Array((text + "\u{1E}end\n").utf8)
    }

    private func raw(_ sections: [(RemoteScript.Section, String)]) throws -> RawSnapshot {
        var reader = SnapshotReader()
        let events = reader.feed(Array("\u{1E}termind-metrics 1 4096 100 0\n".utf8) + snapshot(sections))
        guard events.count == 2, case .snapshot(let raw) = events[1] else { throw XCTSkip("unexpected events \(events)") }
        return raw
    }

    private func stat(user: UInt64, system: UInt64, idle: UInt64, iowait: UInt64 = 0, steal: UInt64 = 0) -> String {
        "cpu  \(user) 0 \(system) \(idle) \(iowait) 0 0 \(steal) 0 0\ncpu0 \(user) 0 \(system) \(idle) \(iowait) 0 0 \(steal) 0 0\n"
    }

    // MARK: - Framing

    func testStartUpNoiseIsSkippedAndSectionsArriveWhole() throws {
        var reader = SnapshotReader()
        var events = reader.feed(Array("Welcome to the box!\nlast login: never\n".utf8))
        events += reader.feed(Array("\u{1E}termind-metrics 1 16384 250 1\n".utf8))
        let bytes = snapshot([(.uptime, "100.5 200.0"), (.loadavg, "0.10 0.20 0.30 1/100 42")])
        // Fed a byte at a time: framing does not depend on how the channel splits output.
        for byte in bytes { events += reader.feed([byte]) }
        XCTAssertEqual(events.first, .header(RemoteHeader(pageSize: 16384, clockTicks: 250, hasNvidiaSMI: true)))
        guard events.count == 2, case .snapshot(let raw) = events[1] else { return XCTFail("\(events)") }
        XCTAssertEqual(raw.text(.uptime), "100.5 200.0\n")
        XCTAssertEqual(raw.text(.loadavg), "0.10 0.20 0.30 1/100 42\n")
    }

    func testTheFilesSectionIsSplitByPathWithinEachFilesBound() throws {
        let huge = String(repeating: "/proc/loadavg:0.1 0.2 0.3 1/2 3\n", count: 20)  // over loadavg's 256 bytes
        let raw = try raw([(.files, "/proc/uptime:12.5 3.0\n/proc/meminfo:MemTotal: 1000 kB\n/etc/shadow:root:x\n/proc/meminfo:MemFree: 10 kB\n" + huge)])
        XCTAssertEqual(raw.text(.uptime), "12.5 3.0\n")
        XCTAssertEqual(raw.text(.meminfo), "MemTotal: 1000 kB\nMemFree: 10 kB\n")
        XCTAssertNil(raw.sections[.loadavg])
        XCTAssertNotNil(raw.oversized[.loadavg])
        XCTAssertFalse(raw.sections.values.contains { String(decoding: $0, as: UTF8.self).contains("shadow") || String(decoding: $0, as: UTF8.self).contains("root:x") },
                       "a line of a file termind did not ask for is dropped")
    }

    func testProtocolViolationsStopTheReader() {
        for (input, expected) in [
            (String(repeating: "x", count: SnapshotReader.preambleLimit + 10) + "\n", "before the monitor's header"),
            ("\u{1E}termind-metrics 2 4096 100 0\n", "protocol version"),
            ("\u{1E}termind-metrics 1 7 100 0\n", "invalid page size"),
            ("\u{1E}termind-metrics 1 4096 100 0\n\u{1E}snapshot\n\u{1E}bogus\n", "unknown section"),
            ("\u{1E}termind-metrics 1 4096 100 0\n\u{1E}snapshot\n\u{1E}stat\n\u{1E}stat\n", "twice"),
            ("\u{1E}termind-metrics 1 4096 100 0\nstray\n", "outside a snapshot"),
        ] {
            var reader = SnapshotReader()
            let events = reader.feed(Array(input.utf8))
            guard case .violation(let reason)? = events.last else { XCTFail("no violation for \(expected): \(events)"); continue }
            XCTAssertTrue(reason.contains(expected), "\(reason) (expected \(expected))")
            XCTAssertTrue(reader.failed)
            XCTAssertEqual(reader.feed(Array("\u{1E}snapshot\n\u{1E}end\n".utf8)), [], "a failed reader reads no more")
        }
    }

    func testAnOversizedSectionIsReportedBySizeAndTheRestStands() throws {
        let huge = String(repeating: "cpu9 1 2 3 4 5 6 7 8 9 10 SECRETCONTENT\n", count: RemoteScript.Section.stat.limit / 40 + 100)
        let raw = try raw([(.stat, huge), (.meminfo, "MemTotal: 1000 kB\nMemAvailable: 400 kB\n")])
        XCTAssertNil(raw.sections[.stat])
        XCTAssertEqual(raw.oversized[.stat], huge.utf8.count)
        var builder = SampleBuilder(header: header)
        let sample = builder.sample(raw, host: "h", label: "h", takenAt: 0)
        XCTAssertEqual(sample.memory?.total, 1000 * 1024, "the other sections stand")
        XCTAssertNil(sample.cpu)
        XCTAssertTrue(sample.problems.contains { $0.hasPrefix("stat: \(huge.utf8.count) bytes") }, "\(sample.problems)")
        XCTAssertFalse(sample.problems.joined().contains("SECRETCONTENT"), "a problem repeats remote content")
    }

    /// A probe without a result (late, or not run) is named among the problems, with how long
    /// it has been running; lines the script never writes are skipped, each probe counts once.
    func testProbesWithoutAResultAreNamedAndTheRestStands() throws {
        let raw = try raw([(.meminfo, "MemTotal: 1000 kB\n"), (.probes, "gpu late 12\ndf skipped\nsecret late 3\ngpu late 99\ndf late x\ngpu\n")])
        XCTAssertEqual(ProcParsers.probes(raw.sections[.probes] ?? []),
                       [.init(section: .gpu, lateSeconds: 12), .init(section: .df, lateSeconds: nil)])
        var builder = SampleBuilder(header: RemoteHeader(pageSize: 4096, clockTicks: 100, hasNvidiaSMI: true))
        let sample = builder.sample(raw, host: "h", label: "h", takenAt: 0)
        XCTAssertEqual(sample.memory?.total, 1000 * 1024, "the base data stands")
        XCTAssertNil(sample.gpus, "no GPU figures are made up")
        let named = sample.problems.filter { $0.hasPrefix("gpu:") || $0.hasPrefix("df:") }
        XCTAssertEqual(named, ["gpu: nvidia-smi has not answered for 12 s (it is left running; its figures come back when it answers)",
                               "df: df was not run: the host gave no temporary folder for its output (mktemp -d failed)"])
        XCTAssertFalse(sample.problems.joined().contains("secret"), "a problem repeats remote content")
    }

    func testAnEndlessLineOrSnapshotHoldsOnlyBoundedMemory() {
        var reader = SnapshotReader()
        _ = reader.feed(Array("\u{1E}termind-metrics 1 4096 100 0\n\u{1E}snapshot\n\u{1E}procs\n".utf8))
        let chunk = [UInt8](repeating: UInt8(ascii: "7"), count: 1 << 20)
        // 16 MiB without a newline, then 16 MiB of lines (both over the bounds): never more than the section's bound held.
        for _ in 0..<16 { _ = reader.feed(chunk) }
        XCTAssertLessThanOrEqual(reader.bufferedBytes, RemoteScript.Section.procs.limit + 1)
        let lines = [UInt8](repeating: UInt8(ascii: "1"), count: 1023) + [10]
        let block = Array([[UInt8]](repeating: lines, count: 1024).joined())
        for _ in 0..<16 { _ = reader.feed(block) }
        XCTAssertLessThanOrEqual(reader.bufferedBytes, SnapshotReader.snapshotLimit + (1 << 20))
        let events = reader.feed(Array("\u{1E}end\n".utf8))
        guard case .snapshot(let raw)? = events.first else { return XCTFail("\(events)") }
        XCTAssertNotNil(raw.oversized[.procs])
        XCTAssertEqual(reader.bufferedBytes, 0)
    }

    // MARK: - Parsers

    func testThisMachinesProcParses() throws {
        func read(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
        let cores = ProcParsers.stat(try read("/proc/stat")).cores.count
        XCTAssertEqual(cores, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        XCTAssertNotNil(ProcParsers.stat(try read("/proc/stat")).total)
        XCTAssertNotNil(ProcParsers.uptime(try read("/proc/uptime")))
        XCTAssertNotNil(ProcParsers.loadavg(try read("/proc/loadavg")))
        let memory = ProcParsers.meminfo(try read("/proc/meminfo"))
        let line = try XCTUnwrap(try read("/proc/meminfo").split(separator: "\n").first { $0.hasPrefix("MemTotal:") })
        XCTAssertEqual(memory["MemTotal"], try XCTUnwrap(UInt64(line.split(separator: " ")[1])) * 1024)
        XCTAssertNotNil(memory["MemAvailable"])
        XCTAssertTrue(ProcParsers.netdev(try read("/proc/net/dev")).contains { $0.name == "lo" })
        XCTAssertFalse(ProcParsers.diskstats(try read("/proc/diskstats")).isEmpty)
        let me = ProcParsers.processes(try read("/proc/self/stat"))
        XCTAssertEqual(me.map(\.pid), [Int(getpid())])
    }

    func testProcessNamesWithSpacesAndParenthesesAndBadLines() {
        let text = """
        42 (my (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 9999 1000000 300 18446744073709551615
        43 (short) R 1 43 43 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 12 100 -5 0
        garbage line
        44 (truncated) S 1 2 3
        -1 (negative) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 12 100 5 0
        45 (ctl\u{7}char) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 12 100 5 0
        """
        let processes = ProcParsers.processes(text)
        XCTAssertEqual(processes.map(\.pid), [42, 43, 45])
        XCTAssertEqual(processes[0].name, "my (weird) name")
        XCTAssertEqual(processes[0].cpuTicks, 200)
        XCTAssertEqual(processes[0].startTime, 9999)
        XCTAssertEqual(processes[0].rssPages, 300)
        XCTAssertEqual(processes[1].rssPages, 0, "a negative RSS is not wrapped into a huge one")
        XCTAssertEqual(processes[2].name, "ctl?char")
    }

    func testDfKeepsRealFilesystemsAndMountPointsWithSpaces() {
        let text = """
        Filesystem     1024-blocks      Used Available Capacity Mounted on
        /dev/sda1         40000000  10000000  30000000      25% /
        tmpfs              1000000         0   1000000       0% /run
        /dev/sdb1          2000000   1000000   1000000      50% /mnt/my disk
        /dev/loop3           60000     60000         0     100% /snap/core/1
        bogus line
        """
        let filesystems = ProcParsers.df(text)
        XCTAssertEqual(filesystems.map(\.mount), ["/", "/mnt/my disk"])
        XCTAssertEqual(filesystems.first?.totalKiB, 40_000_000)
    }

    func testMutatedProcTextNeverCrashesAndStaysBounded() throws {
        let originals = try ["/proc/stat", "/proc/meminfo", "/proc/net/dev", "/proc/diskstats", "/proc/self/stat", "/proc/loadavg", "/proc/uptime"].map {
            Array(try String(contentsOfFile: $0, encoding: .utf8).utf8)
        }
        var generator = SeededGenerator(seed: 99)
        for round in 0..<600 {
            var bytes = originals[round % originals.count]
            for _ in 0..<Int.random(in: 1...12, using: &generator) where !bytes.isEmpty {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<4, using: &generator) {
                case 0: bytes[at] = UInt8.random(in: 0...255, using: &generator)
                case 1: bytes.insert(contentsOf: [UInt8](repeating: UInt8(ascii: "9"), count: 40), at: at)  // overflowing numbers
                case 2: bytes.removeSubrange(at..<min(bytes.count, at + 30))
                default: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + 300)], at: at)
                }
            }
            let text = String(decoding: bytes, as: UTF8.self)
            XCTAssertLessThanOrEqual(ProcParsers.stat(text).cores.count, ProcParsers.maxCores)
            _ = ProcParsers.meminfo(text)
            XCTAssertLessThanOrEqual(ProcParsers.netdev(text).count, ProcParsers.maxInterfaces)
            _ = ProcParsers.diskstats(text)
            _ = ProcParsers.processes(text)
            _ = ProcParsers.df(text)
            _ = ProcParsers.uptime(text)
            _ = ProcParsers.loadavg(text)
            var reader = SnapshotReader()
            _ = reader.feed(Array("\u{1E}termind-metrics 1 4096 100 0\n".utf8) + snapshot([(.stat, text), (.procs, text), (.netdev, text)]))
        }
        // A host listing a million cores is held to the bound.
        let many = (0..<(ProcParsers.maxCores + 50)).map { "cpu\($0) 1 2 3 4 5 6 7 8 0 0" }.joined(separator: "\n")
        XCTAssertEqual(ProcParsers.stat(many).cores.count, ProcParsers.maxCores)
    }

    // MARK: - Rates

    func testRatesComeFromTheRemoteUptimeAndUnknownsAreNil() throws {
        var builder = SampleBuilder(header: header)
        let net = "Inter-|   Receive\n face |bytes    packets\n  eth0: 1000 10 0 0 0 0 0 0 5000 10 0 0 0 0 0 0\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n"
        let first = builder.sample(try raw([(.uptime, "100.00 1"), (.stat, stat(user: 100, system: 100, idle: 800)), (.netdev, net), (.virtual, "lo\n")]),
                                   host: "h", label: "h", takenAt: 1)
        XCTAssertNil(first.intervalSeconds, "one snapshot gives no rate")
        XCTAssertNil(first.cpu?.total.busy)
        XCTAssertEqual(first.network.map(\.name), ["eth0"], "virtual interfaces are left out unless chosen")
        XCTAssertNil(first.network.first?.receive)

        let net2 = net.replacingOccurrences(of: "eth0: 1000", with: "eth0: 3000").replacingOccurrences(of: " 5000 ", with: " 9000 ")
        // 2 s of remote uptime, however long the snapshot took to arrive here.
        let second = builder.sample(try raw([(.uptime, "102.00 1"), (.stat, stat(user: 150, system: 110, idle: 940)), (.netdev, net2), (.virtual, "lo\n")]),
                                    host: "h", label: "h", takenAt: 60)
        XCTAssertEqual(second.intervalSeconds, 2)
        XCTAssertEqual(second.cpu?.total.busy ?? -1, 30, accuracy: 1e-9)  // (50 + 10) of 200 ticks
        XCTAssertEqual(second.cpu?.total.user ?? -1, 25, accuracy: 1e-9)
        XCTAssertEqual(second.network.first?.receive, 1000)
        XCTAssertEqual(second.network.first?.transmit, 2000)

        // A counter that went backwards (a wrap, a reset) is unknown, never negative.
        let wrapped = net.replacingOccurrences(of: "eth0: 1000", with: "eth0: 5").replacingOccurrences(of: " 5000 ", with: " 9500 ")
        let third = builder.sample(try raw([(.uptime, "104.00 1"), (.stat, stat(user: 140, system: 120, idle: 1000)), (.netdev, wrapped), (.virtual, "lo\n")]),
                                   host: "h", label: "h", takenAt: 62)
        XCTAssertNil(third.network.first?.receive)
        XCTAssertEqual(third.network.first?.transmit, 250)
        XCTAssertNil(third.cpu?.total.busy, "a CPU counter went backwards")

        // Uptime that went backwards (a reboot) makes every rate unknown.
        let rebooted = builder.sample(try raw([(.uptime, "3.00 1"), (.stat, stat(user: 1, system: 1, idle: 1)), (.netdev, net)]), host: "h", label: "h", takenAt: 63)
        XCTAssertNil(rebooted.intervalSeconds)
        XCTAssertNil(rebooted.network.first?.receive)
        // Chosen interfaces include virtual ones.
        let chosen = builder.sample(try raw([(.uptime, "5.00 1"), (.netdev, net), (.virtual, "lo\n")]), host: "h", label: "h", takenAt: 64, interfaces: ["lo"])
        XCTAssertEqual(chosen.network.map(\.name), ["lo"])
        XCTAssertEqual(chosen.network.first?.virtual, true)
        XCTAssertTrue(chosen.problems.contains("stat: missing"), "\(chosen.problems)")
        XCTAssertNotNil(chosen.network.first?.receive)
    }

    func testAReusedPIDIsANewProcess() throws {
        var builder = SampleBuilder(header: header)
        func procs(_ lines: [(pid: Int, start: Int, ticks: Int, rss: Int)]) -> String {
            lines.map { "\($0.pid) (p\($0.pid)) S 1 1 1 0 -1 0 0 0 0 0 \($0.ticks) 0 0 0 20 0 1 0 \($0.start) 1000 \($0.rss) 0" }.joined(separator: "\n")
        }
        _ = builder.sample(try raw([(.uptime, "10.00 1"), (.procs, procs([(7, 500, 100, 10), (8, 600, 0, 20)]))]), host: "h", label: "h", takenAt: 0)
        let next = builder.sample(try raw([(.uptime, "11.00 1"), (.procs, procs([(7, 900, 150, 10), (8, 600, 50, 20)]))]), host: "h", label: "h", takenAt: 1)
        let byPID = Dictionary(uniqueKeysWithValues: (next.processes?.byMemory ?? []).map { ($0.pid, $0) })
        XCTAssertNil(byPID[7]?.cpu, "PID 7 started again: its ticks are not a delta of the old process's")
        XCTAssertEqual(byPID[8]?.cpu ?? -1, 50, accuracy: 1e-9)  // 50 ticks at 100 Hz in 1 s
        XCTAssertEqual(byPID[8]?.rss, 20 * 4096, "RSS is pages times the remote page size")
        XCTAssertEqual(next.processes?.byCPU.map(\.pid), [8])
        XCTAssertEqual(next.processes?.count, 2)
    }

    /// Processes' CPU is rated against the previous snapshot's process table: a detail
    /// snapshot after one without detail (a viewer arriving at a server's monitor) says it
    /// has none to rate against, and the next detail snapshot has it.
    func testProcessesSayWhetherTheirCPUCouldBeRated() throws {
        var builder = SampleBuilder(header: header)
        let procs = { (ticks: Int) in "7 (p7) S 1 1 1 0 -1 0 0 0 0 0 \(ticks) 0 0 0 20 0 1 0 500 1000 10 0" }
        let base = builder.sample(try raw([(.uptime, "10.00 1")]), host: "h", label: "h", takenAt: 0)
        XCTAssertNil(base.processes)
        let first = builder.sample(try raw([(.uptime, "11.00 1"), (.procs, procs(100))]), host: "h", label: "h", takenAt: 1)
        XCTAssertEqual(first.intervalSeconds, 1, "the other rates have their interval")
        XCTAssertNil(first.processes?.intervalSeconds, "no process table came before")
        XCTAssertNil(first.processes?.byMemory.first?.cpu)
        let second = builder.sample(try raw([(.uptime, "11.50 1"), (.procs, procs(110))]), host: "h", label: "h", takenAt: 2)
        XCTAssertEqual(second.processes?.intervalSeconds, 0.5)
        XCTAssertEqual(second.processes?.byMemory.first?.cpu ?? -1, 20, accuracy: 1e-9)  // 10 ticks at 100 Hz in 0.5 s
        let text = String(decoding: try JSONEncoder().encode(first), as: UTF8.self)
        XCTAssertTrue(text.contains("\"intervalSeconds\":null"), "unknown is null, not left out: \(text)")
    }

    func testTopListsAreBounded() throws {
        var builder = SampleBuilder(header: header)
        let lines = (1...500).map { "\($0) (p) S 1 1 1 0 -1 0 0 0 0 0 \($0) 0 0 0 20 0 1 0 1 1000 \($0) 0" }.joined(separator: "\n")
        let sample = builder.sample(try raw([(.uptime, "10.00 1"), (.procs, lines)]), host: "h", label: "h", takenAt: 0)
        XCTAssertEqual(sample.processes?.count, 500)
        XCTAssertEqual(sample.processes?.byMemory.count, 20)
        XCTAssertEqual(sample.processes?.byMemory.first?.pid, 500)
    }

    func testUnknownsEncodeAsNull() throws {
        let sample = MetricsSample(host: "h", label: "h", takenAt: 1, uptimeSeconds: .infinity,
                                   network: [.init(name: "eth0", virtual: false, receive: nil, transmit: .nan)])
        let text = String(decoding: try JSONEncoder().encode(sample), as: UTF8.self)
        XCTAssertTrue(text.contains("\"uptimeSeconds\":null"), text)
        XCTAssertTrue(text.contains("\"receive\":null"), text)
        XCTAssertTrue(text.contains("\"transmit\":null"), text)
        XCTAssertTrue(text.contains("\"gpus\":null"), text)
    }

    // MARK: - History

    func testTheRingHoldsFiveMinutesAtTheInterval() {
        var history = History(interval: 2)
        XCTAssertEqual(history.capacity, 151)
        for i in 0..<400 {
            history.append(MetricsSample(host: "h", label: "h", takenAt: Double(i), cpu: .init(total: .init(busy: Double(i % 100), user: nil, system: nil, iowait: nil, steal: nil), cores: [])))
        }
        XCTAssertEqual(history.count, 151)
        XCTAssertEqual(history.all.first?.takenAt, 249)
        XCTAssertEqual(history.all.last?.takenAt, 399)
        XCTAssertEqual(history.recent(3).map(\.takenAt), [397, 398, 399], "the newest points of a ring that wrapped")
        XCTAssertEqual(history.recent(1000).map(\.takenAt), history.all.map(\.takenAt))
        history.resize(interval: 10)
        XCTAssertEqual(history.count, 31)
        XCTAssertEqual(history.all.last?.takenAt, 399)
        XCTAssertEqual(history.recent(2).map(\.takenAt), [398, 399], "the newest points of a ring not yet full")
        XCTAssertEqual(History.sparkline([0, 50, 100, nil], width: 10, maximum: 100), "▁▅█ ")
        XCTAssertEqual(History.sparkline([1, 2, 3], width: 2), "▆█")
    }
}
