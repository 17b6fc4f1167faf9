import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// A name server that never answers (an outage, a firewall dropping DNS) parks every
/// connection attempt in `getaddrinfo` for its whole timeout. Name resolution has executors
/// of its own (`termind.resolve`, `termind.connect`), apart from the database's and the key
/// derivation's, so while 64 attempts wait on it, the Vault and Settings still answer at once.
final class NameOutageTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        try XCTSkipUnless(NetworkChain.isAvailable, "a silent name server needs a network namespace of its own (root and iproute2)")
        directory = try TemporaryDirectory()
    }

    override func tearDown() { directory?.remove() }

    func testVaultAndSettingsAnswerWhileSixtyFourConnectsWaitOnASilentNameServer() throws {
        let chain = try NetworkChain(count: 1)
        defer { chain.teardown() }
        let namespace = chain.name(of: 1)
        // `ip netns exec` mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf: inside
        // the namespace every lookup asks 127.0.0.1, which takes the query and never answers.
        let etc = "/etc/netns/\(namespace)"
        try FileManager.default.createDirectory(atPath: etc, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: etc) }
        try "nameserver 127.0.0.1\noptions timeout:30 attempts:1\n".write(toFile: etc + "/resolv.conf", atomically: true, encoding: .utf8)
        // It counts the queries it takes (and answers none).
        let silent = try chain.spawn(in: 1, "/usr/bin/python3", ["-c", """
            import socket
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 53))
            tcp = socket.socket(); tcp.bind(("127.0.0.1", 53)); tcp.listen(128)
            print("listening", flush=True)
            queries = 0
            while True:
                udp.recvfrom(4096)
                queries += 1
                print(f"query {queries}", flush=True)
            """], captureOutput: true)
        defer { silent.signal(SIGKILL); silent.wait() }
        XCTAssertNotNil(silent.readOutput(until: "listening", timeout: 10), "the silent name server is up")

        let server = try ServeProcess(directory: directory, arguments: [], namespace: namespace)
        defer { server.stop() }
        let client = try ControlClient(path: server.socketPath)
        for index in 0..<64 {
            _ = try client.call("vault.host.add@1", body: try JSONCoding.encode(JSONValue.object([
                "address": .string("h\(index).outage.test"), "label": .string("h\(index)"), "user": .string("nobody")])))
        }
        // 64 connections asked for at once (one `exec` each, through serve).
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        let attempts = try (0..<64).map { index in
            try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", ["--socket", server.socketPath, "exec", "h\(index)", "true"],
                               environment: environment, captureOutput: true)
        }
        defer {
            for attempt in attempts { attempt.signal(SIGKILL) }
            for attempt in attempts { attempt.wait() }
        }
        // Resolution is under way: the name server has taken 16 queries (an A and an AAAA
        // for each lookup, so at least half the resolver's 16 threads are held, the rest
        // following), and each lookup waits on it until termind's 10 s resolve deadline, so
        // for the whole measurement lookups hold the resolver's threads and the rest queue
        // behind them.
        XCTAssertNotNil(silent.readOutput(until: "query 16\n", timeout: 10), "the lookups reach the name server")
        func ended() -> String? {
            guard let ended = attempts.first(where: { !$0.isRunning }) else { return nil }
            let (out, err) = ended.readAll()
            return String(decoding: out + err, as: UTF8.self)
        }
        if let output = ended() { XCTFail("a connection attempt ended while the name server was silent: \(output)") }

        var times: [Double] = []
        for round in 0..<5 {
            for (contract, body) in [("vault.host.list@1", "{}"), ("settings.get@1", #"{"key": "sftp.limits"}"#)] {
                let started = DispatchTime.now().uptimeNanoseconds
                let reply = try JSONCoding.parse(try client.call(contract, body: Data(body.utf8)), source: contract)
                times.append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e6)
                if contract.hasPrefix("vault") { XCTAssertEqual(reply["hosts"]?.arrayValue?.count, 64, "round \(round)") }
            }
        }
        if let output = ended() { XCTFail("the outage lasted through the calls, but an attempt ended: \(output)") }
        // On a loaded machine one call may be slow by chance: the median under 100 ms, none over 1 s.
        let median = times.sorted()[times.count / 2]
        XCTAssertLessThan(median, 100, "the Vault and Settings waited behind name resolution: \(times) ms")
        XCTAssertLessThan(times.max() ?? 0, 1000, "the Vault and Settings waited behind name resolution: \(times) ms")
    }
}
