import AssistantRules
import Foundation
import Synchronization
import TermindCore
import TermindHarness
import XCTest

/// termind as an MCP client: the official SDK's own `MCPServer` (PyPI `mcp` 2.3.x) with a
/// read-only tool and a destructive one (Tests/Peers/mcp_tool_server.py), over stdio and over
/// Streamable HTTP behind a Bearer token, its tools offered to `termind assistant run` (the
/// replay server scripted as the model) as `mcp__SERVER__TOOL` under the policy.
final class MCPClientTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: ReplayServer!
    private var peer: SpawnedProcess?

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        server = try ReplayServer()
        try ok(["assistant", "provider", "add", "p", "--protocol", "chat", "--url", server.url + "/v1"])
        try ok(["assistant", "model", "add", "m1", "--provider", "p", "--model", "model-chat"])
    }

    override func tearDown() {
        peer?.signal(SIGTERM)
        _ = peer?.wait()
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        environment["no_proxy"] = "127.0.0.1,localhost"
        environment["NO_PROXY"] = "127.0.0.1,localhost"
        return environment
    }

    private func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments,
                              environment: environment, stdin: stdin)
    }

    @discardableResult
    private func ok(_ arguments: [String], stdin: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try termind(arguments, stdin: stdin)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stdout)\(result.stderr)", file: file, line: line)
        return result
    }

    private func toolCall(_ name: String, _ arguments: [String: JSONValue], id: String) throws -> ReplayServer.Reply {
        try .toolCall(name, arguments, id: id)
    }

    private func done() -> ReplayServer.Reply { .done() }

    /// What the model was told of the tool call `id`.
    private func told(_ id: String) -> String {
        for request in server.requests.reversed() {
            let messages = (try? request.json()["messages"]?.arrayValue) ?? []
            if let message = messages.last(where: { $0["tool_call_id"] == .string(id) }) { return message["content"]?.stringValue ?? "" }
        }
        return ""
    }

    private func tools() throws -> JSONValue {
        try JSONCoding.parse(Data(try ok(["--json", "assistant", "mcp", "tools"]).stdout.utf8), source: "mcp tools")
    }

    private func rule(_ listing: JSONValue, _ name: String) -> (String?, String?) {
        let tool = listing["tools"]?.arrayValue?.first { $0["name"] == .string(name) }
        return (tool?["rule"]?.stringValue, tool?["ruleFrom"]?.stringValue)
    }

    func testAStdioServersToolsAreOfferedAsMCPToolsAndDecidedByThePolicy() throws {
        let log = directory.file("peer.log")
        try ok(["assistant", "mcp", "add", "peer", "--", try LocalModel.python(), Repository.path("Tests/Peers/mcp_tool_server.py"), "--log", log])
        XCTAssertTrue(try ok(["assistant", "mcp", "list"]).stdout.contains("mcp_tool_server.py"))
        var listing = try tools()
        // The rule before the person sets one: approve only what says read-only and not destructive.
        XCTAssertEqual(rule(listing, "mcp__peer__disk_usage").0, "approve")
        XCTAssertEqual(rule(listing, "mcp__peer__delete_thing").0, "ask")
        XCTAssertEqual(rule(listing, "mcp__peer__delete_thing").1, "hints")
        XCTAssertEqual(listing["versions"]?["peer"], .string("2026-07-28"), "server/discover found the stateless era")

        // The model gets both; the read-only one runs, the destructive one is asked and, with no
        // terminal, refused: the server never sees it.
        server.enqueue(try toolCall("mcp__peer__disk_usage", ["path": .string("/srv")], id: "call_du"),
                       try toolCall("mcp__peer__delete_thing", ["name": .string("db")], id: "call_rm"), done())
        try ok(["assistant", "run", "check the disk, then delete db"])
        let offered = try server.requests.first?.json()["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue } ?? []
        XCTAssertTrue(offered.contains("mcp__peer__disk_usage") && offered.contains("mcp__peer__delete_thing") && offered.contains("ssh_exec"), "\(offered)")
        XCTAssertTrue(told("call_du").contains("/srv: 42% used"), told("call_du"))
        XCTAssertTrue(told("call_rm").contains("did not approve"), told("call_rm"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: log), "the destructive call never reached the server")

        // A call in an answer cut before its end is never made, even in full-access.
        let arguments = String(decoding: try JSONCoding.encode(JSONValue.object(["name": .string("cut")])), as: UTF8.self)
        let cutCall: JSONValue = .object(["choices": .array([.object(["index": .integer(0), "finish_reason": .string("tool_calls"), "delta": .object([
            "tool_calls": .array([.object(["index": .integer(0), "id": .string("call_cut"), "type": .string("function"),
                                           "function": .object(["name": .string("mcp__peer__delete_thing"), "arguments": .string(arguments)])])]),
        ])])])])
        server.enqueue(.stream(ReplayServer.Reply.events([String(decoding: try JSONCoding.encode(cutCall), as: UTF8.self)])), done())  // no [DONE]
        try ok(["assistant", "run", "--mode", "full-access", "delete it"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: log), "the cut answer's call reached the server")

        // full-access pre-approves it.
        server.enqueue(try toolCall("mcp__peer__delete_thing", ["name": .string("cache")], id: "call_rm2"), done())
        try ok(["assistant", "run", "--mode", "full-access", "delete the cache"])
        XCTAssertEqual(try String(contentsOfFile: log, encoding: .utf8), "deleted cache\n")
        XCTAssertTrue(told("call_rm2").contains("deleted cache"))

        // The person's rule wins, and rediscovery keeps it.
        try ok(["settings", "set", "assistant.policy", #"{"tools": {"mcp__peer__disk_usage": "deny", "mcp__peer__delete_thing": "approve"}}"#])
        listing = try tools()
        XCTAssertTrue(rule(listing, "mcp__peer__disk_usage") == ("deny", "person"))
        XCTAssertTrue(rule(listing, "mcp__peer__delete_thing") == ("approve", "person"))
        server.enqueue(try toolCall("mcp__peer__disk_usage", ["path": .string("/")], id: "call_du2"),
                       try toolCall("mcp__peer__delete_thing", ["name": .string("tmp")], id: "call_rm3"), done())
        try ok(["assistant", "run", "again"])
        XCTAssertTrue(told("call_du2").contains("denies"), told("call_du2"))
        XCTAssertEqual(try String(contentsOfFile: log, encoding: .utf8), "deleted cache\ndeleted tmp\n")

        // Audited as any tool: decisions and executions, with who decided.
        let audit = try ok(["--json", "assistant", "audit"]).stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "audit") }
        let rows = audit.filter { $0["tool"]?.stringValue?.hasPrefix("mcp__peer__") == true }
        XCTAssertEqual(rows.filter { $0["event"] == .string("execution") }.count, 3, "\(rows)")
        XCTAssertEqual(rows.filter { $0["decision"] == .string("refused") }.map { $0["decider"] }, [.string("person"), .string("policy")])
        XCTAssertTrue(rows.contains { $0["decider"] == .string("mode") })

        // A misconfigured server is named, and the others still work.
        try ok(["assistant", "mcp", "add", "broken", "--", "/nonexistent/mcp-server"])
        listing = try tools()
        XCTAssertNotNil(listing["problems"]?["broken"], "\(listing)")
        XCTAssertEqual(listing["tools"]?.arrayValue?.count, 2)
        try ok(["assistant", "mcp", "rm", "broken"])

        // A server from before 2026-07-28 (the SDK's handshake-only loop): the probe falls back
        // to initialize, and its tools work the same.
        try ok(["assistant", "mcp", "add", "old", "--", try LocalModel.python(), Repository.path("Tests/Peers/mcp_tool_server.py"), "--log", log, "--legacy"])
        listing = try tools()
        XCTAssertEqual(listing["versions"]?["old"], .string("2025-11-25"), "\(listing)")
        server.enqueue(try toolCall("mcp__old__disk_usage", ["path": .string("/old")], id: "call_old"), done())
        try ok(["assistant", "run", "how full is /old"])
        XCTAssertTrue(told("call_old").contains("/old: 42% used"), told("call_old"))
    }

    func testAnHTTPServerIsReachedWithItsTokenFromTheSecretStore() throws {
        let token = MCPHTTPRules.newToken()
        let tokenFile = try directory.write("peer-token", token)
        let log = directory.file("peer.log")
        let peer = try SpawnedProcess(try LocalModel.python(), [Repository.path("Tests/Peers/mcp_tool_server.py"), "--log", log, "--http", tokenFile],
                                      environment: environment, captureOutput: true)
        self.peer = peer
        guard let line = peer.readOutput(until: "\n", timeout: 60), let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            return XCTFail("the peer printed no port")
        }
        // The token read from standard input, kept in the secret store: not in the record.
        try ok(["assistant", "mcp", "add", "web", "--url", "http://127.0.0.1:\(port)/mcp", "--token", "-"], stdin: token + "\n")
        let record = try ok(["--json", "settings", "get", "assistant.mcpServers"]).stdout
        XCTAssertFalse(record.contains(token))
        XCTAssertTrue(try waitUntil(seconds: 20) { (try self.tools()["tools"]?.arrayValue?.count ?? 0) == 2 })
        XCTAssertEqual(rule(try tools(), "mcp__web__disk_usage").0, "approve")
        XCTAssertEqual(try tools()["versions"]?["web"], .string("2026-07-28"))
        server.enqueue(try toolCall("mcp__web__disk_usage", ["path": .string("/data")], id: "call_h"), done())
        try ok(["assistant", "run", "how full is /data"])
        XCTAssertTrue(told("call_h").contains("/data: 42% used"), told("call_h"))
        // The server's token goes in its Authorization header only: never to the model.
        for request in server.requests { XCTAssertNil(request.body.range(of: Data(token.utf8)), "a request to the model held the MCP server's token") }
        // A wrong token: the server is named with what it answered, never with the token.
        try ok(["assistant", "mcp", "add", "web", "--url", "http://127.0.0.1:\(port)/mcp", "--token", "-", "--replace", "true"], stdin: "wrong-token\n")
        let refused = try tools()
        let problem = refused["problems"]?["web"]?.stringValue ?? ""
        XCTAssertTrue(problem.contains("401"), problem)
        XCTAssertFalse(problem.contains("wrong-token"))
    }

    func testTheRulesOfAnMCPServersToolsArePure() async throws {
        let listed: JSONValue = .object(["tools": .array([
            .object(["name": .string("read"), "annotations": .object(["readOnlyHint": .bool(true)])]),
            .object(["name": .string("both"), "annotations": .object(["readOnlyHint": .bool(true), "destructiveHint": .bool(true)])]),
            .object(["name": .string("silent")]),
            .object(["name": .string("bad name!")]),
        ])])
        let (tools, skipped) = MCPClientRules.tools(server: "docs.team", listed: listed)
        XCTAssertEqual(tools.map(\.name), ["mcp__docs-team__read", "mcp__docs-team__both", "mcp__docs-team__silent"])
        XCTAssertEqual(skipped, ["bad name!"])
        XCTAssertEqual(tools.map { MCPClientRules.rule(explicit: nil, tool: $0) }, [.approve, .ask, .ask], "a hint loosens only what says read-only and not destructive")
        XCTAssertEqual(MCPClientRules.rule(explicit: .deny, tool: tools[0]), .deny, "the person's rule wins over any hint")
        XCTAssertEqual(MCPClientRules.era(fromDiscover: .object(["supportedVersions": .array([.string("2025-11-25")])])), nil, "a handshake-only answer falls back")
        XCTAssertEqual(MCPClientRules.era(fromDiscover: .object(["supportedVersions": .array([.string("2026-07-28")])])), .modern("2026-07-28"))
        // One at a time, in order.
        let lane = SerialLane()
        final class Overlaps: Sendable { let state = Mutex((running: 0, most: 0)) }
        let overlaps = Overlaps()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try await lane.run {
                        overlaps.state.withLock { $0.running += 1; $0.most = max($0.most, $0.running) }
                        try await Task.sleep(for: .milliseconds(30))
                        overlaps.state.withLock { $0.running -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        XCTAssertEqual(overlaps.state.withLock { $0.most }, 1)
    }
}
