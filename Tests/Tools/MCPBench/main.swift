import Foundation
import TermindCore
import TermindHarness

// termind-mcp-bench: `tools/call` of a read-only tool (`list_hosts`, three saved hosts) N
// times (2,000 by default) over stdio, one after another, by one raw JSON-RPC driver (this
// process: a line written, its answer read), against `termind mcp` and against the official
// Python SDK's own `MCPServer` exposing an equivalent tool, in the same run, alternated in
// rounds. Printed: median and p99 latency per call, calls per second, and the ratio.
// Target (issue 38): ≥ 5× the reference server's throughput, p99 ≤ 5 ms.

var calls = 2000
var rounds = 3
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--calls": calls = arguments.popFirst().flatMap(Int.init) ?? calls
    case "--rounds": rounds = arguments.popFirst().flatMap(Int.init) ?? rounds
    default:
        FileHandle.standardError.write(Data("usage: termind-mcp-bench [--calls N] [--rounds N]\n".utf8))
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
    for _ in 0..<rounds {
        // Throughput over the calls themselves (one after another): start-up is not counted.
        let t = try Driver(termind, location + ["mcp"], environment: environment)
        let tl = try measure(t, count: calls)
        oursRate.append(Double(calls) / tl.latencies.reduce(0, +))
        serverCPU.0.append(tl.cpu / Double(calls))
        t.stop()
        ours += tl.latencies
        let r = try Driver(python, [reference, hostsJSON], environment: environment)
        let rl = try measure(r, count: calls)
        theirsRate.append(Double(calls) / rl.latencies.reduce(0, +))
        serverCPU.1.append(rl.cpu / Double(calls))
        r.stop()
        theirs += rl.latencies
    }
    func ms(_ v: Double) -> String { String(format: "%.3f", v * 1000) }
    let median = { (v: [Double]) in v.sorted()[v.count / 2] }
    print("termind-mcp-bench: tools/call list_hosts over stdio, \(calls) calls × \(rounds) rounds each, one after another, alternated")
    print("                       median ms   p99 ms    calls/s   server CPU ms/call")
    print("termind mcp            \(ms(percentile(ours, 0.5)).padding(toLength: 11, withPad: " ", startingAt: 0)) \(ms(percentile(ours, 0.99)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(String(format: "%.0f", median(oursRate)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(ms(median(serverCPU.0)))")
    print("python MCPServer       \(ms(percentile(theirs, 0.5)).padding(toLength: 11, withPad: " ", startingAt: 0)) \(ms(percentile(theirs, 0.99)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(String(format: "%.0f", median(theirsRate)).padding(toLength: 9, withPad: " ", startingAt: 0)) \(ms(median(serverCPU.1)))")
    let ratio = median(oursRate) / median(theirsRate)
    print("target: ≥ 5× the reference's throughput: \(String(format: "%.2f", ratio))× (\(ratio >= 5 ? "met" : "missed")); p99 ≤ 5 ms: \(ms(percentile(ours, 0.99))) ms (\(percentile(ours, 0.99) <= 0.005 ? "met" : "missed"))")
} catch {
    FileHandle.standardError.write(Data("termind-mcp-bench: \(TermindError.from(error).message)\n".utf8))
    exit(1)
}
