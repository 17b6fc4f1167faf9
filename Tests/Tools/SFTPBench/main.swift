import Dispatch
import Foundation
import Synchronization
import TermindCore
import TermindHarness

// termind-sftp-bench [--mib N] [--rtt-mib N] [--files N] [--rtt-files N] [--runs R] [--only loopback,rtt,files,rttfiles,fair] [--relay-window MiB]
//
// Whole `termind get`/`put` processes (each one starts, connects over a saved host, moves
// the bytes, commits by rename) against whole OpenSSH `sftp -b` processes on the same sshd
// (internal-sftp, chacha20-poly1305 forced on both), runs alternated, medians compared
// (ratio = termind over sftp; > 1: termind is faster):
//
//   loopback  N MiB (default 1024) get and put;
//   rtt       N MiB (default 1024) get and put through a relay that delays each direction by
//             10 ms (a 20 ms round trip; this kernel has no netem) and lets each connection
//             have 4 MiB per round trip in flight each way, as TCP with the default 4 MiB
//             send buffer does (`--relay-window MiB` changes it, 0: no limit; DelayingRelay);
//   files     a tree of N files (default 2000) of 1-64 KiB, put -r and get -r, on the disk
//             and again in /dev/shm (a tmpfs) when there is one;
//   rttfiles  the same with N files (default 200) through the 20 ms relay;
//   fair      inside `termind serve` with sftp.limits {active 3, perHost 3}: three puts of 16
//             files each, to three saved hosts at once; prints the hosts in the order the
//             scheduler started their files (the rotation) and the time each put took.
//
// Everything runs on this machine; files live in a scratch folder on the same disk (the
// second files row in memory).

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-sftp-bench [--mib N] [--rtt-mib N] [--files N] [--rtt-files N] [--runs R] [--only loopback,rtt,files,rttfiles,fair] [--relay-window MiB]\n".utf8))
    exit(2)
}
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("termind-sftp-bench: \(message)\n".utf8))
    exit(1)
}
func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

var mib = 1024, rttMib = 1024, fileCount = 2000, rttFiles = 200, runs = 3
/// The relay's window per round trip (DelayingRelay: 4 MiB, a TCP sender's default send
/// buffer); `--relay-window 0` lets it read without limit (up to 256 MiB), as before issue 40.
var relayWindow = DelayingRelay.defaultWindow
var only: Set<String> = ["loopback", "rtt", "files", "rttfiles", "fair"]
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--mib": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; mib = v
    case "--rtt-mib": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; rttMib = v
    case "--files": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; fileCount = v
    case "--rtt-files": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; rttFiles = v
    case "--runs": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; runs = v
    case "--only": guard let v = args.popFirst() else { usage() }; only = Set(v.split(separator: ",").map(String.init))
    case "--relay-window": guard let v = args.popFirst().flatMap(Int.init), v >= 0 else { usage() }; relayWindow = v == 0 ? 256 << 20 : v << 20
    default: usage()
    }
}

let scratch = try TemporaryDirectory("termind-bench-sftp")
defer { scratch.remove() }
chmod(scratch.path, 0o755)
guard (try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", scratch.file("id")])).status == 0 else { fail("ssh-keygen") }
let cipher = "chacha20-poly1305@openssh.com"
let sshd = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: scratch.file("id.pub"), encoding: .utf8)],
                                extraConfig: ["Ciphers \(cipher)", "LogLevel VERBOSE", "MaxSessions 100", "MaxStartups 100"], hostKeyTypes: ["ed25519"])
defer { sshd.stop() }
let relay = try DelayingRelay(to: sshd.port, oneWayDelay: 0.010, window: relayWindow)
defer { relay.stop() }
let hostKey = sshd.hostKeys["ssh-ed25519"] ?? ""
try "[127.0.0.1]:\(sshd.port) \(hostKey)\n[127.0.0.1]:\(relay.port) \(hostKey)\n".write(toFile: scratch.file("known_hosts"), atomically: true, encoding: .utf8)

let termindPath = FeatureHarness.buildDirectory + "/termind"
var environment = ProcessInfo.termindEnvironment(home: scratch.file("home"), socket: scratch.file("none.sock"))
// termind's log says which files got more than one channel or a connection of their own.
let termindLog = scratch.file("termind.log")
environment["TERMIND_LOG_FILE"] = termindLog
var location = ["--store", scratch.file("db.sqlite"), "--secrets-key", scratch.file("k")]
@MainActor @discardableResult
func termind(_ arguments: [String]) throws -> ProcessResult {
    let result = try ProcessRunner.run(termindPath, location + arguments, environment: environment, measured: true)
    guard result.status == 0 else { fail("termind \(arguments.joined(separator: " ")): \(result.stderr)") }
    return result
}
@MainActor func saveHosts() throws {
    try termind(["vault", "key", "import", scratch.file("id"), "--label", "bench"])
    try termind(["vault", "identity", "add", NSUserName(), "--key", "bench"])
    for (label, port) in [("box", sshd.port), ("far", relay.port), ("box2", sshd.port), ("box3", sshd.port)] {
        try termind(["vault", "host", "add", "127.0.0.1", "--label", label, "--port", "\(port)", "--identity", NSUserName()])
    }
    for port in [sshd.port, relay.port] { try termind(["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(port)"]) }
}
try saveHosts()

