import WorkspacesRules
import XCTest

/// What broadcast types: a bracketed paste where asked for (and one that cannot be ended
/// early), Enter for newlines elsewhere, never a mouse report.
final class TerminalInputTests: XCTestCase {
    private func keys(_ text: String, bracketed: Bool, enter: Bool = true) -> String {
        String(decoding: TerminalInput.keys(for: text, bracketedPaste: bracketed, enter: enter), as: UTF8.self)
    }

    func testBracketedPasteWrapsTheTextAndCannotBeEndedEarly() {
        XCTAssertEqual(keys("ls\nrm -rf x", bracketed: true), "\u{1B}[200~ls\nrm -rf x\u{1B}[201~\r")
        XCTAssertEqual(keys("a\u{1B}[201~; reboot\n", bracketed: true, enter: false), "\u{1B}[200~a[201~; reboot\n\u{1B}[201~")
        // A marker split around another cannot be formed by what is taken out.
        let nested = keys("\u{1B}[20\u{1B}[201~1~rm -rf ~\n", bracketed: true, enter: false)
        XCTAssertEqual(nested.components(separatedBy: "\u{1B}[201~").count, 2, "one paste end, the last: \(nested.debugDescription)")
        XCTAssertTrue(nested.hasSuffix("\u{1B}[201~"))
    }

    func testWithoutBracketedPasteNewlinesAreEnter() {
        XCTAssertEqual(keys("echo a\necho b\r\n", bracketed: false, enter: false), "echo a\recho b\r")
        XCTAssertEqual(keys("uptime", bracketed: false), "uptime\r")
    }

    func testMouseReportsAreNeverTyped() {
        let x10 = "a\u{1B}[M !!b"
        let sgr = "c\u{1B}[<0;12;5Md\u{1B}[<0;12;5m"
        XCTAssertEqual(keys(x10 + sgr, bracketed: false, enter: false), "abcd")
        // Other sequences (cursor keys) stay.
        XCTAssertEqual(keys("\u{1B}[A\u{1B}[<x", bracketed: false, enter: false), "\u{1B}[A\u{1B}[<x")
    }
}
