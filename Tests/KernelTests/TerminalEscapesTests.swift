import Foundation
import TermindCore
import XCTest

/// OpenSSH's escape sequences as the terminal bridge applies them: only at the start of a
/// line, across reads, with anything that is not an escape passed on whole.
final class TerminalEscapesTests: XCTestCase {
    private func run(_ chunks: [String]) -> [TerminalEscapes.Action] {
        var escapes = TerminalEscapes()
        let actions = chunks.flatMap { escapes.filter(Data($0.utf8)) }
        // Adjacent sends joined, so the expectations read as what the remote side gets.
        return actions.reduce(into: []) { joined, action in
            if case .send(let more) = action, case .send(let sofar)? = joined.last { joined[joined.count - 1] = .send(sofar + more) } else { joined.append(action) }
        }
    }

    private func send(_ text: String) -> TerminalEscapes.Action { .send(Data(text.utf8)) }

    func testEscapesAreRecognizedOnlyAtTheStartOfALine() {
        XCTAssertEqual(run(["~."]), [.disconnect], "the very first key starts a line")
        XCTAssertEqual(run(["ls\r~."]), [send("ls\r"), .disconnect])
        XCTAssertEqual(run(["ls\n~?"]), [send("ls\n"), .help])
        XCTAssertEqual(run(["echo a~.b\r"]), [send("echo a~.b\r")], "mid-line it is just a tilde")
        XCTAssertEqual(run(["\r~\u{1A}fg"]), [send("\r"), .suspend, send("fg")])
    }

    func testATildeTwiceSendsOneAndAnyOtherKeySendsBoth() {
        XCTAssertEqual(run(["~~X\r"]), [send("~X\r")])
        XCTAssertEqual(run(["~x"]), [send("~x")])
        XCTAssertEqual(run(["~\r~."]), [send("~\r"), .disconnect], "a tilde then Enter: both go, and a new line starts")
    }

    func testASequenceSplitAcrossReadsStillCounts() {
        XCTAssertEqual(run(["ls\r", "~", "."]), [send("ls\r"), .disconnect])
        XCTAssertEqual(run(["~", "~", "a"]), [send("~a")])
    }

    /// Keys without a tilde pass whole (the engine's fast path): where the line stands after
    /// them still decides what the next chunk's tilde means.
    func testChunksWithoutATildeKeepTrackOfTheLineStart() {
        XCTAssertEqual(run(["ls", "~."]), [send("ls~.")], "mid-line after a chunk that did not end a line")
        XCTAssertEqual(run(["ls", "\r", "~."]), [send("ls\r"), .disconnect])
        XCTAssertEqual(run(["l", "s\n", "~?"]), [send("ls\n"), .help])
        XCTAssertEqual(run(["\r", "x", "~."]), [send("\rx~.")])
    }

    /// The engine asks `takesAsTyped` first and calls `filter` only when it says no: a chunk
    /// with a tilde, or after a lone tilde, is filter's; what it takes moves the line start.
    func testWhatGoesAsTypedWithoutFilter() {
        var escapes = TerminalEscapes()
        func typed(_ text: String) -> Bool { Data(text.utf8).withUnsafeBytes { escapes.takesAsTyped($0) } }
        XCTAssertTrue(typed("ls"))
        XCTAssertFalse(typed("a~b"), "any tilde goes through filter")
        XCTAssertFalse(typed(""))
        XCTAssertTrue(typed("\r"))
        XCTAssertEqual(escapes.filter(Data("~".utf8)), [], "a tilde at a line start waits")
        XCTAssertFalse(typed("."), "after a pending tilde the next key is filter's")
        XCTAssertEqual(escapes.filter(Data(".".utf8)), [.disconnect])
        var other = TerminalEscapes()
        XCTAssertTrue(Data("ls".utf8).withUnsafeBytes { other.takesAsTyped($0) })
        XCTAssertEqual(other.filter(Data("~.".utf8)), [.send(Data("~.".utf8))], "mid-line after a chunk taken as typed")
    }

    func testNothingAfterADisconnectIsSent() {
        XCTAssertEqual(run(["~.rm -rf /\r"]), [.disconnect])
    }
}
