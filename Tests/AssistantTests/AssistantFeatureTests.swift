import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind assistant` end to end: the real binary against a loopback server that answers
/// in each provider's streaming format as the official SDKs' fixtures show it
/// (Tests/Fixtures/Providers), recording every request.
final class AssistantFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: ReplayServer!
    private let key = "sk-test-" + String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(24))

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        server = try ReplayServer()
    }

    override func tearDown() {
        _ = serve?.stop()
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        // Loopback is never sent to a proxy the machine may have configured.
        environment["no_proxy"] = "127.0.0.1,localhost"
        environment["NO_PROXY"] = "127.0.0.1,localhost"
        return environment
    }

    /// Inside a `termind serve` when a test starts one, else in-process on the test's store.
    private var serve: ServeProcess?
    private var location: [String] { serve.map { ["--socket", $0.socketPath] } ?? ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] }
    private var database: String { serve == nil ? directory.file("db.sqlite") : directory.file("serve/db.sqlite") }

    private func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment, stdin: stdin)
    }

    @discardableResult
    private func ok(_ arguments: [String], stdin: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try termind(arguments, stdin: stdin)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stdout)\(result.stderr)", file: file, line: line)
        return result
    }

    private func json(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        try JSONCoding.parse(Data(try ok(["--json"] + arguments, file: file, line: line).stdout.utf8), source: "termind's output")
    }

    private func fixture(_ name: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: Repository.path("Tests/Fixtures/Providers/\(name)")))
    }

    /// A provider for `dialect` on the replay server, keyed, and its model as the chat model.
    private func provider(_ dialect: String, name: String = "p", model: String = "m1") throws {
        let url = switch dialect {
        case "responses": server.url + "/v1/responses"
        case "chat": server.url + "/v1"
        case "gemini": server.url + "/v1beta"
        default: server.url
        }
        try ok(["assistant", "provider", "add", name, "--protocol", dialect, "--url", url, "--key", "-"], stdin: key)
        try ok(["assistant", "model", "add", model, "--provider", name, "--model", "model-\(dialect)"])
    }

    /// Nothing termind kept or printed holds the key.
    private func assertKeyNowhere(_ results: [ProcessResult], file: StaticString = #filePath, line: UInt = #line) throws {
        for result in results {
            XCTAssertFalse(result.stdout.contains(key) || result.stderr.contains(key), "the key was printed", file: file, line: line)
        }
        // The key goes in a request's auth header only, never in what any request carried.
        for request in server.requests {
            XCTAssertNil(request.body.range(of: Data(key.utf8)), "a request body held the key", file: file, line: line)
            XCTAssertFalse(request.target.contains(key), "a request's URL held the key", file: file, line: line)
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasPrefix("db.sqlite") || name.hasPrefix("secrets.sqlite") {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: directory.file(name)))
            XCTAssertNil(bytes.range(of: Data(key.utf8)), "\(name) holds the key in plain text", file: file, line: line)
        }
    }

    private func sse(_ events: [String]) -> Data { Data(events.map { "data: \($0)\n\n" }.joined().utf8) }

    // MARK: - Providers

    func testAProvidersKeyGoesToTheSecretStoreViewingNeverContactsItAndTestDoes() throws {
        let added = try ok(["--json", "assistant", "provider", "add", "openai", "--url", server.url + "/v1/responses", "--key", "-"], stdin: key)
        let view = try JSONCoding.parse(Data(added.stdout.utf8), source: "add")
        XCTAssertEqual(view["protocol"], .string("responses"), "responses is the default")
        XCTAssertEqual(view["credential"], .string("key"))
        XCTAssertEqual(view["credentialPresent"], .bool(true))
        // Without --url the protocol's public endpoint is written in, never guessed later.
        let anthropic = try json(["assistant", "provider", "add", "claude", "--protocol", "anthropic"])
        XCTAssertEqual(anthropic["url"], .string("https://api.anthropic.com"))
        XCTAssertEqual(anthropic["credential"], .string("anonymous"))
        let listed = try json(["assistant", "provider", "list"])["providers"]?.arrayValue ?? []
        XCTAssertEqual(listed.compactMap { $0["name"]?.stringValue }, ["claude", "openai"])
        XCTAssertEqual(server.requests.count, 0, "adding and listing contacted the provider")
        // Bad input is named and changes nothing.
        let bad = try termind(["assistant", "provider", "add", "x", "--protocol", "chat", "--url", "ftp://nowhere"])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("--url 'ftp://nowhere'"), bad.stderr)
        let taken = try termind(["assistant", "provider", "add", "openai", "--protocol", "chat", "--url", server.url])
        XCTAssertEqual(taken.status, 2)
        XCTAssertTrue(taken.stderr.contains("provider edit openai"), taken.stderr)
        XCTAssertEqual(try json(["assistant", "provider", "list"])["providers"]?.arrayValue?.count, 2)
        // test is the explicit probe: it lists the models with the key.
        server.enqueue(.body(#"{"object": "list", "data": [{"id": "gpt-4.1"}, {"id": "gpt-4.1-mini"}]}"#))
        let tested = try json(["assistant", "provider", "test", "openai"])
        XCTAssertEqual(tested["models"], .array([.string("gpt-4.1"), .string("gpt-4.1-mini")]))
        XCTAssertEqual(server.requests.first?.target, "/v1/models")
        XCTAssertEqual(server.requests.first?.header("authorization"), "Bearer \(key)")
        // A refused key: the error names the status and the way to fix it, never the body's echo of the key.
        server.enqueue(.body(#"{"error": {"message": "Incorrect API key provided: \#(key).", "type": "invalid_request_error", "code": "invalid_api_key"}}"#, status: 401))
        let refused = try termind(["assistant", "provider", "test", "openai"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("HTTP 401") && refused.stderr.contains("invalid_api_key") && refused.stderr.contains("provider edit openai --key -"), refused.stderr)
        // Removed: gone with its key.
        try ok(["assistant", "provider", "rm", "openai"])
        XCTAssertEqual(try json(["assistant", "provider", "list"])["providers"]?.arrayValue?.compactMap { $0["name"]?.stringValue }, ["claude"])
        try assertKeyNowhere([added, refused])
    }

    // MARK: - Dialects

    func testEachDialectStreamsItsAnswerFromARequestInItsOwnShape() throws {
        let expected = "The load average on web-1 is 0.42 — nothing to worry about."
        var outputs: [ProcessResult] = []
        for (index, dialect) in ["responses", "chat", "anthropic", "gemini"].enumerated() {
            try provider(dialect, name: "p\(index)", model: "m\(index)")
            server.enqueue(.stream(try fixture("\(dialect)/text.sse"), piece: 13))
            let result = try ok(["assistant", "run", "--model", "m\(index)", "How", "is", "web-1?"])
            outputs.append(result)
            XCTAssertEqual(result.stdout, expected + "\n", dialect)
            let request = try XCTUnwrap(server.requests.last)
            let body = try request.json()
            switch dialect {
            case "responses":
                XCTAssertEqual(request.path, "/v1/responses")
                XCTAssertEqual(request.header("authorization"), "Bearer \(key)")
                XCTAssertEqual(body["input"]?.arrayValue?.last?["content"], .string("How is web-1?"))
                XCTAssertEqual(body["store"], .bool(false))
            case "chat":
                XCTAssertEqual(request.path, "/v1/chat/completions")
                XCTAssertEqual(request.header("authorization"), "Bearer \(key)")
                XCTAssertEqual(body["messages"]?.arrayValue?.last?["content"], .string("How is web-1?"))
                XCTAssertEqual(body["stream_options"]?["include_usage"], .bool(true))
            case "anthropic":
                XCTAssertEqual(request.path, "/v1/messages")
                XCTAssertEqual(request.header("x-api-key"), key)
                XCTAssertNil(request.header("authorization"))
                XCTAssertEqual(request.header("anthropic-version"), "2023-06-01")
                XCTAssertNotNil(body["max_tokens"], "Anthropic requires max_tokens")
            default:
                XCTAssertEqual(request.path, "/v1beta/models/model-gemini:streamGenerateContent?alt=sse")
                XCTAssertEqual(request.header("x-goog-api-key"), key)
                XCTAssertEqual(body["contents"]?.arrayValue?.last?["parts"]?.arrayValue?.first?["text"], .string("How is web-1?"))
            }
            XCTAssertEqual(body["stream"] ?? .bool(true), .bool(true), dialect)
            XCTAssertFalse(String(decoding: request.body, as: UTF8.self).contains(key), "\(dialect): the key went into the body")
        }
        // Each run is a conversation, its answer and usage kept.
        let conversations = try json(["assistant", "list"])["conversations"]?.arrayValue ?? []
        XCTAssertEqual(conversations.count, 4)
        let shown = try json(["assistant", "show", "1"])
        XCTAssertEqual(shown["entries"]?.arrayValue?.map { $0["role"]?.stringValue ?? "" }, ["user", "assistant"])
        XCTAssertEqual(shown["entries"]?.arrayValue?.last?["text"], .string(expected))
        XCTAssertNotNil(shown["entries"]?.arrayValue?.last?["outputTokens"]?.intValue)
        // --json: one record per event, the result last.
        server.enqueue(.stream(try fixture("chat/text.sse")))
        let scripted = try ok(["--json", "assistant", "run", "--model", "m1", "again"])
        let lines = scripted.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }
        XCTAssertEqual(lines.filter { $0["type"] == .string("text") }.compactMap { $0["text"]?.stringValue }.joined(), expected)
        XCTAssertEqual(lines.last?["state"], .string("completed"))
        XCTAssertEqual(lines.last?["text"], .string(expected))
        outputs.append(scripted)
        try assertKeyNowhere(outputs)
    }

    func testAConversationGoesOnWithItsHistoryAndAnArchivedOneIsReadOnlyUntilRestored() throws {
        try provider("chat")
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(try fixture("chat/text.sse")), .stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", "first question"])
        try ok(["assistant", "run", "--conversation", "1", "second question"])
        let messages = try server.requests[1].json()["messages"]?.arrayValue ?? []
        XCTAssertEqual(messages.map { $0["role"]?.stringValue ?? "" }, ["system", "user", "assistant", "user"])
        XCTAssertEqual(messages[1]["content"], .string("first question"))
        XCTAssertEqual(messages[2]["content"], .string("The load average on web-1 is 0.42 — nothing to worry about."))
        try ok(["assistant", "archive", "1"])
        let archived = try termind(["assistant", "run", "--conversation", "1", "third"])
        XCTAssertEqual(archived.status, 1)
        XCTAssertTrue(archived.stderr.contains("archived") && archived.stderr.contains("--restore true"), archived.stderr)
        XCTAssertEqual(try json(["assistant", "list"])["conversations"]?.arrayValue?.count, 0)
        XCTAssertEqual(try json(["assistant", "list", "--archived", "true"])["conversations"]?.arrayValue?.count, 1)
        try ok(["assistant", "archive", "1", "--restore", "true"])
        // A fork is a copy: going on in it leaves the original as it was.
        let fork = try json(["assistant", "fork", "1"])
        XCTAssertEqual(fork["forkedFrom"], .string("1"))
        let copy = try XCTUnwrap(fork["id"]?.stringValue)
        try ok(["assistant", "run", "--conversation", copy, "in the fork"])
        XCTAssertEqual(try json(["assistant", "show", copy])["entries"]?.arrayValue?.count, 6)
        XCTAssertEqual(try json(["assistant", "show", "1"])["entries"]?.arrayValue?.count, 4)
        try ok(["assistant", "rm", copy])
        let gone = try termind(["assistant", "show", copy])
        XCTAssertEqual(gone.status, 1)
        XCTAssertTrue(gone.stderr.contains("no conversation \(copy)"), gone.stderr)
    }

    // MARK: - Tools

    func testToolCallsRunOnlyFromACompleteAnswerInTheModelsOrderEachResultSentBack() throws {
        try provider("chat")
        try ok(["vault", "host", "add", "10.0.0.7", "--label", "web-1", "--tags", "prod"])
        try ok(["vault", "host", "add", "10.0.0.8", "--label", "db-1"])
        // Two calls in one answer, their pieces interleaved: list_hosts (with a tag) and a tool
        // that does not exist. Then the final answer.
        let calls = sse([
            #"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"list_hosts","arguments":""}}]},"finish_reason":null}]}"#,
            #"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"reboot_everything","arguments":"{}"}}]},"finish_reason":null}]}"#,
            #"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"tag\":"}}]},"finish_reason":null}]}"#,
            #"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"prod\"}"}}]},"finish_reason":null}]}"#,
            #"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        server.enqueue(.stream(calls, piece: 17), .stream(try fixture("chat/text.sse")))
        let result = try ok(["--json", "assistant", "run", "which hosts are in prod?"])
        let records = result.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }
        XCTAssertEqual(records.filter { $0["type"] == .string("tool_call") }.compactMap { $0["name"]?.stringValue }, ["list_hosts", "reboot_everything"])
        XCTAssertEqual(records.filter { $0["type"] == .string("tool_result") }.compactMap { $0["state"]?.stringValue }, ["succeeded", "failed"])
        XCTAssertEqual(server.requests.count, 2)
        let first = try server.requests[0].json()
        XCTAssertEqual(first["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue }, ["list_hosts", "ssh_exec", "sftp_list", "sftp_stat", "sftp_read", "sftp_write", "sftp_copy", "get_metrics", "request_user_secret", "fetch", "scratch_write", "scratch_read"])
        let messages = try server.requests[1].json()["messages"]?.arrayValue ?? []
        XCTAssertEqual(messages.map { $0["role"]?.stringValue ?? "" }, ["system", "user", "assistant", "tool", "tool"])
        XCTAssertEqual(messages[2]["tool_calls"]?.arrayValue?.compactMap { $0["id"]?.stringValue }, ["call_a", "call_b"])
        XCTAssertEqual(messages[3]["tool_call_id"], .string("call_a"))
        let hosts = try JSONCoding.parse(Data((messages[3]["content"]?.stringValue ?? "").utf8), source: "tool result")
        XCTAssertEqual(hosts.arrayValue?.compactMap { $0["label"]?.stringValue }, ["web-1"], "the tag went through the call")
        XCTAssertEqual(messages[4]["tool_call_id"], .string("call_b"))
        XCTAssertTrue(messages[4]["content"]?.stringValue?.contains("no tool named reboot_everything") == true)
        let shown = try json(["assistant", "show", "1"])
        let entries = shown["entries"]?.arrayValue ?? []
        XCTAssertEqual(entries.map { $0["role"]?.stringValue ?? "" }, ["user", "assistant", "tool", "tool", "assistant"])
        XCTAssertEqual(entries[1]["calls"]?.arrayValue?.compactMap { $0["state"]?.stringValue }, ["succeeded", "failed"])
    }

    func testAnIncompleteAnswerIsNeverShownAsAnAnswerNorUsedToDispatchAToolCall() throws {
        try provider("chat")
        // A tool call cut before [DONE], then a malformed stream: neither dispatches anything.
        let cutCall = sse([#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"list_hosts","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#])
        server.enqueue(.stream(cutCall), .stream(try fixture("chat/malformed-delta.sse")))
        let result = try termind(["--json", "assistant", "run", "go"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stdout.contains("broke its protocol"), "--json errors are on standard output: \(result.stdout)")
        let records = result.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "line") }
        XCTAssertTrue(records.allSatisfy { $0["type"] != .string("tool_call") }, result.stdout)
        XCTAssertEqual(records.filter { $0["type"] == .string("discard") }.count, 1, "the cut answer was declared void")
        let entries = try json(["assistant", "show", "1"])["entries"]?.arrayValue ?? []
        XCTAssertEqual(entries.map { $0["role"]?.stringValue ?? "" }, ["user", "error"], "no assistant text, an error entry")
        XCTAssertEqual(try json(["assistant", "list"])["conversations"]?.arrayValue?.first?["lastRun"], .string("failed"))
    }

    // MARK: - Retries

    func testTransientFailuresSendTheSameRequestAgainAndWhatWasShownIsVoid() throws {
        try provider("anthropic")
        server.enqueue(.stream(try fixture("anthropic/cut.sse")),
                       .body(#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#, status: 529, headers: [("Retry-After", "0")]),
                       .body(#"{"error": {"type": "rate_limit_error", "message": "slow down"}}"#, status: 429, headers: [("Retry-After", "0")]),
                       .stream(try fixture("anthropic/error-mid-stream.sse")),
                       .stream(try fixture("anthropic/text.sse")))
        let started = Date()
        let result = try ok(["assistant", "run", "status?"])
        // cut → 1 s, 529 and 429 → Retry-After 0, overloaded mid-stream → 8 s at the fourth retry.
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 9)
        XCTAssertEqual(server.requests.count, 5)
        let bodies = Set(server.requests.map(\.body))
        XCTAssertEqual(bodies.count, 1, "every attempt sent the same request")
        XCTAssertTrue(result.stdout.hasSuffix("The load average on web-1 is 0.42 — nothing to worry about.\n"), result.stdout)
        XCTAssertTrue(result.stderr.contains("The answer above is discarded"), result.stderr)
        XCTAssertTrue(result.stderr.contains("HTTP 529") && result.stderr.contains("HTTP 429"), result.stderr)
        let entries = try json(["assistant", "show", "1"])["entries"]?.arrayValue ?? []
        XCTAssertEqual(entries.map { $0["role"]?.stringValue ?? "" }, ["user", "assistant"], "only the complete answer was kept")
    }

    func testASpentBudgetIsNotRetriedAndFiveRetriesEndInAnErrorEntry() throws {
        try provider("chat")
        server.enqueue(.body(#"{"error": {"message": "You exceeded your budget.", "type": "insufficient_quota", "code": "enforced_spend_limit_reached"}}"#, status: 429,
                             headers: [("Retry-After", "0")]))
        let spent = try termind(["assistant", "run", "hi"])
        XCTAssertEqual(spent.status, 1)
        XCTAssertEqual(server.requests.count, 1, "a spent budget was retried")
        XCTAssertTrue(spent.stderr.contains("enforced_spend_limit_reached"), spent.stderr)
        server.answer { _ in .body(#"{"error": {"message": "busy"}}"#, status: 503, headers: [("Retry-After", "0")]) }
        let busy = try termind(["assistant", "run", "hi again"])
        XCTAssertEqual(busy.status, 1)
        XCTAssertEqual(server.requests.count, 1 + 6, "one try and five retries")
        XCTAssertTrue(busy.stderr.contains("gave up after 6 attempts"), busy.stderr)
        let entries = try json(["assistant", "show", "2"])["entries"]?.arrayValue ?? []
        XCTAssertEqual(entries.map { $0["role"]?.stringValue ?? "" }, ["user", "error"])
    }

    func testAResponseOverSixteenMebibytesIsRefused() throws {
        try provider("chat")
        let line = Data(("data: " + #"{"choices":[{"index":0,"delta":{"content":""# + String(repeating: "x", count: 60_000) + #""}}]}"# + "\n\n").utf8)
        server.enqueue(ReplayServer.Reply(steps: (0..<350).map { _ in .bytes(line) }))
        let result = try termind(["assistant", "run", "a lot"])
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("16 MiB"), result.stderr)
        XCTAssertEqual(server.requests.count, 1, "a too large answer is not asked for again")
    }

    // MARK: - Cancellation and interruption

    func testCtrlCEndsTheTurnClosesTheRequestAndKeepsWhatWasComplete() throws {
        try provider("chat")
        let start = sse([#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking"},"finish_reason":null}]}"#])
        server.enqueue(ReplayServer.Reply(steps: [.bytes(start), .hang]))
        let run = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["assistant", "run", "slow one"], environment: environment, captureOutput: true)
        XCTAssertNotNil(run.readOutput(until: "Thinking", timeout: 20))
        run.signal(SIGINT)
        XCTAssertEqual(run.wait(), 130)
        XCTAssertTrue(waitUntil(seconds: 5) { server.hangUps == 1 }, "the HTTP request stayed open")
        let conversation = try json(["assistant", "list"])["conversations"]?.arrayValue?.first
        XCTAssertEqual(conversation?["lastRun"], .string("cancelled"))
        XCTAssertEqual(try json(["assistant", "show", "1"])["entries"]?.arrayValue?.map { $0["role"]?.stringValue ?? "" }, ["user"], "the partial answer is not kept")
    }

    func testARunLeftByATermindThatDiedIsInterruptedNeverResumed() throws {
        try provider("chat")
        server.enqueue(ReplayServer.Reply(steps: [.bytes(sse([#"{"choices":[{"index":0,"delta":{"content":"Work"},"finish_reason":null}]}"#])), .hang]))
        let run = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["assistant", "run", "long job"], environment: environment, captureOutput: true)
        XCTAssertNotNil(run.readOutput(until: "Work", timeout: 20))
        run.signal(SIGKILL)
        _ = run.wait()
        let requests = server.requests.count
        let conversation = try json(["assistant", "list"])["conversations"]?.arrayValue?.first
        XCTAssertEqual(conversation?["lastRun"], .string("interrupted"))
        XCTAssertEqual(server.requests.count, requests, "starting again replayed the request")
    }

    // MARK: - Secrets

    func testAKeyNeverReachesALogAndAMissingOneIsAnErrorNotAnAnonymousCall() throws {
        try provider("chat")
        server.enqueue(.stream(try fixture("chat/text.sse")))
        let debug = try ok(["--debug", "assistant", "run", "hello"])
        XCTAssertTrue(debug.stderr.contains("http.request"), debug.stderr)
        XCTAssertTrue(debug.stderr.contains("authorization:redacted"), debug.stderr)
        try assertKeyNowhere([debug])
        // The secret the record names is gone from this device (as for a record synced from
        // another): refused before anything is sent.
        let secrets = try ProcessRunner.run("/usr/bin/sqlite3", [directory.file("secrets.sqlite"), "DELETE FROM secrets;"])
        XCTAssertEqual(secrets.status, 0, secrets.stderr)
        let before = server.requests.count
        let missing = try termind(["assistant", "run", "hello"])
        XCTAssertEqual(missing.status, 1, missing.stdout)
        XCTAssertTrue(missing.stderr.contains("secret"), missing.stderr)
        XCTAssertEqual(server.requests.count, before, "a request went out without its key")
    }
}

/// `termind assistant run` against a real model: llama.cpp's server with SmolLM2-135M
/// (Tests/Peers/llm_server.py), through each of the three dialects it speaks. (This model
/// makes no tool calls; those are covered against the replay server.)
final class LocalModelTests: XCTestCase {
    func testARealModelAnswersThroughChatResponsesAndMessages() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let model = try LocalModel()
        defer { model.stop() }
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        environment["no_proxy"] = "127.0.0.1"
        let cli = TermindCLI(environment: environment, leading: ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")])
        try cli.run(["assistant", "provider", "add", "chat", "--protocol", "chat", "--url", model.url + "/v1"])
        try cli.run(["assistant", "provider", "add", "responses", "--protocol", "responses", "--url", model.url + "/v1/responses"])
        try cli.run(["assistant", "provider", "add", "messages", "--protocol", "anthropic", "--url", model.url])
        let listed = try cli.json(["assistant", "provider", "test", "chat"])
        XCTAssertEqual(listed["models"]?.arrayValue?.compactMap(\.stringValue), [model.model])
        for provider in ["chat", "responses", "messages"] {
            try cli.run(["assistant", "model", "add", provider, "--provider", provider, "--model", model.model, "--max-output-tokens", "24"])
            let answer = try cli.run(["assistant", "run", "--model", provider, "Name", "one", "colour."])
            XCTAssertFalse(answer.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(provider): no answer")
            let run = try cli.json(["assistant", "list"])["conversations"]?.arrayValue?.first
            XCTAssertEqual(run?["lastRun"], .string("completed"), provider)
            let shown = try cli.json(["assistant", "show", run?["id"]?.stringValue ?? ""])
            XCTAssertEqual(shown["entries"]?.arrayValue?.last?["text"]?.stringValue, answer.stdout.trimmingCharacters(in: .newlines), provider)
            XCTAssertGreaterThan(shown["entries"]?.arrayValue?.last?["outputTokens"]?.intValue ?? 0, 0, "\(provider): no usage")
        }
    }
}

/// Vertex: a service account's JSON kept in the secret store, a JWT signed with its key
/// (RS256, OpenSSL) exchanged at its token URL (here the replay server's), the token sent
/// as the bearer of `streamGenerateContent`.
final class VertexTests: XCTestCase {
    func testAServiceAccountsSignedAssertionIsExchangedForTheTokenTheRequestCarries() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = try ReplayServer()
        defer { server.stop() }
        let key = directory.file("key.pem"), publicKey = directory.file("public.pem")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key]).status, 0)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["pkey", "-in", key, "-pubout", "-out", publicKey]).status, 0)
        let pem = try String(contentsOfFile: key, encoding: .utf8)
        func account(_ tokenURL: String) throws -> String {
            let text = String(decoding: try JSONCoding.encode(JSONValue.object([
                "type": .string("service_account"), "project_id": .string("proj"), "private_key_id": .string("kid-1"), "private_key": .string(pem),
                "client_email": .string("termind@proj.iam.gserviceaccount.com"), "token_uri": .string(tokenURL),
            ])), as: UTF8.self)
            return try directory.write("account-\(abs(tokenURL.hashValue)).json", text)
        }
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        environment["no_proxy"] = "127.0.0.1"
        let cli = TermindCLI(environment: environment, leading: ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")])
        // A token URL that is neither Google's nor this machine's is refused: the signed
        // assertion would be a credential handed to it.
        let elsewhere = try cli.run(["assistant", "provider", "add", "vx", "--protocol", "vertex", "--service-account", try account("https://tokens.example.com/token"),
                                     "--project", "proj", "--location", "us-central1"], status: 2)
        XCTAssertTrue(elsewhere.stderr.contains("token_uri (https://tokens.example.com)"), elsewhere.stderr)
        let added = try cli.json(["assistant", "provider", "add", "vx", "--protocol", "vertex", "--url", server.url + "/v1",
                                  "--service-account", try account(server.url + "/token"), "--project", "proj", "--location", "us-central1"])
        XCTAssertEqual(added["credential"], .string("service-account"))
        let token = #"{"access_token": "ya29.token-for-the-test", "expires_in": 3599, "token_type": "Bearer"}"#
        server.enqueue(.body(token))
        let tested = try cli.json(["assistant", "provider", "test", "vx"])
        XCTAssertEqual(tested["reachable"], .bool(true))
        // The assertion: RS256 over header.claims, verifiable with the account's public key.
        let exchange = try XCTUnwrap(server.requests.first)
        XCTAssertEqual(exchange.path, "/token")
        XCTAssertEqual(exchange.header("content-type"), "application/x-www-form-urlencoded")
        let form = String(decoding: exchange.body, as: UTF8.self)
        XCTAssertTrue(form.hasPrefix("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="), form)
        let parts = form.components(separatedBy: "assertion=").last?.split(separator: ".").map(String.init) ?? []
        XCTAssertEqual(parts.count, 3)
        func decode(_ text: String) -> Data {
            var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            return Data(base64Encoded: base64) ?? Data()
        }
        let header = try JSONCoding.parse(decode(parts[0]), source: "header")
        let claims = try JSONCoding.parse(decode(parts[1]), source: "claims")
        XCTAssertEqual(header["alg"], .string("RS256"))
        XCTAssertEqual(header["kid"], .string("kid-1"))
        XCTAssertEqual(claims["iss"], .string("termind@proj.iam.gserviceaccount.com"))
        XCTAssertEqual(claims["aud"], .string(server.url + "/token"))
        XCTAssertEqual(claims["scope"], .string("https://www.googleapis.com/auth/cloud-platform"))
        try Data((parts[0] + "." + parts[1]).utf8).write(to: URL(fileURLWithPath: directory.file("signed")))
        try decode(parts[2]).write(to: URL(fileURLWithPath: directory.file("signature")))
        let verified = try ProcessRunner.run("/usr/bin/openssl", ["dgst", "-sha256", "-verify", publicKey, "-signature", directory.file("signature"), directory.file("signed")])
        XCTAssertEqual(verified.status, 0, "the signature does not verify: \(verified.stdout)\(verified.stderr)")
        // A run: the token as the bearer, the model under the project's location.
        try cli.run(["assistant", "model", "add", "g", "--provider", "vx", "--model", "gemini-2.5-flash"])
        server.enqueue(.body(token), .stream(try Data(contentsOf: URL(fileURLWithPath: Repository.path("Tests/Fixtures/Providers/gemini/text.sse")))))
        let answer = try cli.run(["assistant", "run", "load?"])
        XCTAssertEqual(answer.stdout, "The load average on web-1 is 0.42 — nothing to worry about.\n")
        let request = try XCTUnwrap(server.requests.last)
        XCTAssertEqual(request.path, "/v1/projects/proj/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
        XCTAssertEqual(request.header("authorization"), "Bearer ya29.token-for-the-test")
        // The private key is in the encrypted secret store only.
        let body = pem.split(separator: "\n")[1]
        for name in ["db.sqlite", "db.sqlite-wal", "secrets.sqlite", "secrets.sqlite-wal"] where FileManager.default.fileExists(atPath: directory.file(name)) {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: directory.file(name)))
            XCTAssertNil(bytes.range(of: Data(body.utf8)), "\(name) holds the private key in plain text")
        }
    }
}

extension AssistantFeatureTests {
    func testAnAnonymousProviderSendsNoAuthHeaderAndAModelWithoutToolsIsOfferedNone() throws {
        try ok(["assistant", "provider", "add", "local", "--protocol", "chat", "--url", server.url + "/v1"])
        try ok(["assistant", "model", "add", "plain", "--provider", "local", "--model", "m", "--tools", "false"])
        server.enqueue(.stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", "hello"])
        let request = try XCTUnwrap(server.requests.first)
        XCTAssertNil(request.header("authorization"))
        XCTAssertNil(try request.json()["tools"], "a model that cannot call tools was offered some")
        // A key added later is sent; --anonymous true drops it again.
        try ok(["assistant", "provider", "edit", "local", "--key", "-"], stdin: key)
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", "hello"])
        XCTAssertEqual(server.requests.last?.header("authorization"), "Bearer \(key)")
        try ok(["assistant", "provider", "edit", "local", "--anonymous", "true"])
        try ok(["assistant", "run", "hello"])
        XCTAssertNil(server.requests.last?.header("authorization"))
        XCTAssertEqual(try json(["assistant", "provider", "list"])["providers"]?.arrayValue?.first?["credential"], .string("anonymous"))
    }

    func testACallWhoseOutcomeIsUnknownIsShownAsSuchAndTheModelIsToldSo() throws {
        try provider("chat")
        let call = sse([#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_q","type":"function","function":{"name":"list_hosts","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
                        "[DONE]"])
        server.enqueue(.stream(call), .stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", "hosts?"])
        // As a termind killed while the call ran leaves it: the run running, the call running.
        let crashed = try ProcessRunner.run("/usr/bin/sqlite3", [directory.file("db.sqlite"),
            "UPDATE assistant_runs SET state = 'running'; UPDATE assistant_tool_calls SET state = 'running';"])
        XCTAssertEqual(crashed.status, 0, crashed.stderr)
        let shown = try json(["assistant", "show", "1"])
        XCTAssertEqual(shown["conversation"]?["lastRun"], .string("interrupted"))
        XCTAssertEqual(shown["entries"]?.arrayValue?[1]["calls"]?.arrayValue?.first?["state"], .string("unknown"))
        server.enqueue(.stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", "--conversation", "1", "did it work?"])
        let messages = try server.requests.last?.json()["messages"]?.arrayValue ?? []
        let told = messages.first { $0["role"] == .string("tool") }?["content"]?.stringValue ?? ""
        XCTAssertTrue(told.contains("[") || told.contains("not known"), told)
    }

    func testSuggestPrintsOneCommandAndRunsNothing() throws {
        try provider("chat")
        try ok(["vault", "host", "add", "10.0.0.7", "--label", "web-1"])
        let reply = sse([#"{"choices":[{"index":0,"delta":{"content":"```sh\ndf -h /var\n```"},"finish_reason":"stop"}]}"#, "[DONE]"])
        server.enqueue(.stream(reply))
        let suggested = try ok(["assistant", "suggest", "--host", "web-1", "how", "full", "is", "/var?"])
        XCTAssertEqual(suggested.stdout, "df -h /var\n", "the bare command, ready to copy")
        server.enqueue(.stream(reply))
        XCTAssertEqual(try json(["assistant", "suggest", "disk", "use"])["command"], .string("df -h /var"))
        let request = try server.requests.first?.json()
        XCTAssertNil(request?["tools"], "a suggestion offers no tools")
        XCTAssertTrue(request?["messages"]?.arrayValue?.first?["content"]?.stringValue?.contains("web-1") == true)
        XCTAssertEqual(try json(["assistant", "list"])["conversations"]?.arrayValue?.count, 0, "a suggestion is no conversation")
    }
}

extension AssistantFeatureTests {
    func testAChatTakesATurnPerLineOfItsInputAndKeepsOneConversation() throws {
        try provider("chat")
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(try fixture("chat/text.sse")))
        let chatted = try ok(["assistant", "chat"], stdin: "first question\nsecond question\n")
        let answer = "The load average on web-1 is 0.42 — nothing to worry about.\n"
        XCTAssertEqual(chatted.stdout, answer + answer)
        let messages = try server.requests[1].json()["messages"]?.arrayValue ?? []
        XCTAssertEqual(messages.map { $0["role"]?.stringValue ?? "" }, ["system", "user", "assistant", "user"])
        XCTAssertEqual(try json(["assistant", "list"])["conversations"]?.arrayValue?.count, 1)
        XCTAssertEqual(try json(["assistant", "show", "1"])["entries"]?.arrayValue?.count, 4)
    }

    func testOnATerminalCtrlCEndsTheTurnTheChatGoesOnAndCtrlCAtThePromptLeaves() throws {
        try chatOnATerminal()
    }

    func testInsideServeCtrlCEndsTheTurnTheChatGoesOnAndCtrlCAtThePromptLeaves() throws {
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"])
        try chatOnATerminal()
    }

    private func chatOnATerminal() throws {
        try provider("chat")
        let start = sse([#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking hard"},"finish_reason":null}]}"#])
        server.enqueue(ReplayServer.Reply(steps: [.bytes(start), .hang]), .stream(try fixture("chat/text.sse")))
        var terminal = environment
        terminal["TERM"] = "xterm-256color"
        let tmux = TmuxTerminal(directory: directory, environment: terminal)
        defer { tmux.stop() }
        // In a process group of its own, as a shell with job control runs it: the Ctrl-C at the
        // prompt reaches termind, not the shell that waits for it.
        try tmux.open("chat", ["/bin/sh", "-c", "set -m; \"$@\"; echo \"[exited $?]\"; exec sleep 100000", "sh", FeatureHarness.buildDirectory + "/termind"]
                      + location + ["assistant", "chat"], columns: 120, rows: 30)
        XCTAssertTrue(try tmux.wait("chat", for: "you>").found)
        try tmux.send("chat", "a slow question\r")
        XCTAssertTrue(try tmux.wait("chat", for: "Thinking hard").found)
        try tmux.send("chat", "\u{03}")
        let interrupted = try tmux.wait("chat", for: "The turn was interrupted")
        XCTAssertTrue(interrupted.found, interrupted.screen.joined(separator: "\n"))
        XCTAssertTrue(waitUntil(seconds: 5) { server.hangUps == 1 }, "the interrupted turn's request stayed open")
        XCTAssertTrue(try tmux.settled("chat") { $0.filter { $0.hasPrefix("you>") }.count == 2 } != nil, "no prompt after the interrupted turn")
        try tmux.send("chat", "and now?\r")
        XCTAssertTrue(try tmux.wait("chat", for: "nothing to worry about").found)
        XCTAssertTrue(try tmux.settled("chat") { $0.filter { $0.hasPrefix("you>") }.count == 3 } != nil)
        try tmux.send("chat", "\u{03}")
        XCTAssertEqual(try tmux.waitForExit("chat"), 130)
        let entries = try json(["assistant", "show", "1"])["entries"]?.arrayValue ?? []
        XCTAssertEqual(entries.map { $0["role"]?.stringValue ?? "" }, ["user", "user", "assistant"], "the interrupted turn kept its question, not its partial answer")
        let runs = try ProcessRunner.run("/usr/bin/sqlite3", [database, "SELECT state FROM assistant_runs ORDER BY id"])
        XCTAssertEqual(runs.stdout, "cancelled\ncompleted\n")
    }
}

extension AssistantFeatureTests {
    func testInsideServeARunOutlivesItsClientAndAttachShowsItAllWhileCtrlCEndsIt() throws {
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"])
        try provider("chat")
        let chunk = { (text: String) in self.sse([#"{"choices":[{"index":0,"delta":{"content":"\#(text)"},"finish_reason":null}]}"#]) }
        let end = sse([#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#, "[DONE]"])
        server.enqueue(ReplayServer.Reply(steps: [.bytes(chunk("First part. ")), .pause(2), .bytes(chunk("Second part.")), .bytes(end)]))
        let client = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["assistant", "run", "long", "answer"], environment: environment,
                                        captureOutput: true)
        XCTAssertNotNil(client.readOutput(until: "First part.", timeout: 20))
        // The window closes: the client dies without a word to the server.
        client.signal(SIGKILL)
        _ = client.wait()
        let attached = try ok(["assistant", "attach", "1"])
        XCTAssertEqual(attached.stdout, "First part. Second part.\n", "attach shows the run so far, then the rest")
        XCTAssertEqual(server.hangUps, 0, "the run's request was closed when its client left")
        let shown = try json(["assistant", "show", "1"])
        XCTAssertEqual(shown["entries"]?.arrayValue?.last?["text"], .string("First part. Second part."))
        XCTAssertEqual(shown["conversation"]?["lastRun"], .string("completed"))
        let over = try termind(["assistant", "attach", "1"])
        XCTAssertEqual(over.status, 1)
        XCTAssertTrue(over.stderr.contains("no run going"), over.stderr)
        // Ctrl-C ends a run inside serve too: its request is closed.
        server.enqueue(ReplayServer.Reply(steps: [.bytes(chunk("Thinking")), .hang]))
        let interrupted = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["assistant", "run", "--conversation", "1", "more"],
                                             environment: environment, captureOutput: true)
        XCTAssertNotNil(interrupted.readOutput(until: "Thinking", timeout: 20))
        interrupted.signal(SIGINT)
        XCTAssertEqual(interrupted.wait(), 130)
        XCTAssertTrue(waitUntil(seconds: 5) { server.hangUps == 1 }, "the run's request stayed open")
        XCTAssertTrue(waitUntil(seconds: 5) { (try? self.json(["assistant", "list"]))?["conversations"]?.arrayValue?.first?["lastRun"] == .string("cancelled") })
    }
}

extension AssistantFeatureTests {
    func testTheTitleRolesModelNamesANewConversationOnlyFromACompleteAnswer() throws {
        try provider("chat")
        try ok(["assistant", "model", "add", "titler", "--provider", "p", "--model", "small"])
        try ok(["assistant", "role", "title", "titler"])
        let title = sse([#"{"choices":[{"index":0,"delta":{"content":"\"Load on web-1.\""},"finish_reason":"stop"}]}"#, "[DONE]"])
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(title))
        try ok(["assistant", "run", "how loaded is web-1 right now?"])
        XCTAssertEqual(server.requests.count, 2)
        let asked = try server.requests[1].json()
        XCTAssertEqual(asked["model"], .string("small"))
        XCTAssertNil(asked["tools"])
        XCTAssertEqual(try json(["assistant", "list"])["conversations"]?.arrayValue?.first?["title"], .string("Load on web-1"))
        // A cut title answer names nothing: the first prompt stays the title.
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(try fixture("chat/cut.sse")), .stream(try fixture("chat/cut.sse")),
                       .stream(try fixture("chat/malformed-delta.sse")))
        try ok(["assistant", "run", "second conversation"])
        XCTAssertEqual(try json(["assistant", "show", "2"])["conversation"]?["title"], .string("second conversation"))
        // The title request is never part of the conversation.
        XCTAssertEqual(try json(["assistant", "show", "1"])["entries"]?.arrayValue?.count, 2)
    }
}

extension AssistantFeatureTests {
    func testAConversationNearItsModelsContextIsCondensedByACompleteSummaryAndKeptWhole() throws {
        try ok(["assistant", "provider", "add", "p", "--protocol", "chat", "--url", server.url + "/v1"])
        try ok(["assistant", "model", "add", "m1", "--provider", "p", "--model", "big", "--context-tokens", "1000"])
        let long = "Here is the log of web-1: " + String(repeating: "error at 10:00 disk full on /var; ", count: 100)
        let summary = sse([#"{"choices":[{"index":0,"delta":{"content":"web-1's /var filled up at 10:00."},"finish_reason":"stop"}]}"#, "[DONE]"])
        server.enqueue(.stream(try fixture("chat/text.sse")), .stream(summary), .stream(try fixture("chat/text.sse")))
        try ok(["assistant", "run", long])
        let second = try ok(["assistant", "run", "--conversation", "1", "and now?"])
        XCTAssertTrue(second.stderr.contains("condensed"), second.stderr)
        XCTAssertEqual(server.requests.count, 3)
        let condense = try server.requests[1].json()
        XCTAssertNil(condense["tools"])
        XCTAssertTrue(String(decoding: server.requests[1].body, as: UTF8.self).contains("disk full on /var"))
        let messages = try server.requests[2].json()["messages"]?.arrayValue ?? []
        XCTAssertEqual(messages.map { $0["role"]?.stringValue ?? "" }, ["system", "user", "user"])
        XCTAssertTrue(messages[1]["content"]?.stringValue?.hasSuffix("web-1's /var filled up at 10:00.") == true, "\(messages[1])")
        XCTAssertFalse(String(decoding: server.requests[2].body, as: UTF8.self).contains("disk full on /var"), "the condensed messages were sent again")
        XCTAssertEqual(try json(["assistant", "show", "1"])["entries"]?.arrayValue?.count, 4, "every message is kept")
    }
}

extension AssistantFeatureTests {
    func testInsideServeAChatWhoseClientGoesAwayEndsItsTurn() throws {
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"])
        try provider("chat")
        let start = sse([#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking hard"},"finish_reason":null}]}"#])
        server.enqueue(ReplayServer.Reply(steps: [.bytes(start), .hang]))
        let client = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["assistant", "chat"], environment: environment, captureOutput: true)
        client.writeInput(Data("a slow question\n".utf8))
        XCTAssertNotNil(client.readOutput(until: "Thinking hard", timeout: 20))
        // A chat is a person's: unlike a run, it does not go on without them.
        client.signal(SIGKILL)
        _ = client.wait()
        XCTAssertTrue(waitUntil(seconds: 5) { server.hangUps == 1 }, "the turn's request stayed open")
        XCTAssertTrue(waitUntil(seconds: 5) {
            (try? ProcessRunner.run("/usr/bin/sqlite3", [self.database, "SELECT state FROM assistant_runs"]))?.stdout == "cancelled\n"
        })
    }
}
