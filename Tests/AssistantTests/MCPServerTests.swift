import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind mcp` against the official MCP SDK (PyPI `mcp` 2.3.x) as its client, over stdio,
/// with a real sshd behind the tools. Conformance scenarios covered: `initialize`,
/// `tools_list`, `tools_call`, and the SDK's `auto` era probe (`server/discover`) choosing the
/// stateless 2026-07-28 era (`request-metadata`: every request carries its `_meta` envelope).
final class MCPServerTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var sshd: SSHServerFixture!

    private var serve: ServeProcess?

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        sshd = try SSHServerFixture.withNewKey(in: directory)
        try configure()
    }

    /// Saved hosts web-1 (tag prod, read-only) and lab on the sshd, trusted.
    private func configure() throws {
        try AssistantHosts.save(on: sshd, key: directory.file("id")) { try ok($0) }
        try ok(["assistant", "tier", "--tag", "prod", "read-only"])
    }

    override func tearDown() {
        _ = serve?.stop()
        sshd?.stop()
        directory?.remove()
    }

    private var environment: [String: String] { ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock")) }
    private var termindArgv: [String] {
        [FeatureHarness.buildDirectory + "/termind"] + (serve.map { ["--socket", $0.socketPath] } ?? ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")])
    }

    @discardableResult
    private func ok(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try ProcessRunner.run(termindArgv[0], Array(termindArgv.dropFirst()) + arguments, environment: environment)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stdout)\(result.stderr)", file: file, line: line)
        return result
    }

    /// The SDK's client in `mode`, calling `calls` ([name, arguments]); its report.
    private func client(mode: String, _ calls: [(String, JSONValue)]) throws -> JSONValue {
        let list = JSONValue.array(calls.map { .array([.string($0.0), $0.1]) })
        let result = try ProcessRunner.run(try LocalModel.python(), [Repository.path("Tests/Peers/mcp_client.py"), mode,
                                                                      String(decoding: try JSONCoding.encode(list), as: UTF8.self), "--"] + termindArgv + ["mcp"],
                                           environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        return try JSONCoding.parse(Data((result.stdout.split(separator: "\n").last.map(String.init) ?? "").utf8), source: "mcp_client.py: \(result.stderr)")
    }

    func testTheOfficialSDKListsAndCallsTheToolsUnderTheSamePolicyInBothConnectModes() throws {
        let victim = directory.file("victim")
        try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: true)
        for mode in ["legacy", "auto"] {
            let report = try client(mode: mode, [
                ("list_hosts", .object([:])),
                ("ssh_exec", .object(["host": .string("web-1"), "command": .string("uname -s; id -un")])),
                ("ssh_exec", .object(["host": .string("web-1"), "command": .string("rm -rf \(victim)")])),
                ("ssh_exec", .object(["host": .integer(5)])),
                ("ssh_exec", .object(["host": .string("lab"), "command": .string("touch \(directory.file("made-\(mode)"))")])),
            ])
            // legacy: the handshake; auto: server/discover, then the stateless era.
            XCTAssertEqual(report["sessionVersion"], .string(mode == "legacy" ? "2025-11-25" : "2026-07-28"), mode)
            XCTAssertEqual(report["discovered"], .bool(mode == "auto"), mode)
            let tools = report["tools"]?.arrayValue ?? []
            let exec = tools.first { $0["name"] == .string("ssh_exec") }
            XCTAssertEqual(exec?["annotations"]?["destructiveHint"], .bool(true))
            XCTAssertEqual(exec?["required"], .array([.string("host"), .string("command")]))
            XCTAssertEqual(tools.first { $0["name"] == .string("list_hosts") }?["annotations"]?["readOnlyHint"], .bool(true))
            let calls = report["calls"]?.arrayValue ?? []
            XCTAssertEqual(calls.map { $0["isError"] }, [.bool(false), .bool(false), .bool(true), .bool(true), .bool(true)], "\(mode): \(calls)")
            let text = calls.map { $0["text"]?.stringValue ?? "" }
            XCTAssertTrue(text[0].contains("\"label\":\"web-1\"") && !text[0].contains("identity"), text[0])
            // Data that matches the declared output schema (the SDK checks it against it).
            XCTAssertEqual(Set(calls[0]["structured"]?["hosts"]?.arrayValue?.compactMap { $0["label"]?.stringValue } ?? []), ["web-1", "lab"], "\(calls[0])")
            XCTAssertEqual(tools.first { $0["name"] == .string("list_hosts") }?["outputSchema"], .bool(true))
            XCTAssertEqual(tools.first { $0["name"] == .string("ssh_exec") }?["outputSchema"], .bool(false))
            XCTAssertEqual(calls[2]["structured"], .null, "no data with an error")
            XCTAssertTrue(text[1].contains("Linux") && text[1].contains(NSUserName()), text[1])
            XCTAssertTrue(text[2].contains("read-only"), text[2])
            XCTAssertTrue(text[3].contains("do not fit ssh_exec"), "a schema misfit is a tool error: \(text[3])")
            XCTAssertTrue(text[4].contains("did not approve"), "nobody to ask: refused, never approved: \(text[4])")
            XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("made-\(mode)")))
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: victim))
        // The audit names the MCP session as the conversation.
        let audit = try ok(["--json", "assistant", "audit"]).stdout
        XCTAssertTrue(audit.contains("\"conversation\":\"mcp-stdio-"), audit)
    }

    func testInsideServeWhatNeedsAPersonWaitsForMCPApprovalsAndUnansweredIsRefused() throws {
        serve = try ServeProcess(directory: directory, arguments: [])
        try configure()
        try ok(["settings", "set", "assistant.policy", #"{"approvalTimeoutSeconds": 3}"#])
        let made = directory.file("made"), unanswered = directory.file("unanswered")
        // The SDK's client waits on a call that needs an approval; a person answers it from another terminal.
        let calls = JSONValue.array([.array([.string("ssh_exec"), .object(["host": .string("lab"), "command": .string("touch \(made)")])])])
        let waiting = try SpawnedProcess(try LocalModel.python(), [Repository.path("Tests/Peers/mcp_client.py"), "legacy",
                                                                  String(decoding: try JSONCoding.encode(calls), as: UTF8.self), "--"] + termindArgv + ["mcp"],
                                        environment: environment, captureOutput: true)
        let report = try PseudoTerminal.run(termindArgv + ["mcp", "approvals", "--count", "1"],
                                            steps: [.expect("MCP session mcp-stdio-"), .expect("Allow it?"), .send("o\r")], environment: environment)
        XCTAssertEqual(report.met, [true, true], report.output)
        XCTAssertEqual(report.status, 0, report.output)
        let line = waiting.readOutput(until: "}", timeout: 60) ?? ""
        XCTAssertEqual(waiting.wait(), 0)
        let answered = try JSONCoding.parse(Data(line.trimmingCharacters(in: .whitespacesAndNewlines).utf8), source: "mcp_client.py")
        XCTAssertEqual(answered["calls"]?.arrayValue?.first?["isError"], .bool(false), line)
        XCTAssertTrue(FileManager.default.fileExists(atPath: made))
        XCTAssertEqual(try ok(["--json", "assistant", "audit"]).stdout.components(separatedBy: #""decider":"person""#).count - 1, 1)
        // Nobody attached: refused after the timeout, never approved.
        let started = Date()
        let alone = try client(mode: "legacy", [("ssh_exec", .object(["host": .string("lab"), "command": .string("touch \(unanswered)")]))])
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 3)
        XCTAssertEqual(alone["calls"]?.arrayValue?.first?["isError"], .bool(true))
        XCTAssertFalse(FileManager.default.fileExists(atPath: unanswered))
    }

    func testCallsRunAtOnceAPingIsAnsweredMeanwhileAndACancelledCallGetsNoAnswer() throws {
        let server = try SpawnedProcess(termindArgv[0], Array(termindArgv.dropFirst()) + ["mcp"], environment: environment, captureOutput: true)
        func send(_ line: String) { server.writeInput(Data((line + "\n").utf8)) }
        send(#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#)
        XCTAssertNotNil(server.readOutput(until: "2025-06-18", timeout: 30))
        let started = Date()
        send(#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ssh_exec","arguments":{"host":"lab","command":"sleep 2; echo slow"}}}"#)
        send(#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ssh_exec","arguments":{"host":"lab","command":"sleep 30; echo never"}}}"#)
        send(#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#)
        let ping = server.readOutput(until: "\"id\":4", timeout: 10) ?? ""
        XCTAssertFalse(ping.contains("slow"), "the ping was answered while the calls ran: \(ping)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5)
        send(#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user"}}"#)
        let slow = server.readOutput(until: "slow", timeout: 20) ?? ""
        XCTAssertTrue(slow.contains("\"id\":2"), slow)
        server.closeInput()
        let (rest, _) = server.readAll()
        XCTAssertEqual(server.wait(), 0)
        XCTAssertFalse(String(decoding: rest, as: UTF8.self).contains("\"id\":3"), "a cancelled call is not answered")
        XCTAssertLessThan(Date().timeIntervalSince(started), 15, "the cancelled 30 s call was stopped")
    }

    func testMalformedMessagesGetJSONRPCErrorsAndTheSessionGoesOn() throws {
        let lines = [
            "not json",
            #"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            #"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            #"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#,
            #"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            #"{"jsonrpc":"2.0","id":4,"method":"server/discover"}"#,
            #"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
            #"{"jsonrpc":"1.0","id":6,"method":"ping"}"#,
            #"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
        ]
        let result = try ProcessRunner.run(termindArgv[0], Array(termindArgv.dropFirst()) + ["mcp"], environment: environment, stdin: lines.joined(separator: "\n") + "\n")
        XCTAssertEqual(result.status, 0, result.stderr)
        let replies = result.stdout.split(separator: "\n").map { try? JSONCoding.parse(Data($0.utf8), source: "reply") }
        XCTAssertEqual(replies.count, 8, "one answer per request, none for the notification: \(result.stdout)")
        // A tool call is answered when it is done, so answers are matched by id.
        let byID = Dictionary(replies.compactMap { reply in reply.map { ($0["id"].map { String(describing: $0) } ?? "none", $0) } }, uniquingKeysWith: { first, _ in first })
        XCTAssertEqual(replies.prefix(3).map { $0?["error"]?["code"] }, [.integer(-32700), .integer(-32600), .integer(-32600)])
        XCTAssertEqual(replies.prefix(3).map { $0?["id"] }, [.null, .null, .integer(2)])
        XCTAssertEqual(byID[String(describing: JSONValue.integer(3))]?["result"]?["protocolVersion"], .string("2025-11-25"), "an unknown version is answered with termind's newest")
        XCTAssertEqual(byID[String(describing: JSONValue.integer(4))]?["error"]?["code"], .integer(-32601), "no discover in a handshake session")
        XCTAssertEqual(byID[String(describing: JSONValue.integer(5))]?["error"]?["code"], .integer(-32602), "an unknown tool")
        XCTAssertEqual(byID[String(describing: JSONValue.integer(6))]?["error"]?["code"], .integer(-32600))
        XCTAssertEqual(byID[String(describing: JSONValue.integer(7))]?["result"], .object([:]))
    }
}
