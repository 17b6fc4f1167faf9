import Dispatch
import Foundation
import TermindCore
import TermindHarness
import TermindSSH

// termind-ssh-bench: termind's CLI against OpenSSH's ssh, both as whole processes, on the
// same sshd (started here on a free loopback port, forced to one cipher so both sides use
// it), with the same sink (/dev/null) and the same source (a sparse file), runs alternated
// termind/ssh and compared pair by pair:
//   N MiB down and up over one channel, new connection     termind --local exec  vs  ssh
//   N MiB down and up inside a running server               termind exec (serve)  vs  ssh -S (ControlMaster)
//   `exec true` on a kept connection                        termind exec (serve)  vs  ssh -S
//   N/4 MiB down and up at 20 ms round trip (a delaying relay in front of sshd)
//   N/4 MiB down through a jump host 20 ms away (-J; the target next to the jump host)
// For each: min/median/max of both, the paired ratio (termind's speed over ssh's, so > 1
// means termind is faster), and client CPU seconds per GiB from getrusage of the client
// process — plus, through a server, the server's (termind serve, or the ssh master) CPU
// for the same run from /proc. As root, the remote side is a throwaway account whose
// /bin/sh starts light, so neither side pays for a heavy .bashrc. STEAL is the share of
// the machine's CPU time the hypervisor took during the row's runs: above a few per cent
// the row's spread is the host's, not the programs'. PEAK RSS / PEER RSS: each side's peak
// resident memory over the row's runs, its largest process: the client's (termind exec, ssh),
// started through GNU time (a millisecond more for each side; the `exec true` row is timed
// without it and takes the peaks from one more pair), and through a server also the server's
// (termind serve, the ssh master) VmHWM from /proc, set back (clear_refs) as the row starts.
//   start-up: version, vault host list, settings get (in-process) vs ssh -V; exec true in-process vs ssh
// Usage: termind-ssh-bench [--mib N] [--runs N] [--quick] [--only TEXT] (only the rows whose name contains TEXT)

var mib = 1024
var runs = 5
var only: String?
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--mib": if let v = args.popFirst().flatMap(Int.init), v > 0 { mib = v } else { usage() }
    case "--runs": if let v = args.popFirst().flatMap(Int.init), v > 0 { runs = v } else { usage() }
    case "--quick": mib = 128; runs = 3
    case "--only": if let v = args.popFirst(), !v.isEmpty { only = v } else { usage() }
    default: usage()
    }
}
let runCount = runs
let onlyRows = only

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-ssh-bench [--mib N] [--runs N] [--quick] [--only TEXT]\n".utf8))
    exit(2)
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// One whole-process run: wall seconds and CPU seconds (the client's, plus the server's
/// share where a server does the SSH work), and the client's peak resident memory (MiB).
struct Run { var wall: Double; var cpu: Double; var peak: Double }

/// One side's peak over a row: its clients' (wait4) and its server's (VmHWM), the largest.
func sidePeak(_ runs: [Run], server: pid_t?) -> Double {
    max(runs.map(\.peak).max() ?? 0, server.flatMap(ProcessMemory.peakMiB(of:)) ?? 0)
}

/// Runs `program` with stdin and stdout from/to files (stderr to `log`), waits for it
/// with wait4, and returns its wall and CPU time; `server` is a process whose CPU during
/// the run counts too.
func measure(_ program: String, _ arguments: [String], environment: [String: String], stdin: String, stdout: String = "/dev/null",
             log: String, server: pid_t? = nil, peak: Bool = true) throws -> Run {
    // Its peak memory through GNU time, which forks it from a small process: wait4's
    // ru_maxrss of a child posix_spawn started here counts this benchmark's memory too.
    let (program, arguments, peakFile) = peak ? ProcessMemory.measuredCommand(program, arguments) : (program, arguments, nil)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
    let argv = ([program] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    let serverBefore = server.map(ProcessCPU.seconds(of:)) ?? 0
    let start = now()
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, program, &actions, nil, argv, envp)
    guard spawned == 0 else { throw TermindError(code: "bench.spawn", message: "cannot start \(program): \(String(cString: strerror(spawned)))") }
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let wall = now() - start
    let serverCPU = server.map { ProcessCPU.seconds(of: $0) - serverBefore } ?? 0
    guard status == 0 else {
        throw TermindError(code: "bench.failed", message: "\(URL(fileURLWithPath: program).lastPathComponent) \(arguments.joined(separator: " ")) ended with status \(status); see \(log)")
    }
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    let peakMiB = peakFile.flatMap(ProcessMemory.peakMiB(in:))
    return Run(wall: wall, cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime) + serverCPU, peak: peakMiB ?? 0)
}

