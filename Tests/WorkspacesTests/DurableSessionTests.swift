import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// Durable sessions (`termind ssh` inside `termind serve`): the session belongs to the
/// server, a client detaches (`~d`, its window closed) and another attaches with the same
/// screen redrawn from the server's model — checked in real terminals (tmux) against a real
/// sshd, with full-screen programs.
final class DurableSessionTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: ServeProcess!
    private var tmux: TmuxTerminal!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("termind-durable")
        server = try SSHServerFixture.withNewKey(in: directory)
        serve = try ServeProcess(directory: directory, arguments: [])
        tmux = TmuxTerminal(directory: directory, environment: environment)
    }

    override func tearDown() {
        tmux?.stop()
        serve?.stop()
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("serve/control.sock"))
        environment["TERM"] = "xterm-256color"
        environment["PS1"] = "$ "
        return environment
    }

    private var termind: String { FeatureHarness.buildDirectory + "/termind" }
    private var target: String { "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1" }

    private func ssh(_ extra: [String] = []) -> [String] {
        // A plain shell with a known prompt, so screens compare exactly.
        [termind, "ssh", target, "--accept-host-key", "once"] + extra + ["--", "env PS1='$ ' bash --norc --noprofile -i"]
    }

    private func sessions() throws -> [JSONValue] {
        let result = try ProcessRunner.run(termind, ["--json", "sessions"], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "sessions")["sessions"]?.arrayValue ?? []
    }

    private func waitForState(_ id: Int, _ state: String, seconds: Double = 10) throws -> JSONValue? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let session = try sessions().first(where: { $0["id"]?.intValue == id }), session["state"]?.stringValue == state { return session }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return try sessions().first { $0["id"]?.intValue == id }
    }

    func testDetachWithTildeDAndAttachRedrawsTheSameScreenAndTheSessionGoesOn() throws {
        try tmux.open("first", ssh(), columns: 90, rows: 24)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        try tmux.send("first", "for i in $(seq 1 40); do printf '\\033[3%dmline %d\\033[0m\\n' $((i % 7)) $i; done; cd /tmp\r")
        XCTAssertTrue(try tmux.wait("first", for: "line 40").found)
        try tmux.send("first", "echo ready-$((6*7))\r")
        let before = try tmux.wait("first", for: "ready-42").screen
        // ~d right after a newline (Enter at an empty prompt first).
        try tmux.send("first", "\r")
        let shown = try XCTUnwrap(try tmux.settled("first") { Array($0.suffix(3)) == ["ready-42", "$", "$"] }, "no empty prompt after ready-42")
        try tmux.send("first", "~d")
        XCTAssertEqual(try tmux.waitForExit("first"), 0)
        let left = try tmux.screen("first")
        XCTAssertTrue(left.contains { $0.contains("Detached from session 1") }, left.joined(separator: "\n"))

        let listed = try XCTUnwrap(try waitForState(1, "detached"))
        XCTAssertEqual(listed["state"]?.stringValue, "detached")
        XCTAssertEqual(listed["size"]?.stringValue, "90x24")
        XCTAssertTrue(before.contains { $0.contains("ready-42") })

        // Output while nobody is attached is kept in the screen.
        try tmux.open("second", [termind, "attach", "1"], columns: 90, rows: 24)
        let redrawn = try tmux.wait("second", for: "ready-42").screen
        XCTAssertEqual(redrawn, shown, "the attached terminal shows the screen the session had")
        // The lines that scrolled off came first, into the terminal's own history.
        let history = try tmux.tmux(["capture-pane", "-p", "-S", "-100", "-t", "second:"])
        XCTAssertTrue(history.contains("line 1\n"), history)
        try tmux.send("second", "pwd; exit 7\r")
        XCTAssertEqual(try tmux.waitForExit("second"), 7)
        XCTAssertTrue(try tmux.screen("second").contains("/tmp"))
        XCTAssertEqual(try waitForState(1, "ended")?["exitStatus"]?.intValue, 7)
        // An ended session cannot be attached to, and says how it ended.
        let again = try ProcessRunner.run(termind, ["attach", "1"], environment: environment)
        XCTAssertEqual(again.status, 1)
        XCTAssertTrue(again.stderr.contains("ended with status 7"), again.stderr)
    }

    /// Output while nobody is attached is drawn into the session's screen. A client that
    /// hands over no terminal (any client of the socket) gets the session as `stdout` events
    /// and types as input; the next terminal that attaches is linked to the engine again.
    func testOutputWhileDetachedIsRedrawnAndAClientWithoutATerminalGetsTheSessionAsEvents() throws {
        try tmux.open("first", ssh(), columns: 90, rows: 24)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        try tmux.send("first", "\r")
        XCTAssertNotNil(try tmux.settled("first") { Array($0.reversed().drop { $0.isEmpty }.prefix(2)) == ["$", "$"] })
        try tmux.send("first", "~d")
        XCTAssertEqual(try tmux.waitForExit("first"), 0)
        XCTAssertEqual(try waitForState(1, "detached")?["state"]?.stringValue, "detached")
        let typed = try ProcessRunner.run(termind, ["broadcast", "--sessions", "1", "--", "echo AWAY-$((3*3))"], environment: environment)
        XCTAssertEqual(typed.status, 0, typed.stderr)
        Thread.sleep(forTimeInterval: 1)

        let client = try ControlClient(path: directory.file("serve/control.sock"))
        var id: JSONValue = .null
        var screen = Data()
        var started: StreamEvent?
        var typedThrough = false
        let body = #"{"session": 1, "scrollback": 0, "terminal": {"term": "xterm-256color", "columns": 90, "rows": 24}}"#
        let reply = try client.stream("workspaces.attach@1", body: Data(body.utf8), onOpen: { opened in
            id = opened
            // Whatever happens, the client leaves within 20 s (the assertions below then say why).
            DispatchQueue.global().asyncAfter(deadline: .now() + 20) { _ = client.streamMessage(id: opened, ["control": .object(["detach": .bool(true)])]) }
        }) { event in
            switch event.kind {
            case "started"?:
                started = event
            case "stdout"?:
                screen += event.data ?? Data()
                let text = String(decoding: screen, as: UTF8.self)
                if text.contains("AWAY-9"), !typedThrough {
                    typedThrough = true
                    _ = client.streamInput(id: id, Data("echo EVENTS-$((2*4))\r".utf8))
                }
                if text.contains("EVENTS-8\r\n") { _ = client.streamMessage(id: id, ["control": .object(["detach": .bool(true)])]) }
            default:
                break
            }
            return nil
        }
        XCTAssertEqual(started?["linked"], .bool(false), "a client that handed over nothing is not linked")
        XCTAssertTrue(String(decoding: screen, as: UTF8.self).contains("AWAY-9"), "the redraw holds what came while detached")
        XCTAssertEqual(try JSONCoding.parse(reply, source: "attach")["detached"], .bool(true))

        try tmux.open("second", [termind, "attach", "1", "--scrollback", "0"], columns: 90, rows: 24)
        let redrawn = try tmux.wait("second", for: "EVENTS-8").screen
        XCTAssertTrue(redrawn.contains { $0.contains("AWAY-9") }, redrawn.joined(separator: "\n"))
        try tmux.send("second", "echo LINKED-$((5+5)); exit 2\r")
        XCTAssertEqual(try tmux.waitForExit("second"), 2)
        XCTAssertTrue(try tmux.screen("second").contains { $0 == "LINKED-10" })
    }

    /// A client that handed over its terminal and never said it is raw (stopped before it
    /// could): closing the session still ends its attach, with the exit, not a hang.
    func testAnAttachThatNeverSaidReadyEndsWithTheSession() throws {
        try tmux.open("first", ssh(), columns: 80, rows: 24)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        var master: Int32 = -1, slave: Int32 = -1
        XCTAssertEqual(openpty(&master, &slave, nil, nil, nil), 0)
        defer { close(master); close(slave) }
        let terminal = StreamDescriptors(stdin: slave, stdout: slave)
        let client = try ControlClient(path: directory.file("serve/control.sock"))
        let body = #"{"session": 1, "terminal": {"term": "xterm-256color", "columns": 80, "rows": 24}}"#
        let (termind, environment) = (self.termind, self.environment)
        let closer: @Sendable () -> Void = { _ = try? ProcessRunner.run(termind, ["sessions", "close", "1"], environment: environment) }
        // On a thread of its own: a hang fails the test instead of stopping the suite.
        let reply = Outcome()
        let done = DispatchSemaphore(value: 0)
        let stream = Thread {
            reply.value = Result {
                try client.stream("workspaces.attach@1", body: Data(body.utf8), descriptors: terminal) { event in
                    if event.kind == "started" {
                        reply.started = event
                        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5, execute: closer)
                    }
                    return nil
                }
            }
            done.signal()
        }
        stream.start()
        guard done.wait(timeout: .now() + 15) == .success, let outcome = reply.value else {
            return XCTFail("the attach hung after its session ended")
        }
        XCTAssertEqual(reply.started?["linked"], .bool(true))
        let result = try JSONCoding.parse(try outcome.get(), source: "attach")
        XCTAssertNotNil(result["exitStatus"], "the session's end, not a detach: \(result)")
    }

    func testAFullScreenProgramSurvivesItsWindowClosingAndIsRedrawnOnAttach() throws {
        let file = try directory.write("notes.txt", (1...60).map { "note \($0): the quick brown fox\n" }.joined())
        try tmux.open("first", ssh(), columns: 80, rows: 20)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        try tmux.send("first", "vi -u NONE -i NONE -c 'set number' \(file)\r")
        let inVi = try tmux.wait("first", for: "note 19:")
        XCTAssertTrue(inVi.found, inVi.screen.joined(separator: "\n"))
        try tmux.send("first", "30G")
        // The screen once vi has moved (it scrolls so that line 30 shows) and is done drawing.
        let before = try XCTUnwrap(try tmux.settled("first") { $0.contains { $0.contains("note 30:") } }, "vi never showed line 30")
        // Closing the window (the client gets SIGHUP) detaches; the editor goes on.
        tmux.kill("first")
        XCTAssertEqual(try waitForState(1, "detached")?["state"]?.stringValue, "detached")

        try tmux.open("second", [termind, "attach", "1"], columns: 80, rows: 20)
        let redrawn = try tmux.wait("second", for: "note 30:").screen
        XCTAssertEqual(redrawn, before, "vi's screen, redrawn from the model")
        // The editor still answers keys (the cursor keys in application mode included), and
        // leaving it shows the shell's screen as it was.
        try tmux.send("second", ":q!\r")
        XCTAssertTrue(try tmux.wait("second", for: "vi -u NONE").found)
        try tmux.send("second", "exit 3\r")
        XCTAssertEqual(try tmux.waitForExit("second"), 3)
    }

    func testAttachingElsewhereDetachesTheFirstClientAndTheWindowSizeFollowsTheAttachedTerminal() throws {
        try tmux.open("first", ssh(), columns: 100, rows: 30)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        try tmux.send("first", "stty size\r")
        XCTAssertTrue(try tmux.wait("first", for: "30 100").found)

        try tmux.open("second", [termind, "attach", "1", "--scrollback", "0"], columns: 120, rows: 40)
        XCTAssertEqual(try tmux.waitForExit("first"), 0)
        let replaced = try tmux.screen("first")
        XCTAssertTrue(replaced.contains { $0.contains("attached from another terminal") }, replaced.joined(separator: "\n"))
        XCTAssertTrue(try tmux.wait("second", for: "30 100").found)
        try tmux.send("second", "clear; stty size\r")
        XCTAssertTrue(try tmux.wait("second", for: "40 120").found)
        try tmux.resize("second", columns: 70, rows: 22)
        // The window change reaches the server before anything is typed to ask for it.
        XCTAssertTrue(waitUntil { (try? self.sessions().first?["size"]?.stringValue) == "70x22" }, "the session's size follows the window")
        try tmux.send("second", "stty size\r")
        XCTAssertTrue(try tmux.wait("second", for: "22 70").found)
        try tmux.send("second", "exit\r")
        XCTAssertEqual(try tmux.waitForExit("second"), 0)
    }

    func testClosingASessionAndStoppingTheServerEndTheRemoteShells() throws {
        // A sleep whose argument no other process has.
        let marker = "sleep 9999.\(Int.random(in: 100_000...999_999))"
        try tmux.open("first", ssh(), columns: 80, rows: 24)
        XCTAssertTrue(try tmux.wait("first", for: "$").found)
        try tmux.send("first", "\(marker)1\r")
        XCTAssertTrue(waitUntil { self.remoteProcessRuns("\(marker)1") })
        // Closed while attached: the client ends with the hung-up shell.
        let closed = try ProcessRunner.run(termind, ["--json", "sessions", "close", "1"], environment: environment)
        XCTAssertEqual(closed.status, 0, closed.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(closed.stdout.utf8), source: "close")["state"]?.stringValue, "ended")
        XCTAssertNotNil(try tmux.waitForExit("first"))
        XCTAssertTrue(waitUntil { !self.remoteProcessRuns("\(marker)1") }, "the remote shell's command still runs")

        // Detached, then the server stops: the shell is hung up too.
        try tmux.open("second", ssh(), columns: 80, rows: 24)
        XCTAssertTrue(try tmux.wait("second", for: "$").found)
        try tmux.send("second", "\(marker)2\r")
        XCTAssertTrue(waitUntil { self.remoteProcessRuns("\(marker)2") })
        tmux.kill("second")
        XCTAssertEqual(try waitForState(2, "detached")?["state"]?.stringValue, "detached")
        XCTAssertTrue(remoteProcessRuns("\(marker)2"))
        XCTAssertEqual(serve.stop(), 0)
        serve = nil
        XCTAssertTrue(waitUntil { !self.remoteProcessRuns("\(marker)2") }, "the server's stop left the remote shell running")
    }

    func testTildeDotEndsTheSessionAndItsRemoteShellAtEverySpeed() throws {
        // `~.` is the user ending the session: it must never be taken for the client merely
        // going away (a detach that leaves the shell logged in), however fast the client exits.
        // The gaps between Enter, `~` and `.`: all in one write, a fast typist, a person.
        let marker = "sleep 9998.\(Int.random(in: 100_000...999_999))"
        for (index, gap) in [0.0, 0.03, 0.3].enumerated() {
            let name = "tilde\(index)", id = index + 1
            try tmux.open(name, ssh(), columns: 80, rows: 24)
            XCTAssertTrue(try tmux.wait(name, for: "$").found)
            try tmux.send(name, "\(marker)\(index)\r")
            XCTAssertTrue(waitUntil { self.remoteProcessRuns("\(marker)\(index)") })
            if gap == 0 {
                try tmux.send(name, "\r~.")
            } else {
                for key in ["\r", "~", "."] {
                    try tmux.send(name, key)
                    Thread.sleep(forTimeInterval: gap)
                }
            }
            let status = try tmux.waitForExit(name)
            let screen = try tmux.screen(name)
            XCTAssertEqual(status, 255, "gap \(gap) s: " + screen.joined(separator: "\n"))
            XCTAssertTrue(screen.contains { $0.contains("Connection closed.") }, screen.joined(separator: "\n"))
            XCTAssertEqual(try waitForState(id, "ended")?["state"]?.stringValue, "ended", "gap \(gap) s: the session was left running")
            XCTAssertTrue(waitUntil { !self.remoteProcessRuns("\(marker)\(index)") }, "gap \(gap) s: the remote shell's command still runs")
        }
    }

    func testASessionThatEndsSaysNothingButItsStatusAndOneClosedByTermindSaysWhy() throws {
        // The remote shell exits 7: the client ends with 7 and prints no record of the result.
        try tmux.open("exits", ssh(), columns: 80, rows: 24)
        XCTAssertTrue(try tmux.wait("exits", for: "$").found)
        try tmux.send("exits", "exit 7\r")
        XCTAssertEqual(try tmux.waitForExit("exits"), 7)
        let exited = try tmux.screen("exits")
        XCTAssertFalse(exited.contains { $0.hasPrefix("session") }, exited.joined(separator: "\n"))
        // Closed with termind sessions close: the attached client is told so.
        try tmux.open("closed", ssh(), columns: 120, rows: 24)
        XCTAssertTrue(try tmux.wait("closed", for: "$").found)
        let id = try XCTUnwrap(try sessions().last?["id"]?.intValue)
        XCTAssertEqual(try ProcessRunner.run(termind, ["sessions", "close", String(id)], environment: environment).status, 0)
        XCTAssertNotNil(try tmux.waitForExit("closed"))
        let screen = try tmux.screen("closed")
        XCTAssertTrue(screen.contains { $0.contains("Session \(id) on") && $0.contains("was closed (termind sessions close \(id))") }, screen.joined(separator: "\n"))
        XCTAssertFalse(screen.contains { $0.hasPrefix("session") }, screen.joined(separator: "\n"))
        // A session number that is no open session: only open ones are offered.
        let missing = try ProcessRunner.run(termind, ["attach", "999"], environment: environment)
        XCTAssertFalse(missing.stderr.contains("open: \(id)"), missing.stderr)
    }

    func testWithoutAServerSessionsAndAttachSaySoAndSshIsAPlainSession() throws {
        serve.stop()
        serve = nil
        let listed = try ProcessRunner.run(termind, ["sessions"], environment: environment)
        XCTAssertEqual(listed.status, 1)
        XCTAssertTrue(listed.stderr.contains("termind serve"), listed.stderr)
        let attached = try ProcessRunner.run(termind, ["attach", "3"], environment: environment)
        XCTAssertEqual(attached.status, 1)
        XCTAssertTrue(attached.stderr.contains("termind serve"), attached.stderr)
        // In-process: ~d is not an escape there (it is typed as it is).
        var local = environment
        local["TERMIND_STORE"] = directory.file("local.sqlite")
        let scratch = try TemporaryDirectory("termind-plain")
        let plain = TmuxTerminal(directory: scratch, environment: local)
        defer {
            plain.stop()
            scratch.remove()
        }
        try plain.open("plain", [termind, "--local", "--secrets-key", directory.file("k")] + Array(ssh().dropFirst()))
        XCTAssertTrue(try plain.wait("plain", for: "$").found)
        try plain.send("plain", "\r~d\r")
        XCTAssertTrue(try plain.wait("plain", for: "~d: command not found").found)
        try plain.send("plain", "exit 4\r")
        XCTAssertEqual(try plain.waitForExit("plain"), 4)
    }

    /// `termind broadcast` types into three sessions at once; bash asked for bracketed paste,
    /// so a two-line text is one paste, run with one Enter; an ended session is reported.
    func testBroadcastTypesIntoThreeSessionsAndSaysWhereItWasDelivered() throws {
        for name in ["a", "b", "c"] {
            try tmux.open(name, ssh(), columns: 90, rows: 20)
            XCTAssertTrue(try tmux.wait(name, for: "$").found)
        }
        XCTAssertEqual(try sessions().count, 3)
        let typed = try ProcessRunner.run(termind, ["--json", "broadcast", "--sessions", "1,2,3,9", "--", "echo BROAD-$((40+2))"], environment: environment)
        XCTAssertEqual(typed.status, 3, "three of four delivered: \(typed.stderr)")
        let deliveries = try JSONCoding.parse(Data(typed.stdout.utf8), source: "broadcast")["deliveries"]?.arrayValue ?? []
        XCTAssertEqual(deliveries.map { $0["delivered"] }, [.bool(true), .bool(true), .bool(true), .bool(false)])
        XCTAssertEqual(deliveries.prefix(3).map { $0["bracketedPaste"] }, [.bool(true), .bool(true), .bool(true)], "bash's readline asks for bracketed paste")
        XCTAssertTrue(deliveries[3]["error"]?.stringValue?.contains("no session 9") == true)
        for name in ["a", "b", "c"] { XCTAssertTrue(try tmux.wait(name, for: "BROAD-42").found, name) }
        // Two lines from standard input, one paste: both run after the single Enter.
        let piped = try ProcessRunner.run(termind, ["broadcast", "--all", "true"], environment: environment, stdin: "echo ONE-$((0+1))\necho TWO-$((1+1))")
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertTrue(piped.stdout.contains("Typed into 3 of 3 sessions"), piped.stdout)
        for name in ["a", "b", "c"] { XCTAssertTrue(try tmux.wait(name, for: "TWO-2").found, name) }
        XCTAssertTrue(try tmux.screen("b").contains("ONE-1"))
    }

    /// `termind ssh -L` runs a forward for the session's lifetime (the PortForwarding
    /// feature's), in serve and in-process; it is gone once the session ends.
    func testForwardsLiveAsLongAsTheSession() throws {
        let echo = try EchoServer()
        defer { echo.stop() }
        let port = try SSHServerFixture.freePort()
        try tmux.open("f", [termind, "ssh", target, "--accept-host-key", "once", "-L", "\(port):127.0.0.1:\(echo.port)", "--", "env PS1='$ ' bash --norc --noprofile -i"])
        XCTAssertTrue(try tmux.wait("f", for: "$").found)
        XCTAssertEqual(try roundTrip(port: port), "ping-\(port)", "the forward carries data while the session runs")
        // Detached, the session (and its forward) goes on.
        tmux.kill("f")
        XCTAssertEqual(try waitForState(1, "detached")?["state"]?.stringValue, "detached")
        XCTAssertEqual(try roundTrip(port: port), "ping-\(port)")
        XCTAssertEqual(try ProcessRunner.run(termind, ["sessions", "close", "1"], environment: environment).status, 0)
        XCTAssertTrue(waitUntil { (try? self.roundTrip(port: port)) == nil }, "the forward outlived its session")
        // In-process, the same for a plain session.
        let local = try SSHServerFixture.freePort()
        try tmux.open("g", [termind, "--local", "--store", directory.file("local.sqlite"), "--secrets-key", directory.file("local.key"), "ssh", target,
                            "--accept-host-key", "once", "-L\(local):127.0.0.1:\(echo.port)", "--", "echo UP; sleep 3"])
        XCTAssertTrue(try tmux.wait("g", for: "UP").found)
        XCTAssertEqual(try roundTrip(port: local), "ping-\(local)")
        XCTAssertEqual(try tmux.waitForExit("g"), 0)
        XCTAssertNil(try roundTrip(port: local), "the forward outlived the plain session")
        // A spec that does not parse starts nothing and says which.
        let bad = try ProcessRunner.run(termind, ["ssh", target, "--accept-host-key", "once", "-L", "nonsense", "--", "true"], environment: environment)
        XCTAssertEqual(bad.status, 2)
        XCTAssertTrue(bad.stderr.contains("nonsense"), bad.stderr)
    }

    /// Connects to 127.0.0.1:`port`, sends a line and reads it back (nil: refused or nothing back).
    private func roundTrip(port: Int) throws -> String? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { return nil }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let message = Array("ping-\(port)".utf8)
        guard send(fd, message, message.count, 0) == message.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 64)
        var got: [UInt8] = []
        while got.count < message.count {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { return got.isEmpty ? nil : String(decoding: got, as: UTF8.self) }
            got += buffer[0..<n]
        }
        return String(decoding: got, as: UTF8.self)
    }

    // MARK: - Helpers

    private func remoteProcessRuns(_ marker: String) -> Bool {
        ((try? ProcessRunner.run("/usr/bin/pgrep", ["-f", marker]))?.status ?? 1) == 0
    }
}

/// What a stream run on a thread of its own brought back.
private final class Outcome: @unchecked Sendable {
    var value: Result<Data, Error>?
    var started: StreamEvent?
}
