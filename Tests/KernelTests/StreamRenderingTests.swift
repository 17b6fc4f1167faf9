import Foundation
import TermindCore
import TermindHarness
import XCTest

/// The CLI shows any feature's stream events generically (docs/contracts.md, Streams):
/// a fixture feature sends one of each kind and asks each kind of question, and termind
/// renders them without a terminal, with --json, on a pseudo-terminal, and with scripted
/// answers — in-process and through `termind serve` alike.
final class StreamRenderingTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private func registry() throws -> String { try directory.fixtureStreamsRegistry() }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["XDG_RUNTIME_DIR"] = directory.file("home/run")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET", "TERMIND_STORE"] { environment.removeValue(forKey: name) }
        // Some runs are on script(1)'s terminal: a crash there prints its backtrace at once.
        return printingBacktraces(environment)
    }

    /// termind in-process with the fixture (`socket` nil) or as a client of a server.
    private func run(_ arguments: [String], socket: String? = nil, stdin: String? = nil) throws -> ProcessResult {
        let boot = try socket.map { ["--socket", $0] } ?? ["--registry", registry(), "--socket", directory.file("none.sock")]
        return try ProcessRunner.run("/usr/bin/setsid", ["-w", termind] + boot + arguments, environment: environment, stdin: stdin)
    }

    private let everything = ["show", "--steps", "4", "--total", "4000", "--records", "2", "--views", "2", "--stdout", "out\n",
                              "--stderr", "err\n", "--notice", "heads up", "--ask", "confirm,choice,prompts"]

    private func checkPlain(_ result: ProcessResult, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        XCTAssertEqual(result.stdout, """
        out
        name  record-0
        size  0 B

        name  record-1
        size  10 B
        view 1
        HOST  N
        box   0

        view 2
        HOST  N
        box   1

        answers  unanswered, unanswered, unanswered

        """, file: file, line: line)
        // No terminal: no progress line, nothing redrawn, questions refused (never guessed).
        XCTAssertEqual(result.stderr, "err\ntermind: heads up\n", file: file, line: line)
    }

    func testWithoutATerminalEachKindIsPrintedInTurnInProcessAndThroughServe() throws {
        checkPlain(try run(everything))
        let serve = try ServeProcess(directory: directory, arguments: ["--registry", try registry()])
        defer { serve.stop() }
        checkPlain(try run(everything, socket: serve.socketPath))
    }

    func testJSONKeepsTheResultOnStandardOutputAfterRecordAndViewLinesAndProgressGoesToStandardError() throws {
        let result = try run(["--json", "show", "--steps", "2", "--total", "100", "--records", "1", "--views", "1", "--ask", "confirm"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stdout.split(separator: "\n", maxSplits: 2).map(String.init)
        XCTAssertEqual(try JSONCoding.parse(Data(lines[0].utf8), source: "record"), .object(["name": .string("record-0"), "size": .integer(0)]))
        XCTAssertEqual(try JSONCoding.parse(Data(lines[1].utf8), source: "view")["title"], .string("view 1"))
        XCTAssertEqual(try JSONCoding.parse(Data(lines[2].utf8), source: "result")["answers"], .array([.string("unanswered")]))
        let progress = try result.stderr.split(separator: "\n").map { try JSONCoding.parse(Data($0.utf8), source: "progress") }
        XCTAssertEqual(progress.map { $0["done"] }, [.integer(0), .integer(50), .integer(100)])
        XCTAssertEqual(progress.first?["event"], .string("progress"))
    }

    /// termind's words on a shell line: in-process with the fixture (`socket` nil), or a
    /// launcher whose command the server at `socket` runs (prompts and terminal modes then
    /// by the launcher, the rest by the server on the launcher's terminal).
    private func commandLine(_ arguments: [String], socket: String?) throws -> String {
        let boot = try socket.map { ["--socket", $0] } ?? ["--registry", registry(), "--socket", directory.file("none.sock")]
        return Shell.quoted([termind] + boot + arguments)
    }

    /// Runs termind on a pseudo-terminal (script(1)) fed `input`; returns what the terminal showed.
    private func onTerminal(_ arguments: [String], input: String, socket: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run("/usr/bin/script", ["-qec", try commandLine(arguments, socket: socket), "/dev/null"], environment: environment, stdin: input)
    }

    func testOnATerminalProgressAndViewsRedrawInPlaceAndQuestionsAreAskedThere() throws {
        let serve = try ServeProcess(directory: directory, arguments: ["--registry", try registry()])
        defer { serve.stop() }
        for socket in [nil, serve.socketPath] {
            try checkOnATerminal(socket: socket)
        }
    }

    private func checkOnATerminal(socket: String?) throws {
        let shown = try onTerminal(["show", "--steps", "4", "--total", "4194304", "--pause", "0.15", "--views", "3", "--ask", "confirm,choice,prompts"],
                                   input: "y\nb\nsecret-word\n", socket: socket)
        XCTAssertEqual(shown.status, 0, shown.stdout)
        let text = shown.stdout
        // One progress line redrawn in place (carriage return, clear line), with rate and size.
        XCTAssertTrue(text.contains("\r\u{1B}[Kfile.bin  [#####...............]  25%  1.0 MiB/4.0 MiB"), text)
        XCTAssertTrue(text.contains("100%  4.0 MiB/4.0 MiB"), text)
        XCTAssertTrue(text.contains("MiB/s"), text)
        // Each later view moves up over the previous one (3 lines) and redraws it.
        XCTAssertEqual(text.components(separatedBy: "\u{1B}[3F").count - 1, 2, text)
        // Asked on the terminal; the cursor a view hid is shown again for the question and at the end.
        XCTAssertTrue(text.contains("Go ahead? [y/N] "), text)
        XCTAssertTrue(text.hasSuffix("answers  yes, beta, secret-word\r\n"), text)
        let hidden = try XCTUnwrap(text.range(of: "\u{1B}[?25l", options: .backwards))
        let shownAgain = try XCTUnwrap(text.range(of: "\u{1B}[?25h", options: .backwards))
        XCTAssertLessThan(hidden.lowerBound, shownAgain.lowerBound)
        XCTAssertFalse(text.contains("secret-word\r\n\u{1B}"), "a hidden prompt must not echo what was typed")
    }

    func testCtrlCDuringALiveViewRestoresTheTerminalAndExits130() throws {
        let serve = try ServeProcess(directory: directory, arguments: ["--registry", try registry()])
        defer { serve.stop() }
        for socket in [nil, serve.socketPath] {
            try checkCtrlCDuringALiveView(socket: socket)
        }
    }

    private func checkCtrlCDuringALiveView(socket: String?) throws {
        let session = try SpawnedProcess("/usr/bin/script", ["-qec", try commandLine(["show", "--views", "1", "--hold", "30"], socket: socket),
                                                             directory.file("typescript")], environment: environment, captureOutput: true)
        defer { session.signal(SIGKILL); session.wait() }
        XCTAssertNotNil(session.readOutput(until: "box", timeout: 20), "the view was not drawn")
        let pid = try ProcessRunner.run("/usr/bin/pgrep", ["-f", "show --views 1 --hold 30"]).stdout.split(separator: "\n").compactMap { Int32($0) }
            .first { (try? String(contentsOfFile: "/proc/\($0)/comm", encoding: .utf8))?.hasPrefix("termind") == true }
        kill(try XCTUnwrap(pid, "termind is not running"), SIGINT)
        XCTAssertEqual(session.wait(), 130)
        let screen = try String(contentsOfFile: directory.file("typescript"), encoding: .utf8)
        XCTAssertTrue(screen.contains("\u{1B}[?25h"), "the cursor stays hidden: \(screen.debugDescription)")
    }

    /// A stream reaches the client only with what it declares: another event kind, or a
    /// question on another topic, stops it with a reason (in-process and through serve).
    func testAnUndeclaredEventOrQuestionStopsTheStream() throws {
        let serve = try ServeProcess(directory: directory, arguments: ["--registry", try registry()])
        defer { serve.stop() }
        for socket in [nil, serve.socketPath] {
            let event = try run(["show", "--undeclared", "true", "--stdout", "never\n"], socket: socket)
            XCTAssertEqual(event.status, 1, event.stderr)
            XCTAssertTrue(event.stderr.contains("emitted a 'surprise' event, which it does not declare"), event.stderr)
            XCTAssertFalse(event.stdout.contains("answers"), "the stream went on to its result: \(event.stdout)")
            let question = try run(["--yes", "show", "--ask", "undeclared"], socket: socket)
            XCTAssertEqual(question.status, 1, question.stderr)
            XCTAssertTrue(question.stderr.contains("asked a 'confirm' question on topic 'fixture.elsewhere', which it does not declare"), question.stderr)
        }
        let listed = try run(["--json", "contracts", "fixture-streams.show@1"])
        let info = try JSONCoding.parse(Data(listed.stdout.utf8), source: "contracts")
        guard case .array(let contracts)? = info["contracts"], let show = contracts.first else { return XCTFail(listed.stdout) }
        XCTAssertEqual(show["questions"]?["fixture.confirm"], .string("confirm"))
        XCTAssertEqual(show["events"]?["progress"]?["required"], .array([.string("done")]))
    }

    func testScriptedAnswersAnswerByTopicYesAnswersOnlyConfirmationsAndSecretsNeedAPrivateFile() throws {
        let yes = try run(["--yes", "show", "--ask", "confirm,choice"])
        XCTAssertEqual(yes.stdout, "answers  yes, unanswered\n", yes.stderr)

        let book = try directory.write("answers.json", #"{"fixture.choice": "beta", "fixture.confirm": false, "fixture.prompts": ["w1"]}"#)
        chmod(book, 0o600)
        let scripted = try run(["--answers", book, "show", "--ask", "confirm,choice,prompts"])
        XCTAssertEqual(scripted.stdout, "answers  no, beta, w1\n", scripted.stderr)

        chmod(book, 0o644)
        let exposed = try run(["--answers", book, "show", "--ask", "prompts"])
        XCTAssertEqual(exposed.status, 1)
        XCTAssertTrue(exposed.stderr.contains("\"fixture.prompts\" answers a secret prompt, so the answers file must be readable by you alone"), exposed.stderr)

        let wrong = try directory.write("wrong.json", #"{"fixture.choice": "gamma"}"#)
        let refused = try run(["--answers", wrong, "show", "--ask", "choice"])
        XCTAssertEqual(refused.status, 2, "a wrong scripted answer is bad input")
        XCTAssertTrue(refused.stderr.contains(#""fixture.choice" must be one of "alpha", "beta", "none""#), refused.stderr)
        let notJSON = try directory.write("broken.json", "{")
        XCTAssertEqual(try run(["--answers", notJSON, "show"]).status, 2)
    }
}
