import Dispatch
import Foundation
import TermindCore
import TermindHarness
import TermindSSH

// termind-ssh-bench: the SSH transport against OpenSSH's ssh client, on the same sshd
// (started here on a free loopback port), in one run:
//   connection set-up        vs  ssh host true
//   exec round trip          vs  ssh through a ControlMaster connection
//   8 commands at once       vs  8 ssh clients on the same ControlMaster at once
//   termind exec via serve   vs  ssh -S (ControlMaster): whole CLI processes, connection kept
//   1 GiB over one channel   vs  ssh (same ControlMaster) 'head -c 1G /dev/zero' > /dev/null
// Usage: termind-ssh-bench [--mib N]

/// Accepts every host key: the benchmark's own throwaway sshd.
struct TrustAll: HostKeyTrust {
    func verdict(host: String, port: Int, key: PublicHostKey) async throws -> TrustVerdict { .trusted }
    func knownKeyTypes(host: String, port: Int) async throws -> [String] { [] }
    func trust(host: String, port: Int, key: PublicHostKey) async throws {}
    func fingerprint(_ key: PublicHostKey) -> String { "" }
    func refusal(host: String, port: Int, key: PublicHostKey) async throws -> String? { nil }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var total = 0
    func add(_ n: Int) { lock.withLock { total += n } }
    var value: Int { lock.withLock { total } }
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

var mib = 1024
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    if arg == "--mib", let v = args.popFirst().flatMap(Int.init), v > 0 { mib = v } else {
        FileHandle.standardError.write(Data("usage: termind-ssh-bench [--mib N]\n".utf8))
        exit(2)
    }
}

let directory = try TemporaryDirectory("termind-ssh-bench")
defer { directory.remove() }
let keyPath = directory.file("id")
_ = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", keyPath])
let server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)])
defer { server.stop() }
let user = NSUserName()
let key = Secret(try String(contentsOfFile: keyPath, encoding: .utf8))
let target = SSHTarget(host: "127.0.0.1", port: server.port, username: user)
let sshBase = ["-q", "-i", keyPath, "-p", "\(server.port)", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "BatchMode=yes", "\(user)@127.0.0.1"]

func ssh(_ extra: [String], _ command: String) throws -> Double {
    let start = now()
    let result = try ProcessRunner.run("/usr/bin/ssh", extra + sshBase + [command])
    guard result.status == 0 else { throw TermindError(code: "bench.ssh", message: "ssh failed: \(result.stderr)") }
    return now() - start
}

func open() async throws -> SSHConnection {
    try await SSHConnection.open(target, credentials: SSHCredentials(privateKey: key), trust: TrustAll()) { _ in .acceptOnce }
}

var rows: [(String, Double, Double, String)] = []

// 1. Connection set-up (handshake, key exchange, public key auth), then close.
var ours: [Double] = [], theirs: [Double] = []
for _ in 0..<10 {
    let start = now()
    let connection = try await open()
    _ = try await connection.exec("true")
    ours.append(now() - start)
    await connection.close()
    theirs.append(try ssh([], "true"))
}
rows.append(("connect + auth + exec true, median of 10", median(ours) * 1e3, median(theirs) * 1e3, "ms"))

// 2. Exec round trip on an open connection vs a ControlMaster connection.
let control = directory.file("cm")
_ = try ProcessRunner.run("/usr/bin/ssh", ["-M", "-S", control, "-f", "-N"] + sshBase)
let connection = try await open()
ours = []
theirs = []
for _ in 0..<50 {
    let start = now()
    _ = try await connection.exec("true")
    ours.append(now() - start)
    theirs.append(try ssh(["-S", control], "true"))
}
rows.append(("exec round trip on an open connection, median of 50", median(ours) * 1e3, median(theirs) * 1e3, "ms"))

