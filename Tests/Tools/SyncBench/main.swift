import Dispatch
import Foundation
import TermindCore
import TermindHarness

// termind-sync-bench [--hosts N] [--json]: two devices (separate stores, the real termind
// binary) syncing N hosts through a folder served by a real sshd on loopback: the first
// sync of device A to an empty folder, the first sync of device B, then one change on A
// reaching B (A's `sync now`, B's `sync now`), and the bytes stored on the server per host.
// The peer is what OpenSSH users do by hand: scp the same hosts as an ssh_config up from
// one machine and down to the other. PEAK RSS / PEER RSS: the peak resident memory of the
// row's `termind sync now` process and of its scp (the largest of it and the ssh it runs; both
// started through GNU time, which adds about a millisecond to each side's time);
// for both first syncs, the larger of the two on each side; the bytes row has no process.

typealias Figure = BenchmarkFigure

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("termind-sync-bench: \(message)\n".utf8))
    exit(1)
}

var count = 10_000
var json = false
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--hosts":
        guard let v = args.popFirst().flatMap(Int.init), v > 0, v <= 12_000 else {
            FileHandle.standardError.write(Data("usage: termind-sync-bench [--hosts N (1-12000)] [--json]\n".utf8))
            exit(2)
        }
        count = v
    case "--json": json = true
    default:
        FileHandle.standardError.write(Data("usage: termind-sync-bench [--hosts N] [--json]\n".utf8))
        exit(2)
    }
}

let scratch = try TemporaryDirectory("termind-bench-sync")
defer { scratch.remove() }
let server = try SSHServerFixture.withNewKey(in: scratch)
defer { server.stop() }
let folder = scratch.file("server/sync")
try FileManager.default.createDirectory(atPath: scratch.file("server"), withIntermediateDirectories: true)
try "bench passphrase 1\n".write(toFile: scratch.file("passphrase"), atomically: true, encoding: .utf8)
let program = FeatureHarness.buildDirectory + "/termind"

struct Device {
    let name: String
    let environment: [String: String]

    @discardableResult
    func run(_ arguments: [String]) throws -> ProcessResult {
        let result = try ProcessRunner.run(program, arguments, environment: environment, measured: true)
        guard result.status == 0 else { fail("termind \(arguments.prefix(4).joined(separator: " ")) (\(name)): \(result.stdout)\(result.stderr)") }
        return result
    }
}

func device(_ name: String) throws -> Device {
    var environment = ProcessInfo.termindEnvironment(home: scratch.file("home-\(name)"), socket: scratch.file("none.sock"))
    environment["TERMIND_STORE"] = scratch.file("\(name).sqlite")
    environment["TERMIND_SECRETS"] = scratch.file("\(name)-secrets.sqlite")
    environment["TERMIND_SECRETS_KEY"] = scratch.file("\(name)-secrets.key")
    let device = Device(name: name, environment: environment)
    try device.run(["vault", "key", "import", scratch.file("id"), "--label", "key-\(name)"])
    try device.run(["vault", "identity", "add", NSUserName(), "--label", "me-\(name)", "--key", "key-\(name)"])
    try device.run(["vault", "host", "add", "127.0.0.1", "--label", "sync-\(name)", "--port", "\(server.port)", "--identity", "me-\(name)"])
    try device.run(["vault", "knownhost", "add", "127.0.0.1", server.hostKeys["ssh-ed25519"]!, "--port", "\(server.port)"])
    return device
}

/// Seconds the run took, and its process's peak resident memory (MiB).
func timed(_ body: () throws -> ProcessResult) rethrows -> (seconds: Double, peak: Double) {
    let start = now()
    let result = try body()
    return (now() - start, result.peakResidentMiB ?? 0)
}

