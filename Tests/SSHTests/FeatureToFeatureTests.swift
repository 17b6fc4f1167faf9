import Foundation
import TermindCore
import TermindHarness
import XCTest

/// A feature uses other features' work through the kernel, against a real sshd: it runs
/// `workspaces.exec@1` (a stream of another feature) and queues a transfer through the SFTP
/// scheduler's port, seeing the output, the progress and the result.
final class FeatureToFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("termind-f2f")
        server = try SSHServerFixture.withNewKey(in: directory)
        // The saved host `box`, in the store the kernel below opens.
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        environment["TERMIND_STORE"] = directory.file("termind.sqlite")
        environment["TERMIND_SECRETS"] = directory.file("secrets.sqlite")
        environment["TERMIND_SECRETS_KEY"] = directory.file("secrets.key")
        try TermindCLI(environment: environment).saveHosts(["box"], server: server, key: directory.file("id"))
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private func boot(calls: [String], policy: Bool = false) async throws -> HarnessSession {
        let agent = FeatureManifest(id: "fixture-agent", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixtureAgent"), order: 90,
                                    ports: .init(optional: ["sftp.scheduler"]),
                                    contracts: ["fixture-agent.chain@1", "fixture-agent.relay@1", "fixture-agent.transfer@1"], streams: ["fixture-agent.run@1"],
                                    calls: calls, source: "test")
        var others = try ["vault", "settings", "sftp", "workspaces"].map { try FeatureHarness.registryManifest(id: $0) }
        if policy {
            others.append(FeatureManifest(id: "fixture-policy", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixturePolicy"), order: 5,
                                          ports: .init(provides: ["kernel.policy"]), contracts: ["fixture-policy.script@1"], source: "test"))
        }
        return try await FeatureHarness.boot(agent, others: others, storeDirectory: directory.path)
    }

    func testAFeatureRunsExecOnAHostThroughTheKernel() async throws {
        let session = try await boot(calls: ["workspaces.exec@1"])
        defer { Task { await session.shutdown() } }
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
        let body = String(decoding: try JSONCoding.encode(["target": "box", "command": "echo fixture-$((6*7))"]), as: UTF8.self)
        let request = String(decoding: try JSONCoding.encode(["contract": JSONValue.string("workspaces.exec@1"), "body": .string(body), "stream": .bool(true)]), as: UTF8.self)
        let reply = try JSONCoding.parse(try await session.call("fixture-agent.relay@1", json: request), source: "relay")
        XCTAssertNil(reply["errorCode"], reply["errorMessage"]?.stringValue ?? "")
        XCTAssertEqual(reply["output"]?.stringValue, "fixture-42\n")
        XCTAssertEqual(try JSONCoding.parse(Data((reply["reply"]?.stringValue ?? "").utf8), source: "result")["exitStatus"], .integer(0))
        // Without it among its calls, the same run is refused.
        await session.shutdown()
        let limited = try await boot(calls: [])
        let refused = try JSONCoding.parse(try await limited.call("fixture-agent.relay@1", json: request), source: "relay")
        XCTAssertEqual(refused["errorCode"]?.stringValue, "capability.denied")
        await limited.shutdown()
    }

    func testAFeatureQueuesATransferThroughTheSchedulersPortAndSeesItsProgress() async throws {
        let session = try await boot(calls: [])
        defer { Task { await session.shutdown() } }
        let local = directory.file("up.bin")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["rand", "-out", local, String(4 << 20)]).status, 0)
        let remote = directory.file("landing")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        let request = String(decoding: try JSONCoding.encode(["sources": JSONValue.array([.string(local)]), "destination": .string("box:" + remote + "/")]), as: UTF8.self)
        let reply = try JSONCoding.parse(try await session.call("fixture-agent.transfer@1", json: request), source: "transfer")
        let progress = reply["progress"]?.arrayValue?.compactMap { value -> Int64? in if case .integer(let n) = value { n } else { nil } } ?? []
        XCTAssertEqual(progress.last, Int64(4 << 20), "the last progress is the whole file: \(reply)")
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: remote + "/up.bin")[.size] as? Int, 4 << 20)
        let result = try JSONCoding.parse(Data((reply["result"]?.stringValue ?? "").utf8), source: "result")
        XCTAssertEqual(result["copied"], .integer(1), "\(reply)")
        XCTAssertEqual(result["bytes"], .integer(4 << 20))
        XCTAssertEqual(result["exitStatus"], .integer(0))
    }

    func testThePolicyDecidesOnWhatEachRequestDoesNotOnTheWorstItsOperationMay() async throws {
        let session = try await boot(calls: ["sftp.run@1", "sftp.transfer@1"], policy: true)
        defer { Task { await session.shutdown() } }
        _ = try await session.call("fixture-policy.script@1", json: #"{"fallback": "allow", "decisions": {"sftp.transfer@1": "deny"}}"#)
        for action in ["ls", "mkdir", "rmdir"] {
            let path = directory.file("made-by-agent")
            let body = String(decoding: try JSONCoding.encode(["target": JSONValue.string("box"), "action": .string(action), "paths": .array([.string(action == "ls" ? "/" : path)])]),
                              as: UTF8.self)
            let request = String(decoding: try JSONCoding.encode(["contract": JSONValue.string("sftp.run@1"), "body": .string(body), "stream": .bool(true),
                                                                  "agent": .string("conversation 1")]), as: UTF8.self)
            let reply = try JSONCoding.parse(try await session.call("fixture-agent.relay@1", json: request), source: "relay")
            XCTAssertNil(reply["errorCode"], "\(action): \(reply)")
        }
        // The hosts a request reaches, as the feature itself reads them (scp's rules), for the
        // policy to resolve; a local path is none.
        let transfer = String(decoding: try JSONCoding.encode(["sources": JSONValue.array([.string("box:/etc/hostname"), .string("alice@db:logs"), .string("./local:file")]),
                                                              "destination": .string("scp://bob@[::1]:2222/tmp"), "conflict": .string("skip")]), as: UTF8.self)
        let relayed = String(decoding: try JSONCoding.encode(["contract": JSONValue.string("sftp.transfer@1"), "body": .string(transfer), "stream": .bool(true),
                                                              "agent": .string("conversation 1")]), as: UTF8.self)
        let refused = try JSONCoding.parse(try await session.call("fixture-agent.relay@1", json: relayed), source: "relay")
        XCTAssertEqual(refused["errorCode"], .string("policy.denied"), "\(refused)")
        let seen = try JSONCoding.parse(try await session.call("fixture-policy.script@1", json: "{}"), source: "seen")["seen"]?.arrayValue ?? []
        XCTAssertEqual(seen.compactMap { $0["effect"]?.stringValue }, ["read+network", "write+network", "destructive+network", "write+network"])
        XCTAssertEqual(seen.map { $0["hosts"]?.arrayValue?.compactMap(\.stringValue) ?? [] }, [["box"], ["box"], ["box"], ["box", "alice@db", "bob@::1"]])
    }

    func testCancellingAFeaturesRunOfAnotherFeaturesStreamEndsTheRemoteCommand() async throws {
        // sshd delivers signal requests only to unprivileged users' sessions.
        try XCTSkipUnless(getuid() == 0, "needs root to create a throwaway account")
        let throwaway = try ThrowawayAccount()
        defer { throwaway.remove() }
        chmod(server.directory.file("authorized_keys"), 0o644)
        chmod(directory.path, 0o777)
        let marker = directory.file("cancelled")
        let tag = "sleep 39.\(Int.random(in: 100_000...999_999))"
        let script = "exec 2>/dev/null; trap 'echo TERM > \(marker); exit 0' TERM; \(tag)"
        let session = try await boot(calls: ["workspaces.exec@1"])
        defer { Task { await session.shutdown() } }
        let target = "ssh -p \(server.port) -i \(directory.file("id")) \(throwaway.name)@127.0.0.1"
        let body = String(decoding: try JSONCoding.encode(["target": target, "command": script, "acceptHostKey": "once"]), as: UTF8.self)
        let request = String(decoding: try JSONCoding.encode(["contract": JSONValue.string("workspaces.exec@1"), "body": .string(body), "stream": .bool(true)]), as: UTF8.self)
        let running = Task { try await session.call("fixture-agent.relay@1", json: request) }
        func runs() -> Bool { ((try? ProcessRunner.run("/usr/bin/pgrep", ["-u", throwaway.name, "-f", tag]))?.status ?? 1) == 0 }
        XCTAssertTrue(waitUntil(seconds: 20) { runs() }, "the remote command never started")
        // The feature gives up (its task is cancelled): the remote command gets TERM.
        running.cancel()
        _ = try? await running.value
        XCTAssertTrue(waitUntil(seconds: 20) { (try? String(contentsOfFile: marker, encoding: .utf8))?.contains("TERM") == true },
                      "the remote command got no TERM: \(server.log)")
        XCTAssertTrue(waitUntil(seconds: 20) { !runs() }, "the remote command outlived its cancelled run")
    }
}
