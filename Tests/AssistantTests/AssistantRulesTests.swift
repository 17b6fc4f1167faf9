import AssistantRules
import Foundation
import TermindCore
import TermindHarness
import XCTest

/// The Assistant's pure rules: when to try again, what may be quoted of a provider's error,
/// and each dialect's request body.
final class AssistantRulesTests: XCTestCase {
    func testRetriesFollowTheScheduleAndTheServerUpToAMinuteAndNeverForASpentBudget() {
        XCTAssertEqual((0..<6).map { RetryRule.delay(after: $0, retryAfter: nil) }, [1, 2, 4, 8, 16, nil])
        XCTAssertEqual(RetryRule.delay(after: 0, retryAfter: 0), 0)
        XCTAssertEqual(RetryRule.delay(after: 2, retryAfter: 30), 30)
        XCTAssertEqual(RetryRule.delay(after: 2, retryAfter: 600), 60, "Retry-After is honoured up to 60 s")
        XCTAssertNil(RetryRule.delay(after: 5, retryAfter: 1), "five retries, then no more")
        for status in [408, 409, 429, 500, 502, 503, 529] { XCTAssertTrue(RetryRule.isTransient(status: status, code: nil), "\(status)") }
        for status in [400, 401, 403, 404, 413, 422] { XCTAssertFalse(RetryRule.isTransient(status: status, code: nil), "\(status)") }
        XCTAssertFalse(RetryRule.isTransient(status: 429, code: "enforced_spend_limit_reached"))
        XCTAssertFalse(RetryRule.isTransient(status: 429, code: "insufficient_quota"))
        XCTAssertTrue(RetryRule.isTransient(streamError: "overloaded_error"))
        XCTAssertFalse(RetryRule.isTransient(streamError: "invalid_request_error"))
    }

