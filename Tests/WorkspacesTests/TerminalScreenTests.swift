import TerminalScreen
import WorkspacesRules
import XCTest

/// A durable session's screen model (libvterm): what programs draw, the scrollback, and a
/// redraw that paints the same screen on a fresh terminal — checked by feeding the redraw
/// to a second model and comparing every row, the cursor, the modes and the redraw itself.
final class TerminalScreenTests: XCTestCase {
    private func screen(_ text: String, rows: Int = 6, columns: Int = 20, scrollback: Int = 100) -> TerminalScreen {
        let screen = TerminalScreen(rows: rows, columns: columns, scrollbackLimit: scrollback)
        screen.feed(Array(text.utf8))
        return screen
    }

    /// The redraw, fed to a fresh model of the same size, gives the same screen (and redraws the same).
    private func assertRedrawReproduces(_ original: TerminalScreen, file: StaticString = #filePath, line: UInt = #line) {
        let copy = TerminalScreen(rows: original.rows, columns: original.columns, scrollbackLimit: original.scrollbackLimit)
        let redraw = original.redraw()
        copy.feed(redraw)
        XCTAssertEqual(copy.lines(), original.lines(), file: file, line: line)
        XCTAssertEqual(copy.cursor.row, original.cursor.row, "cursor row", file: file, line: line)
        XCTAssertEqual(copy.cursor.column, original.cursor.column, "cursor column", file: file, line: line)
        XCTAssertEqual(copy.modes, original.modes, file: file, line: line)
        XCTAssertEqual(copy.scrollbackLines(), original.scrollbackLines(), file: file, line: line)
        XCTAssertEqual(String(decoding: copy.redraw(), as: UTF8.self), String(decoding: redraw, as: UTF8.self), "the redraw is a fixed point", file: file, line: line)
    }

    func testTextWrapsScrollsAndKeepsTheLinesThatScrolledOff() {
        let screen = screen((1...9).map { "line \($0)" }.joined(separator: "\r\n") + "\r\n" + String(repeating: "x", count: 25))
        XCTAssertEqual(screen.lines(), ["line 6", "line 7", "line 8", "line 9", String(repeating: "x", count: 20), "xxxxx"])
        XCTAssertEqual(screen.scrollbackLines(), ["line 1", "line 2", "line 3", "line 4", "line 5"])
        XCTAssertEqual(screen.cursor.row, 5)
        XCTAssertEqual(screen.cursor.column, 5)
        assertRedrawReproduces(screen)
    }

    func testLinesThatScrollOffKeepTheirColoursWideCharactersAndColouredBlanks() {
        let screen = screen("\u{1B}[1;31mred\u{1B}[0m 日本\r\n\u{1B}[44m  \u{1B}[0m\r\nplain   \r\n\u{1B}[3mé\u{1B}[0m\r\nlast",
                            rows: 2, columns: 12)
        XCTAssertEqual(screen.scrollbackLines(), ["red 日本", "  ", "plain"])
        // Each kept line: its own SGR (a reset after a coloured end), trailing default blanks
        // dropped, blanks on a colour kept.
        let expected = "\u{1B}[0m" + "\u{1B}[0;1;31mred\u{1B}[0m 日本\r\n" + "\u{1B}[0;44m  \u{1B}[0m\r\n" + "plain\r\n"
        XCTAssertTrue(String(decoding: screen.redraw(), as: UTF8.self).hasPrefix(expected), String(decoding: screen.redraw(), as: UTF8.self).debugDescription)
        XCTAssertEqual(screen.lines(), ["é", "last"])
    }