/// Runs `a` and `b` in turn (one unmeasured warm-up each), `count` pairs.
func paired(count: Int = runCount, _ a: () throws -> Run, _ b: () throws -> Run) throws -> [(Run, Run)] {
    _ = try a()
    _ = try b()
    var pairs: [(Run, Run)] = []
    for _ in 0..<count { pairs.append((try a(), try b())) }
    return pairs
}

func spread(_ values: [Double]) -> (min: Double, median: Double, max: Double) {
    let sorted = values.sorted()
    return (sorted.first ?? 0, sorted[sorted.count / 2], sorted.last ?? 0)
}

func row(_ name: String, _ cells: [String]) {
    let widths = [40, 18, 18, 7, 9, 9, 19, 7, 6]
    var line = name.padding(toLength: widths[0], withPad: " ", startingAt: 0)
    for (cell, width) in zip(cells, widths.dropFirst()) { line += " " + cell.padding(toLength: width, withPad: " ", startingAt: 0) }
    print(line)
}
func f(_ v: Double) -> String { v >= 100 ? String(format: "%.0f", v) : v >= 10 ? String(format: "%.1f", v) : String(format: "%.2f", v) }
func triple(_ s: (min: Double, median: Double, max: Double)) -> String { "\(f(s.min))/\(f(s.median))/\(f(s.max))" }

/// Whether the row named `name` runs (`--only`).
func wanted(_ name: String) -> Bool { onlyRows.map { name.contains($0) } ?? true }

/// A throughput figure: MiB/s of both, paired speed ratio, both sides' peak memory, CPU
/// s/GiB of both, CPU ratio. The pairs run only when the row is wanted; `servers` are the
/// server processes of each side (termind serve, the ssh master) when there are.
func throughputRow(_ name: String, bytes: Int, servers: (pid_t, pid_t)? = nil, _ measured: @autoclosure () throws -> [(Run, Run)]) rethrows {
    guard wanted(name) else { return }
    if let servers { ProcessMemory.resetPeak(of: servers.0); ProcessMemory.resetPeak(of: servers.1) }
    let stealBefore = CPUSteal.now()
    let pairs = try measured()
    let steal = CPUSteal.now().share(since: stealBefore)
    let gib = Double(bytes) / Double(1 << 30)
    let ours = spread(pairs.map { Double(bytes) / $0.0.wall / 1_048_576 })
    let theirs = spread(pairs.map { Double(bytes) / $0.1.wall / 1_048_576 })
    let ratio = spread(pairs.map { $0.1.wall / $0.0.wall }).median
    let cpuOurs = spread(pairs.map { $0.0.cpu / gib }).median, cpuTheirs = spread(pairs.map { $0.1.cpu / gib }).median
    let cpuRatio = spread(pairs.map { $0.0.cpu / max($0.1.cpu, 1e-6) }).median
    row(name, [triple(ours), triple(theirs), String(format: "%.2f×", ratio), BenchmarkFigure.mebibytes(sidePeak(pairs.map(\.0), server: servers?.0)),
               BenchmarkFigure.mebibytes(sidePeak(pairs.map(\.1), server: servers?.1)), "\(f(cpuOurs)) / \(f(cpuTheirs))", String(format: "%.2f×", cpuRatio), steal])
}

// MARK: - Set-up

let directory = try TemporaryDirectory("termind-ssh-bench")
defer { directory.remove() }
chmod(directory.path, 0o755)
let keyPath = directory.file("id")
_ = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", keyPath])
let account = getuid() == 0 ? try ThrowawayAccount() : nil
defer { account?.remove() }
let user = account?.name ?? NSUserName()
let bytes = mib << 20
/// A sparse file of `size` zero bytes: both clients read their upload from one.
func sparseFile(_ name: String, size: Int) -> String {
    let path = directory.file(name)
    guard let file = fopen(path, "w"), ftruncate(fileno(file), off_t(size)) == 0 else { fatalError("cannot make \(path)") }
    fclose(file)
    return path
}
let source = sparseFile("source", size: bytes)
let log = directory.file("bench.log")