/// Real bytes (not a sparse file).
@MainActor func makeFile(_ path: String, bytes: Int, seed: UInt64) {
    let fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0o644)
    var state = seed | 1
    var left = bytes
    var block = [UInt8](repeating: 0, count: min(bytes, 1 << 20))
    while left > 0 {
        let n = min(left, block.count)
        for i in stride(from: 0, to: n, by: 8) {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            withUnsafeBytes(of: state) { raw in for j in 0..<min(8, n - i) { block[i + j] = raw[j] } }
        }
        _ = block.withUnsafeBytes { write(fd, $0.baseAddress!, n) }
        left -= n
    }
    close(fd)
}

/// Each side's peak resident memory for each verb (the largest process: sftp or the ssh it
/// runs; every process started through GNU time, about a millisecond more for each side),
/// kept under "SIDE VERB" for the verb the next runs are for.
var peaks: [String: Double] = [:]
var verb = ""
@MainActor func noted(_ side: String, _ result: ProcessResult) { peaks["\(side) \(verb)"] = max(peaks["\(side) \(verb)"] ?? 0, result.peakResidentMiB ?? 0) }

/// A row's figure with both sides' peaks for `verb`.
@MainActor func row(_ name: String, verb: String, value: Double, unit: String, baseline: Double) -> BenchmarkFigure {
    defer { peaks["termind \(verb)"] = nil; peaks["sftp \(verb)"] = nil }
    return BenchmarkFigure(name: name, value: value, unit: unit, baseline: baseline, resident: peaks["termind \(verb)"], peerResident: peaks["sftp \(verb)"])
}

@MainActor func openssh(_ command: String, port: Int) throws -> Double {
    verb = String(command.prefix { $0 != " " }) + (command.contains(" -r ") ? " -r" : "")
    let batch = scratch.file("batch")
    try (command + "\n").write(toFile: batch, atomically: true, encoding: .utf8)
    let started = now()
    let result = try ProcessRunner.run("/usr/bin/sftp", ["-q", "-b", batch, "-i", scratch.file("id"), "-o", "UserKnownHostsFile=\(scratch.file("known_hosts"))",
                                                         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-F", "/dev/null", "-c", cipher,
                                                         "-P", "\(port)", "\(NSUserName())@127.0.0.1"], measured: true)
    guard result.status == 0 else { fail("sftp: \(result.stderr)") }
    noted("sftp", result)
    return now() - started
}

@MainActor func timed(_ arguments: [String]) throws -> Double {
    verb = arguments[0] + (arguments.contains("-r") ? " -r" : "")
    let started = now()
    noted("termind", try termind(arguments))
    return now() - started
}

@MainActor func clear(_ paths: String...) { for path in paths { try? FileManager.default.removeItem(atPath: path) } }

var figures: [BenchmarkFigure] = []
var notes: [String] = []