let a = try device("a"), b = try device("b")
// N hosts on A, from an ssh_config through the Vault's import (each journaled as any edit).
var text = ""
for i in 0..<count { text += "Host node-\(i)\n    HostName 10.\(i / 65_536 % 256).\(i / 256 % 256).\(i % 256)\n    User ops\n    Port \(2000 + i % 100)\n\n" }
let config = scratch.file("config")
try text.write(toFile: config, atomically: true, encoding: .utf8)
try a.run(["vault", "import", "commit", config, "--select", (0..<count).map { "node-\($0)" }.joined(separator: ",")])
try a.run(["sync", "setup", "sync-a:\(folder)", "--passphrase-file", scratch.file("passphrase")])
try b.run(["sync", "setup", "sync-b:\(folder)", "--passphrase-file", scratch.file("passphrase")])

var figures: [Figure] = []
let first = try timed { try a.run(["sync", "now"]) }
let onto = try timed { try b.run(["sync", "now"]) }
let listed = try b.run(["--json", "vault", "host", "list"]).stdout
guard listed.contains("\"node-\(count - 1)\"") else { fail("device B does not have node-\(count - 1) after its sync") }

// The peer: the same hosts as a file, up with scp from one machine, down to the other.
let ssh = ["-i", scratch.file("id"), "-P", "\(server.port)", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
func scp(_ arguments: [String]) throws -> ProcessResult {
    let result = try ProcessRunner.run("/usr/bin/scp", ssh + arguments, measured: true)
    guard result.status == 0 else { fail("scp: \(result.stderr)") }
    return result
}
let up = try timed { try scp([config, "127.0.0.1:\(scratch.file("server/config"))"]) }
let down = try timed { try scp(["127.0.0.1:\(scratch.file("server/config"))", scratch.file("config-b")]) }

figures.append(Figure(name: "first sync of \(count) hosts from A to an empty folder", value: first.seconds, unit: "s", baseline: up.seconds,
                      resident: first.peak, peerResident: up.peak))
figures.append(Figure(name: "first sync onto B (fetch, merge, apply)", value: onto.seconds, unit: "s", baseline: down.seconds,
                      resident: onto.peak, peerResident: down.peak))
figures.append(Figure(name: "both first syncs (target ≤ 10 s each)", value: first.seconds + onto.seconds, unit: "s", baseline: up.seconds + down.seconds,
                      resident: max(first.peak, onto.peak), peerResident: max(up.peak, down.peak)))

// One change on A reaching B: A's sync sends it, B's sync applies it.
try a.run(["vault", "host", "edit", "node-7", "--port", "2222"])
let send = try timed { try a.run(["sync", "now"]) }
let receive = try timed { try b.run(["sync", "now"]) }
guard try b.run(["--json", "vault", "host", "show", "node-7"]).stdout.contains("2222") else { fail("the change did not reach device B") }
figures.append(Figure(name: "one change: A's sync now (sends it)", value: send.seconds * 1e3, unit: "ms", resident: send.peak))
figures.append(Figure(name: "one change: B's sync now (applies it)", value: receive.seconds * 1e3, unit: "ms", resident: receive.peak))

func bytes(in directory: String) -> Int {
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return 0 }
    var total = 0
    for case let name as String in walker where name.hasSuffix(".tsr") {
        total += (try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? Int) ?? 0
    }
    return total
}
let stored = bytes(in: folder)
let plain = text.utf8.count
figures.append(Figure(name: "bytes stored on the server per host (sealed; peer: the ssh_config)", value: Double(stored) / Double(count), unit: "B",
                      baseline: Double(plain) / Double(count)))

if json {
    struct Report: Encodable { let hosts: Int; let peer: String; let figures: [Figure] }
    let data = try JSONCoding.encode(Report(hosts: count, peer: "scp of the same hosts as an ssh_config, up and down", figures: figures), pretty: true)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
} else {
    print("termind-sync-bench — \(count) hosts, two devices, a real sshd on loopback; peer: scp of the same hosts as an ssh_config")
    for line in Figure.table(figures) { print(line) }
}