let termind = FeatureHarness.buildDirectory + "/termind"
guard FileManager.default.isExecutableFile(atPath: termind) else { fatalError("\(termind) is missing: build it first (make bench does)") }
let termindEnvironment = {
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = directory.file("home")
    environment["TERMIND_SOCKET"] = directory.file("run/termind.sock")
    environment["SSH_AUTH_SOCK"] = nil
    return environment
}()
let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
let sshEnvironment = ProcessInfo.processInfo.environment.filter { $0.key != "SSH_AUTH_SOCK" }

func sshArguments(port: Int, control: String? = nil) -> [String] {
    ["-F", "/dev/null", "-q", "-i", keyPath, "-p", "\(port)", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
     "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"] + (control.map { ["-S", $0] } ?? []) + ["\(user)@127.0.0.1"]
}
func termindLine(port: Int) -> String { "ssh -p \(port) -i \(keyPath) \(user)@127.0.0.1" }

// One termind server for every figure that runs inside one.
try FileManager.default.createDirectory(atPath: directory.file("run"), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
let serve = try SpawnedProcess(termind, store + ["serve"], environment: termindEnvironment, captureOutput: false)
serve.closeInput()
for _ in 0..<400 where !FileManager.default.fileExists(atPath: directory.file("run/termind.sock")) { usleep(25_000) }
// Without its socket, `termind exec` would quietly run in-process and the serve rows would lie.
guard FileManager.default.fileExists(atPath: directory.file("run/termind.sock")) else { fatalError("termind serve did not start: its socket never appeared") }
defer { serve.signal(SIGTERM); serve.wait() }

func termindExec(port: Int, local: Bool, _ command: String, stdin: String = "/dev/null", server: pid_t? = nil, peak: Bool = true) throws -> Run {
    try measure(termind, store + (local ? ["--local"] : []) + ["exec", termindLine(port: port), "--accept-host-key", "once", "--", command],
                environment: termindEnvironment, stdin: stdin, log: log, server: server, peak: peak)
}
func ssh(port: Int, control: String? = nil, _ command: String, stdin: String = "/dev/null", server: pid_t? = nil, peak: Bool = true) throws -> Run {
    try measure("/usr/bin/ssh", sshArguments(port: port, control: control) + [command], environment: sshEnvironment, stdin: stdin, log: log, server: server, peak: peak)
}

let down = "head -c \(bytes) /dev/zero", up = "cat > /dev/null"
print("termind-ssh-bench: libssh2 \(SSHLibrary.version) vs \(try ProcessRunner.run("/usr/bin/ssh", ["-V"]).stderr.trimmingCharacters(in: .whitespacesAndNewlines)), "
      + "\(runCount) pairs each after a warm-up, remote user \(user)\(account == nil ? "" : " (throwaway, /bin/sh)")")
print("speed ratio = ssh's time / termind's time, pair by pair (> 1: termind faster); CPU = client (+ server) seconds per GiB")
row("FIGURE", ["TERMIND min/med/max", "OPENSSH min/med/max", "RATIO", "PEAK RSS", "PEER RSS", "CPU s/GiB t / ssh", "CPU ×", "STEAL"])

/// A start-up row in milliseconds: `count` pairs timed without GNU time in front (a
/// millisecond each is much of the figure), then one more pair through it for the peaks.
func startupRow(_ name: String, servers: (pid_t, pid_t)? = nil, _ a: (Bool) throws -> Run, _ b: (Bool) throws -> Run) throws {
    guard wanted(name) else { return }
    if let servers { ProcessMemory.resetPeak(of: servers.0); ProcessMemory.resetPeak(of: servers.1) }
    let stealBefore = CPUSteal.now()
    let pairs = try paired(count: max(20, runCount), { try a(false) }, { try b(false) })
    let steal = CPUSteal.now().share(since: stealBefore)
    let peaks = [(try a(true), try b(true))]
    let ours = spread(pairs.map { $0.0.wall * 1e3 }), theirs = spread(pairs.map { $0.1.wall * 1e3 })
    let ratio = spread(pairs.map { $0.1.wall / $0.0.wall }).median
    let cpuOurs = spread(pairs.map { $0.0.cpu * 1e3 }).median, cpuTheirs = spread(pairs.map { $0.1.cpu * 1e3 }).median
    row(name, [triple(ours), triple(theirs), String(format: "%.2f×", ratio),
               BenchmarkFigure.mebibytes(sidePeak(peaks.map(\.0), server: servers?.0)), BenchmarkFigure.mebibytes(sidePeak(peaks.map(\.1), server: servers?.1)),
               "\(f(cpuOurs)) / \(f(cpuTheirs)) ms", String(format: "%.2f×", spread(pairs.map { $0.0.cpu / max($0.1.cpu, 1e-6) }).median), steal])
}

// What a one-shot command pays before it does anything (issue 40): in this process, no
// server asked (`--local`), against `ssh -V` (which loads OpenSSL and exits).
func termindLocal(_ words: [String], peak: Bool) throws -> Run {
    try measure(termind, store + ["--local"] + words, environment: termindEnvironment, stdin: "/dev/null", log: log, peak: peak)
}
func sshVersion(peak: Bool) throws -> Run {
    try measure("/usr/bin/ssh", ["-V"], environment: sshEnvironment, stdin: "/dev/null", log: log, peak: peak)
}
_ = try termindLocal(["vault", "host", "add", "127.0.0.1", "--label", "bench-host"], peak: false)
try startupRow("version vs ssh -V (ms)", { try measure(termind, ["version"], environment: termindEnvironment, stdin: "/dev/null", log: log, peak: $0) }, sshVersion)
// The general help with no server to ask: the launcher's, from Registry.json.
let noServer = termindEnvironment.merging(["TERMIND_SOCKET": directory.file("run/none.sock")]) { $1 }
try startupRow("help (no server) vs ssh -V (ms)", { try measure(termind, ["help"], environment: noServer, stdin: "/dev/null", log: log, peak: $0) }, sshVersion)
try startupRow("vault host list --local vs ssh -V (ms)", { try termindLocal(["vault", "host", "list"], peak: $0) }, sshVersion)
try startupRow("settings get --local vs ssh -V (ms)", { try termindLocal(["settings", "get", "terminal.preferences"], peak: $0) }, sshVersion)

let ciphers = ["chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com"]
for cipher in ciphers {
    let server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)],
                                      extraConfig: ["Ciphers \(cipher)"], hostKeyTypes: ["ed25519"])
    defer { server.stop() }
    chmod(server.directory.file("authorized_keys"), 0o644)
    let port = server.port
    let name = cipher.hasPrefix("chacha20") ? "chacha20" : String(cipher.split(separator: "@")[0])

    try throughputRow("\(mib) MiB down \(name) new conn.", bytes: bytes,
                  paired({ try termindExec(port: port, local: true, down) }, { try ssh(port: port, down) }))
    try throughputRow("\(mib) MiB up \(name) new conn.", bytes: bytes,
                  paired({ try termindExec(port: port, local: true, up, stdin: source) }, { try ssh(port: port, up, stdin: source) }))

    // Kept connections: termind serve's pool and an ssh ControlMaster.
    let control = directory.file("cm-\(port)")
    _ = try ProcessRunner.run("/usr/bin/ssh", ["-M", "-f", "-N"] + sshArguments(port: port, control: control))
    let check = try ProcessRunner.run("/usr/bin/ssh", ["-O", "check"] + sshArguments(port: port, control: control))
    guard let range = check.stderr.range(of: #"pid=(\d+)"#, options: .regularExpression),
          let master = pid_t(check.stderr[range].dropFirst(4)) else { fatalError("no ControlMaster: \(check.stderr)") }
    defer { _ = try? ProcessRunner.run("/usr/bin/ssh", ["-O", "exit"] + sshArguments(port: port, control: control)) }
    if wanted("serve/master") { _ = try termindExec(port: port, local: false, "true") }  // opens the server's connection
    try throughputRow("\(mib) MiB down \(name) serve/master", bytes: bytes, servers: (serve.pid, master),
                  paired({ try termindExec(port: port, local: false, down, server: serve.pid) },
                             { try ssh(port: port, control: control, down, server: master) }))
    try throughputRow("\(mib) MiB up \(name) serve/master", bytes: bytes, servers: (serve.pid, master),
                  paired({ try termindExec(port: port, local: false, up, stdin: source, server: serve.pid) },
                             { try ssh(port: port, control: control, up, stdin: source, server: master) }))

    if cipher == ciphers[0] {  // start-up does not depend on the cipher: once
        try startupRow("exec true --local vs ssh new conn. (ms)", { try termindExec(port: port, local: true, "true", peak: $0) },
                       { try ssh(port: port, "true", peak: $0) })
    }
    if cipher == ciphers[0] && wanted("exec true serve/master (ms)") {  // start-up does not depend on the cipher: once
        ProcessMemory.resetPeak(of: serve.pid); ProcessMemory.resetPeak(of: master)
        let stealBefore = CPUSteal.now()
        // Timed without GNU time in front (a millisecond each is most of the figure); one
        // more pair, untimed, gives the peaks.
        let pairs = try paired(count: max(20, runCount), { try termindExec(port: port, local: false, "true", server: serve.pid, peak: false) },
                               { try ssh(port: port, control: control, "true", server: master, peak: false) })
        let steal = CPUSteal.now().share(since: stealBefore)
        let peaks = [(try termindExec(port: port, local: false, "true", server: serve.pid), try ssh(port: port, control: control, "true", server: master))]
        let ours = spread(pairs.map { $0.0.wall * 1e3 }), theirs = spread(pairs.map { $0.1.wall * 1e3 })
        let ratio = spread(pairs.map { $0.1.wall / $0.0.wall }).median
        let cpuOurs = spread(pairs.map { $0.0.cpu * 1e3 }).median, cpuTheirs = spread(pairs.map { $0.1.cpu * 1e3 }).median
        row("exec true serve/master (ms)", [triple(ours), triple(theirs), String(format: "%.2f×", ratio),
                                                BenchmarkFigure.mebibytes(sidePeak(peaks.map(\.0), server: serve.pid)), BenchmarkFigure.mebibytes(sidePeak(peaks.map(\.1), server: master)),
                                                "\(f(cpuOurs)) / \(f(cpuTheirs)) ms", String(format: "%.2f×", spread(pairs.map { $0.0.cpu / max($0.1.cpu, 1e-6) }).median), steal])
    }

    if cipher.hasPrefix("chacha20") {
        // 20 ms round trip: 10 ms each way through a relay in front of this sshd.
        let relay = try DelayingRelay(to: port, oneWayDelay: 0.010)
        defer { relay.stop() }
        let far = max(1, mib / 4) << 20
        let farSource = sparseFile("far-source", size: far)
        try throughputRow("\(far >> 20) MiB down \(name) 20ms RTT", bytes: far,
                      paired({ try termindExec(port: relay.port, local: true, "head -c \(far) /dev/zero") },
                                 { try ssh(port: relay.port, "head -c \(far) /dev/zero") }))
        try throughputRow("\(far >> 20) MiB up \(name) 20ms RTT", bytes: far,
                      paired({ try termindExec(port: relay.port, local: true, up, stdin: farSource) },
                                 { try ssh(port: relay.port, up, stdin: farSource) }))

        // A jump host 20 ms away (this sshd behind the relay) and the target next to it (the
        // same sshd, reached from the jump host by direct-tcpip): the route's tunnel channel
        // carries the target's whole session, so its window bounds the route.
        let config = directory.file("ssh_config")
        try "Host *\n  IdentityFile \(keyPath)\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let jump = "\(user)@127.0.0.1:\(relay.port)"
        // As with OpenSSH, -i names the destination's key, not a jump host's: termind's jump
        // host is a saved host with the key as its identity (what -F gives ssh here).
        let jumpRow = "\(far >> 20) MiB down \(name) via jump 20ms"
        // Saved only when the row runs (as `--only chacha` selects it, not by "via jump").
        if wanted(jumpRow) && (try? ProcessRunner.run(termind, store + ["--local", "vault", "host", "show", "bench-jump-\(relay.port)"],
                                                         environment: termindEnvironment))?.status != 0 {
            for step in [["vault", "key", "import", keyPath, "--label", "bench-key"], ["vault", "identity", "add", user, "--label", "bench-identity", "--key", "bench-key"]] {
                _ = try ProcessRunner.run(termind, store + ["--local"] + step, environment: termindEnvironment)  // already there on the second cipher
            }
            let saved = try ProcessRunner.run(termind, store + ["--local", "vault", "host", "add", "127.0.0.1", "--port", "\(relay.port)", "--label", "bench-jump-\(relay.port)",
                                                                "--identity", "bench-identity"], environment: termindEnvironment)
            guard saved.status == 0 else { fatalError("cannot save the jump host: \(saved.stderr)") }
        }
        try throughputRow(jumpRow, bytes: far,
                      paired({ try measure(termind, store + ["--local", "exec", "ssh -J bench-jump-\(relay.port) -p \(port) -i \(keyPath) \(user)@127.0.0.1", "--accept-host-key", "once",
                                                                "--", "head -c \(far) /dev/zero"], environment: termindEnvironment, stdin: "/dev/null", log: log) },
                                 { try measure("/usr/bin/ssh", ["-F", config, "-J", jump, "-p", "\(port)", "\(user)@127.0.0.1", "head -c \(far) /dev/zero"],
                                               environment: sshEnvironment, stdin: "/dev/null", log: log) }))
    }
}