    func testColoursAttributesAndWideCharactersSurviveARedraw() {
        let text = "\u{1B}[1;31mred\u{1B}[0m \u{1B}[4;38;5;200mpink\u{1B}[0m\r\n\u{1B}[48;2;10;20;30m rgb \u{1B}[0m 日本語 é\r\n"
            + "\u{1B}[7mrev\u{1B}[27m\u{1B}[3;9mis\u{1B}[0m\r\n\u{1B}[32mstill green"
        let screen = screen(text)
        XCTAssertEqual(screen.lines()[0], "red pink")
        XCTAssertEqual(screen.lines()[1], " rgb  日本語 é")
        assertRedrawReproduces(screen)
        // The pen stays green after the redraw: what the program prints next is green too.
        let copy = TerminalScreen(rows: 6, columns: 20, scrollbackLimit: 0)
        copy.feed(screen.redraw() + Array("!".utf8))
        screen.feed(Array("!".utf8))
        XCTAssertEqual(String(decoding: copy.redraw(), as: UTF8.self), String(decoding: screen.redraw(), as: UTF8.self))
    }

    func testAFullScreenProgramOnTheAlternateScreenIsRedrawnThere() {
        let text = "shell$ vim\r\n\u{1B}[?1049h\u{1B}[?1h\u{1B}=\u{1B}[H\u{1B}[2J\u{1B}[2;5r\u{1B}[1;1H~ file\u{1B}[6;1H\u{1B}[7m-- INSERT --\u{1B}[27m\u{1B}[3;4H\u{1B}[?25l"
        let screen = screen(text)
        XCTAssertTrue(screen.modes.alternateScreen)
        XCTAssertEqual(screen.lines(), ["~ file", "", "", "", "", "-- INSERT --"])
        XCTAssertEqual(screen.modes.scrollRegion, TerminalModes.ScrollRegion(top: 2, bottom: 5))
        assertRedrawReproduces(screen)
        // Leaving the program shows the shell's screen again — on a terminal the redraw
        // painted, too (the main screen went under the alternate one).
        let copy = TerminalScreen(rows: 6, columns: 20, scrollbackLimit: 100)
        copy.feed(screen.redraw())
        let leave = Array("\u{1B}[r\u{1B}[?1049l\u{1B}[?25h$ ".utf8)
        screen.feed(leave)
        copy.feed(leave)
        XCTAssertEqual(screen.lines().first, "shell$ vim")
        XCTAssertEqual(copy.lines(), screen.lines())
        XCTAssertEqual(copy.cursor.row, screen.cursor.row)
        XCTAssertEqual(copy.cursor.column, screen.cursor.column)
    }

    func testRowsFilledToTheLastColumnAreNotErasedByTheRedraw() {
        let screen = screen(String(repeating: "a", count: 20) + "\r\n" + String(repeating: "b", count: 19) + "\u{1B}[44m \u{1B}[0m\r\nend", columns: 20)
        assertRedrawReproduces(screen)
        XCTAssertEqual(screen.lines()[0], String(repeating: "a", count: 20))
    }

    func testResizingKeepsTheContentAndTheScrollbackIsBounded() {
        let screen = screen((1...300).map { "row \($0)" }.joined(separator: "\r\n"), rows: 10, columns: 30, scrollback: 50)
        XCTAssertEqual(screen.scrollbackCount, 50)
        XCTAssertEqual(screen.scrollbackLines().first, "row 241")
        XCTAssertEqual(screen.lines().last, "row 300")
        screen.resize(rows: 5, columns: 40)
        XCTAssertEqual(screen.lines().last, "row 300")
        XCTAssertEqual(screen.rows, 5)
        assertRedrawReproduces(screen)
        // Only the newest N scrollback lines when asked.
        let copy = TerminalScreen(rows: 5, columns: 40, scrollbackLimit: 100)
        copy.feed(screen.redraw(scrollbackLines: 3))
        XCTAssertEqual(copy.scrollbackLines(), ["row 293", "row 294", "row 295"], "the rows pushed off by the resize are the newest")
    }

