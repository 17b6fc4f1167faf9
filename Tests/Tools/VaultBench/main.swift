import Dispatch
import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import VaultAPI

// termind-vault-bench [--hosts N] [--json]: imports N hosts from a generated ssh_config
// through the Vault's contracts (preview, then commit), lists them and looks hosts up by
// label. The peer is OpenSSH resolving one host from the same file (`ssh -G -F FILE alias`).
// PEER RSS on the lookup row: an ssh -G process's peak resident memory (one more run, untimed,
// started through GNU time); PEAK RSS stays empty: termind's side runs in this process (the contracts
// called in-process), not in a process of its own.
// A tool of `make bench`, outside the host: the generic client holds no feature code.

typealias Figure = BenchmarkFigure

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-vault-bench [--hosts N] [--json]\n".utf8))
    exit(2)
}

var count = 10_000
var json = false
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--hosts":
        guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }
        count = v
    case "--json": json = true
    default: usage()
    }
}

let scratch = try TemporaryDirectory("termind-bench-vault")
defer { scratch.remove() }
let session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"), storeDirectory: scratch.path)
let kernel = session.kernel

// A realistic config: N hosts in blocks, a shared bastion, and a catch-all.
var text = "Host bastion\n    HostName bastion.example.com\n    Port 2222\n\n"
for i in 0..<count {
    text += "Host node-\(i)\n    HostName 10.\(i / 65_536 % 256).\(i / 256 % 256).\(i % 256)\n    User ops\n"
    if i % 10 == 0 { text += "    ProxyJump bastion\n" }
    text += "\n"
}
text += "Host *\n    ServerAliveInterval 30\n"
let path = scratch.file("config")
try text.write(toFile: path, atomically: true, encoding: .utf8)
var figures: [Figure] = []

var start = now()
let preview = try await kernel.call(ImportContracts.Preview.self, .init(path: path))
figures.append(Figure(name: "import preview of \(count + 1) hosts", value: (now() - start) * 1e3, unit: "ms"))
start = now()
let committed = try await kernel.call(ImportContracts.Commit.self, .init(path: path, select: preview.candidates.map(\.alias), files: preview.files))
figures.append(Figure(name: "import commit (one transaction)", value: (now() - start) * 1e3, unit: "ms"))
guard committed.created.count == count + 1 else {
    FileHandle.standardError.write(Data("the benchmark imported \(committed.created.count) hosts, expected \(count + 1)\n".utf8))
    exit(1)
}
start = now()
let listed = try await kernel.call(VaultContracts.HostList.self, .init()).hosts
figures.append(Figure(name: "list \(listed.count) hosts", value: (now() - start) * 1e3, unit: "ms"))

let lookups = 1_000
start = now()
for i in 0..<lookups { _ = try await kernel.call(VaultContracts.HostGet.self, .init(host: "node-\(i * 7 % count)")) }
let lookup = (now() - start) / Double(lookups)
// Peer: OpenSSH resolving one alias from the same file (a process start per lookup).
let ssh = "/usr/bin/ssh"
var peer: Double?
var peerPeak: Double?
if FileManager.default.isExecutableFile(atPath: ssh) {
    let samples = 20
    start = now()
    // Standard output and error to /dev/null.
    for i in 0..<samples {
        let process = try SpawnedProcess(ssh, ["-G", "-F", path, "node-\(i * 97 % count)"], captureOutput: false)
        process.closeInput()
        process.wait()
    }
    peer = (now() - start) / Double(samples)
    // Once more, untimed, for its peak memory (GNU time starts it).
    let measured = try SpawnedProcess(ssh, ["-G", "-F", path, "node-1"], captureOutput: false, measured: true)
    measured.closeInput()
    measured.wait()
    peerPeak = measured.peakResidentMiB
}
figures.append(Figure(name: "lookup by label (contract call), mean of \(lookups)", value: lookup * 1e6, unit: "µs", baseline: peer.map { $0 * 1e6 },
                      peerResident: peerPeak))
let database = ["", "-wal"].reduce(0) { total, suffix in
    total + ((try? FileManager.default.attributesOfItem(atPath: scratch.file("termind.sqlite") + suffix)[.size] as? Int) ?? 0)
}
figures.append(Figure(name: "database size (with WAL)", value: Double(database) / 1_048_576, unit: "MiB"))
await session.shutdown()

if json {
    struct Report: Encodable { let hosts: Int; let peer: String; let figures: [Figure] }
    let data = try JSONCoding.encode(Report(hosts: count + 1, peer: "ssh -G -F FILE alias (OpenSSH resolving one host from the same file)", figures: figures), pretty: true)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
} else {
    print("termind-vault-bench — \(count + 1) hosts from a generated ssh_config; peer: ssh -G -F FILE alias")
    for line in Figure.table(figures) { print(line) }
}