// 3. Eight commands at once: channels of one connection vs eight ssh clients on the master.
ours = []
theirs = []
for _ in 0..<10 {
    var start = now()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<8 { group.addTask { _ = try await connection.exec("true") } }
        try await group.waitForAll()
    }
    ours.append(now() - start)
    start = now()
    let failures = Counter()
    DispatchQueue.concurrentPerform(iterations: 8) { _ in
        if (try? ssh(["-S", control], "true")) == nil { failures.add(1) }
    }
    guard failures.value == 0 else { throw TermindError(code: "bench.ssh", message: "a concurrent ssh failed") }
    theirs.append(now() - start)
}
rows.append(("8 commands at once on one connection, median of 10", median(ours) * 1e3, median(theirs) * 1e3, "ms"))

// 4. The CLI: `termind exec` processes inside a running `termind serve` (which keeps the
// connection) against `ssh` processes on the ControlMaster — each a whole process start.
let termindPath = FeatureHarness.buildDirectory + "/termind"
if FileManager.default.isExecutableFile(atPath: termindPath) {
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = directory.file("home")
    environment["TERMIND_SOCKET"] = directory.file("control.sock")
    environment["SSH_AUTH_SOCK"] = nil
    let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
    let serve = try SpawnedProcess(termindPath, store + ["serve", "--json"], environment: environment, captureOutput: false)
    serve.closeInput()
    for _ in 0..<400 where !FileManager.default.fileExists(atPath: directory.file("control.sock")) { usleep(25_000) }
    let line = "ssh -p \(server.port) -i \(keyPath) \(user)@127.0.0.1"
    func termindExec() throws -> Double {
        let start = now()
        let result = try ProcessRunner.run(termindPath, store + ["exec", line, "--accept-host-key", "once", "--", "true"], environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.termind", message: "termind exec failed: \(result.stderr)") }
        return now() - start
    }
    _ = try termindExec()  // opens the server's connection
    ours = []
    theirs = []
    for _ in 0..<20 {
        ours.append(try termindExec())
        theirs.append(try ssh(["-S", control], "true"))
    }
    rows.append(("termind exec via serve vs ssh -S, median of 20", median(ours) * 1e3, median(theirs) * 1e3, "ms"))
    serve.signal(SIGTERM)
    serve.wait()
}

// 5. Throughput over one channel.
let bytes = mib << 20
let received = Counter()
var start = now()
let result = try await connection.exec("head -c \(bytes) /dev/zero", timeout: 600) { _, chunk in received.add(chunk.count) }
let oursThroughput = Double(received.value) / (now() - start) / 1_048_576
guard result.exitStatus == 0, received.value == bytes else {
    FileHandle.standardError.write(Data("throughput run received \(received.value) of \(bytes) bytes\n".utf8))
    exit(1)
}
// OpenSSH through its already-open master connection, so neither side pays for set-up.
start = now()
_ = try ssh(["-S", control], "head -c \(bytes) /dev/zero")
let theirsThroughput = Double(bytes) / (now() - start) / 1_048_576
_ = try? ProcessRunner.run("/usr/bin/ssh", ["-S", control, "-O", "exit"] + sshBase)
rows.append(("\(mib) MiB over one channel (open connection)", oursThroughput, theirsThroughput, "MiB/s"))
// And a direct ssh (no mux hop), which pays for its own set-up.
start = now()
_ = try ssh([], "head -c \(bytes) /dev/zero")
rows.append(("\(mib) MiB, vs a direct ssh incl. its set-up", oursThroughput, Double(bytes) / (now() - start) / 1_048_576, "MiB/s"))
await connection.close()

print("termind-ssh-bench — libssh2 \(SSHLibrary.version) vs OpenSSH ssh, same sshd on 127.0.0.1:\(server.port)")
print("FIGURE".padding(toLength: 54, withPad: " ", startingAt: 0) + "TERMIND        OPENSSH        RATIO")
for (name, a, b, unit) in rows {
    func f(_ v: Double) -> String { (v >= 100 ? String(format: "%.0f", v) : String(format: "%.2f", v)) + " " + unit }
    print(name.padding(toLength: 54, withPad: " ", startingAt: 0) + f(a).padding(toLength: 15, withPad: " ", startingAt: 0)
          + f(b).padding(toLength: 15, withPad: " ", startingAt: 0) + String(format: "%.2f×", a / b))
}
