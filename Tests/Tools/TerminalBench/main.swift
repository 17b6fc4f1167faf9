import Dispatch
import Foundation
import TermindCore
import TermindHarness

// termind-terminal-bench [--mib N] [--runs R] [--keys K] [--only TEXT]
//
// Interactive terminals: `termind ssh` against `ssh -tt` on the same sshd (chacha20-poly1305
// forced, a light remote shell), every client a whole process on a pseudo-terminal this
// bench holds the other end of, runs alternated termind/ssh (which goes first alternates
// too), medians compared (defaults: 5 runs of each; 1,000 keys, so that a client's p99 is
// its 11th slowest key, not its 6th as with 600):
//   output throughput: the remote side writes N MiB of 80-column text to its terminal and
//     the bench drains its end as fast as it can (ratio = ssh's time / termind's: > 1 is
//     termind faster; target >= 1.0x) — in-process, and as a durable session inside
//     `termind serve` (its screen model fed too);
//   keystroke echo: one byte typed, the time until its echo arrives (the remote terminal
//     echoes it), K keys into each client, alternating key by key between termind and ssh
//     (both open at once), 20 ms apart; median and p99 (ratio = termind's / ssh's: target
//     <= 1.2x) — in-process and through serve; and the CPU each client used per key (its
//     process CPU clock; termind's through serve counts all of serve's).
// Beside each ratio, PEAK RSS / PEER RSS: each side's peak resident memory over the row's
// runs, its largest process: the client's (termind ssh, ssh -tt) from GNU time, which runs it on
// the pseudo-terminal (wait4's ru_maxrss of a forked child would count pages it shared with this
// benchmark at the fork), and
// for a durable session also termind serve's VmHWM from /proc, set back to its current size
// (clear_refs) as the row starts.
// --only TEXT runs only the rows whose name contains TEXT ("echo", "durable", "MiB"...).
// Everything runs on this 2-core machine (sshd, clients, the bench): say so when quoting.

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-terminal-bench [--mib N] [--runs R] [--keys K] [--only TEXT]\n".utf8))
    exit(2)
}
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("termind-terminal-bench: \(message)\n".utf8))
    exit(1)
}
func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

var mib = 100
var runs = 5
var keys = 1000
var only: String?
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--mib": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; mib = v
    case "--runs": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; runs = v
    case "--keys": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; keys = v
    case "--only": guard let v = args.popFirst(), !v.isEmpty else { usage() }; only = v
    default: usage()
    }
}



let keyCount = keys
let onlyRows = only
/// Whether a row whose name is `name` runs (`--only`).
func wanted(_ name: String) -> Bool { onlyRows.map { name.contains($0) } ?? true }

// MARK: - Set-up

let directory = try TemporaryDirectory("termind-terminal-bench")
defer { directory.remove() }
chmod(directory.path, 0o755)
let keyPath = directory.file("id")
_ = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", keyPath])
let account = getuid() == 0 ? try ThrowawayAccount() : nil
defer { account?.remove() }
let user = account?.name ?? NSUserName()
let server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)],
                                  extraConfig: ["Ciphers chacha20-poly1305@openssh.com"], hostKeyTypes: ["ed25519"])
defer { server.stop() }
chmod(server.directory.path, 0o755)
chmod(server.directory.file("authorized_keys"), 0o644)

