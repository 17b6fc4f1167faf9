import AssistantRules
import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Each dialect's parser against every fixture in Tests/Fixtures/Providers (shaped after the
/// official SDKs' own streaming fixtures; README.md there says which), fed in awkward
/// pieces: one byte at a time, inside a UTF-8 character, between `data:` and its JSON.
final class StreamParserTests: XCTestCase {
    private func parser(for dialect: String) -> any StreamParser {
        switch dialect {
        case "responses": ResponsesParser()
        case "chat": ChatParser()
        case "anthropic": AnthropicParser()
        default: GeminiParser()
        }
    }

    /// The outcome of `body` fed to a fresh parser `piece` bytes at a time.
    private func outcome(_ dialect: String, _ body: Data, piece: Int) -> (TurnOutcome, String) {
        var reader = SSEReader()
        var parser = parser(for: dialect)
        var shown = ""
        var offset = 0
        feeding: while offset < body.count {
            let end = min(body.count, offset + piece)
            do {
                for event in try reader.feed(body[offset..<end]) {
                    for delta in try parser.consume(event) { if case .text(let text) = delta { shown += text } }
                }
            } catch {
                break feeding
            }
            offset = end
        }
        return (parser.outcome(), shown)
    }

    func testEveryFixtureComesToWhatItsExpectationSaysHoweverItIsSplit() throws {
        let root = Repository.path("Tests/Fixtures/Providers")
        var checked = 0
        for dialect in ["responses", "chat", "anthropic", "gemini"] {
            let folder = root + "/" + dialect
            for file in try FileManager.default.contentsOfDirectory(atPath: folder).sorted() where file.hasSuffix(".sse") {
                let name = "\(dialect)/\(file)"
                let body = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + file))
                let expected = try JSONCoding.parse(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + file.replacingOccurrences(of: ".sse", with: ".expected.json"))),
                                                    source: name)
                for piece in [1, 7, 4096, body.count] {
                    let (outcome, shown) = self.outcome(dialect, body, piece: piece)
                    let label = "\(name) in pieces of \(piece)"
                    XCTAssertEqual(outcome.complete, expected["complete"] == .bool(true), label)
                    XCTAssertEqual(outcome.text, expected["text"]?.stringValue, label)
                    XCTAssertEqual(shown, outcome.text, "\(label): what was shown is what was kept")
                    if expected["complete"] == .bool(true) {
                        let calls = expected["toolCalls"]?.arrayValue ?? []
                        XCTAssertEqual(outcome.calls.map(\.name), calls.compactMap { $0["name"]?.stringValue }, label)
                        XCTAssertEqual(outcome.calls.map(\.arguments), calls.compactMap { $0["arguments"] }, label)
                        for (call, want) in zip(outcome.calls, calls) {
                            if let id = want["id"]?.stringValue { XCTAssertEqual(call.id, id, label) } else { XCTAssertFalse(call.id.isEmpty, label) }
                        }
                        XCTAssertEqual(outcome.finish?.rawValue, expected["finish"]?.stringValue, label)
                        let usage = expected["usage"]
                        XCTAssertEqual(outcome.usage.map { [$0.input, $0.output] }, usage?["input"]?.intValue.flatMap { input in usage?["output"]?.intValue.map { [input, $0] } },
                                       label)
                        if let signatures = expected["thoughtSignatures"]?.arrayValue?.compactMap(\.stringValue) {
                            let found = outcome.calls.compactMap(\.signature) + [outcome.echo?["textSignature"]?.stringValue].compactMap { $0 }
                            XCTAssertEqual(Set(found), Set(signatures), label)
                        }
                        if let thinking = expected["thinking"] {
                            let echoed = outcome.echo?["thinking"]?.arrayValue?.first
                            XCTAssertEqual(echoed?["thinking"], thinking["text"], label)
                            XCTAssertEqual(echoed?["signature"], thinking["signature"], label)
                        }
                    } else {
                        XCTAssertNil(outcome.finish, "\(label): an incomplete answer has no finish")
                        if let error = expected["error"], error != .null {
                            XCTAssertEqual(outcome.error?.type, error["type"]?.stringValue, label)
                            if error["type"]?.stringValue != "malformed_event" { XCTAssertEqual(outcome.error?.message, error["message"]?.stringValue, label) }
                        } else {
                            XCTAssertNil(outcome.error, label)
                        }
                    }
                }
                checked += 1
            }
        }
        XCTAssertGreaterThanOrEqual(checked, 27, "the fixtures were not all found")
    }

    func testTheEventReaderFollowsTheSSERulesAndIsBounded() throws {
        var reader = SSEReader()
        let events = try reader.feed(Array(": ping\r\nevent: a\r\ndata: one\rdata:two\n\nid: 7\nretry: 10\n\ndata: {}\n".utf8))
        XCTAssertEqual(events, [SSEEvent(event: "a", data: "one\ntwo")], "a comment, id and retry dispatch nothing; the last event has no blank line yet")
        XCTAssertEqual(try reader.feed(Array("\n".utf8)), [SSEEvent(data: "{}")])
        var small = SSEReader(lineLimit: 16, streamLimit: 64)
        XCTAssertThrowsError(try small.feed(Array("data: 0123456789abcdef\n".utf8))) { XCTAssertTrue("\($0)".contains("line"), "\($0)") }
        var short = SSEReader(lineLimit: 1024, streamLimit: 64)
        XCTAssertThrowsError(try short.feed(Array(String(repeating: "data: x\n\n", count: 10).utf8))) { XCTAssertTrue("\($0)".contains("longer than"), "\($0)") }
    }

    func testOllamasToolCallsWithoutAnIndexAreEachACallAndArgumentsMayBeAnObject() throws {
        var parser = ChatParser()
        let chunks = [
            #"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"one","arguments":{"x":1}}},{"id":"b","function":{"name":"two","arguments":"{\"y\":"}}]}}]}"#,
            #"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"2}"}}]},"finish_reason":"stop"}]}"#,
        ]
        for chunk in chunks { _ = try parser.consume(SSEEvent(data: chunk)) }
        _ = try parser.consume(SSEEvent(data: "[DONE]"))
        let outcome = parser.outcome()
        XCTAssertTrue(outcome.complete)
        XCTAssertEqual(outcome.calls.map(\.name), ["one", "two"])
        XCTAssertEqual(outcome.calls.map(\.arguments), [.object(["x": .integer(1)]), .object(["y": .integer(2)])])
        XCTAssertEqual(outcome.finish, .toolCalls, "stop with tool calls present still means tool calls")
    }
}
