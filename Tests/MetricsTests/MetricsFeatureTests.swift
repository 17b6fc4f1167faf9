import Foundation
import TermindCore
import TermindHarness
import XCTest

/// The Metrics feature end to end: `termind metrics …` against a real sshd on loopback,
/// which runs on this very machine, so every value can be checked against our own /proc
/// read at the same moment. GPUs come from a fake `nvidia-smi` on the session's PATH
/// (sshd's SetEnv) printing recorded real XML, or hostile XML.
final class MetricsFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: ServeProcess?

    override func tearDown() {
        _ = serve?.stop()
        server?.stop()
        directory?.remove()
    }

    /// sshd with a fake nvidia-smi printing `gpuXML` (nil: none on the PATH); it hangs
    /// while the file `hangFlag` exists, as a wedged driver makes the real one hang.
    private func start(gpuXML: String? = nil) throws {
        directory = try TemporaryDirectory()
        var extra: [String] = []
        if let gpuXML {
            let bin = directory.file("fakebin")
            try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
            try gpuXML.write(toFile: directory.file("gpu.xml"), atomically: true, encoding: .utf8)
            let script = "#!/bin/sh\n[ \"$1 $2\" = \"-q -x\" ] || exit 2\nwhile [ -e \(hangFlag) ]; do sleep 0.2; done\ncat \(directory.file("gpu.xml"))\n"
            try script.write(toFile: bin + "/nvidia-smi", atomically: true, encoding: .utf8)
            chmod(bin + "/nvidia-smi", 0o755)
            extra.append("SetEnv PATH=\(bin):/usr/local/bin:/usr/bin:/bin")
        }
        server = try SSHServerFixture.withNewKey(in: directory, extraConfig: extra)
    }

    private var hangFlag: String { directory.file("nvidia-smi.hangs") }

    private var environment: [String: String] {
        ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
    }

    /// termind in-process (its own store), or on the server's socket once `serve` runs.
    private func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        let location = serve.map { ["--socket", $0.socketPath] } ?? ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
        return try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment, stdin: stdin)
    }

    private func json(_ arguments: [String]) throws -> JSONValue {
        let result = try termind(["--json"] + arguments)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "termind's output")
    }

    /// A saved host "box" for the fixture's sshd, with its key; sampling every second.
    private func saveHost() throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
        let set = try termind(["settings", "set", "metrics.preferences", #"{"intervalSeconds": 1}"#])
        XCTAssertEqual(set.status, 0, set.stderr)
    }

    private func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let n)?: Double(n)
        case .unsignedInteger(let n)?: Double(n)
        case .double(let d)?: d
        default: nil
        }
    }

    private func accepted() -> Int {
        ((try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
    }

    // MARK: - Tests

    func testASampleMatchesThisMachinesOwnProc() throws {
        try start()
        try saveHost()
        let added = try termind(["metrics", "add", "box", "--accept-host-key", "once"])
        XCTAssertEqual(added.status, 0, added.stderr)
        XCTAssertTrue(added.stdout.contains("box"), added.stdout)
        XCTAssertTrue(added.stderr.contains("monitored while termind serve runs"), added.stderr)

        // Trust given once is for that process's connection only: a new process asks again.
        let refused = try termind(["metrics", "show", "box"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("no terminal to ask whether to trust it"), refused.stderr)
        let sample = try json(["metrics", "show", "box", "--detail", "true", "--accept-host-key", "save"])
        let local = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        let memTotal = local("/proc/meminfo").split(separator: "\n").first { $0.hasPrefix("MemTotal:") }.flatMap { UInt64($0.split(separator: " ")[1]) }
        XCTAssertEqual(number(sample["memory"]?["total"]).map { UInt64($0) }, memTotal.map { $0 * 1024 }, "\(sample)")
        guard case .array(let cores)? = sample["cpu"]?["cores"] else { return XCTFail("no cores: \(sample)") }
        XCTAssertEqual(cores.count, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        let busy = try XCTUnwrap(number(sample["cpu"]?["total"]?["busy"]), "rates come with show: \(sample)")
        XCTAssertTrue((0...100).contains(busy))
        let uptime = Double(local("/proc/uptime").split(separator: " ")[0]) ?? 0
        XCTAssertEqual(number(sample["uptimeSeconds"]) ?? 0, uptime, accuracy: 10)
        XCTAssertEqual(number(sample["intervalSeconds"]) ?? 0, 1, accuracy: 0.5)
        let loadOne = Double(local("/proc/loadavg").split(separator: " ")[0]) ?? 0
        XCTAssertEqual(number(sample["load"]?["one"]) ?? -1, loadOne, accuracy: 2)
        // Interfaces: the physical ones, as /sys says (lo and other virtual ones left out).
        let virtual = Set((try? FileManager.default.contentsOfDirectory(atPath: "/sys/devices/virtual/net")) ?? [])
        let physical = local("/proc/net/dev").split(separator: "\n").compactMap { line -> String? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            return virtual.contains(name) ? nil : name
        }
        guard case .array(let interfaces)? = sample["network"] else { return XCTFail("\(sample)") }
        XCTAssertEqual(Set(interfaces.compactMap { $0["name"]?.stringValue }), Set(physical))
        // Detail: processes (never their command lines) and filesystems; no nvidia-smi means no GPUs, not an error.
        guard case .array(let byMemory)? = sample["processes"]?["byMemory"] else { return XCTFail("no processes: \(sample)") }
        XCTAssertFalse(byMemory.isEmpty)
        XCTAssertLessThanOrEqual(byMemory.count, 20)
        let processCount = try XCTUnwrap(number(sample["processes"]?["count"]))
        XCTAssertGreaterThan(processCount, 1)
        guard case .array(let filesystems)? = sample["filesystems"] else { return XCTFail("no filesystems: \(sample)") }
        XCTAssertTrue(filesystems.contains { $0["mount"]?.stringValue == "/" }, "\(filesystems)")
        XCTAssertEqual(sample["gpus"], .null)
        XCTAssertEqual(sample["problems"], .array([]))

        // The human form: a detail view standing for the result.
        let text = try termind(["metrics", "show", "box"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertTrue(text.stdout.contains("CPU cores"), text.stdout)
        XCTAssertFalse(text.stdout.contains("uptimeSeconds"), "the raw result was printed too: \(text.stdout)")
    }

    /// Monitors of one interval sample on the same instants inside a server, however far
    /// apart they started: one wake-up serves them all (MonitorClock). Two monitors started
    /// about half a second apart (with timers of their own, their samples stayed that far apart).
    func testMonitorsStartedApartSampleTogether() throws {
        try start()
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box2", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0)
        // The first add also saved the host key: box2's is about a quarter second quicker.
        Thread.sleep(forTimeInterval: 0.75)
        XCTAssertEqual(try termind(["metrics", "add", "box2"]).status, 0)
        let watched = try termind(["--json", "metrics", "watch", "box", "box2", "--count", "12"])
        XCTAssertEqual(watched.status, 0, watched.stderr)
        var times: [String: [Double]] = [:]
        for line in watched.stdout.split(separator: "\n") {
            guard let sample = try? JSONCoding.parse(Data(line.utf8), source: "line"), let label = sample["label"]?.stringValue,
                  let at = number(sample["takenAt"]) else { continue }
            times[label, default: []].append(at)
        }
        guard let first = times["box"], let second = times["box2"], first.count >= 4, second.count >= 4 else { return XCTFail("\(times)") }
        // box2's later samples fall on box's instants of the 1 s grid (phases of separate
        // timers would stay about half a second apart); compared modulo the interval, since
        // the two series need not end on the same instant. A sample is stamped when it
        // arrives, after its own round trip (both hosts' scripts share two cores), so the
        // middle of the last three offsets is held to a fifth of a second.
        let phase = first.last!.truncatingRemainder(dividingBy: 1)
        let offsets = second.suffix(3).map { at -> Double in
            let apart = abs(at.truncatingRemainder(dividingBy: 1) - phase)
            return min(apart, 1 - apart)
        }.sorted()
        XCTAssertLessThan(offsets[1], 0.2, "box2 sampled at \(second), box at \(first)")
    }

    /// Inside a server, whose monitor samples without detail until someone views it, a
    /// detail has processes' CPU: show waits for the second detail snapshot (taken a second
    /// after the first) instead of answering with the first, where every process's CPU was
    /// null (nothing to rate it against).
    func testADetailShownInsideAServerHasProcessesCPU() throws {
        try start()
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0)
        let sample = try json(["metrics", "show", "box", "--detail", "true"])
        let processes = sample["processes"]
        XCTAssertNotNil(number(processes?["intervalSeconds"]), "no process table to rate against: \(String(describing: processes?["intervalSeconds"]))")
        let listed = (processes?["byCPU"]?.arrayValue ?? []) + (processes?["byMemory"]?.arrayValue ?? [])
        XCTAssertFalse(listed.isEmpty)
        // A process seen in both tables (this machine's long-lived ones: sshd, termind serve) has a CPU figure.
        XCTAssertTrue(listed.contains { number($0["cpu"]) != nil }, "every process's CPU is null: \(listed.prefix(3))")
        for process in processes?["byCPU"]?.arrayValue ?? [] { XCTAssertNotNil(number(process["cpu"])) }
    }

    /// A served store with two monitored hosts, `box` and `box2`, both this machine's sshd.
    private func serveTwoMonitoredHosts(file: StaticString = #filePath, line: UInt = #line) throws {
        try start()
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box2", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0, file: file, line: line)
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0, file: file, line: line)
        XCTAssertEqual(try termind(["metrics", "add", "box2"]).status, 0, file: file, line: line)
    }

    /// `metrics watch` without a host shows every monitored host, as its help says (it was
    /// refused: "needs HOSTS").
    func testWatchWithoutAHostShowsEveryMonitoredHost() throws {
        try serveTwoMonitoredHosts()
        let watched = try termind(["--json", "metrics", "watch", "--count", "6"])
        XCTAssertEqual(watched.status, 0, watched.stderr)
        let labels = Set(watched.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }.compactMap { $0["label"]?.stringValue })
        XCTAssertEqual(labels, ["box", "box2"], watched.stdout)
        // Every line is a JSON document of its own, the closing result too (not pretty-printed).
        let lines = watched.stdout.split(separator: "\n")
        for line in lines { XCTAssertNoThrow(try JSONCoding.parse(Data(line.utf8), source: "line"), String(line)) }
        XCTAssertEqual(try lines.last.map { try JSONCoding.parse(Data($0.utf8), source: "last line") }?["redraws"], .integer(6), watched.stdout)
        // Paused hosts are left out; with every host paused it says so.
        XCTAssertEqual(try termind(["metrics", "pause", "box2"]).status, 0)
        let one = try termind(["--json", "metrics", "watch", "--count", "2"])
        XCTAssertEqual(one.status, 0, one.stderr)
        XCTAssertFalse(one.stdout.contains("\"box2\""), one.stdout)
        XCTAssertEqual(try termind(["metrics", "pause", "box"]).status, 0)
        let none = try termind(["metrics", "watch"])
        XCTAssertEqual(none.status, 1)
        XCTAssertTrue(none.stderr.contains("Every monitored host is paused"), none.stderr)
    }

    /// A host removed (termind metrics rm) while a watch shows it leaves the view; it stayed
    /// as a row of dashes.
    func testAHostRemovedDuringAWatchLeavesTheView() throws {
        try serveTwoMonitoredHosts()
        // Without a terminal each view is printed in turn, its title first.
        let watch = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", ["--socket", serve?.socketPath ?? "", "metrics", "watch", "box", "box2"],
                                       environment: environment, captureOutput: true)
        defer {
            if watch.isRunning { watch.signal(SIGKILL) }
            watch.wait()
        }
        XCTAssertNotNil(watch.readOutput(until: "box2", timeout: 20), "the watch never showed box2")
        XCTAssertEqual(try termind(["metrics", "rm", "box2"]).status, 0)
        let title = "termind metrics at"
        var text = ""
        var views: [String] { Array(text.components(separatedBy: title).dropFirst().dropLast()) }  // the complete ones
        let shown = waitUntil(seconds: 20) {
            guard let more = watch.readOutput(until: title, timeout: 5) else { return true }
            text += more
            guard let gone = views.firstIndex(where: { !$0.contains("box2") }) else { return false }
            return views.count >= gone + 3
        }
        XCTAssertTrue(shown, "the watch ended or stopped drawing: \(text.suffix(500))")
        guard let gone = views.firstIndex(where: { !$0.contains("box2") }) else { return XCTFail("box2 stayed in the view: \(views.last ?? text.suffix(500).description)") }
        for view in views[gone...] {
            XCTAssertFalse(view.contains("box2"), "box2 came back: \(view)")
            XCTAssertTrue(view.contains("box"), view)
        }
        XCTAssertTrue(watch.isRunning, "the watch of the host left ended")
    }

    func testGetReturnsWhatIsHeldAndNeverStartsSampling() throws {
        try start()
        try saveHost()
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0)
        let before = accepted()
        // A new process holds no sample: get says so, and connects nowhere.
        let got = try json(["call", "metrics.get@1", "{}"])
        guard case .array(let hosts)? = got["hosts"], let first = hosts.first else { return XCTFail("\(got)") }
        XCTAssertEqual(first["label"], .string("box"))
        XCTAssertEqual(first["state"], .string("idle"))
        XCTAssertEqual(first["sample"], .null)
        XCTAssertEqual(first["stale"], .bool(true))
        XCTAssertEqual(accepted(), before, "metrics.get@1 connected to the host")
        // Hosts are validated by name.
        let unknown = try termind(["call", "metrics.get@1", #"{"hosts": ["nope"]}"#])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("'nope' is not a monitored host"), unknown.stderr)
        // A host that is not saved cannot be added; nothing changes.
        let notSaved = try termind(["metrics", "add", "elsewhere"])
        XCTAssertNotEqual(notSaved.status, 0)
        XCTAssertTrue(notSaved.stderr.contains("'elsewhere' is not a saved host"), notSaved.stderr)
        let list = try json(["metrics", "list"])
        guard case .array(let monitors)? = list["monitors"] else { return XCTFail("\(list)") }
        XCTAssertEqual(monitors.compactMap { $0["label"]?.stringValue }, ["box"])
        // Removed: gone from the list and from get.
        XCTAssertEqual(try termind(["metrics", "rm", "box"]).status, 0)
        XCTAssertEqual(try json(["metrics", "list"])["monitors"], .array([]))
    }

    func testAServerSamplesRecordedGPUsSurvivesADroppedConnectionAndForgetsOnceTrustOnPause() throws {
        let xml = try String(contentsOfFile: Repository.path("Tests/Fixtures/NvidiaSMI/tesla-v100s-x8-driver-460.xml"), encoding: .utf8)
        try start(gpuXML: xml)
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        let added = try termind(["metrics", "add", "box", "--accept-host-key", "once"])
        XCTAssertEqual(added.status, 0, added.stderr)

        // --json streams one object per sample.
        let watched = try termind(["--json", "metrics", "watch", "box", "--count", "3"])
        XCTAssertEqual(watched.status, 0, watched.stderr)
        let lines = watched.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }
        let samples = lines.filter { $0["host"] != nil }
        XCTAssertEqual(samples.count, 3, watched.stdout)
        for sample in samples {
            guard case .array(let gpus)? = sample["gpus"] else { XCTFail("no GPUs: \(sample)"); continue }
            XCTAssertEqual(gpus.count, 8)
            XCTAssertEqual(gpus.first?["name"], .string("Tesla V100S-PCIE-32GB"))
            XCTAssertEqual(gpus.first?["processes"]?.arrayValue?.first?["name"], .string("python"))
        }
        let times = samples.compactMap { number($0["takenAt"]) }
        XCTAssertEqual(times, times.sorted())
        XCTAssertEqual(Set(times).count, 3, "three distinct samples")

        // Two watchers at once share the one monitor: no new SSH connection, the same samples.
        let connections = accepted()
        let group = DispatchGroup()
        let outputs = Locked<[String]>([])
        let executable = FeatureHarness.buildDirectory + "/termind"
        let arguments = ["--socket", serve?.socketPath ?? "", "--json", "metrics", "watch", "box", "--count", "2"]
        let environment = self.environment
        for _ in 0..<2 {
            group.enter()
            DispatchQueue.global().async {
                let result = try? ProcessRunner.run(executable, arguments, environment: environment)
                outputs.withLock { $0.append(result?.stdout ?? "") }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(accepted(), connections, "a watcher opened a connection of its own")
        let seen = outputs.withLock { $0 }.map { Set($0.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }.compactMap { number($0["takenAt"]) }) }
        XCTAssertEqual(seen.count, 2)
        XCTAssertFalse(seen[0].intersection(seen[1]).isEmpty, "the watchers saw different samples: \(seen)")

        // The server keeps sampling without any client: get sees a fresh sample.
        Thread.sleep(forTimeInterval: 1.5)
        let got = try json(["call", "metrics.get@1", #"{"hosts": ["box"]}"#])
        let held = got["hosts"]?.arrayValue?.first
        XCTAssertEqual(held?["state"], .string("sampling"), "\(got)")
        XCTAssertEqual(held?["stale"], .bool(false), "\(got)")
        XCTAssertLessThan(number(held?["ageSeconds"]) ?? 99, 3)

        // Drop the connection: sshd's session processes die. The monitor reconnects by
        // itself, trusting the key it was told to trust once, without asking anyone.
        let dropped = Date().timeIntervalSince1970
        let sshd = Int32((try String(contentsOfFile: server.directory.file("sshd.pid"), encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        XCTAssertGreaterThan(sshd, 0)
        for child in Self.children(of: sshd) { kill(child, SIGKILL) }
        var recovered = false
        var states: Set<String> = []
        for _ in 0..<100 {
            Thread.sleep(forTimeInterval: 0.2)
            let list = try json(["metrics", "list"])
            let monitor = list["monitors"]?.arrayValue?.first
            if let state = monitor?["state"]?.stringValue { states.insert(state) }
            if monitor?["state"] == .string("sampling"), (number(monitor?["lastSampleAt"]) ?? 0) > dropped + 0.5 { recovered = true; break }
        }
        XCTAssertTrue(recovered, "no sample after the drop; states seen: \(states)")
        XCTAssertTrue(states.contains("retrying") || states.contains("connecting"), "the drop went unnoticed: \(states)")

        // Paused: once-only trust is forgotten, so resuming with nobody to ask fails closed.
        let paused = try json(["metrics", "pause", "box"])
        XCTAssertEqual(paused["state"], .string("paused"))
        let resumed = try termind(["metrics", "resume", "box"])
        XCTAssertNotEqual(resumed.status, 0)
        XCTAssertTrue(resumed.stderr.contains("no terminal to ask whether to trust it"), resumed.stderr)
        let after = try json(["metrics", "list"])
        XCTAssertEqual(after["monitors"]?.arrayValue?.first?["state"], .string("needs-attention"), "\(after)")
        // Resumed with an answer: sampling again.
        let again = try termind(["metrics", "resume", "box", "--accept-host-key", "once"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(try json(["metrics", "list"])["monitors"]?.arrayValue?.first?["state"], .string("sampling"))

        // A watch whose only monitor is removed ends, saying so, instead of waiting for Ctrl-C.
        let watch = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", ["--socket", serve?.socketPath ?? "", "--json", "metrics", "watch", "box"],
                                       environment: environment, captureOutput: true)
        XCTAssertNotNil(watch.readOutput(until: "takenAt", timeout: 20), "the watch showed no sample")
        XCTAssertEqual(try termind(["metrics", "rm", "box"]).status, 0)
        let deadline = Date().addingTimeInterval(15)
        while watch.isRunning && Date() < deadline { usleep(100_000) }
        if watch.isRunning { watch.signal(SIGKILL) }
        let status = watch.wait()
        let (stdout, stderr) = watch.readAll()
        let said = String(decoding: stdout + stderr, as: UTF8.self)
        XCTAssertEqual(status, 1, said)
        XCTAssertTrue(said.contains("no longer monitored") && said.contains("metrics.not_monitored"), said)
    }

    /// A hanging nvidia-smi (a wedged driver) never holds up the base data: CPU and memory
    /// keep coming, each sample names the late GPU probe (and list, get and show say so),
    /// and the GPUs come back once it answers. It blanked the whole host before: the remote
    /// loop waited for nvidia-smi, the channel went silent, and the monitor reconnected into
    /// the same wait.
    func testAHangingNvidiaSMIKeepsTheBaseDataFlowingAndIsNamedUntilItAnswers() throws {
        let xml = try String(contentsOfFile: Repository.path("Tests/Fixtures/NvidiaSMI/tesla-v100s-x8-driver-460.xml"), encoding: .utf8)
        try start(gpuXML: xml)
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        let added = try termind(["metrics", "add", "box", "--accept-host-key", "once"])
        XCTAssertEqual(added.status, 0, added.stderr)
        func latest() throws -> JSONValue? {
            try json(["call", "metrics.get@1", #"{"hosts": ["box"]}"#])["hosts"]?.arrayValue?.first?["sample"]
        }
        func problems(_ sample: JSONValue?) -> [String] { sample?["problems"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        func isLate(_ sample: JSONValue?) -> Bool { problems(sample).contains { $0.hasPrefix("gpu: nvidia-smi has not answered for") } }
        XCTAssertTrue(try waitUntil(seconds: 20) { try latest()?["gpus"]?.arrayValue?.count == 8 }, "no GPUs before the hang")

        XCTAssertTrue(FileManager.default.createFile(atPath: hangFlag, contents: nil))
        let hung = Date().timeIntervalSince1970
        var late: JSONValue?
        XCTAssertTrue(try waitUntil(seconds: 45) {
            late = try latest()
            return isLate(late)
        }, "no sample named the late GPU probe; the latest, taken at \(number(late?["takenAt"]) ?? 0), says \(problems(late))")
        // The base data stands in it; the GPUs are left out, not made up.
        XCTAssertGreaterThan(number(late?["takenAt"]) ?? 0, hung)
        XCTAssertNotNil(number(late?["memory"]?["total"]), "no memory while nvidia-smi hangs")
        XCTAssertNotNil(number(late?["cpu"]?["total"]?["busy"]), "no CPU while nvidia-smi hangs")
        XCTAssertEqual(late?["gpus"], .null, "GPU figures while nvidia-smi hangs")
        // Samples keep coming while it hangs, each naming it.
        var next: JSONValue?
        XCTAssertTrue(try waitUntil(seconds: 10) {
            next = try latest()
            return (number(next?["takenAt"]) ?? 0) > (number(late?["takenAt"]) ?? 0)
        }, "sampling stopped while nvidia-smi hangs")
        XCTAssertTrue(isLate(next), "\(problems(next))")
        // list does not claim all is well; show answers (with the problem) instead of failing.
        let monitor = try json(["metrics", "list"])["monitors"]?.arrayValue?.first
        XCTAssertEqual(monitor?["state"], .string("sampling"))
        XCTAssertTrue(monitor?["problems"]?.arrayValue?.contains { $0.stringValue?.contains("nvidia-smi has not answered") == true } == true,
                      "list: \(String(describing: monitor))")
        let listed = try termind(["metrics", "list"])
        XCTAssertTrue(listed.stdout.contains("nvidia-smi has not answered"), listed.stdout)
        let shown = try termind(["--json", "metrics", "show", "box"])
        XCTAssertEqual(shown.status, 0, shown.stderr)
        XCTAssertTrue(isLate(try? JSONCoding.parse(Data(shown.stdout.utf8), source: "show")), "show: \(shown.stdout.prefix(300))")
        let text = try termind(["metrics", "show", "box"])
        XCTAssertTrue(text.stdout.contains("Problems") && text.stdout.contains("nvidia-smi has not answered"), text.stdout)

        // It answers again: the GPUs are back and nothing is said any more.
        try FileManager.default.removeItem(atPath: hangFlag)
        var recovered: JSONValue?
        XCTAssertTrue(try waitUntil(seconds: 20) {
            recovered = try latest()
            return recovered?["gpus"]?.arrayValue?.count == 8 && problems(recovered).isEmpty
        }, "the GPUs did not come back: \(problems(recovered))")
        XCTAssertEqual(try json(["metrics", "list"])["monitors"]?.arrayValue?.first?["problems"], .array([]))
    }

    func testChangingTheHostsUserForgetsOnceOnlyTrust() throws {
        // A second account the same key logs in as (root makes it; without root: skipped).
        guard getuid() == 0 else { throw XCTSkip("needs root for a second account") }
        let account = try ThrowawayAccount()
        defer { account.remove() }
        try start()
        chmod(server.directory.file("authorized_keys"), 0o644)  // sshd reads it as the account logging in
        serve = try ServeProcess(directory: directory, arguments: [])
        try saveHost()
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "once"]).status, 0)
        let sshd = Int32((try String(contentsOfFile: server.directory.file("sshd.pid"), encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0

        // The same host under another user: the key trusted once for the old one is forgotten,
        // so the reconnect after a drop asks again, with nobody there, and stops.
        XCTAssertEqual(try termind(["vault", "host", "edit", "box", "--user", account.name]).status, 0)
        for child in Self.children(of: sshd) { kill(child, SIGKILL) }
        var state: JSONValue?
        var error = ""
        for _ in 0..<100 {
            Thread.sleep(forTimeInterval: 0.2)
            let monitor = try json(["metrics", "list"])["monitors"]?.arrayValue?.first
            state = monitor?["state"]
            error = monitor?["lastError"]?.stringValue ?? ""
            if state == .string("needs-attention") { break }
        }
        XCTAssertEqual(state, .string("needs-attention"), error)
        XCTAssertTrue(error.contains("no terminal to ask whether to trust it"), error)
    }

    func testHostileGPUOutputLeavesTheBaseDataAndNeverEchoesIt() throws {
        let laughs = """
        <?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "MALICIOUS"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>
        <nvidia_smi_log><gpu id="x"><product_name>&lol2;</product_name></gpu></nvidia_smi_log>
        """
        try start(gpuXML: laughs)
        try saveHost()
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0)
        let result = try termind(["--json", "metrics", "show", "box"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertFalse(result.stdout.contains("MALICIOUS") || result.stderr.contains("MALICIOUS"))
        let sample = try JSONCoding.parse(Data(result.stdout.utf8), source: "show")
        XCTAssertNotEqual(sample["memory"], .null, "the base data stands")
        XCTAssertEqual(sample["gpus"], .null)
        let problems = sample["problems"]?.arrayValue?.compactMap(\.stringValue) ?? []
        XCTAssertTrue(problems.contains { $0.hasPrefix("gpu: nvidia-smi's XML (\(laughs.utf8.count + 1) bytes) is unusable") }, "\(problems)")
    }

    /// The interfaces chosen per host are keyed by host id: a label or an unknown key is
    /// refused, named (both were stored and never used); the id works.
    func testInterfacesAreChosenByMonitoredHostID() throws {
        try start()
        try saveHost()
        XCTAssertEqual(try termind(["metrics", "add", "box", "--accept-host-key", "save"]).status, 0)
        let id = try XCTUnwrap(try json(["metrics", "list"])["monitors"]?.arrayValue?.first?["host"]?.stringValue)
        for key in ["box", "nosuchhost"] {
            let refused = try termind(["settings", "set", "metrics.preferences", #"{"interfaces": {"\#(key)": ["lo"]}}"#])
            XCTAssertEqual(refused.status, 2, refused.stderr)
            XCTAssertTrue(refused.stderr.contains("metrics.preferences.interfaces.\(key)") && refused.stderr.contains("not the id of a monitored host"), refused.stderr)
        }
        let set = try termind(["settings", "set", "metrics.preferences", #"{"interfaces": {"\#(id)": ["lo"]}}"#])
        XCTAssertEqual(set.status, 0, set.stderr)
        // The chosen (virtual) interface is what the sample shows.
        let sample = try json(["metrics", "show", "box"])
        XCTAssertEqual(sample["network"]?.arrayValue?.compactMap { $0["name"]?.stringValue }, ["lo"], "\(String(describing: sample["network"]))")
    }

    /// Processes whose parent is `pid` (sshd's per-connection children).
    static func children(of pid: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { child in
            guard let stat = try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == pid
        }
    }
}

/// A value shared between a test's threads.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R { lock.lock(); defer { lock.unlock() }; return body(&value) }
}