    func testAProvidersMessageIsQuotedWithoutKeysOrTokens() {
        let key = "sk-proj-Abc123def456Ghi789"
        let scrubbed = Redaction.scrub("Incorrect API key provided: \(key). Token ya29.a0AfB_byC1d2E3f4G5h6 expired; code invalid_api_key", secrets: [key])
        XCTAssertFalse(scrubbed.contains("Abc123def456"), scrubbed)
        XCTAssertFalse(scrubbed.contains("a0AfB_byC1d2E3f4G5h6"), scrubbed)
        XCTAssertTrue(scrubbed.contains("invalid_api_key") && scrubbed.contains("Incorrect API key provided"), scrubbed)
        XCTAssertLessThanOrEqual(Redaction.scrub(String(repeating: "word ", count: 500), secrets: []).count, 301)
        let (code, message) = Redaction.providerError(in: Data(#"{"error": {"type": "rate_limit_error", "message": "slow"}}"#.utf8))
        XCTAssertEqual(code, "rate_limit_error")
        XCTAssertEqual(message, "slow")
    }

    func testEachDialectCarriesToolCallsAndResultsAsItsAPIWantsThem() throws {
        let call = ToolCall(id: "call_1", name: "list_hosts", arguments: .object(["tag": .string("prod")]), signature: "c2ln")
        let request = ModelRequest(model: "m", system: "be brief", items: [
            .user("hosts?"), .assistant(text: "", calls: [call], echo: nil), .toolResult(id: "call_1", name: "list_hosts", output: "[]", isError: false),
        ], tools: [ToolSpec(name: "list_hosts", description: "d", parameters: .object(["type": .string("object")]))], maxOutputTokens: 10)
        let responses = WireBody.body(request, .responses)
        XCTAssertEqual(responses["input"]?.arrayValue?.compactMap { $0["type"]?.stringValue }, ["function_call", "function_call_output"])
        XCTAssertEqual(responses["input"]?.arrayValue?[1]["arguments"], .string(#"{"tag":"prod"}"#))
        XCTAssertEqual(responses["tools"]?.arrayValue?.first?["name"], .string("list_hosts"), "a Responses tool is flat")
        XCTAssertEqual(responses["instructions"], .string("be brief"))
        let chat = WireBody.body(request, .chat)
        XCTAssertEqual(chat["messages"]?.arrayValue?.compactMap { $0["role"]?.stringValue }, ["system", "user", "assistant", "tool"])
        XCTAssertEqual(chat["messages"]?.arrayValue?[2]["content"], .null, "no text beside the calls")
        let anthropic = WireBody.body(request, .anthropic)
        let messages = anthropic["messages"]?.arrayValue ?? []
        XCTAssertEqual(messages.compactMap { $0["role"]?.stringValue }, ["user", "assistant", "user"])
        XCTAssertEqual(messages[1]["content"]?.arrayValue?.first?["input"], .object(["tag": .string("prod")]))
        XCTAssertEqual(messages[2]["content"]?.arrayValue?.first?["tool_use_id"], .string("call_1"))
        XCTAssertEqual(anthropic["system"], .string("be brief"))
        let gemini = WireBody.body(request, .gemini)
        let contents = gemini["contents"]?.arrayValue ?? []
        XCTAssertEqual(contents.compactMap { $0["role"]?.stringValue }, ["user", "model", "user"])
        XCTAssertEqual(contents[1]["parts"]?.arrayValue?.first?["thoughtSignature"], .string("c2ln"), "a call's signature goes back with it")
        XCTAssertEqual(contents[2]["parts"]?.arrayValue?.first?["functionResponse"]?["name"], .string("list_hosts"))
        XCTAssertEqual(gemini["generationConfig"]?["maxOutputTokens"], .integer(10))
        // A Gemini call without an id of its own is sent back without one.
        let numbered = ModelRequest(model: "m", items: [.assistant(text: "", calls: [ToolCall(id: "gemini-call-1", name: "x", arguments: .object([:]))], echo: nil)])
        XCTAssertNil(WireBody.body(numbered, .gemini)["contents"]?.arrayValue?.first?["parts"]?.arrayValue?.first?["functionCall"]?["id"])
        XCTAssertEqual(ProviderAddress(.vertex, url: ProviderAddress.defaultURL(.vertex, location: "europe-west4"), project: "p", location: "europe-west4").streamURL(model: "gemini-2.5-pro"),
                       "https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse")
    }
}

/// The command classifier against its table (Tests/Fixtures/Classifier/commands.txt: every
/// known way of hiding a write behind a read among several hundred commands), plus the
/// parser's edges.
final class CommandClassifierTests: XCTestCase {
    func testEveryCommandOfTheTableGetsItsClass() throws {
        let text = try String(contentsOfFile: Repository.path("Tests/Fixtures/Classifier/commands.txt"), encoding: .utf8)
        var checked = 0, wrong: [String] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: "\t", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let command = parts[1].replacingOccurrences(of: "\\n", with: "\n")
            let verdict = CommandClassifier.classify(command)
            let expected: CommandClassifier.Kind = parts[0] == "R" ? .readOnly : .stateChanging
            if verdict.kind != expected { wrong.append("\(parts[0]) \(parts[1]) → \(verdict.kind.rawValue): \(verdict.reason)") }
            checked += 1
        }
        XCTAssertGreaterThanOrEqual(checked, 300)
        XCTAssertEqual(wrong, [], "\(wrong.count) of \(checked) classified wrongly:\n" + wrong.joined(separator: "\n"))
    }

    func testAStateChangingVerdictSaysWhy() {
        XCTAssertTrue(CommandClassifier.classify("ls; rm -rf x").reason.contains("rm"))
        XCTAssertTrue(CommandClassifier.classify("echo x > /etc/x").reason.contains("/etc/x"))
        XCTAssertTrue(CommandClassifier.classify("cat $(rm x)").reason.contains("inside"))
        XCTAssertTrue(CommandClassifier.classify("ls 'open").reason.contains("not fully understood"))
        XCTAssertEqual(CommandClassifier.classify(String(repeating: "ls; ", count: 5000)).kind, .stateChanging, "longer than the parser reads")
    }

    func testTheParserSplitsWordsAsTheShellDoes() throws {
        let parsed = try ShellSyntax.parse(#"FOO=1 grep -e 'a b' "c\"d" e\ f 2>/dev/null | wc -l"#)
        XCTAssertEqual(parsed.commands.count, 2)
        XCTAssertEqual(parsed.commands[0].assignments.map(\.text), ["FOO=1"])
        XCTAssertEqual(parsed.commands[0].words.map(\.text), ["grep", "-e", "a b", "c\"d", "e f"])
        XCTAssertEqual(parsed.commands[0].redirections.first?.op, ">")
        XCTAssertEqual(parsed.commands[0].redirections.first?.descriptor, 2)
        XCTAssertEqual(parsed.commands[1].words.map(\.text), ["wc", "-l"])
        let nested = try ShellSyntax.parse("echo $(date) `id` \"$(uname -a)\"")
        XCTAssertEqual(nested.nested, ["date", "id", "uname -a"])
    }
}
