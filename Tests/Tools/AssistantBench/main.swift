import AssistantRules
import Foundation
import TermindCore
import TermindHarness

// termind-assistant-bench: a long streamed answer (10,000 tokens by default, one Chat
// Completions chunk each, as OpenAI's API sends them) from a loopback replay server, read by
// whole `termind assistant run` processes and by whole Python processes using the official
// `openai` SDK (`client.chat.completions.create(stream=True)`, each delta written and flushed
// as it comes, as termind does), alternated in pairs on the same server in one run.
//
// Printed per client (min/median/max over the runs):
// * first token: from the server writing the first body byte to the client's first byte on
//   standard output (the client's own overhead over the raw stream; the target is 5 ms);
// * CPU per 1,000 tokens: the client's CPU (wait4) for the long answer minus its CPU for a
//   one-token answer, divided by the tokens (start-up, imports and the request are the same in
//   both, so what is left is the cost of reading the stream); the target is termind ≤ 0.5× the SDK;
// * CPU and wall time of the whole process, start-up included;
// and beside each ratio both sides' peak resident memory (PEAK RSS for `termind assistant
// run`, PEER RSS for the SDK's Python process, from one more long answer each, untimed, started
// through GNU time). The batch row adds the same: termind serve's VmHWM from /proc (set back to
// its current size with clear_refs before the measured runs) with its `termind assistant run`
// clients, against the ssh master's VmHWM (likewise) with its `ssh -S` clients.

var tokens = 10_000
var runs = 5
var batchOnly = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--tokens": tokens = arguments.popFirst().flatMap(Int.init) ?? tokens
    case "--runs": runs = arguments.popFirst().flatMap(Int.init) ?? runs
    case "--batch-only": batchOnly = true
    default:
        FileHandle.standardError.write(Data("usage: termind-assistant-bench [--tokens N] [--runs N] [--batch-only]\n".utf8))
        exit(2)
    }
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// One chunk per token, then the finish, usage and [DONE], as OpenAI's API streams them.
func stream(tokens: Int) -> Data {
    var body = ""
    let head = #"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":{"#
    body += "data: " + head + #""role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"# + "\n\n"
    let words = ["load", " average", " on", " web", "-1", " is", " 0", ".42", ";", " fine", ".\\n"]
    for index in 0..<tokens {
        body += "data: " + head + #""content":""# + words[index % words.count] + #""},"logprobs":null,"finish_reason":null}],"usage":null}"# + "\n\n"
    }
    body += "data: " + head + #"},"logprobs":null,"finish_reason":"stop"}],"usage":null}"# + "\n\n"
    body += "data: " + #"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":"# + String(tokens) + #","total_tokens":"# + String(tokens + 12) + "}}\n\n"
    body += "data: [DONE]\n\n"
    return Data(body.utf8)
}

struct Run {
    var wall: Double
    var cpu: Double
    /// From the server's first body byte to the client's first byte on standard output.
    var firstToken: Double
    var bytes: Int
    /// The client's peak resident memory, MiB, when it was run for it (`peak`); else 0.
    var peak: Double
}

/// Runs a client whose standard output is a pipe read here; its CPU from wait4.
/// `peak`: started through GNU time for its peak memory (wait4's ru_maxrss of a child
/// posix_spawn started here counts this benchmark's memory too); its CPU and wall then
/// include GNU time's, so the timed runs go without.
func measure(_ program: String, _ arguments: [String], environment: [String: String], server: ReplayServer, peak: Bool = false) throws -> Run {
    let (program, arguments, peakFile) = peak ? ProcessMemory.measuredCommand(program, arguments) : (program, arguments, nil)
    var pipeFDs: [Int32] = [0, 0]
    guard pipe(&pipeFDs) == 0 else { throw TermindError(code: "bench.pipe", message: "pipe failed") }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
    posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
    posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
    let argv = ([program] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    let replies = server.bodyStarts.count
    let start = now()
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, program, &actions, nil, argv, envp)
    close(pipeFDs[1])
    guard spawned == 0 else { throw TermindError(code: "bench.spawn", message: "cannot start \(program): \(String(cString: strerror(spawned)))") }
    var first: Double?
    var total = 0
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(pipeFDs[0], &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { break }
        if first == nil { first = now() }
        total += count
    }
    close(pipeFDs[0])
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let wall = now() - start
    guard status == 0 else { throw TermindError(code: "bench.failed", message: "\(program) \(arguments.joined(separator: " ")) ended with status \(status)") }
    let starts = server.bodyStarts
    guard starts.count > replies, let first else { throw TermindError(code: "bench.stream", message: "\(program) printed nothing") }
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    let peakMiB = peakFile.flatMap(ProcessMemory.peakMiB(in:))
    return Run(wall: wall, cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime), firstToken: first - starts[replies], bytes: total,
               peak: peakMiB ?? 0)
}

