import Foundation
import Synchronization
import TermindCore
import TermindHarness
import XCTest

/// `termind ssh` (the Workspaces feature's `workspaces.terminal@1`) through the generic
/// client's terminal bridge, on a real pseudo-terminal against a real sshd: the remote
/// terminal gets the local size and every window change, keys (Ctrl-C included) go to the
/// remote side, the exit status is termind's, and the local terminal is restored however
/// the session ends — in-process and inside `termind serve`.
final class TerminalSessionTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        server = try SSHServerFixture.withNewKey(in: directory)
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERM"] = "xterm-256color"
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET", "TERMIND_STORE"] { environment.removeValue(forKey: name) }
        return environment
    }

    private func ssh(socket: String? = nil) -> [String] {
        let target = "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1"
        let boot = socket.map { ["--socket", $0] } ?? ["--local", "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
        return [FeatureHarness.buildDirectory + "/termind"] + boot + ["ssh", target, "--accept-host-key", "once"]
    }

    /// Typed at the remote shell once it is up (the marker is not in what is typed); with
    /// `touching`, the remote shell (this machine, this user) also creates that file.
    /// READY is printed before `path` is touched: what `whenUp` does to the session then
    /// cannot cut the line off (it did, now and then, on a loaded machine).
    private func ready(touching path: String? = nil) -> [PseudoTerminal.Step] {
        [.send("echo READY-$((40+2))" + (path.map { "; touch '\($0)'" } ?? "") + "\n"), .expect("READY-42")]
    }

    /// Runs `action` on a thread of its own once `path` exists (the session is up, however
    /// long that took) and its READY line had a moment to reach the terminal, or after 60 s.
    private func whenUp(_ path: String, _ action: @escaping @Sendable () -> Void) {
        Thread.detachNewThread {
            _ = waitUntil(seconds: 60) { FileManager.default.fileExists(atPath: path) }
            Thread.sleep(forTimeInterval: 0.3)
            action()
        }
    }

    private func checkSizesAndExit(_ argv: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        let report = try PseudoTerminal.run(argv, steps: ready() + [
            .send("echo TERM=$TERM; stty size\n"), .expect("30 100"),
            // Asked until the window change has arrived (it races the keys otherwise).
            .resize(rows: 40, columns: 120),
            .send("until [ \"$(stty size)\" = '40 120' ]; do sleep 0.1; done; echo SIZE-$((100+20))\n"), .expect("SIZE-120"),
            .send("exit 5\n"),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true], report.output, file: file, line: line)
        XCTAssertTrue(report.output.contains("TERM=xterm-256color"), report.output, file: file, line: line)
        XCTAssertEqual(report.status, 5, report.output, file: file, line: line)
        XCTAssertTrue(report.restored, "the terminal's settings were not restored", file: file, line: line)
    }

    func testTheRemoteTerminalFollowsTheLocalSizeAndTheExitStatusIsTermindsInProcessAndInsideServe() throws {
        try checkSizesAndExit(ssh())
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        try checkSizesAndExit(ssh(socket: serve.socketPath))
        XCTAssertEqual(server.acceptedConnections(), 1, "the session ran on the server's pooled connection")
    }

    func testCtrlCGoesToTheRemoteSideAndSIGTERMSIGHUPOrSIGINTEndTheSessionWithTheTerminalRestored() throws {
        let interrupted = try PseudoTerminal.run(ssh(), steps: ready() + [
            .send("sleep 30; echo SLE''PT\n"), .sleep(0.5), .send("\u{3}"), .send("echo AFTER-$((1+1))\n"), .expect("AFTER-2"), .send("exit 9\n"),
        ], environment: environment)
        XCTAssertEqual(interrupted.met, [true, true], interrupted.output)
        XCTAssertFalse(interrupted.output.contains("SLEPT"), "Ctrl-C interrupts the remote command")
        XCTAssertEqual(interrupted.status, 9, interrupted.output)
        XCTAssertTrue(interrupted.restored)
        for (signal, status) in [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)] {
            let ended = try PseudoTerminal.run(ssh(), steps: ready() + [.send("sleep 30\n"), .sleep(0.5), .signal(signal)], environment: environment)
            XCTAssertEqual(ended.status, status, "\(signal): \(ended.output)")
            XCTAssertTrue(ended.restored, "\(signal) left the terminal raw")
        }
    }

    /// OpenSSH's escape sequences after a newline: `~?` lists them, `~~` sends one tilde, a
    /// tilde mid-line is just typed, `~.` ends the session (255, the terminal restored).
    func testEscapeSequencesAfterANewlineListSendATildeAndDisconnect() throws {
        let report = try PseudoTerminal.run(ssh(), steps: ready() + [
            .send("~?"), .expect("Supported escape sequences"),
            .send("echo mid~.li''ne\n"), .expect("mid~.line"),
            .send("~~X-$((2+3))\n"), .expect(": ~X-5"),
            .send("~."),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true, true], report.output)
        XCTAssertFalse(report.output.contains("~~X-5"), "~~ sent two tildes: \(report.output)")
        XCTAssertEqual(report.status, 255, report.output)
        XCTAssertTrue(report.output.contains("Connection closed."), report.output)
        XCTAssertTrue(report.restored, "~. left the terminal raw")
    }

    /// `~^Z` stops termind as a job of the local shell, with the terminal cooked meanwhile;
    /// `fg` brings the session back raw. Inside `serve` the server reads the keys itself, and
    /// must leave the terminal to the shell until `fg`.
    func testEscapeControlZSuspendsTermindAndFgResumesTheSession() throws {
        try checkSuspend(ssh())
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        try checkSuspend(ssh(socket: serve.socketPath))
    }

    private func checkSuspend(_ argv: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        let command = Shell.quoted(argv)
        var environment = self.environment
        environment["PS1"] = "local$ "
        // Only the local shell knows it: what it prints proves the keys went there.
        environment["TERMIND_TEST_SIDE"] = "local"
        let gate = directory.file("gate-\(UUID().uuidString.prefix(8))")
        let report = try PseudoTerminal.run(["/bin/bash", "--norc", "--noprofile", "-i"], steps: [
            .send(command + "\n"),
        ] + ready() + [
            // Printed by the remote side while termind is stopped (once the local shell has
            // made the gate file, on this machine): it must wait for fg.
            .send("(while [ ! -e '\(gate)' ]; do sleep 0.1; done; echo LATE-$((6*7))) &\n"),
            .send("~\u{1A}"), .expect("Stopped"),
            .send("touch '\(gate)'; echo SIDE-${TERMIND_TEST_SIDE}-$((1+1))\n"), .expect("SIDE-local-2"), .sleep(1),
            .send("fg\n"), .sleep(1),
            .send("\necho BACK-$((2+2))\n"), .expect("BACK-4"),
            // The local shell's prompt again: termind has ended.
            .send("exit 3\n"), .expect("local$ "),
            .send("exit\n"),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true, true, true], report.output, file: file, line: line)
        XCTAssertEqual(report.status, 3, "the resumed session's status: \(report.output)", file: file, line: line)
        let local = report.output.range(of: "SIDE-local-2"), late = report.output.range(of: "LATE-42")
        XCTAssertNotNil(late, report.output, file: file, line: line)
        XCTAssertLessThan(local?.lowerBound ?? report.output.endIndex, late?.lowerBound ?? report.output.startIndex,
                          "the remote output reached the terminal while termind was stopped: \(report.output)", file: file, line: line)
    }

    /// The other ways out: the server going away mid-session, and a session that fails
    /// before it starts (refused authentication) — the terminal is restored either way.
    func testTheTerminalIsRestoredWhenTheServerGoesAwayOrTheSessionFails() throws {
        let serve = try ServeProcess(directory: directory, arguments: [])
        let up = directory.file("up-serve")
        whenUp(up) { serve.process.signal(SIGKILL) }
        let lost = try PseudoTerminal.run(ssh(socket: serve.socketPath), steps: ready(touching: up), environment: environment)
        _ = serve.process.wait()
        XCTAssertEqual(lost.met, [true], lost.output)
        XCTAssertEqual(lost.status, 1, lost.output)
        XCTAssertTrue(lost.output.contains("closed the connection"), lost.output)
        XCTAssertTrue(lost.restored, "the server's end left the terminal raw")

        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("stranger")]).status, 0)
        let target = "ssh -p \(server.port) -i \(directory.file("stranger")) \(NSUserName())@127.0.0.1"
        let refused = try PseudoTerminal.run([FeatureHarness.buildDirectory + "/termind", "--local", "--store", directory.file("db.sqlite"), "--secrets-key",
                                              directory.file("k"), "ssh", target, "--accept-host-key", "once"], steps: [], environment: environment)
        XCTAssertEqual(refused.status, 1, refused.output)
        XCTAssertTrue(refused.restored, "a failed session left the terminal raw")
    }

    /// sshd killed under a running session (a crash, a pulled cable): termind says the
    /// connection is gone, exits non-zero and leaves the terminal as it found it — in-process
    /// and inside serve.
    func testTheTerminalIsRestoredWhenSshdIsKilled() throws {
        let server = self.server!
        let up = directory.file("up-local")
        whenUp(up) { server.kill() }
        let local = try PseudoTerminal.run(ssh(), steps: ready(touching: up), environment: environment)
        XCTAssertEqual(local.met, [true], local.output)
        XCTAssertNotEqual(local.status, 0, local.output)
        XCTAssertNotNil(local.status, "termind did not end when sshd went away: \(local.output)")
        XCTAssertTrue(local.restored, "a killed sshd left the terminal raw")

        try server.restart()
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        let upServed = directory.file("up-served")
        whenUp(upServed) { server.kill() }
        let served = try PseudoTerminal.run(ssh(socket: serve.socketPath), steps: ready(touching: upServed), environment: environment)
        XCTAssertEqual(served.met, [true], served.output)
        XCTAssertNotEqual(served.status, 0, served.output)
        XCTAssertNotNil(served.status)
        XCTAssertTrue(served.restored, "a killed sshd left the terminal raw (inside serve)")
    }

    /// Questions asked while connecting see a cooked terminal: a passphrase typed with
    /// Enter (a carriage return, as a real terminal sends it) is read, and the terminal goes
    /// raw only once the session has started.
    func testAPassphraseIsAskedOnACookedTerminalBeforeTheSessionGoesRaw() throws {
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "pass-phrase-7", "-f", directory.file("locked")]).status, 0)
        let locked = try String(contentsOfFile: directory.file("locked.pub"), encoding: .utf8)
        try (try String(contentsOfFile: server.directory.file("authorized_keys"), encoding: .utf8) + locked)
            .write(toFile: server.directory.file("authorized_keys"), atomically: true, encoding: .utf8)
        let target = "ssh -p \(server.port) -i \(directory.file("locked")) \(NSUserName())@127.0.0.1"
        let argv = [FeatureHarness.buildDirectory + "/termind", "--local", "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"),
                    "ssh", target, "--accept-host-key", "once"]
        let report = try PseudoTerminal.run(argv, steps: [.expect("Enter passphrase for key"), .send("pass-phrase-7\r")] + ready() + [.send("exit 4\n")],
                                            environment: environment)
        XCTAssertEqual(report.met, [true, true], report.output)
        XCTAssertEqual(report.status, 4, report.output)
        XCTAssertFalse(report.output.contains("pass-phrase-7"), "the passphrase was echoed")
        XCTAssertTrue(report.restored)
    }

    /// A command's whole output reaches the terminal, however soon it ends (the engine moves
    /// the terminal from the channel's first byte); with stdout a pipe whose reader goes away,
    /// termind ends as a pipeline's writer does: 141, no message.
    func testAShortCommandsOutputAllArrivesAndAGoneReaderOfStdoutEndsWith141() throws {
        for round in 1...3 {
            let report = try PseudoTerminal.run(ssh() + ["--", "echo EARLY-$((\(round)+4)); exit \(round)"], steps: [.expect("EARLY-\(round + 4)")],
                                                environment: environment)
            XCTAssertEqual(report.met, [true], "round \(round): \(report.output)")
            XCTAssertEqual(report.status, Int(round), report.output)
        }
        // On a terminal and without one, in-process and inside serve (where the terminal's
        // session is a durable one): the output's reader gone is 141, not the remote status,
        // and leaves no session behind; an output that cannot be written (a full disk) fails
        // the command and says why.
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        for argv in [ssh(), ssh(socket: serve.socketPath)] {
            let command = Shell.quoted(argv)
            let piped = try PseudoTerminal.run(["/bin/bash", "--norc", "--noprofile", "-c",
                                                command + " -- 'seq 1 10000000' | head -1; echo STATUS=${PIPESTATUS[0]}"],
                                               steps: [.expect("STATUS=")], environment: environment)
            XCTAssertTrue(piped.output.contains("STATUS=141"), piped.output)
            XCTAssertFalse(piped.output.contains("killed by"), piped.output)
            let fullTerminal = try PseudoTerminal.run(["/bin/bash", "--norc", "--noprofile", "-c",
                                                      command + " -- 'echo LOST; exit 0' >/dev/full; echo STATUS=$?"],
                                                     steps: [.expect("STATUS=")], environment: environment)
            XCTAssertTrue(fullTerminal.output.contains("No space left on device"), fullTerminal.output)
            XCTAssertTrue(fullTerminal.output.contains("STATUS=1"), fullTerminal.output)
            let noTerminal = try ProcessRunner.run("/bin/bash", ["--norc", "--noprofile", "-c",
                                                                 command + " -- 'seq 1 10000000' </dev/null | head -1; exit ${PIPESTATUS[0]}"], environment: environment)
            XCTAssertEqual(noTerminal.status, 141, noTerminal.stderr)
            XCTAssertEqual(noTerminal.stdout, "1\n")
            XCTAssertEqual(noTerminal.stderr, "")
            let full = try ProcessRunner.run("/bin/bash", ["--norc", "--noprofile", "-c", command + " -- 'echo LOST; exit 0' </dev/null >/dev/full"],
                                             environment: environment)
            XCTAssertEqual(full.status, 1, full.stderr)
            XCTAssertTrue(full.stderr.contains("No space left on device"), full.stderr)
        }
        let sessions = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["--socket", serve.socketPath, "sessions", "--json"], environment: environment)
        XCTAssertEqual(sessions.status, 0, sessions.stderr)
        XCTAssertFalse(sessions.stdout.contains("\"detached\"") || sessions.stdout.contains("\"attached\""), "a session was left behind: \(sessions.stdout)")
    }

    /// A command run in-process ends the process while the kernel's threads still run (the
    /// SSH engine closing its connection, executor workers). The client must end without
    /// running the process's exit handlers under those threads: with `exit` it died of
    /// "double free" on the engine thread in 2 of 3,600 runs under load, and CI caught one.
    /// This runs many short sessions on terminals, four at a time, half of them ending
    /// because the reader of their output went away while the remote side still sends, and
    /// holds each to its exit status and output. `TERMIND_EXIT_RUNS` sets how many
    /// (`make soak` runs 3,000; `make test` runs 24).
    func testManyShortInProcessSessionsEndWithTheRightStatusAndNeverCrash() throws {
        let command = Shell.quoted(ssh() + ["--"])
        // (the shell command, what its terminal must show)
        let kinds = [(command + " 'echo OUT-$((1+2)); exit 3'; echo STATUS=$?", "OUT-3\r\nSTATUS=3"),
                     (command + " 'seq 1 10000000' | head -1; echo STATUS=${PIPESTATUS[0]}", "1\r\nSTATUS=141")]
        let environment = self.environment
        let runs = Int(ProcessInfo.processInfo.environment["TERMIND_EXIT_RUNS"] ?? "") ?? 24
        let failures = Mutex<[String]>([])
        let next = Mutex(0)
        // Four threads of our own: concurrentPerform would run only as many as there are cores.
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                while true {
                    let run = next.withLock { count -> Int in
                        count += 1
                        return count
                    }
                    guard run <= runs else { return }
                    let (line, shown) = kinds[run % 2]
                    do {
                        let report = try PseudoTerminal.run(["/bin/bash", "--norc", "--noprofile", "-c", line], steps: [.expect("STATUS=")],
                                                            environment: environment)
                        if report.met != [true] || !report.output.contains(shown) || report.output.contains("crashed") {
                            failures.withLock { $0.append("run \(run): wanted \(shown.debugDescription)\n\(report.output)") }
                        }
                    } catch {
                        failures.withLock { $0.append("run \(run): \(error)") }
                    }
                }
            }
        }
        group.wait()
        let failed = failures.withLock { $0 }
        XCTAssertTrue(failed.isEmpty, "\(failed.count) of \(runs) runs failed; the first:\n\(failed.first ?? "")")
    }

    func testWithoutATerminalNoRemoteTerminalIsAllocatedAndInputGoesToTheShell() throws {
        var environment = self.environment
        environment["TERM"] = nil
        let result = try ProcessRunner.run("/usr/bin/setsid", ["-w"] + ssh(), environment: environment, stdin: "tty; echo piped; exit 7\n")
        XCTAssertEqual(result.status, 7, result.stderr)
        XCTAssertTrue(result.stdout.contains("not a tty"), result.stdout)
        XCTAssertTrue(result.stdout.contains("piped"), result.stdout)
    }
}
