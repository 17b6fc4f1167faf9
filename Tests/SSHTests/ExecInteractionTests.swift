import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind exec` as a person or a script uses it, against a real sshd: output that is not
/// UTF-8 in --json, questions nobody can answer without a terminal, a passphrase asked on
/// one, Ctrl-C and SIGTERM (in-process and inside `termind serve`), and its debug log.
final class ExecInteractionTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private let user = NSUserName()

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("id")]).status, 0)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "lock-phrase-9", "-f", directory.file("locked")]).status, 0)
        let keys = try ["id", "locked"].map { try String(contentsOfFile: directory.file($0 + ".pub"), encoding: .utf8) }
        server = try SSHServerFixture(authorizedKeys: keys)
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("termind.sock")
        environment["SSH_AUTH_SOCK"] = nil
        // Some runs are on script(1)'s terminal: a crash there prints its backtrace at once.
        return printingBacktraces(environment)
    }

    private var store: [String] { ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] }
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    /// Runs termind in a new session without a controlling terminal (as from cron or CI).
    private func run(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run("/usr/bin/setsid", ["-w", termind] + store + arguments, environment: environment, stdin: stdin)
    }

    private func quick(_ key: String = "id", user: String? = nil) -> String {
        "ssh -p \(server.port) -i \(directory.file(key)) \(user ?? self.user)@127.0.0.1"
    }

    func testJSONCarriesOutputThatIsNotUTF8AsBase64() throws {
        let result = try run(["--json", "exec", quick(), "--accept-host-key", "once", "--", #"printf '\377\376ok\200'; printf 'plain' >&2"#])
        XCTAssertEqual(result.status, 0, result.stderr)
        let report = try JSONCoding.parse(Data(result.stdout.utf8), source: "stdout")
        XCTAssertEqual(report["stdoutEncoding"], .string("base64"))
        XCTAssertEqual(report["stdout"]?.stringValue.flatMap { Data(base64Encoded: $0) }, Data([0xFF, 0xFE, 0x6F, 0x6B, 0x80]))
        XCTAssertEqual(report["stderrEncoding"], .string("utf-8"))
        XCTAssertTrue(report["stderr"]?.stringValue?.hasSuffix("plain") == true, "\(report["stderr"] ?? .null)")  // (stderr ends with the command's own: the account's shell start-up files may print first)
        XCTAssertEqual(report["truncated"], .bool(false))
    }

    func testAnUnknownHostKeyWithoutATerminalSaysSoAndNamesTheRemedies() throws {
        let result = try run(["exec", quick(), "--", "true"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("is not trusted yet, and there is no terminal to ask"), result.stderr)
        XCTAssertTrue(result.stderr.contains("--accept-host-key once"), result.stderr)
        let line = try XCTUnwrap(server.hostKeys["ssh-ed25519"])
        XCTAssertTrue(result.stderr.contains("termind vault knownhost add 127.0.0.1 '\(line)' --port \(server.port)"), result.stderr)
        // The remedy works as printed.
        XCTAssertEqual(try run(["vault", "knownhost", "add", "127.0.0.1", line, "--port", "\(server.port)"]).status, 0)
        XCTAssertEqual(try run(["exec", quick(), "--", "echo trusted"]).stdout, "trusted\n")
    }

    func testATypoAtTheHostKeyQuestionIsAskedAgainNeverTakenForAnAnswer() throws {
        let report = try PseudoTerminal.run([termind] + store + ["exec", quick(), "--", "echo trusted-once"], steps: [
            .expect("Trust it?"), .send("sav\n"), .expect("Please answer one of"), .expect("Trust it?"), .send("o\n"), .expect("trusted-once"),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true, true], report.output)
        XCTAssertEqual(report.status, 0, report.output)
        // Once: nothing was saved.
        XCTAssertEqual(try run(["--json", "vault", "knownhost", "list"]).stdout.contains("SHA256"), false)
        // n refuses, as the question's [N]o says.
        let refused = try PseudoTerminal.run([termind] + store + ["exec", quick(), "--", "true"], steps: [.expect("Trust it?"), .send("n\n")],
                                             environment: environment)
        XCTAssertEqual(refused.status, 1, refused.output)
    }

    func testSSHsOwnOptionsWorkUnquotedAndWordsAfterTheCommandAreItsOwn() throws {
        // ssh -p PORT -i KEY user@host, as ssh is typed: no quoted quick-connect line.
        let plain = try run(["exec", "-p", "\(server.port)", "-i", directory.file("id"), "\(user)@127.0.0.1", "--accept-host-key", "once", "echo", "-n", "plain-ok"])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertEqual(plain.stdout, "plain-ok", "-n after the command's first word is the command's")
        let viaSSH = try run(["ssh", "-p", "\(server.port)", "-l", user, "-i", directory.file("id"), "127.0.0.1", "--accept-host-key", "once", "-t", "--", "echo", "ssh-ok"])
        XCTAssertEqual(viaSSH.status, 0, viaSSH.stderr)
        XCTAssertEqual(viaSSH.stdout, "ssh-ok\n")
        // -N is not sent to the remote side: it names the command that does forwards only.
        let forwardsOnly = try run(["ssh", "box", "-N"])
        XCTAssertEqual(forwardsOnly.status, 2, forwardsOnly.stderr)
        XCTAssertTrue(forwardsOnly.stderr.contains("termind forward run box"), forwardsOnly.stderr)
        // An option ssh has and termind does not is refused, not run as a command.
        let unknown = try run(["ssh", "box", "-X"])
        XCTAssertEqual(unknown.status, 2, unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("unknown option -X"), unknown.stderr)
    }

    func testAPassphraseProtectedKeyIsAskedForOnATerminalAndNamedWithoutOne() throws {
        let without = try run(["exec", quick("locked"), "--accept-host-key", "once", "--", "true"])
        XCTAssertEqual(without.status, 1, without.stderr)
        XCTAssertTrue(without.stderr.contains("is passphrase-protected and there is no terminal"), without.stderr)
        let locked = (directory.file("locked") as NSString).standardizingPath  // as termind prints it
        XCTAssertTrue(without.stderr.contains("termind vault key import \(locked) --passphrase -"), without.stderr)
        XCTAssertTrue(without.stderr.contains("ssh-add"), without.stderr)
        // On a terminal (script(1) gives termind a pseudo-terminal fed from our input).
        let command = ([termind] + store + ["exec", quick("locked"), "--accept-host-key", "once", "--", "echo unlocked"]).map { "'\($0)'" }.joined(separator: " ")
        let onTerminal = try ProcessRunner.run("/usr/bin/script", ["-qec", command, "/dev/null"], environment: environment, stdin: "lock-phrase-9\n")
        XCTAssertEqual(onTerminal.status, 0, onTerminal.stdout + onTerminal.stderr)
        XCTAssertTrue(onTerminal.stdout.contains("Enter passphrase for key '\(locked)'"), onTerminal.stdout)
        XCTAssertTrue(onTerminal.stdout.contains("unlocked"), onTerminal.stdout)
        let wrong = try ProcessRunner.run("/usr/bin/script", ["-qec", command, "/dev/null"], environment: environment, stdin: "not-it\n")
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertTrue(wrong.stdout.contains("Wrong passphrase for the key file"), wrong.stdout)
    }

    func testInsideServeAProtectedKeysPassphraseIsAskedOnTheClientsTerminal() throws {
        let daemon = try SpawnedProcess(termind, store + ["serve"], environment: environment, captureOutput: false)
        defer { daemon.signal(SIGTERM); daemon.wait() }
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: directory.file("termind.sock")) { usleep(50_000) }
        let locked = (directory.file("locked") as NSString).standardizingPath
        let command = ([termind] + store + ["exec", quick("locked"), "--accept-host-key", "once", "--", "echo served"]).map { "'\($0)'" }.joined(separator: " ")
        let onTerminal = try ProcessRunner.run("/usr/bin/script", ["-qec", command, "/dev/null"], environment: environment, stdin: "lock-phrase-9\n")
        XCTAssertEqual(onTerminal.status, 0, onTerminal.stdout + onTerminal.stderr)
        XCTAssertTrue(onTerminal.stdout.contains("Enter passphrase for key '\(locked)'"), onTerminal.stdout)
        XCTAssertTrue(onTerminal.stdout.contains("served"), onTerminal.stdout)
        // It ran inside the server: a second run reuses the server's connection.
        let again = try ProcessRunner.run("/usr/bin/script", ["-qec", command, "/dev/null"], environment: environment, stdin: "lock-phrase-9\n")
        XCTAssertTrue(again.stdout.contains("served"), again.stdout)
        XCTAssertEqual(server.acceptedConnections(), 1, server.log)
        // Without a terminal at the client, the server's error names the remedies.
        let without = try run(["exec", quick("locked"), "--accept-host-key", "once", "--", "true"])
        XCTAssertEqual(without.status, 1, without.stderr)
        XCTAssertTrue(without.stderr.contains("is passphrase-protected and there is no terminal"), without.stderr)
    }

    func testCtrlCAtAPassphrasePromptEndsTermindAtOnceWith130() throws {
        let command = ([termind] + store + ["exec", quick("locked"), "--accept-host-key", "once", "--", "true"]).map { "'\($0)'" }.joined(separator: " ")
        let session = try SpawnedProcess("/usr/bin/script", ["-qec", command, "/dev/null"], environment: environment, captureOutput: true)
        XCTAssertNotNil(session.readOutput(until: "Enter passphrase", timeout: 20), "the prompt appeared")
        let pids = try ProcessRunner.run("/usr/bin/pgrep", ["-f", "exec ssh -p \(server.port) -i \(directory.file("locked"))"]).stdout
            .split(separator: "\n").compactMap { pid_t($0) }.filter { $0 != session.pid }
        XCTAssertFalse(pids.isEmpty, "termind runs under script")
        let started = Date()
        for pid in pids { kill(pid, SIGINT) }
        session.closeInput()
        _ = session.readAll()
        XCTAssertEqual(session.wait(), 130, "ended by Ctrl-C, without waiting for Enter")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
    }

    func testTheDebugLogHoldsConnectionEventsAndNoSecrets() throws {
        let log = directory.file("debug.log")
        let result = try run(["--debug", "--log-file", log, "exec", quick(), "--accept-host-key", "once", "--", "echo logged"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let text = try String(contentsOfFile: log, encoding: .utf8)
        for code in ["ssh.connect.start", "ssh.handshake.done", "ssh.trust.verdict", "ssh.auth.methods", "ssh.auth.attempt", "ssh.auth.done",
                     "ssh.channel.open", "ssh.channel.exit"] {
            XCTAssertTrue(text.contains(code), "\(code) missing from:\n\(text)")
        }
        XCTAssertTrue(text.contains("publickey"), text)
        let key = try String(contentsOfFile: directory.file("id"), encoding: .utf8)
        let body = key.split(separator: "\n").dropFirst().first.map(String.init) ?? "?"
        XCTAssertFalse(text.contains(body), "private key material in the log")
        XCTAssertFalse(text.contains("logged"), "remote output in the log")
    }

    func testStandardInputStreamsToTheCommandAsItArrives() throws {
        let client = try SpawnedProcess("/usr/bin/setsid", ["-w", termind] + store + ["--local", "exec", quick(), "--accept-host-key", "once", "--", "cat"],
                                        environment: environment, captureOutput: true)
        client.writeInput(Data("first\n".utf8))
        // The first line comes back while standard input is still open.
        let first = try XCTUnwrap(client.readOutput(until: "first\n", timeout: 20), "nothing came back before standard input ended")
        XCTAssertEqual(first, "first\n")
        client.writeInput(Data("second\n".utf8))
        client.closeInput()
        let (rest, errors) = client.readAll()
        XCTAssertEqual(client.wait(), 0, String(decoding: errors, as: UTF8.self))
        XCTAssertEqual(String(decoding: rest, as: UTF8.self), "second\n")
    }

    /// In-process, standard input is held back by the command's window, never dropped: far
    /// more than the stream's 256 buffered chunks arrive whole.
    func testAllOfALargeStandardInputReachesTheCommandInProcess() throws {
        let payload = directory.file("payload")
        XCTAssertEqual(try ProcessRunner.run("/bin/sh", ["-c", "head -c 48M /dev/urandom > \(payload)"]).status, 0)
        let expected = try ProcessRunner.run("/usr/bin/sha256sum", [payload]).stdout.split(separator: " ").first.map(String.init)
        let command = Shell.quoted([termind] + store + ["--local", "exec", quick(), "--accept-host-key", "once", "--", "sha256sum"])
        let result = try ProcessRunner.run("/usr/bin/setsid", ["-w", "/bin/sh", "-c", "exec \(command) < \(payload)"], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.split(separator: " ").first.map(String.init), expected)
    }

    /// Inside `termind serve`, a relative `-i` key file is the client's: the server resolves it
    /// against the client's working folder, not its own.
    func testInsideServeARelativeKeyFileIsTheClientsNotTheServers() throws {
        let daemon = try SpawnedProcess(termind, store + ["serve"], environment: environment, currentDirectory: "/", captureOutput: false)
        defer { daemon.signal(SIGTERM); daemon.wait() }
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: directory.file("termind.sock")) { usleep(50_000) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.file("termind.sock")), "termind serve is not listening")
        let result = try ProcessRunner.run("/usr/bin/setsid", ["-w", termind] + store + ["exec", "ssh -p \(server.port) -i ./id \(user)@127.0.0.1",
                                                                                         "--accept-host-key", "once", "--", "echo", "relative"],
                                           environment: environment, currentDirectory: directory.path)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout, "relative\n")
        // It ran inside the server: the server keeps the connection open for the next run
        // (an in-process run's connection ends with the process).
        XCTAssertEqual(server.acceptedConnections(), 1, "the command did not run inside serve")
    }

    func testWordsAfterTheSeparatorAreJoinedIntoOneRemoteCommandLineAsSSHJoinsThem() throws {
        let target = directory.file("joined.txt")
        let result = try run(["exec", quick(), "--accept-host-key", "once", "--", "echo", "a", "b", ">", target])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "a b\n", "the remote shell saw the redirection")
    }

    // MARK: - Signals

    /// Runs a command that records which signal reached it, then signals termind with
    /// `signal` once the command runs; returns termind's exit status and what was recorded.
    private func interrupt(with signal: Int32, serve: Bool) throws -> (status: Int32, recorded: String, said: String) {
        // sshd delivers signal requests only to unprivileged users' sessions (see SSHChannelTests).
        try XCTSkipUnless(getuid() == 0, "needs root to create a throwaway account")
        let throwaway = try ThrowawayAccount()
        defer { throwaway.remove() }
        let account = throwaway.name
        chmod(server.directory.file("authorized_keys"), 0o644)
        let marker = directory.file("marker-\(serve)-\(signal)")
        chmod(directory.path, 0o777)
        let tag = "sleep 41.\(signal)"
        // In the foreground: a non-interactive shell starts background commands with SIGINT
        // ignored. Its stderr goes nowhere: the shell reports "Terminated" there once the
        // channel (and the pipe) closed, and SIGPIPE would end it before the trap runs.
        let script = "exec 2>/dev/null; trap 'echo INT > \(marker); exit 0' INT; trap 'echo TERM > \(marker); exit 0' TERM; \(tag)"
        var daemon: SpawnedProcess?
        let serveLog = directory.file("serve-\(signal).log")
        var environment = self.environment
        if serve {
            // The test folder is open to the throwaway account (for the marker); the server's
            // socket needs a folder of its own that only we can enter, or serve refuses to start.
            let socket = directory.file("run-\(signal)/termind.sock")
            environment["TERMIND_SOCKET"] = socket
            // Its debug log goes into a failure's message: what it saw of the client going.
            daemon = try SpawnedProcess(termind, store + ["--debug", "--log-file", serveLog, "serve"], environment: environment, captureOutput: false)
            for _ in 0..<100 where !FileManager.default.fileExists(atPath: socket) { usleep(50_000) }
            XCTAssertTrue(FileManager.default.fileExists(atPath: socket), "termind serve is not listening")
        }
        defer { daemon?.signal(SIGTERM); daemon?.wait() }
        let client = try SpawnedProcess(termind, store + (serve ? [] : ["--local"]) + ["exec", quick(user: account), "--accept-host-key", "once", "--", script],
                                        environment: environment, captureOutput: true)
        client.closeInput()
        var running = false
        for _ in 0..<100 where !running {
            running = try ProcessRunner.run("/usr/bin/pgrep", ["-u", account, "-f", tag]).status == 0
            if !running { usleep(100_000) }
        }
        XCTAssertTrue(running, "the remote command started")
        client.signal(signal)
        let (_, errors) = client.readAll()
        let status = client.wait()
        var recorded = ""
        for _ in 0..<50 where recorded.isEmpty {
            recorded = ((try? String(contentsOfFile: marker, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            if recorded.isEmpty { usleep(100_000) }
        }
        let served = serve ? "; serve's log: " + ((try? String(contentsOfFile: serveLog, encoding: .utf8)) ?? "(none)") : ""
        XCTAssertFalse(try ProcessRunner.run("/usr/bin/pgrep", ["-u", account, "-f", tag]).status == 0, "the remote command still runs\(served)")
        if recorded.isEmpty { XCTFail("nothing reached the remote command; termind said: \(String(decoding: errors, as: UTF8.self)); sshd: \(server.log)\(served)") }
        return (status, recorded, String(decoding: errors, as: UTF8.self))
    }

    func testCtrlCEndsTheRemoteCommandWithINTAndExits130() throws {
        let interrupted = try interrupt(with: SIGINT, serve: false)
        XCTAssertEqual(interrupted.status, 130)
        XCTAssertEqual(interrupted.recorded, "INT")
    }

    func testSIGTERMEndsTheRemoteCommandWithTERMAndExits143() throws {
        let terminated = try interrupt(with: SIGTERM, serve: false)
        XCTAssertEqual(terminated.status, 143)
        XCTAssertEqual(terminated.recorded, "TERM")
    }

    func testInsideServeTheSignalTravelsToTheServerAndOnToTheRemoteCommand() throws {
        let interrupted = try interrupt(with: SIGINT, serve: true)
        XCTAssertEqual(interrupted.status, 130)
        XCTAssertEqual(interrupted.recorded, "INT")
        // One line says so (the rest of standard error is the remote side's).
        XCTAssertEqual(interrupted.said.components(separatedBy: "termind: Cancelled by SIGINT; the operation on the server was stopped.\n").count, 2, interrupted.said)
    }

    /// A client killed mid-stream cannot say anything: the server sees it go and stops the
    /// remote command (its channel closes with TERM).
    func testAClientKilledInsideServeEndsTheRemoteCommand() throws {
        let killed = try interrupt(with: SIGKILL, serve: true)
        XCTAssertEqual(killed.status, 137)
        XCTAssertEqual(killed.recorded, "TERM")
    }
}
