import WorkspacesRules
import XCTest

/// The output scanner: shell marks, the working folder and the modes a redraw sets again,
/// across any chunking, and bounded against a hostile stream.
final class TerminalScannerTests: XCTestCase {
    private func scan(_ text: String, chunk: Int? = nil) -> (marks: [TerminalMark], modes: TerminalModes) {
        var scanner = TerminalScanner()
        var marks: [TerminalMark] = []
        let bytes = Array(text.utf8)
        let size = chunk ?? max(bytes.count, 1)
        var index = 0
        while index < bytes.count {
            marks += scanner.scan(bytes[index..<min(index + size, bytes.count)])
            index += size
        }
        return (marks, scanner.modes)
    }

    func testShellIntegrationMarksAreReadWithBellOrStringTerminator() {
        let text = "\u{1B}]133;A\u{7}user@box:~$ \u{1B}]133;B\u{1B}\\ls -l\r\n\u{1B}]133;C;cmdline_url=ls%20-l%0Aecho%20%C3%A9\u{7}"
            + "total 0\r\n\u{1B}]133;D;2;duration_ms=1534\u{7}\u{1B}]133;D\u{7}\u{1B}]133;C;cmdline=top\u{7}"
        let expected: [TerminalMark] = [.promptStart, .commandStart, .commandExecuted(commandLine: "ls -l\necho é"),
                                        .commandFinished(status: 2, durationMilliseconds: 1534), .commandFinished(status: nil, durationMilliseconds: nil),
                                        .commandExecuted(commandLine: "top")]
        XCTAssertEqual(scan(text).marks, expected)
        // Byte by byte: the same marks.
        XCTAssertEqual(scan(text, chunk: 1).marks, expected)
    }

    func testTheWorkingFolderComesFromOSC7PercentDecodedAndTheTitleFromOSC0And2() {
        let marks = scan("\u{1B}]7;file://box.example/home/al%20ice/%E2%82%AC\u{7}\u{1B}]0;vim notes\u{7}\u{1B}]2;top\u{1B}\\\u{1B}]7;not a url\u{7}").marks
        XCTAssertEqual(marks, [.workingDirectory("/home/al ice/€"), .title("vim notes"), .title("top")])
        XCTAssertEqual(scan("\u{1B}]7;kitty-shell-cwd://h/tmp\u{7}").marks, [.workingDirectory("/tmp")])
    }

    func testModesFollowSetAndResetAcrossChunks() {
        let text = "\u{1B}[?1049h\u{1B}[?1h\u{1B}=\u{1B}[?2004h\u{1B}[?1000;1006h\u{1B}[?25l\u{1B}[3;20r\u{1B}[5 q\u{1B}[4h\u{1B}[?7l"
        for chunk in [nil, 1, 3] {
            let modes = scan(text, chunk: chunk).modes
            XCTAssertTrue(modes.alternateScreen && modes.applicationCursor && modes.applicationKeypad && modes.bracketedPaste, "chunk \(String(describing: chunk))")
            XCTAssertEqual(modes.mouseTracking, 1000)
            XCTAssertEqual(modes.mouseEncoding, 1006)
            XCTAssertFalse(modes.cursorVisible)
            XCTAssertEqual(modes.scrollRegion, TerminalModes.ScrollRegion(top: 3, bottom: 20))
            XCTAssertEqual(modes.cursorStyle, 5)
            XCTAssertTrue(modes.insertMode)
            XCTAssertFalse(modes.autowrap)
        }
        let back = scan(text + "\u{1B}[?1049l\u{1B}[?1l\u{1B}>\u{1B}[?2004l\u{1B}[?1000l\u{1B}[?1006l\u{1B}[?25h\u{1B}[r\u{1B}[0 q\u{1B}[4l\u{1B}[?7h").modes
        XCTAssertEqual(back, TerminalModes())
        // DECSTR puts back the cursor modes, not the screen or mouse; RIS all of them.
        let soft = scan(text + "\u{1B}[!p").modes
        XCTAssertTrue(soft.alternateScreen && soft.bracketedPaste && soft.cursorVisible && soft.autowrap && !soft.applicationCursor)
        XCTAssertNil(soft.scrollRegion)
        XCTAssertEqual(scan(text + "\u{1B}c").modes, TerminalModes())
    }

    func testTheModesSequencesRestoreWhatTheyDescribe() {
        let modes = scan("\u{1B}[?1h\u{1B}[?2004h\u{1B}[?1002h\u{1B}[?1006h\u{1B}[?25l\u{1B}[?7l").modes
        XCTAssertEqual(scan(modes.sequences).modes, modes)
        XCTAssertEqual(scan(modes.sequences + modes.resetSequences).modes, TerminalModes())
    }

    func testStringsAndOverlongOSCAreSkippedAndNothingLeaksIntoLaterMarks() {
        // DCS/APC strings are skipped whole, even with what looks like an OSC inside.
        XCTAssertEqual(scan("\u{1B}P1$r\u{1B}]133;A\u{7}q\u{1B}\\\u{1B}_x\u{1B}\\\u{1B}]133;B\u{7}").marks, [.commandStart])
        // An OSC past the bound is dropped whole; the next one is read.
        let huge = "\u{1B}]0;" + String(repeating: "x", count: TerminalScanner.oscLimit + 10) + "\u{7}"
        XCTAssertEqual(scan(huge + "\u{1B}]133;A\u{7}").marks, [.promptStart])
        // An OSC cut off by a new escape, and CAN, abort cleanly.
        XCTAssertEqual(scan("\u{1B}]0;half\u{1B}[?2004h\u{1B}]133;A\u{18}\u{1B}]133;B\u{7}").marks, [.commandStart])
        XCTAssertTrue(scan("\u{1B}]0;half\u{1B}[?2004h").modes.bracketedPaste)
        // Huge CSI numbers and parameter lists are clamped, not grown.
        XCTAssertEqual(scan("\u{1B}[?" + String(repeating: "9", count: 400) + "h").modes, TerminalModes())
        XCTAssertTrue(scan("\u{1B}[?" + String(repeating: "1;", count: 1000) + "2004h").modes.applicationCursor)
    }

    func testMalformedMarksAreIgnored() {
        XCTAssertEqual(scan("\u{1B}]133;D;abc\u{7}\u{1B}]133;D;0;duration_ms=-5\u{7}\u{1B}]133;Z\u{7}\u{1B}]133\u{7}").marks,
                       [.commandFinished(status: nil, durationMilliseconds: nil), .commandFinished(status: 0, durationMilliseconds: nil)])
        // A command line that is not UTF-8 once decoded is reported as unknown.
        XCTAssertEqual(scan("\u{1B}]133;C;cmdline_url=%FF%FE\u{7}").marks, [.commandExecuted(commandLine: nil)])
    }

    func testSwitchesOfTheAlternateScreenAreReportedWhereTheyHappen() {
        var scanner = TerminalScanner()
        let text = Array("ab\u{1B}[?1049hcd\u{1B}[?1049h\u{1B}[?1049l\u{1B}c".utf8)
        let found = scanner.scanWithOffsets(text)
        // The offset is the final byte of the sequence; a repeated switch is not a change.
        XCTAssertEqual(found.map(\.offset), [9, 27])
        XCTAssertEqual(found.map(\.mark), [.alternateScreen(true), .alternateScreen(false)])
        var again = TerminalScanner()
        XCTAssertEqual(again.scan(Array("\u{1B}[?47h".utf8) + Array("\u{1B}c".utf8)), [.alternateScreen(true), .alternateScreen(false)])
    }
}
