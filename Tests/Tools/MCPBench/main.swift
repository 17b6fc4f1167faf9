import Foundation
import TermindCore
import TermindHarness

// termind-mcp-bench: `tools/call` of a read-only tool (`list_hosts`, three saved hosts) N
// times (2,000 by default), one after another, by one raw JSON-RPC driver (this process),
// against termind and against the official Python SDK's own `MCPServer` exposing an
// equivalent tool, in the same run, alternated in rounds: over stdio (`termind mcp`, a line
// written and its answer read) and over Streamable HTTP (`termind serve --mcp-listen` against
// the SDK's HTTP app on uvicorn, JSON answers; one keep-alive connection, a handshake-era
// session). Printed: median and p99 latency per call, calls per second, the server's CPU per
// call, and the ratios, each with both sides' peak resident memory: over stdio the largest
// `termind mcp` and Python server process of the rounds (VmHWM just before each ends); over HTTP
// termind serve's and the reference server's VmHWM from /proc, set back to their current
// size (clear_refs) as the rounds start. The download row compares two ways inside one
// termind serve: its VmHWM, set back before each transfer, is kept per way (with `termind
// get`'s client process, from one more untimed get started through GNU time); the largest of the rounds.
// Target (issue 38): ≥ 5× the reference server's throughput, p99 ≤ 5 ms.

var calls = 2000
var rounds = 3
var downloadMiB = 1024
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--calls": calls = arguments.popFirst().flatMap(Int.init) ?? calls
    case "--rounds": rounds = arguments.popFirst().flatMap(Int.init) ?? rounds
    case "--download-mib": downloadMiB = arguments.popFirst().flatMap(Int.init) ?? downloadMiB
    default:
        FileHandle.standardError.write(Data("usage: termind-mcp-bench [--calls N] [--rounds N] [--download-mib N (0: no download row)]\n".utf8))
        exit(2)
    }
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// One server process on pipes, driven line by line.
final class Driver {
    let process: SpawnedProcess
    private var pending = Data()
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)
    private let outputFD: Int32

    init(_ program: String, _ arguments: [String], environment: [String: String]) throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TermindError(code: "bench.pipe", message: "pipe failed") }
        process = try SpawnedProcess(program, arguments, environment: environment, captureOutput: false, output: fds[1])
        close(fds[1])
        outputFD = fds[0]
    }

    /// Sends one message; with an id, returns its answer line.
    @discardableResult
    func send(_ line: String, answer: Bool = true) throws -> String? {
        process.writeInput(Data((line + "\n").utf8))
        guard answer else { return nil }
        while true {
            if let newline = pending.firstIndex(of: 0x0A) {
                let reply = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                pending.removeSubrange(pending.startIndex...newline)
                return reply
            }
            let n = read(outputFD, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw TermindError(code: "bench.eof", message: "the server ended") }
            pending.append(contentsOf: buffer[0..<n])
        }
    }

    func stop() {
        process.closeInput()
        _ = process.wait()
        close(outputFD)
    }
}

