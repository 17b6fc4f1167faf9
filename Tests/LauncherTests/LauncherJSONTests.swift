import TermindLauncher
import XCTest

/// The launcher's own small JSON (it loads no Foundation): what it reads from a server and
/// what it writes must round-trip exactly, and anything that is not JSON is refused.
final class LauncherJSONTests: XCTestCase {
    private func parse(_ text: String) -> LauncherJSON? { LauncherJSON.parse(Array(text.utf8)) }

    func testServerLinesParseToTheirValues() throws {
        let line = try XCTUnwrap(parse(#"{"id":1,"event":"ask","askID":7,"ask":{"op":"line","text":"Passphrase for \"k\": ","echo":false,"terminal":true}}"#))
        XCTAssertEqual(line["event"]?.string, "ask")
        XCTAssertEqual(line["askID"]?.int32, 7)
        XCTAssertEqual(line["ask"]?["text"]?.string, "Passphrase for \"k\": ")
        XCTAssertEqual(line["ask"]?["echo"]?.bool, false)
        let reply = try XCTUnwrap(parse(#" {"id":1,"ok":true,"body":{"exitCode":141}} "#))
        XCTAssertEqual(reply["body"]?["exitCode"]?.int32, 141)
        XCTAssertEqual(parse(#"{"ok":false,"id":null,"error":{"code":"socket.busy","message":"m"}}"#)?["id"], .null)
        XCTAssertEqual(parse("[1, -2.5e1, true, null, []]"), .array([.number(1), .number(-25), .bool(true), .null, .array([])]))
    }

    func testEscapesAndNonASCIIRoundTrip() throws {
        let text = "tab\tquote\" back\\ nl\n bell\u{07} é 日本 🎉 \u{1F}"
        let encoded = LauncherJSON.object(["t": .string(text)]).text
        XCTAssertFalse(encoded.unicodeScalars.contains { $0.value < 0x20 }, "control characters are escaped: \(encoded)")
        XCTAssertEqual(parse(encoded)?["t"]?.string, text)
        // \u escapes, a surrogate pair among them.
        XCTAssertEqual(parse(#""\u00e9\ud83c\udf89\/""#), .string("é🎉/"))
    }

    func testWhatIsNotJSONIsRefused() {
        for bad in ["", "{", #"{"a":1,}"#, #"{"a" 1}"#, "[1 2]", "tru", #""open"#, #""\x""#, "01x", "+1", ".5", #"{"a":1,"a":2}"#,
                    #""\ud83c""#, "\"raw\u{01}control\"", String(repeating: "[", count: 100) + String(repeating: "]", count: 100)] {
            XCTAssertNil(parse(bad), "accepted \(bad.prefix(40))")
        }
        XCTAssertNil(LauncherJSON.parse([0x22, 0xFF, 0x22]), "invalid UTF-8 in a string")
        // Next to an escape, a cut sequence or a stray continuation byte stays invalid: "\xC3\n",
        // "\u00e9\xA9"; "\u00e9é" is text.
        XCTAssertNil(LauncherJSON.parse([0x22, 0xC3, 0x5C, 0x6E, 0x22]), "a lead byte cut by an escape")
        XCTAssertNil(LauncherJSON.parse([0x22, 0x5C, 0x75, 0x30, 0x30, 0x65, 0x39, 0xA9, 0x22]), "a continuation byte after an escape")
        XCTAssertEqual(LauncherJSON.parse([0x22, 0x5C, 0x75, 0x30, 0x30, 0x65, 0x39, 0xC3, 0xA9, 0x22]), .string("\u{E9}\u{E9}"))
    }

    func testIntegersAreWrittenWithoutAFraction() {
        XCTAssertEqual(LauncherJSON.object(["id": .number(1), "b": .bool(false)]).text, #"{"b":false,"id":1}"#)
        XCTAssertEqual(LauncherJSON.number(2.5).text, "2.5")
        XCTAssertNil(LauncherJSON.number(2.5).int32)
    }
}