func spread(_ values: [Double]) -> (min: Double, median: Double, max: Double) {
    let sorted = values.sorted()
    return (sorted.first ?? 0, sorted[sorted.count / 2], sorted.last ?? 0)
}
func f(_ v: Double) -> String { v >= 100 ? String(format: "%.0f", v) : v >= 10 ? String(format: "%.1f", v) : String(format: "%.2f", v) }
func triple(_ s: (min: Double, median: Double, max: Double)) -> String { "\(f(s.min))/\(f(s.median))/\(f(s.max))" }

/// Issue 37's batch row: a model answer of 20 read-only `ssh_exec` calls on one host, run by
/// `termind assistant run` inside `termind serve` (its pooled connection warm, the calls at
/// once), against the same 20 commands run one after another with `ssh -S` on a warm
/// ControlMaster. Wall time of the whole, each way, alternated; target ≥ 3× faster.
func batchRow(directory: TemporaryDirectory, server: ReplayServer, environment: [String: String]) throws {
    let commands = ["cat /proc/loadavg", "uptime", "df -h /", "free -m", "uname -a", "id -un", "head -n 5 /proc/meminfo", "ls /etc",
                    "ps -eo pid,comm", "cat /etc/os-release", "hostname", "date", "head -n 3 /proc/cpuinfo", "who", "ls -la /tmp",
                    "df -i /", "cat /proc/uptime", "whoami", "nproc", "cat /proc/version"]
    for command in commands { precondition(CommandClassifier.classify(command).isReadOnly, command) }
    let sshd = try SSHServerFixture.withNewKey(in: directory, name: "batch-id")
    defer { sshd.stop() }
    let serve = try ServeProcess(directory: directory, arguments: [], environment: ["no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"])
    defer { _ = serve.stop() }
    let termind = FeatureHarness.buildDirectory + "/termind"
    let socket = ["--socket", serve.socketPath]
    guard let hostKey = sshd.hostKeys["ssh-ed25519"] else { throw TermindError(code: "bench.setup", message: "no host key") }
    for setup in [["assistant", "provider", "add", "bench", "--protocol", "chat", "--url", server.url + "/v1"],
                  ["assistant", "model", "add", "gpt", "--provider", "bench", "--model", "gpt-4.1"],
                  ["vault", "key", "import", directory.file("batch-id"), "--label", "bench"], ["vault", "identity", "add", NSUserName(), "--key", "bench"],
                  ["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(sshd.port)", "--identity", NSUserName()],
                  ["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(sshd.port)"]] {
        let result = try ProcessRunner.run(termind, socket + setup, environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.setup", message: "\(setup.joined(separator: " ")): \(result.stderr)") }
    }
    let entries: [JSONValue] = commands.enumerated().map { index, command in
        .object(["index": .integer(Int64(index)), "id": .string("call_\(index)"), "type": .string("function"),
                 "function": .object(["name": .string("ssh_exec"), "arguments": .string(#"{"host":"box","command":"\#(command)"}"#)])])
    }
    let chunk: JSONValue = .object(["choices": .array([.object(["index": .integer(0), "finish_reason": .string("tool_calls"), "delta": .object(["tool_calls": .array(entries)])])])])
    let calls = Data(("data: " + String(decoding: try JSONCoding.encode(chunk), as: UTF8.self) + "\n\ndata: [DONE]\n\n").utf8)
    let done = Data(#"data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}"#.utf8 + Data("\n\ndata: [DONE]\n\n".utf8))
    /// Each side's largest client (MiB, wait4), for the batch row.
    var clientPeaks = (ours: 0.0, theirs: 0.0)
    func termindBatch(measured: Bool = false) throws -> Double {
        server.enqueue(.stream(calls, piece: 1 << 16), .stream(done))
        let start = now()
        let result = try ProcessRunner.run(termind, socket + ["--json", "assistant", "run", "--mode", "ask", "check box"], environment: environment, measured: measured)
        let wall = now() - start
        clientPeaks.ours = max(clientPeaks.ours, result.peakResidentMiB ?? 0)
        let succeeded = result.stdout.components(separatedBy: #""state":"succeeded""#).count - 1
        guard result.status == 0, succeeded == commands.count else {
            throw TermindError(code: "bench.batch", message: "termind's batch: status \(result.status), \(succeeded) of \(commands.count) succeeded: \(result.stdout.suffix(600))\(result.stderr)")
        }
        return wall
    }
    let control = directory.file("cm")
    let sshBase = ["-F", "/dev/null", "-q", "-i", directory.file("batch-id"), "-p", "\(sshd.port)", "-o", "StrictHostKeyChecking=no",
                   "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-S", control, "\(NSUserName())@127.0.0.1"]
    _ = try ProcessRunner.run("/usr/bin/ssh", ["-M", "-f", "-N"] + sshBase)
    defer { _ = try? ProcessRunner.run("/usr/bin/ssh", ["-O", "exit"] + sshBase) }
    let check = try ProcessRunner.run("/usr/bin/ssh", ["-O", "check"] + sshBase)
    guard let found = check.stderr.range(of: #"pid=(\d+)"#, options: .regularExpression), let master = pid_t(check.stderr[found].dropFirst(4)) else {
        throw TermindError(code: "bench.ssh", message: "no ControlMaster: \(check.stderr)")
    }
    func sshSequence(measured: Bool = false) throws -> Double {
        let start = now()
        for command in commands {
            let result = try ProcessRunner.run("/usr/bin/ssh", sshBase + [command], measured: measured)
            guard result.status == 0 else { throw TermindError(code: "bench.ssh", message: "ssh \(command): \(result.stderr)") }
            clientPeaks.theirs = max(clientPeaks.theirs, result.peakResidentMiB ?? 0)
        }
        return now() - start
    }
    // Warm: serve's pooled connection, the master's; the clients' peaks taken here, untimed
    // (GNU time in front of each).
    ProcessMemory.resetPeak(of: serve.process.pid); ProcessMemory.resetPeak(of: master)
    _ = try termindBatch(measured: true); _ = try sshSequence(measured: true)
    var ours: [Double] = [], theirs: [Double] = []
    var sshdOurs: [Double] = [], sshdTheirs: [Double] = [], clientOurs: [Double] = [], clientTheirs: [Double] = []
    for _ in 0..<5 {
        var sshd = sshdCPU(), mine = childrenCPU() + ProcessCPU.seconds(of: serve.process.pid)
        ours.append(try termindBatch())
        sshdOurs.append(sshdCPU() - sshd)
        clientOurs.append(childrenCPU() + ProcessCPU.seconds(of: serve.process.pid) - mine)
        sshd = sshdCPU(); mine = childrenCPU() + ProcessCPU.seconds(of: master)
        theirs.append(try sshSequence())
        sshdTheirs.append(sshdCPU() - sshd)
        clientTheirs.append(childrenCPU() + ProcessCPU.seconds(of: master) - mine)
    }
    let speedup = spread(theirs).median / max(spread(ours).median, 1e-9)
    let peakOurs = max(clientPeaks.ours, ProcessMemory.peakMiB(of: serve.process.pid) ?? 0), peakTheirs = max(clientPeaks.theirs, ProcessMemory.peakMiB(of: master) ?? 0)
    let n = Double(commands.count)
    print("20-call read-only batch, one host: termind (serve, parallel) \(triple(spread(ours.map { $0 * 1000 }))) ms, ssh -S ControlMaster sequential \(triple(spread(theirs.map { $0 * 1000 }))) ms: \(f(speedup))× faster (target ≥ 3×: \(speedup >= 3 ? "met" : "missed")); "
          + "peak RSS \(BenchmarkFigure.mebibytes(peakOurs)) (termind serve and client) / \(BenchmarkFigure.mebibytes(peakTheirs)) (ssh master and clients)")
    print("  CPU per command, ms: sshd \(f(spread(sshdOurs).median / n * 1000)) (termind's channels) / \(f(spread(sshdTheirs).median / n * 1000)) (ssh's); "
          + "client side \(f(spread(clientOurs).median / n * 1000)) (termind serve + client) / \(f(spread(clientTheirs).median / n * 1000)) (ssh processes + master)")
    let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
    let floor = (spread(sshdOurs).median + spread(clientOurs).median) / cores
    print("  on \(Int(cores)) cores the CPU of termind's way alone takes ≥ \(f(floor * 1000)) ms: ssh's sequential wall / that floor = \(f(spread(theirs).median / max(floor, 1e-9)))× is the most any parallel client could reach here")
}

/// CPU seconds of every sshd process now, with the children they reaped (a session's shell).
func sshdCPU() -> Double {
    var total = 0.0
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where entry.allSatisfy(\.isNumber) {
        guard let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8), stat.contains("(sshd") else { continue }
        guard let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the name: state is field 3; utime, stime, cutime, cstime are fields 14-17.
        guard fields.count > 15 else { continue }
        total += (11...14).compactMap { Double(fields[$0]) }.reduce(0, +) / ticks
    }
    return total
}

/// CPU seconds of this process's reaped children so far.
func childrenCPU() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_CHILDREN.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

do {
    let directory = try TemporaryDirectory("termind-assistant-bench")
    defer { directory.remove() }
    let server = try ReplayServer()
    defer { server.stop() }
    if batchOnly {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["no_proxy"] = "127.0.0.1"
        environment["NO_PROXY"] = "127.0.0.1"
        for name in ["TERMIND_SOCKET", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] { environment[name] = nil }
        try batchRow(directory: directory, server: server, environment: environment)
        exit(0)
    }
    let long = stream(tokens: tokens), short = stream(tokens: 1)
    let python = try LocalModel.python()
    let sdk = try directory.write("sdk.py", """
        import sys
        from openai import OpenAI
        client = OpenAI(base_url=sys.argv[1], api_key="sk-bench")
        out = sys.stdout
        for chunk in client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "how is web-1?"}], stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                out.write(chunk.choices[0].delta.content)
                out.flush()
        """)
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = directory.file("home")
    environment["no_proxy"] = "127.0.0.1"
    environment["NO_PROXY"] = "127.0.0.1"
    for name in ["TERMIND_SOCKET", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] { environment[name] = nil }
    let termind = FeatureHarness.buildDirectory + "/termind"
    let location = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
    for setup in [["assistant", "provider", "add", "bench", "--protocol", "chat", "--url", server.url + "/v1"],
                  ["assistant", "model", "add", "gpt", "--provider", "bench", "--model", "gpt-4.1"]] {
        let result = try ProcessRunner.run(termind, location + setup, environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.setup", message: result.stderr) }
    }
    let termindRun = { () throws -> Run in try measure(termind, location + ["assistant", "run", "how is web-1?"], environment: environment, server: server) }
    let sdkRun = { () throws -> Run in try measure(python, [sdk, server.url + "/v1"], environment: environment, server: server) }

    func serve(_ body: Data) { server.enqueue(.stream(body, piece: 16 << 10)) }
    // Warm-up, one of each, unmeasured.
    serve(long); _ = try termindRun()
    serve(long); _ = try sdkRun()
    var longRuns: [(Run, Run)] = [], shortRuns: [(Run, Run)] = []
    for _ in 0..<runs {
        serve(long); let t = try termindRun()
        serve(long); let s = try sdkRun()
        longRuns.append((t, s))
        serve(short); let ts = try termindRun()
        serve(short); let ss = try sdkRun()
        shortRuns.append((ts, ss))
    }
    // One more long answer each, untimed, for the peaks (GNU time in front).
    serve(long); let termindPeak = try measure(termind, location + ["assistant", "run", "how is web-1?"], environment: environment, server: server, peak: true).peak
    serve(long); let sdkPeak = try measure(python, [sdk, server.url + "/v1"], environment: environment, server: server, peak: true).peak
    // termind ends an answer that has no newline with one; the SDK script prints none.
    guard longRuns.allSatisfy({ $0.0.bytes - $0.1.bytes == 0 || $0.0.bytes - $0.1.bytes == 1 }) else {
        throw TermindError(code: "bench.output", message: "termind and the SDK printed different amounts: \(longRuns.map { ($0.0.bytes, $0.1.bytes) })")
    }
    let termindPer = zip(longRuns, shortRuns).map { ($0.0.0.cpu - $0.1.0.cpu) / Double(tokens) * 1000 }
    let sdkPer = zip(longRuns, shortRuns).map { ($0.0.1.cpu - $0.1.1.cpu) / Double(tokens) * 1000 }
    print("termind-assistant-bench: \(tokens) tokens (\(long.count >> 10) KiB of Chat Completions chunks) from a loopback server, \(runs) runs each, alternated")
    print("\("".padding(toLength: 34, withPad: " ", startingAt: 0)) \("termind".padding(toLength: 20, withPad: " ", startingAt: 0)) \("openai SDK".padding(toLength: 20, withPad: " ", startingAt: 0)) \("ratio (median)".padding(toLength: 14, withPad: " ", startingAt: 0)) \("PEAK RSS".padding(toLength: 9, withPad: " ", startingAt: 0)) PEER RSS")
    /// `runs`: the runs behind the row, for each side's largest client.
    func line(_ name: String, _ a: [Double], _ b: [Double], scale: Double = 1) {
        let x = spread(a.map { $0 * scale }), y = spread(b.map { $0 * scale })
        let peaks = (termindPeak, sdkPeak)
        print("\(name.padding(toLength: 34, withPad: " ", startingAt: 0)) \(triple(x).padding(toLength: 20, withPad: " ", startingAt: 0)) \(triple(y).padding(toLength: 20, withPad: " ", startingAt: 0)) \(f(x.median / max(y.median, 1e-9)).padding(toLength: 14, withPad: " ", startingAt: 0)) \(BenchmarkFigure.mebibytes(peaks.0).padding(toLength: 9, withPad: " ", startingAt: 0)) \(BenchmarkFigure.mebibytes(peaks.1))")
    }
    line("first token after the stream, ms", longRuns.map(\.0.firstToken), longRuns.map(\.1.firstToken), scale: 1000)
    line("CPU per 1,000 tokens, ms", termindPer, sdkPer, scale: 1000)
    line("whole process CPU, s", longRuns.map(\.0.cpu), longRuns.map(\.1.cpu))
    line("whole process wall, s", longRuns.map(\.0.wall), longRuns.map(\.1.wall))
    line("one-token answer CPU, s", shortRuns.map(\.0.cpu), shortRuns.map(\.1.cpu))
    // The command classifier on a 200-character command (issue 37's target: ≤ 50 µs median).
    let command = "ps -eo pid,comm,%cpu --sort=-%cpu | head -n 20 && df -h / /var /home | grep -v tmpfs && journalctl -u nginx --since today -n 50 --no-pager | tail -n 20 && uptime; free -m && who | head -n 5 && id -un"
    var samples: [Double] = []
    for _ in 0..<200 {
        let start = now()
        for _ in 0..<100 { precondition(CommandClassifier.classify(command).isReadOnly) }
        samples.append((now() - start) / 100)
    }
    print("classifier, \(command.count)-character command: \(triple(spread(samples.map { $0 * 1e6 }))) µs (target: ≤ 50 µs median)")
    try batchRow(directory: directory, server: server, environment: environment)
    let ratio = spread(termindPer).median / max(spread(sdkPer).median, 1e-9)
    print("target: termind's CPU per token ≤ 0.5× the SDK's: \(f(ratio))× (\(ratio <= 0.5 ? "met" : "missed")); first-token overhead ≤ 5 ms: \(f(spread(longRuns.map(\.0.firstToken)).median * 1000)) ms (\(spread(longRuns.map(\.0.firstToken)).median <= 0.005 ? "met" : "missed"))")
} catch {
    FileHandle.standardError.write(Data("termind-assistant-bench: \(TermindError.from(error).message)\n".utf8))
    exit(1)
}
