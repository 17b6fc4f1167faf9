import Dispatch
import Foundation
import SFTPWire
import TermindCore
import TermindHarness
import TermindSSH

// termind-sftp-bench [--mib N] [--runs R]
//
// termind's SFTP (SFTPWire: 64 requests of up to 255 KiB in flight, sized by
// limits@openssh.com) against OpenSSH's `sftp` on the same sshd (internal-sftp, one cipher
// forced on both: chacha20-poly1305), N MiB get and put on loopback, runs alternated,
// medians compared (ratio = termind over sftp, > 1: termind is faster). termind's side is
// the library in this process (no CLI yet: issue 14), OpenSSH's a whole `sftp -b` process
// — so termind's figure leaves out a process start (~10 ms) that sftp's includes.
// Everything runs on this machine; files live in a scratch folder on the same disk.

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-sftp-bench [--mib N] [--runs R]\n".utf8))
    exit(2)
}
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("termind-sftp-bench: \(message)\n".utf8))
    exit(1)
}
func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

var mib = 1024
var runs = 3
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--mib": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; mib = v
    case "--runs": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; runs = v
    default: usage()
    }
}
let mebibytes = mib
let size = UInt64(mebibytes) << 20

struct AcceptOnce: HostKeyTrust {
    func verdict(host: String, port: Int, key: PublicHostKey) async throws -> TrustVerdict { .unknown }
    func knownKeyTypes(host: String, port: Int) async throws -> [String] { [] }
    func trust(host: String, port: Int, key: PublicHostKey) async throws {}
    func fingerprint(_ key: PublicHostKey) -> String { "" }
    func refusal(host: String, port: Int, key: PublicHostKey) async throws -> String? { nil }
}

let scratch = try TemporaryDirectory("termind-bench-sftp")
defer { scratch.remove() }
chmod(scratch.path, 0o755)
guard (try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", scratch.file("id")])).status == 0 else { fail("ssh-keygen") }
let cipher = "chacha20-poly1305@openssh.com"
let sshd = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: scratch.file("id.pub"), encoding: .utf8)],
                                extraConfig: ["Ciphers \(cipher)", "LogLevel ERROR"], hostKeyTypes: ["ed25519"])
defer { sshd.stop() }
try "[127.0.0.1]:\(sshd.port) \(sshd.hostKeys["ssh-ed25519"] ?? "")\n".write(toFile: scratch.file("known_hosts"), atomically: true, encoding: .utf8)

// The source: real bytes (not a sparse file), written once.
let source = scratch.file("source.bin")
do {
    let fd = open(source, O_CREAT | O_TRUNC | O_WRONLY, 0o644)
    var block = [UInt8](repeating: 0, count: 1 << 20)
    var state: UInt64 = 88172645463325252
    for _ in 0..<mib {
        for i in stride(from: 0, to: block.count, by: 8) {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            withUnsafeBytes(of: state) { raw in for j in 0..<8 { block[i + j] = raw[j] } }
        }
        _ = block.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
    }
    close(fd)
}

let key = try String(contentsOfFile: scratch.file("id"), encoding: .utf8)
let connection = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: sshd.port, username: NSUserName()),
                                              credentials: SSHCredentials(privateKey: Secret(key), agentSocket: ""), trust: AcceptOnce()) { _ in .acceptOnce }
let sftp = try await SFTPSession.open(on: connection)
let limits = await sftp.limits

func termindGet() async throws -> Double {
    let out = open(scratch.file("got.termind"), O_CREAT | O_TRUNC | O_WRONLY, 0o644)
    defer { close(out) }
    let started = now()
    let got = try await SFTPTransfer.download(sftp, Array(source.utf8), to: out)
    guard got == size else { fail("termind got \(got) of \(size) bytes") }
    return Double(mebibytes) / (now() - started)
}

func termindPut() async throws -> Double {
    let input = open(source, O_RDONLY)
    defer { close(input) }
    let started = now()
    try await SFTPTransfer.upload(sftp, from: input, size: size, to: Array(scratch.file("put.termind").utf8))
    return Double(mebibytes) / (now() - started)
}

func openssh(_ command: String) throws -> Double {
    let batch = scratch.file("batch")
    try (command + "\n").write(toFile: batch, atomically: true, encoding: .utf8)
    let started = now()
    let result = try ProcessRunner.run("/usr/bin/sftp", ["-q", "-b", batch, "-i", scratch.file("id"), "-o", "UserKnownHostsFile=\(scratch.file("known_hosts"))",
                                                         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-F", "/dev/null", "-c", cipher,
                                                         "-P", "\(sshd.port)", "\(NSUserName())@127.0.0.1"])
    guard result.status == 0 else { fail("sftp: \(result.stderr)") }
    return Double(mebibytes) / (now() - started)
}

var values: [String: [Double]] = [:]
for _ in 0..<runs {
    values["get termind", default: []].append(try await termindGet())
    values["get sftp", default: []].append(try openssh("get \(source) \(scratch.file("got.sftp"))"))
    values["put termind", default: []].append(try await termindPut())
    values["put sftp", default: []].append(try openssh("put \(source) \(scratch.file("put.sftp"))"))
}
await sftp.close()
await connection.close()
for (name, list) in values.sorted(by: { $0.key < $1.key }) { print("\(name): \(list.map(BenchmarkFigure.format))") }
let figures = [
    BenchmarkFigure(name: "\(mib) MiB get (MiB/s)", value: median(values["get termind"]!), unit: "MiB/s", baseline: median(values["get sftp"]!)),
    BenchmarkFigure(name: "\(mib) MiB put (MiB/s)", value: median(values["put termind"]!), unit: "MiB/s", baseline: median(values["put sftp"]!)),
]
print("termind-sftp-bench: \(runs) runs alternated, \(cipher), loopback; requests of \(limits.readSize) / \(limits.writeSize) bytes, \(SFTPSession.window) in flight")
for line in BenchmarkFigure.table(figures) { print(line) }
