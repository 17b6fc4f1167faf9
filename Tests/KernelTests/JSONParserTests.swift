import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The JSON layer keeps integers exact over the whole 64-bit range, never repairs bad
/// UTF-8, and names the line and column of every syntax error.
final class JSONParserTests: XCTestCase {
    private func parse(_ text: String) throws -> JSONValue { try JSONCoding.parse(Data(text.utf8), source: "input") }

    private func message(_ bytes: Data) -> String {
        do { _ = try JSONCoding.parse(bytes, source: "input"); return "parsed" } catch { return "\(error)" }
    }

    func testIntegersKeepTheirExactValueAcrossTheInt64AndUInt64Ranges() throws {
        XCTAssertEqual(try parse("-9223372036854775808"), .integer(Int64.min))
        XCTAssertEqual(try parse("9223372036854775807"), .integer(Int64.max))
        XCTAssertEqual(try parse("9223372036854775808"), .unsignedInteger(1 << 63))
        XCTAssertEqual(try parse("18446744073709551615"), .unsignedInteger(UInt64.max))
        XCTAssertEqual(try parse("-1234567890123456789"), .integer(-1_234_567_890_123_456_789))
        // Beyond 64 bits, fractions and exponents are numbers.
        XCTAssertEqual(try parse("18446744073709551616"), .double(18_446_744_073_709_551_616))
        XCTAssertEqual(try parse("-9223372036854775809"), .double(-0x1p63))
        XCTAssertEqual(try parse("1.5"), .double(1.5))
        XCTAssertEqual(try parse("2e3"), .double(2000))
        XCTAssertEqual(JSONValue(exactly: 5), .integer(5), "an unsigned value that fits Int64 is canonical .integer")
    }

    func testExactIntegersSurviveEncodingAndDecodingAsValues() throws {
        let value = JSONValue.object(["min": .integer(Int64.min), "max": .unsignedInteger(UInt64.max), "mid": .unsignedInteger(1 << 63)])
        let text = String(decoding: try JSONCoding.encode(value), as: UTF8.self)
        XCTAssertEqual(text, #"{"max":18446744073709551615,"mid":9223372036854775808,"min":-9223372036854775808}"#)
        XCTAssertEqual(try JSONCoding.parse(Data(text.utf8), source: "t"), value)
        // Through Codable (a JSONValue field inside a Swift type), too.
        struct Holder: Codable { var v: [JSONValue] }
        let decoded = try JSONDecoder().decode(Holder.self, from: Data(#"{"v": [-9223372036854775808, 18446744073709551615, 1.25]}"#.utf8))
        XCTAssertEqual(decoded.v, [.integer(Int64.min), .unsignedInteger(UInt64.max), .double(1.25)])
        XCTAssertEqual(JSONSchema.integer.problems(in: .unsignedInteger(UInt64.max)), [])
    }

    func testSyntaxErrorsNameTheReasonLineAndColumn() {
        XCTAssertEqual(message(Data("{\n  \"a\": 1,\n  \"b\" 2\n}".utf8)), "input is not valid JSON: expected ':' after an object key, got '2' at line 3, column 7.")
        XCTAssertEqual(message(Data("[1, 2".utf8)), "input is not valid JSON: unexpected end of input at line 1, column 6.")
        XCTAssertEqual(message(Data()), "input is not valid JSON: the input is empty.")
        XCTAssertEqual(message(Data(#"{"a": 1, "a": 2}"#.utf8)), "input is not valid JSON: duplicate key \"a\" at line 1, column 10.")
        XCTAssertEqual(message(Data("01".utf8)), "input is not valid JSON: numbers may not have leading zeros at line 1, column 1.")
        XCTAssertEqual(message(Data("1e400".utf8)), "input is not valid JSON: the number 1e400 is out of range at line 1, column 1.")
        XCTAssertEqual(message(Data("[NaN]".utf8)), "input is not valid JSON: unexpected 'N' at line 1, column 2.")
        XCTAssertEqual(message(Data(#"{"a": 1} x"#.utf8)), "input is not valid JSON: unexpected 'x' after the JSON value at line 1, column 10.")
        XCTAssertEqual(message(Data(#""\ud800""#.utf8)), "input is not valid JSON: unpaired surrogate \\uD800 at line 1, column 2.")
        XCTAssertEqual(message(Data("\"a\tb\"".utf8)), "input is not valid JSON: control character 0x9 in a string (escape it) at line 1, column 3.")
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        XCTAssertTrue(message(Data(deep.utf8)).contains("nesting deeper than 512 levels"))
    }

    func testStringsMustBeValidUTF8AndEscapesDecode() throws {
        XCTAssertEqual(message(Data([0x22, 0x61, 0xFF, 0x62, 0x22])), "input is not valid JSON: invalid UTF-8 in a string at line 1, column 3.")
        XCTAssertEqual(message(Data([0x22, 0xC0, 0xAF, 0x22])), "input is not valid JSON: invalid UTF-8 in a string at line 1, column 2.", "an overlong '/'")
        XCTAssertEqual(message(Data([0x22, 0xED, 0xA0, 0x80, 0x22])), "input is not valid JSON: invalid UTF-8 in a string at line 1, column 2.", "an encoded surrogate")
        XCTAssertEqual(try parse(#""caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \n""#), .string("café 😀 \"q\" \\ / \n"))
        XCTAssertEqual(try parse("\"héllo ✓ 😀\""), .string("héllo ✓ 😀"))
        XCTAssertEqual(UTF8Validation.firstInvalidOffset(in: Array("ok ✓".utf8)), nil)
        XCTAssertEqual(UTF8Validation.firstInvalidOffset(in: [0x61, 0xF4, 0x90, 0x80, 0x80]), 1, "above U+10FFFF")
        XCTAssertEqual(UTF8Validation.firstInvalidOffset(in: [0x61, 0xE2, 0x9C]), 1, "truncated")
    }

    func testAnEchoedRequestKeepsItsIntegersOverTheSocket() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let kernel = Kernel(configuration: KernelConfiguration(registryPath: nil), sink: .disabled())
        try await kernel.boot()
        let server = ControlServer(path: directory.file("run/control.sock"), kernel: kernel, logger: kernel.logger)
        try server.start()
        defer { server.stop() }
        let client = try SocketClientForTest(path: server.path)
        for id in ["-9223372036854775808", "18446744073709551615", "9223372036854775808"] {
            client.send(#"{"id": \#(id), "contract": "kernel.ping@1", "body": {"payload": "x"}}"# + "\n")
            let line = try XCTUnwrap(client.readLine())
            XCTAssertTrue(line.hasPrefix(#"{"id":\#(id),"ok":true"#), line)
        }
        client.close()
        await kernel.shutdown()
    }
}