/// `count` calls on a fresh session: each call's latency, and the server's CPU for them
/// (start-up and the handshake left out), seconds.
func measure(_ driver: Driver, count: Int) throws -> (latencies: [Double], cpu: Double) {
    let hello = try driver.send(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#)
    guard hello?.contains("protocolVersion") == true else { throw TermindError(code: "bench.init", message: "initialize: \(hello ?? "")") }
    try driver.send(#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, answer: false)
    var latencies: [Double] = []
    let cpu = ProcessCPU.seconds(of: driver.process.pid)
    for id in 1...count {
        let start = now()
        let reply = try driver.send(#"{"jsonrpc":"2.0","id":\#(id),"method":"tools/call","params":{"name":"list_hosts","arguments":{}}}"#) ?? ""
        latencies.append(now() - start)
        guard reply.contains("web-1"), !reply.contains(#""isError":true"#) else { throw TermindError(code: "bench.call", message: "call \(id): \(reply.prefix(300))") }
    }
    return (latencies, ProcessCPU.seconds(of: driver.process.pid) - cpu)
}

/// One keep-alive HTTP/1.1 connection to a loopback MCP endpoint, a request at a time.
final class HTTPDriver {
    let fd: Int32
    let port: Int
    var headers: [String: String]
    private var pending = Data()
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)

    init(port: Int, headers: [String: String]) throws {
        self.port = port
        self.headers = headers
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { throw TermindError(code: "bench.connect", message: "cannot connect to port \(port)") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// POSTs `body`; the status, the headers (lowercased names) and the body.
    func post(_ body: String) throws -> (Int, [String: String], String) {
        var head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Length: \(body.utf8.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let request = Array((head + "\r\n" + body).utf8)
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, request.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TermindError(code: "bench.send", message: "the server closed the connection") }
            sent += n
        }
        while true {
            if let end = pending.range(of: Data("\r\n\r\n".utf8)) {
                let lines = String(decoding: pending[pending.startIndex..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
                var fields: [String: String] = [:]
                for line in lines.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                let length = Int(fields["content-length"] ?? "0") ?? 0
                if pending.count - (end.upperBound - pending.startIndex) >= length {
                    let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
                    let bodyStart = end.upperBound
                    let text = String(decoding: pending[bodyStart..<(bodyStart + length)], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex..<(bodyStart + length))
                    return (status, fields, text)
                }
            }
            // Acknowledge at once (Linux re-arms delayed ACKs): a server that writes a response's
            // head and body apart would otherwise wait ~40 ms for the ACK (Nagle against
            // delayed ACK), a cost of this driver, not of the server.
            var quick: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_QUICKACK, &quick, socklen_t(MemoryLayout<Int32>.size))
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw TermindError(code: "bench.eof", message: "the server closed the connection") }
            pending.append(contentsOf: buffer[0..<n])
        }
    }

    deinit { close(fd) }
}

/// `count` calls over HTTP on a fresh session: each call's latency, and `pid`'s CPU for them.
func measureHTTP(_ driver: HTTPDriver, pid: pid_t, count: Int) throws -> (latencies: [Double], cpu: Double) {
    let (status, fields, hello) = try driver.post(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#)
    guard status == 200, let session = fields["mcp-session-id"] else { throw TermindError(code: "bench.init", message: "initialize: \(status) \(hello.prefix(300))") }
    driver.headers["Mcp-Session-Id"] = session
    driver.headers["MCP-Protocol-Version"] = "2025-11-25"
    _ = try driver.post(#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
    var latencies: [Double] = []
    let cpu = ProcessCPU.seconds(of: pid)
    for id in 1...count {
        let start = now()
        let (code, _, reply) = try driver.post(#"{"jsonrpc":"2.0","id":\#(id),"method":"tools/call","params":{"name":"list_hosts","arguments":{}}}"#)
        latencies.append(now() - start)
        guard code == 200, reply.contains("web-1"), !reply.contains(#""isError":true"#) else { throw TermindError(code: "bench.call", message: "call \(id): \(code) \(reply.prefix(300))") }
    }
    return (latencies, ProcessCPU.seconds(of: pid) - cpu)
}

/// The download row: a file of `mib` MiB on a saved host (a real sshd on loopback) fetched by
/// `termind get` inside serve and through a byte channel (`sftp_download_link`, then a GET
/// written to a file), alternated, `rounds` each. Target: the link at ≥ 0.9× `termind get`.
func downloadRow(mib: Int, rounds: Int, environment: [String: String]) throws {
    let directory = try TemporaryDirectory("termind-mcp-bench-files")
    defer { directory.remove() }
    let sshd = try SSHServerFixture.withNewKey(in: directory, name: "files-id")
    defer { sshd.stop() }
    let serve = try ServeProcess(directory: directory, arguments: [], serveArguments: ["--mcp-listen", "127.0.0.1:0"])
    defer { _ = serve.stop() }
    let termind = FeatureHarness.buildDirectory + "/termind"
    let viaServe = ["--socket", serve.socketPath]
    guard let hostKey = sshd.hostKeys["ssh-ed25519"] else { throw TermindError(code: "bench.setup", message: "no host key") }
    for setup in [["vault", "key", "import", directory.file("files-id"), "--label", "bench"], ["vault", "identity", "add", NSUserName(), "--key", "bench"],
                  ["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(sshd.port)", "--identity", NSUserName()],
                  ["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(sshd.port)"]] {
        let result = try ProcessRunner.run(termind, viaServe + setup, environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.setup", message: "\(setup.joined(separator: " ")): \(result.stderr)") }
    }
    let source = directory.file("source.bin")
    _ = FileManager.default.createFile(atPath: source, contents: nil)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: source))
    let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
    for _ in 0..<mib { handle.write(block) }
    try handle.close()
    let token = try JSONCoding.parse(Data(try ProcessRunner.run(termind, viaServe + ["--json", "mcp", "token", "show"], environment: environment).stdout.utf8), source: "token")["token"]?.stringValue ?? ""
    let url = try JSONCoding.parse(Data(try ProcessRunner.run(termind, viaServe + ["--json", "mcp", "status"], environment: environment).stdout.utf8), source: "status")["url"]?.stringValue ?? ""
    guard let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") else { throw TermindError(code: "bench.status", message: url) }
    let mcp = try HTTPDriver(port: port, headers: ["Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer \(token)"])
    let (_, fields, _) = try mcp.post(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#)
    mcp.headers["Mcp-Session-Id"] = fields["mcp-session-id"] ?? ""
    mcp.headers["MCP-Protocol-Version"] = "2025-11-25"
    let size = UInt64(mib) << 20
    /// Each way's peak resident memory over the rounds (MiB): serve's during its transfers,
    /// and for `termind get` its client's too.
    var peaks = (get: 0.0, link: 0.0)
    /// Each round's CPU seconds: serve's, sshd's (its session processes too) and the
    /// client's (`termind get`'s process; for the link, this thread receiving and writing).
    var cpu: (get: [(serve: Double, sshd: Double, client: Double)], link: [(serve: Double, sshd: Double, client: Double)]) = ([], [])
    func sides() -> (serve: Double, sshd: Double) {
        (ProcessCPU.seconds(of: serve.process.pid), sshd.liveServerCPUSeconds() ?? 0)
    }
    /// `measured`: GNU time in front, for the client's peak (untimed runs only: it would add
    /// to this side's time and not the link's).
    func viaGet(measured: Bool = false) throws -> Double {
        let target = directory.file("got.bin")
        try? FileManager.default.removeItem(atPath: target)
        ProcessMemory.resetPeak(of: serve.process.pid)
        let before = sides()
        let start = now()
        let result = try ProcessRunner.run(termind, viaServe + ["get", "box:\(source)", target], environment: environment, measured: measured)
        let wall = now() - start
        let after = sides()
        if !measured { cpu.get.append((after.serve - before.serve, after.sshd - before.sshd, result.cpuSeconds)) }
        peaks.get = max(peaks.get, result.peakResidentMiB ?? 0, ProcessMemory.peakMiB(of: serve.process.pid) ?? 0)
        let got = (try? FileManager.default.attributesOfItem(atPath: target)[.size] as? UInt64) ?? 0
        guard result.status == 0, got == size else { throw TermindError(code: "bench.get", message: "termind get: \(result.status) \(got) bytes \(result.stderr)") }
        return wall
    }
    func viaLink(_ round: Int) throws -> Double {
        let target = directory.file("linked.bin")
        try? FileManager.default.removeItem(atPath: target)
        ProcessMemory.resetPeak(of: serve.process.pid)
        let before = sides(), clientBefore = ProcessCPU.thisThread()
        let start = now()
        let (_, _, answer) = try mcp.post(#"{"jsonrpc":"2.0","id":\#(round + 1),"method":"tools/call","params":{"name":"sftp_download_link","arguments":{"host":"box","path":"\#(source)"}}}"#)
        let result = try JSONCoding.parse(Data(answer.utf8), source: "link")["result"]
        guard let capability = result?["structuredContent"]?["headers"]?["Termind-Capability"]?.stringValue else { throw TermindError(code: "bench.link", message: answer) }
        // A GET whose body goes to a file as it arrives.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let request = Array("GET /files/download HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nTermind-Capability: \(capability)\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
        let out = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        defer { close(out) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var head = Data()
        var body: UInt64 = 0
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            if head.isEmpty || head.range(of: Data("\r\n\r\n".utf8)) == nil {
                head.append(contentsOf: buffer[0..<n])
                if let end = head.range(of: Data("\r\n\r\n".utf8)) {
                    let rest = head[end.upperBound...]
                    _ = rest.withUnsafeBytes { write(out, $0.baseAddress, $0.count) }
                    body += UInt64(rest.count)
                }
                continue
            }
            var written = 0
            while written < n { written += buffer.withUnsafeBytes { write(out, $0.baseAddress! + written, n - written) } }
            body += UInt64(n)
        }
        let wall = now() - start
        let after = sides()
        cpu.link.append((after.serve - before.serve, after.sshd - before.sshd, ProcessCPU.thisThread() - clientBefore))
        peaks.link = max(peaks.link, ProcessMemory.peakMiB(of: serve.process.pid) ?? 0)
        guard body == size else { throw TermindError(code: "bench.link", message: "the link delivered \(body) of \(size) bytes") }
        return wall
    }
    var gets: [Double] = [], links: [Double] = []
    for round in 0..<rounds {
        gets.append(try viaGet())
        links.append(try viaLink(round))
    }
    // One more get, untimed, for its client's peak.
    _ = try viaGet(measured: true)
    let median = { (v: [Double]) in v.sorted()[v.count / 2] }
    let mb = Double(size) / 1e6
    print("download \(mib) MiB from a saved host on loopback, \(rounds) rounds alternated (wall s min/median/max, MB/s at the median):")
    print("  termind get (inside serve)     \(String(format: "%.2f/%.2f/%.2f", gets.min()!, median(gets), gets.max()!))   \(String(format: "%.0f", mb / median(gets)))")
    print("  sftp_download_link + GET       \(String(format: "%.2f/%.2f/%.2f", links.min()!, median(links), links.max()!))   \(String(format: "%.0f", mb / median(links)))")
    let gib = Double(size) / Double(1 << 30)
    for (name, rows) in [("termind get", cpu.get), ("the link", cpu.link)] {
        print("  CPU s/GiB, median of rounds, \(name): serve \(String(format: "%.2f", median(rows.map(\.serve)) / gib)), sshd \(String(format: "%.2f", median(rows.map(\.sshd)) / gib)), client \(String(format: "%.2f", median(rows.map(\.client)) / gib))")
    }
    let ratio = median(gets) / median(links)
    print("target: the link ≥ 0.9× termind get's throughput: \(String(format: "%.2f", ratio))× (\(ratio >= 0.9 ? "met" : "missed")); "
          + "peak RSS \(BenchmarkFigure.mebibytes(peaks.link)) (link: serve) / \(BenchmarkFigure.mebibytes(peaks.get)) (termind get: serve and its client)")
}


func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
}

do {
    let directory = try TemporaryDirectory("termind-mcp-bench")
    defer { directory.remove() }
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = directory.file("home")
    for name in ["TERMIND_SOCKET", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] { environment[name] = nil }
    let termind = FeatureHarness.buildDirectory + "/termind"
    let location = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
    var hosts: [JSONValue] = []
    for (label, address, tags) in [("web-1", "10.0.0.7", ["prod"]), ("web-2", "10.0.0.8", ["prod"]), ("gpu-box", "10.0.0.9", [String]())] {
        let result = try ProcessRunner.run(termind, location + ["vault", "host", "add", address, "--label", label] + (tags.isEmpty ? [] : ["--tags", tags.joined(separator: ",")]),
                                           environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.setup", message: result.stderr) }
        hosts.append(.object(["label": .string(label), "address": .string(address), "port": .integer(22), "user": .null, "tags": .array(tags.map { .string($0) })]))
    }
    let python = try LocalModel.python()
    let reference = Repository.path("Tests/Peers/mcp_reference_server.py")
    let hostsJSON = String(decoding: try JSONCoding.encode(JSONValue.array(hosts)), as: UTF8.self)
    var ours: [Double] = [], theirs: [Double] = []
    var oursRate: [Double] = [], theirsRate: [Double] = []
    var serverCPU: ([Double], [Double]) = ([], [])
    var stdioPeaks = (ours: 0.0, theirs: 0.0)
    for _ in 0..<rounds {
        // Throughput over the calls themselves (one after another): start-up is not counted.
        let t = try Driver(termind, location + ["mcp"], environment: environment)
        let tl = try measure(t, count: calls)
        oursRate.append(Double(calls) / tl.latencies.reduce(0, +))
        serverCPU.0.append(tl.cpu / Double(calls))
        // Its peak so far (VmHWM) before it ends.
        stdioPeaks.ours = max(stdioPeaks.ours, ProcessMemory.peakMiB(of: t.process.pid) ?? 0)
        t.stop()
        ours += tl.latencies
        let r = try Driver(python, [reference, hostsJSON], environment: environment)
        let rl = try measure(r, count: calls)
        theirsRate.append(Double(calls) / rl.latencies.reduce(0, +))
        serverCPU.1.append(rl.cpu / Double(calls))
        stdioPeaks.theirs = max(stdioPeaks.theirs, ProcessMemory.peakMiB(of: r.process.pid) ?? 0)
        r.stop()
        theirs += rl.latencies
    }
    // Over HTTP: one termind serve (its listener) and one reference server for all rounds.
    let serveDirectory = try TemporaryDirectory("termind-mcp-bench-serve")
    defer { serveDirectory.remove() }
    let serve = try ServeProcess(directory: serveDirectory, arguments: [], serveArguments: ["--mcp-listen", "127.0.0.1:0"])
    defer { _ = serve.stop() }
    let viaSocket = ["--socket", serve.socketPath]
    for (label, address, tags) in [("web-1", "10.0.0.7", ["prod"]), ("web-2", "10.0.0.8", ["prod"]), ("gpu-box", "10.0.0.9", [String]())] {
        let result = try ProcessRunner.run(termind, viaSocket + ["vault", "host", "add", address, "--label", label] + (tags.isEmpty ? [] : ["--tags", tags.joined(separator: ",")]),
                                           environment: environment)
        guard result.status == 0 else { throw TermindError(code: "bench.setup", message: result.stderr) }
    }
    let token = try JSONCoding.parse(Data(try ProcessRunner.run(termind, viaSocket + ["--json", "mcp", "token", "show"], environment: environment).stdout.utf8), source: "token")["token"]?.stringValue ?? ""
    let listening = try JSONCoding.parse(Data(try ProcessRunner.run(termind, viaSocket + ["--json", "mcp", "status"], environment: environment).stdout.utf8), source: "status")["url"]?.stringValue ?? ""
    guard let termindPort = Int(listening.split(separator: ":").last?.split(separator: "/").first ?? "") else { throw TermindError(code: "bench.status", message: "no MCP listener: \(listening)") }
    let referenceHTTP = try SpawnedProcess(python, [reference, hostsJSON, "--http"], environment: environment, captureOutput: true)
    defer { referenceHTTP.signal(SIGTERM); _ = referenceHTTP.wait() }
    guard let portLine = referenceHTTP.readOutput(until: "\n", timeout: 60), let referencePort = Int(portLine.trimmingCharacters(in: .whitespacesAndNewlines)) else {
        throw TermindError(code: "bench.reference", message: "the reference HTTP server printed no port")
    }
    Thread.sleep(forTimeInterval: 1)  // uvicorn's lifespan start
    var oursHTTP: [Double] = [], theirsHTTP: [Double] = []
    var oursHTTPRate: [Double] = [], theirsHTTPRate: [Double] = []
    var httpCPU: ([Double], [Double]) = ([], [])
    let jsonHeaders = ["Content-Type": "application/json", "Accept": "application/json, text/event-stream"]
    ProcessMemory.resetPeak(of: serve.process.pid); ProcessMemory.resetPeak(of: referenceHTTP.pid)
    for _ in 0..<rounds {
        let t = try measureHTTP(HTTPDriver(port: termindPort, headers: jsonHeaders.merging(["Authorization": "Bearer \(token)"]) { $1 }), pid: serve.process.pid, count: calls)
        oursHTTP += t.latencies
        oursHTTPRate.append(Double(calls) / t.latencies.reduce(0, +))
        httpCPU.0.append(t.cpu / Double(calls))
        let r = try measureHTTP(HTTPDriver(port: referencePort, headers: jsonHeaders), pid: referenceHTTP.pid, count: calls)
        theirsHTTP += r.latencies
        theirsHTTPRate.append(Double(calls) / r.latencies.reduce(0, +))
        httpCPU.1.append(r.cpu / Double(calls))
    }
    let httpPeaks = (ours: ProcessMemory.peakMiB(of: serve.process.pid) ?? 0, theirs: ProcessMemory.peakMiB(of: referenceHTTP.pid) ?? 0)

    func ms(_ v: Double) -> String { String(format: "%.3f", v * 1000) }
    let median = { (v: [Double]) in v.sorted()[v.count / 2] }
    func row(_ name: String, _ latencies: [Double], _ rates: [Double], _ cpu: [Double]) {
        print("\(name.padding(toLength: 30, withPad: " ", startingAt: 0)) \(ms(percentile(latencies, 0.5)).padding(toLength: 11, withPad: " ", startingAt: 0)) \(ms(percentile(latencies, 0.99)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(String(format: "%.0f", median(rates)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(ms(median(cpu)))")
    }
    print("termind-mcp-bench: tools/call list_hosts, \(calls) calls × \(rounds) rounds each, one after another, alternated")
    print("                               median ms   p99 ms    calls/s   server CPU ms/call")
    row("stdio: termind mcp", ours, oursRate, serverCPU.0)
    row("stdio: python MCPServer", theirs, theirsRate, serverCPU.1)
    row("http: termind serve", oursHTTP, oursHTTPRate, httpCPU.0)
    row("http: python MCPServer+uvicorn", theirsHTTP, theirsHTTPRate, httpCPU.1)
    for (name, ourRates, theirRates, latencies, peaks, processes) in [("stdio", oursRate, theirsRate, ours, stdioPeaks, "termind mcp / python"),
                                                                      ("http", oursHTTPRate, theirsHTTPRate, oursHTTP, httpPeaks, "termind serve / python")] {
        let ratio = median(ourRates) / median(theirRates)
        let p99 = percentile(latencies, 0.99)
        print("\(name): target ≥ 5× the reference's throughput: \(String(format: "%.2f", ratio))× (\(ratio >= 5 ? "met" : "missed")); p99 ≤ 5 ms: \(ms(p99)) ms (\(p99 <= 0.005 ? "met" : "missed")); "
              + "peak RSS \(BenchmarkFigure.mebibytes(peaks.ours)) / \(BenchmarkFigure.mebibytes(peaks.theirs)) (\(processes))")
    }
    if downloadMiB > 0 { try downloadRow(mib: downloadMiB, rounds: max(2, min(rounds, 3)), environment: environment) }
} catch {
    FileHandle.standardError.write(Data("termind-mcp-bench: \(TermindError.from(error).message)\n".utf8))
    exit(1)
}