/// get and put of one file of `size` MiB over `host` (sftp over `port`), alternated.
@MainActor func bulk(_ label: String, mebibytes: Int, host: String, port: Int) throws {
    let stealBefore = CPUSteal.now()
    defer { notes.append("\(label): the hypervisor's steal while it ran: \(CPUSteal.now().share(since: stealBefore))") }
    let source = scratch.file("source-\(label.filter { $0.isLetter || $0.isNumber }).bin")
    makeFile(source, bytes: mebibytes << 20, seed: 88172645463325252)
    var values: [String: [Double]] = [:]
    // sshd's side of each transfer: its CPU (the session processes', counted once they are
    // reaped) and the connections and SFTP sessions it logged.
    var serverCPU: [String: [Double]] = [:]
    var topology: [String: (connections: Int, channels: String)] = [:]
    func server(_ key: String, _ run: () throws -> Double) rethrows -> Double {
        let cpu = sshd.serverCPUSeconds() ?? 0
        let logged = (try? String(contentsOfFile: termindLog, encoding: .utf8))?.count ?? 0
        // The most connection processes sshd had at once while it ran, sampled.
        let most = Mutex((seen: 0, done: false))
        let sampler = Thread {
            while !most.withLock({ $0.done }) {
                let now = sshd.connectionProcesses()
                most.withLock { $0.seen = max($0.seen, now) }
                usleep(20_000)
            }
        }
        sampler.start()
        let seconds = try run()
        most.withLock { $0.done = true }
        serverCPU[key, default: []].append((sshd.serverCPUSeconds() ?? 0) - cpu)
        // termind's own account of its data channels (only files with more than one, or on a connection of their own).
        let lines = String(((try? String(contentsOfFile: termindLog, encoding: .utf8)) ?? "").dropFirst(logged)).split(separator: "\n").filter { $0.contains("sftp.file.channels") }
        let channels = lines.compactMap { $0.split(separator: " ").first { $0.hasPrefix("channels=") }?.dropFirst(9) }.joined(separator: "+")
        topology[key] = (most.withLock { $0.seen }, key.hasSuffix("sftp") ? "1" : (channels.isEmpty ? "1" : channels))
        return seconds
    }
    for _ in 0..<runs {
        clear(scratch.file("got.termind"), scratch.file("got.sftp"), scratch.file("put.termind"), scratch.file("put.sftp"))
        values["get termind", default: []].append(Double(mebibytes) / (try server("get termind") { try timed(["get", "\(host):\(source)", scratch.file("got.termind")]) }))
        values["get sftp", default: []].append(Double(mebibytes) / (try server("get sftp") { try openssh("get \(source) \(scratch.file("got.sftp"))", port: port) }))
        values["put termind", default: []].append(Double(mebibytes) / (try server("put termind") { try timed(["put", source, "\(host):\(scratch.file("put.termind"))"]) }))
        values["put sftp", default: []].append(Double(mebibytes) / (try server("put sftp") { try openssh("put \(source) \(scratch.file("put.sftp"))", port: port) }))
    }
    for (name, list) in values.sorted(by: { $0.key < $1.key }) { print("\(label) \(name): \(list.map(BenchmarkFigure.format)) MiB/s") }
    let gibibytes = Double(mebibytes) / 1024
    for verb in ["get", "put"] {
        let ours = median(serverCPU["\(verb) termind"]!) / gibibytes, theirs = median(serverCPU["\(verb) sftp"]!) / gibibytes
        let a = topology["\(verb) termind"]!, b = topology["\(verb) sftp"]!
        notes.append("\(label) \(verb): sshd CPU \(String(format: "%.2f", ours)) s/GiB for termind, \(String(format: "%.2f", theirs)) for sftp "
                     + "(\(String(format: "%.2f", ours / max(theirs, 0.001)))×); the file's data channels: termind \(a.channels), sftp \(b.channels); sshd connections at once: termind \(a.connections), sftp \(b.connections)")
    }
    for verb in ["get", "put"] {
        figures.append(row("\(mebibytes) MiB \(verb), \(label) (MiB/s)", verb: verb, value: median(values["\(verb) termind"]!), unit: "MiB/s", baseline: median(values["\(verb) sftp"]!)))
    }
    clear(source, scratch.file("got.termind"), scratch.file("got.sftp"), scratch.file("put.termind"), scratch.file("put.sftp"))
}

if only.contains("loopback") { try bulk("loopback", mebibytes: mib, host: "box", port: sshd.port) }
if only.contains("rtt") {
    try bulk("20 ms RTT", mebibytes: rttMib, host: "far", port: relay.port)
    notes.append("20 ms RTT: the relay let each connection have \(relayWindow >> 20) MiB per round trip in flight each way (\(relayWindow >> 20) MiB / 20 ms = \(relayWindow / (1 << 20) * 50) MiB/s per connection at most)")
}

