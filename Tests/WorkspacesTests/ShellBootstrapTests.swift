import Foundation
import TermindCore
import TermindHarness
import WorkspacesRules
import XCTest

/// The shell integration bootstrap, run by real bash and zsh on a pseudo-terminal: the marks
/// they then print (read back with TerminalScanner) and what stays out of history.
final class ShellBootstrapTests: XCTestCase {
    private func run(_ shell: [String], commands: [String], twice: Bool = false, promptCommand: String? = nil) throws -> (marks: [TerminalMark], output: String) {
        let directory = try TemporaryDirectory("termind-bootstrap")
        defer { directory.remove() }
        var environment = ProcessInfo.processInfo.environment
        environment["PS1"] = "$ "
        environment["HOME"] = directory.path
        environment["HISTFILE"] = directory.file("history")
        environment["PROMPT_COMMAND"] = promptCommand
        let line = ShellBootstrap.line(nonce: "n0nce1")
        var steps: [PseudoTerminal.Step] = [.expect("$ "), .send(line), .expect("termind-ready;n0nce1")]
        if twice { steps += [.send(line), .expect("termind-ready;n0nce1")] }
        steps.append(.sleep(0.3))
        for command in commands { steps += [.send(command + "\n"), .sleep(0.6)] }
        steps += [.send("exit\n")]
        let report = try PseudoTerminal.run(shell, steps: steps, environment: environment)
        XCTAssertEqual(report.met.prefix(twice ? 3 : 2).allSatisfy { $0 }, true, report.output)
        var scanner = TerminalScanner()
        return (scanner.scan(Array(report.output.utf8)), report.output)
    }

    private func commands(_ marks: [TerminalMark]) -> [(command: String?, status: Int?, duration: Int?)] {
        var result: [(String?, Int?, Int?)] = []
        var pending: String??
        for mark in marks {
            switch mark {
            case .commandExecuted(let line): pending = .some(line)
            case .commandFinished(let status, let duration):
                if let line = pending { result.append((line.map(HistoryText.normalized), status, duration)) }
                pending = nil
            default: break
            }
        }
        return result
    }

    func testBashReportsEachCommandWithItsStatusDurationAndFolderAndLeavesNoTraceInHistory() throws {
        let (marks, output) = try run(["/bin/bash", "--norc", "--noprofile", "-i"],
                                      commands: ["echo hi there", "cd /tmp && false", "sleep 0.2; echo é \\\n  continued", "history"])
        XCTAssertTrue(marks.contains(.bootstrapReady(nonce: "n0nce1")))
        let seen = commands(marks)
        XCTAssertEqual(seen.map(\.command), ["echo hi there", "cd /tmp && false", "sleep 0.2; echo é   continued", "history"], output)
        XCTAssertEqual(seen.map(\.status), [0, 1, 0, 0])
        XCTAssertGreaterThanOrEqual(seen[2].duration ?? -1, 200, "measured by the shell")
        XCTAssertTrue(marks.contains(.workingDirectory("/tmp")), "OSC 7 after cd")
        XCTAssertTrue(marks.contains(.promptStart) && marks.contains(.commandStart))
        // The bootstrap is not in bash's history, and its helpers never count as commands.
        let listed = output.components(separatedBy: "history\r\n").last ?? ""
        XCTAssertFalse(listed.contains("termind-ready"), listed)
        XCTAssertFalse(seen.contains { $0.command?.contains("__termind") == true })
    }

    func testZshReportsEachCommandToo() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh") || FileManager.default.isExecutableFile(atPath: "/bin/zsh") else {
            throw XCTSkip("zsh is not installed (scripts/lib.sh installs it)")
        }
        let zsh = FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh") ? "/usr/bin/zsh" : "/bin/zsh"
        let (marks, output) = try run([zsh, "-f", "-i"], commands: ["echo hi there", "cd /tmp && false", "sleep 0.2; echo é \\\n  continued"])
        let seen = commands(marks)
        XCTAssertEqual(seen.map(\.command), ["echo hi there", "cd /tmp && false", "sleep 0.2; echo é   continued"], output)
        XCTAssertEqual(seen.map(\.status), [0, 1, 0])
        XCTAssertGreaterThanOrEqual(seen[2].duration ?? -1, 200)
        XCTAssertTrue(marks.contains(.workingDirectory("/tmp")))
    }

    func testSendingTheBootstrapTwiceMarksEachPromptOnce() throws {
        let (marks, output) = try run(["/bin/bash", "--norc", "--noprofile", "-i"], commands: ["true"], twice: true)
        // From the last ready mark on: one prompt start per prompt, one report per command.
        let tail = Array(marks.drop { $0 != .bootstrapReady(nonce: "n0nce1") }.dropFirst().drop { $0 != .bootstrapReady(nonce: "n0nce1") }.dropFirst())
        // Two prompts (after the bootstrap, after `true`), each marked once; one command, reported once.
        XCTAssertEqual(tail.filter { $0 == .promptStart }.count, 2, output)
        XCTAssertEqual(tail.filter { $0 == .commandStart }.count, 2, output)
        XCTAssertEqual(tail.filter { if case .commandFinished = $0 { true } else { false } }.count, 1, output)
        XCTAssertEqual(commands(tail).map(\.command), ["true"], output)
        XCTAssertEqual(commands(tail).first?.status, 0)
    }

    func testHistoryTextJoinsContinuationsOnlyAndShowsTheFirstLine() {
        XCTAssertEqual(HistoryText.normalized("make \\\n  all\\\r\nx\n"), "make   allx")
        XCTAssertEqual(HistoryText.normalized("for i in 1 2\ndo echo $i\ndone"), "for i in 1 2\ndo echo $i\ndone")
        XCTAssertEqual(HistoryText.firstLine("for i in 1 2\ndo echo $i\ndone"), "for i in 1 2 …")
        XCTAssertEqual(HistoryText.firstLine("ls -l"), "ls -l")
        XCTAssertFalse(ShellBootstrap.line(nonce: "x").dropFirst().dropLast().contains("\n"), "one line of input")
        XCTAssertEqual(ShellBootstrap.line(nonce: "a'b;c").filter { $0 == "'" }.count, 2, "the nonce cannot break out of the quoting")
    }

    func testCommandsTheShellKeepsOutOfItsHistoryAreNotReported() throws {
        let (marks, output) = try run(["/bin/bash", "--norc", "--noprofile", "-i"],
                                      commands: ["HISTCONTROL=ignorespace", " echo secret-token", "echo shown", "set +o history", "echo unseen", "set -o history"])
        let seen = commands(marks).compactMap(\.command)
        XCTAssertTrue(seen.contains("echo shown"), output)
        XCTAssertFalse(seen.contains { $0.contains("secret-token") || $0.contains("unseen") }, "\(seen)")
        // The commands left out still end (their D mark) without a command line.
        XCTAssertTrue(marks.contains(.commandExecuted(commandLine: nil)))
    }

    /// A PROMPT_COMMAND of the user's (pyenv's ends in a semicolon) keeps running, once per prompt.
    func testAnExistingPromptCommandRunsOnBeforeTheMarks() throws {
        let (marks, output) = try run(["/bin/bash", "--norc", "--noprofile", "-i"], commands: ["echo hi"], promptCommand: "echo PC-RAN; ")
        XCTAssertFalse(output.contains("syntax error"), output)
        XCTAssertEqual(commands(marks).map(\.command), ["echo hi"], output)
        XCTAssertGreaterThanOrEqual(output.components(separatedBy: "PC-RAN").count - 1, 2, output)
    }
}