let termind = FeatureHarness.buildDirectory + "/termind"
guard FileManager.default.isExecutableFile(atPath: termind) else { fail("\(termind) is missing: build it first (make bench does)") }
let environment: [String: String] = {
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = directory.file("home")
    environment["TERMIND_SOCKET"] = directory.file("run/termind.sock")
    environment["TERM"] = "xterm-256color"
    environment["SSH_AUTH_SOCK"] = nil
    return environment
}()
let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
try FileManager.default.createDirectory(atPath: directory.file("run"), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
let serve = try SpawnedProcess(termind, store + ["serve"], environment: environment, captureOutput: false)
serve.stopAtExit()  // fail() exits without the defers
serve.closeInput()
for _ in 0..<400 where !FileManager.default.fileExists(atPath: directory.file("run/termind.sock")) { usleep(25_000) }
guard FileManager.default.fileExists(atPath: directory.file("run/termind.sock")) else { fail("termind serve did not start") }
defer { serve.signal(SIGTERM); serve.wait() }

func sshClient(_ command: String) -> [String] {
    ["/usr/bin/ssh", "-tt", "-F", "/dev/null", "-q", "-i", keyPath, "-p", "\(server.port)", "-o", "StrictHostKeyChecking=no",
     "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "\(user)@127.0.0.1", command]
}
func termindClient(_ command: String, local: Bool) -> [String] {
    [termind] + store + (local ? ["--local"] : []) + ["ssh", "ssh -p \(server.port) -i \(keyPath) \(user)@127.0.0.1", "--accept-host-key", "once", "--", command]
}

// MARK: - Output throughput

let bytes = mib << 20
/// 80-column lines (79 characters and a newline), N MiB of them.
let flood = "yes 'the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstu' | head -c \(bytes)"

/// A client on a pseudo-terminal of its own, or the end of the benchmark.
func startClient(_ argv: [String]) -> TerminalClient {
    do { return try TerminalClient(argv, environment: environment) } catch { fail("\(error)") }
}

/// Seconds, and the client's peak resident memory (MiB).
func throughput(_ argv: [String]) -> (seconds: Double, peak: Double) {
    let start = now()
    let client = startClient(argv)
    let status = client.finish()
    guard status == 0 else { fail("\(argv.joined(separator: " ")) ended with status \(status)") }
    return (now() - start, client.peakResidentMiB)
}

// MARK: - Echo latency

/// Starts both clients (their remote sides print READY, then echo what is typed) and types
/// `keys` bytes into each, alternating between them key by key (which goes first alternates
/// too) with 20 ms between keys, so both see the machine in the same state: a key's time is
/// from its write to its echo's arrival (milliseconds). Returns termind's and ssh's times,
/// and the CPU each side used per key (microseconds): the client's process, and for termind
/// also `helpers` (the serve process that runs a durable session, with whatever else it does
/// meanwhile); and each client's peak resident memory (MiB).
func echoLatencies(_ ours: [String], _ theirs: [String], keys: Int, helpers: [pid_t] = [])
    -> (ours: [Double], theirs: [Double], cpu: (ours: Double, theirs: Double), peaks: (ours: Double, theirs: Double)) {
    let clients = [startClient(ours), startClient(theirs)]
    for (client, argv) in zip(clients, [ours, theirs]) where !client.waitFor("READY") { fail("\(argv.last ?? "") never said READY") }
    let programs = clients.map(\.programPID)
    let oursCPU = { ([programs[0]] + helpers).reduce(0) { $0 + ProcessCPU.seconds(of: $1) } }, theirsCPU = { ProcessCPU.seconds(of: programs[1]) }
    let cpuBefore = (oursCPU(), theirsCPU())
    var latencies: [[Double]] = [[], []]
    let letters = Array("abcdefghijklmnopqrstuvwxyz".utf8)
    for index in 0..<keys {
        let key = letters[index % letters.count]
        for which in index % 2 == 0 ? [0, 1] : [1, 0] {
            let client = clients[which]
            let start = now()
            client.write([key])
            var echoed = false
            while !echoed, now() - start < 5 {
                guard let chunk = client.read(timeout: 5) else { break }
                echoed = chunk.contains(key)
            }
            guard echoed else { fail("no echo of a key after 5 s") }
            latencies[which].append((now() - start) * 1000)
            usleep(20_000)
        }
    }
    let cpu = ((oursCPU() - cpuBefore.0) * 1e6 / Double(keys), (theirsCPU() - cpuBefore.1) * 1e6 / Double(keys))
    for client in clients {
        client.write([0x04, 0x04])  // EOF ends cat (twice: a line may be pending)
        _ = client.finish()
    }
    return (latencies[0], latencies[1], cpu, (clients[0].peakResidentMiB, clients[1].peakResidentMiB))
}

// MARK: - Runs

func cell(_ values: [Double], _ format: String = "%.1f") -> String {
    let sorted = values.sorted()
    return "\(String(format: format, sorted.first!))/\(String(format: format, sorted[sorted.count / 2]))/\(String(format: format, sorted.last!))"
}
func line(_ columns: [String]) {
    let widths = [44, 22, 22, 8, 9, 9, 6]
    print(zip(columns, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: " "))
}

print("termind-terminal-bench: termind ssh vs ssh -tt on one sshd (chacha20-poly1305), remote user \(user)\(account == nil ? "" : " (throwaway, /bin/sh)"), \(runs) runs alternated after a warm-up")
line(["FIGURE", "TERMIND min/med/max", "SSH -TT min/med/max", "RATIO", "PEAK RSS", "PEER RSS", "STEAL"])

// A connection for the server rows, so that those runs measure the session, not the handshake.
_ = throughput(termindClient("true", local: false))
for (name, local) in [("in-process", true), ("durable, in serve", false)] where wanted("\(mib) MiB to the terminal, \(name)") {
    _ = throughput(termindClient("true", local: local))
    _ = throughput(sshClient("true"))
    var ours: [Double] = [], theirs: [Double] = []
    var peaks = (ours: 0.0, theirs: 0.0)
    /// A run of each, its seconds kept and its client's peak noted.
    func termindRun() { let run = throughput(termindClient(flood, local: local)); ours.append(run.seconds); peaks.ours = max(peaks.ours, run.peak) }
    func sshRun() { let run = throughput(sshClient(flood)); theirs.append(run.seconds); peaks.theirs = max(peaks.theirs, run.peak) }
    if !local { ProcessMemory.resetPeak(of: serve.pid) }
    let stealBefore = CPUSteal.now()
    // Which client goes first alternates from pair to pair, as the echo's keys do: a run
    // that follows a flood meets the other's leftovers (dirty pages, a warm sshd).
    for run in 0..<runs {
        if run % 2 == 0 {
            termindRun()
            sshRun()
        } else {
            sshRun()
            termindRun()
        }
    }
    let steal = CPUSteal.now().share(since: stealBefore)
    if !local { peaks.ours = max(peaks.ours, ProcessMemory.peakMiB(of: serve.pid) ?? 0) }
    let ratio = zip(ours, theirs).map { $1 / $0 }.sorted()[runs / 2]
    line(["\(mib) MiB to the terminal, \(name) (MiB/s)", cell(ours.map { Double(mib) / $0 }), cell(theirs.map { Double(mib) / $0 }), String(format: "%.2f×", ratio),
          BenchmarkFigure.mebibytes(peaks.ours), BenchmarkFigure.mebibytes(peaks.theirs), steal])
}

let echo = "printf READY; cat > /dev/null"
for (name, local) in [("in-process", true), ("durable, in serve", false)] where wanted("key echo \(name)") {
    if !local { ProcessMemory.resetPeak(of: serve.pid) }
    let stealBefore = CPUSteal.now()
    let (ours, theirs, cpu, peaks) = echoLatencies(termindClient(echo, local: local), sshClient(echo), keys: keyCount, helpers: local ? [] : [serve.pid])
    let steal = CPUSteal.now().share(since: stealBefore)
    // The same processes behind all three lines.
    let memory = [BenchmarkFigure.mebibytes(local ? peaks.ours : max(peaks.ours, ProcessMemory.peakMiB(of: serve.pid) ?? 0)), BenchmarkFigure.mebibytes(peaks.theirs)]
    line(["key echo \(name), median (ms)", String(format: "%.2f", percentile(ours, 0.5)), String(format: "%.2f", percentile(theirs, 0.5)),
          String(format: "%.2f×", percentile(ours, 0.5) / percentile(theirs, 0.5))] + memory + [steal])
    line(["key echo \(name), p99 (ms)", String(format: "%.2f", percentile(ours, 0.99)), String(format: "%.2f", percentile(theirs, 0.99)),
          String(format: "%.2f×", percentile(ours, 0.99) / percentile(theirs, 0.99))] + memory)
    // The CPU behind each key (termind's: with serve's when the session is durable), cold
    // (keys 20 ms apart): the work under the latency, which wakes from idle blur.
    line(["key echo \(name), CPU per key (µs)", String(format: "%.0f", cpu.ours), String(format: "%.0f", cpu.theirs), String(format: "%.2f×", cpu.ours / cpu.theirs)] + memory)
}
print("ratio: throughput = ssh's time / termind's (> 1: termind faster); echo = termind's time / ssh's (< 1: termind faster); STEAL: the hypervisor's share of CPU time during the row")