    /// A remote host controls every byte the model reads. Inputs that crashed libvterm
    /// before termind's patches (scripts/deps/libvterm): a UTF-8 encoded C1 control (width
    /// -1) in insert mode, a wide character on a one-column terminal; then seeded random
    /// sequences (the seeds that crashed 0.3.3 as released among them).
    func testHostileInputIsBoundedAndNeverCrashes() {
        let insertC1 = TerminalScreen(rows: 24, columns: 80, scrollbackLimit: 10)
        insertC1.feed(Array("\u{1B}[4h\u{1B}\\".utf8) + [0xC2, 0x95] + Array("u\u{85}v".utf8))
        XCTAssertEqual(insertC1.lines().first, "uv", "C1 controls are not drawn")
        let narrow = TerminalScreen(rows: 1, columns: 1, scrollbackLimit: 10)
        narrow.feed(Array("日本\u{1B}#6語".utf8) + [0xE8, 0x85] + Array(repeating: 0x85, count: 20))
        _ = narrow.redraw()
        // More CSI arguments than libvterm holds, and a huge one; REP with nothing to repeat
        // (it never returned).
        let parser = TerminalScreen(rows: 5, columns: 20, scrollbackLimit: 10)
        parser.feed(Array(("\u{1B}[" + String(repeating: ":", count: 40) + "m\u{1B}[" + String(repeating: "7;", count: 100) + "99999999999999999999H").utf8))
        parser.feed(Array("\u{1B}[5bok\u{1B}[3b".utf8))
        XCTAssertTrue(parser.lines().joined().contains("okkkk"), "\(parser.lines())")

        let pieces = ["\u{1B}[", "\u{1B}]", "\u{1B}P", ";", "?", "9999999", "h", "m", "\u{7}", "\u{1B}\\", "\r\n", "é", "\u{FF}", "日",
                      "\u{1B}[?1049h", "\u{1B}[4h", "\u{85}", "\u{1B}#6", "\u{301}"]
        for seed in [UInt64(3), 5, 9, 19, 21, 25, 26, 27] {
            var state = seed
            func next() -> UInt64 { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state }
            let screen = TerminalScreen(rows: 24, columns: 80, scrollbackLimit: 1000)
            for step in 0..<20_000 {
                let piece = pieces[Int(next() % UInt64(pieces.count))]
                screen.feed(Array(piece.utf8) + [UInt8(truncatingIfNeeded: next())])
                if step % 5000 == 4999 { screen.resize(rows: 1 + Int(next() % 40), columns: 1 + Int(next() % 120)) }
            }
            _ = screen.redraw()
            XCTAssertLessThanOrEqual(screen.scrollbackCount, 1000)
        }
    }

    /// After output the model could not follow was dropped, the screen carries on from the
    /// modes at the gap: no half-read sequence runs on, the right screen is shown, and a line
    /// says what was left out.
    func testResynchronizingAfterAGapAbandonsHalfReadSequencesAndNotesTheGap() {
        let screen = screen("$ make\r\n\u{1B}]0;half a tit", rows: 6, columns: 100)
        var modes = TerminalModes()
        modes.bracketedPaste = true
        screen.resynchronize(modes: modes, skippedBytes: 12_345_678)
        screen.feed(Array("done\r\n$ ".utf8))
        XCTAssertEqual(screen.lines().filter { !$0.isEmpty }, ["$ make", "[termind: 12345678 bytes of output came faster than this screen could follow]", "done", "$"])
        XCTAssertEqual(screen.modes, modes)
        XCTAssertNil(screen.title, "the half-read title did not take the following text")
        // A gap that ends on the alternate screen shows it (and notes nothing there).
        var alternate = TerminalModes()
        alternate.alternateScreen = true
        screen.resynchronize(modes: alternate, skippedBytes: 10)
        screen.feed(Array("\u{1B}[HTOP".utf8))
        XCTAssertEqual(screen.lines().first, "TOP")
        XCTAssertTrue(screen.modes.alternateScreen)
    }
}
