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

    func testNothingAfterADisconnectIsSent() {
        XCTAssertEqual(run(["~.rm -rf /\r"]), [.disconnect])
    }
}