/// A tree of `count` files of 1-64 KiB in 20 folders, put -r and get -r over `host`.
@MainActor func tree(_ label: String, count: Int, host: String, port: Int, in folder: TemporaryDirectory = scratch) throws {
    let tree = folder.file("tree")
    var total = 0
    var state: UInt64 = 0x2545F4914F6CDD1D
    for i in 0..<count {
        let folder = tree + "/d\(i % 20)"
        if i < 20 { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        let size = 1024 + Int(state % (63 * 1024))
        total += size
        makeFile(folder + "/f\(i).bin", bytes: size, seed: state)
    }
    let stealBefore = CPUSteal.now()
    defer { notes.append("files \(label): the hypervisor's steal while it ran: \(CPUSteal.now().share(since: stealBefore))") }
    var values: [String: [Double]] = [:]
    // Each run writes new trees, and they are all removed at the end: on an ext4 without a
    // journal (this VM's disk), an inode freed in the last seconds (minutes, while its table
    // block is dirty) is skipped by every later allocation, one buffer lookup each, so a
    // tree created right after another was removed costs about 0.3 s more, for whichever
    // tool came next. Without the removals both tools create files at the disk's plain cost.
    var made: [String] = []
    for run in 0..<runs {
        let up = folder.file("up\(run)"), down = folder.file("down\(run)")
        made += [up + ".termind", up + ".sftp", down + ".termind", down + ".sftp"]
        values["put -r termind", default: []].append(try timed(["put", "-r", tree, "\(host):\(up).termind"]))
        values["put -r sftp", default: []].append(try openssh("put -r \(tree) \(up).sftp", port: port))
        values["get -r termind", default: []].append(try timed(["get", "-r", "\(host):\(tree)", down + ".termind"]))
        values["get -r sftp", default: []].append(try openssh("get -r \(tree) \(down).sftp", port: port))
    }
    for path in made { clear(path) }
    for (name, list) in values.sorted(by: { $0.key < $1.key }) { print("\(count) files \(label) \(name): \(list.map(BenchmarkFigure.format)) s") }
    // Files per second, so that above 1 means termind is faster.
    for verb in ["put -r", "get -r"] {
        figures.append(row("\(count) files \(verb), \(label) (files/s)", verb: verb, value: Double(count) / median(values["\(verb) termind"]!), unit: "files/s",
                           baseline: Double(count) / median(values["\(verb) sftp"]!)))
    }
    notes.append("files \(label): \(count) files, \(total >> 10) KiB in all, 20 folders")
    clear(tree)
}

if only.contains("files") {
    try tree("loopback", count: fileCount, host: "box", port: sshd.port)
    // The same in memory (a tmpfs): what the tools cost without this disk's inode allocation
    // (on this VM about 140 µs per new file, the same for both, which compresses the ratio).
    if let memory = try? TemporaryDirectory(under: "/dev/shm", "termind-bench-sftp") {
        defer { memory.remove() }
        chmod(memory.path, 0o755)
        try tree("loopback, tmpfs", count: fileCount, host: "box", port: sshd.port, in: memory)
    }
}
if only.contains("rttfiles") { try tree("20 ms RTT", count: rttFiles, host: "far", port: relay.port) }

if only.contains("fair") {
    let serve = try ServeProcess(directory: scratch, arguments: [], environment: ["TERMIND_SOCKET": scratch.file("serve/control.sock")])
    defer { _ = serve.stop() }
    location = ["--socket", serve.socketPath]
    try saveHosts()
    // The process limit binds, not the host's: each freed slot goes to the host served longest ago.
    try termind(["settings", "set", "sftp.limits", #"{"active": 3, "perHost": 3}"#])
    var sources: [String] = []
    for h in 0..<3 {
        let folder = scratch.file("batch\(h)")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for f in 0..<16 { makeFile(folder + "/f\(f).bin", bytes: 4 << 20, seed: UInt64(h * 100 + f + 1)) }
        sources.append(folder)
    }
    let started = now()
    let hosts = ["box", "box2", "box3"]
    let processes = try hosts.enumerated().map { index, host in
        try SpawnedProcess(termindPath, location + ["put", "-r", sources[index], "\(host):\(scratch.file("landing-\(host)"))"], environment: environment, captureOutput: true)
    }
    var took: [String] = []
    for (index, process) in processes.enumerated() {
        guard process.wait() == 0 else { fail("put to \(hosts[index]) failed: \(String(decoding: process.readAll().1, as: UTF8.self))") }
        took.append("\(hosts[index]) \(String(format: "%.2f", now() - started)) s")
    }
    let rows = try JSONCoding.parse(Data(try termind(["--json", "transfers"]).stdout.utf8), source: "transfers")["transfers"]?.arrayValue ?? []
    let order = rows.compactMap { row -> (Double, String)? in
        guard let started = row["started"].flatMap({ if case .double(let d) = $0 { d } else { $0.intValue.map(Double.init) } }), let host = row["hosts"]?.arrayValue?.first?.stringValue else { return nil }
        return (started, host)
    }.sorted { $0.0 < $1.0 }.map(\.1)
    print("fair: sftp.limits {active 3, perHost 3}; 3 puts of 16 x 4 MiB to box, box2, box3 at once")
    print("fair: start order of the first 24 files: \(order.prefix(24).joined(separator: " "))")
    print("fair: each put ended after: \(took.joined(separator: ", "))")
    let counts = Dictionary(grouping: order.prefix(12), by: { $0 }).mapValues(\.count)
    notes.append("fair: of the first 12 files started, per host \(counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
}

print("termind-sftp-bench: \(runs) runs alternated, \(cipher), whole processes on both sides (termind in-process, no serve), loopback sshd")
for note in notes { print(note) }
for line in BenchmarkFigure.table(figures) { print(line) }
