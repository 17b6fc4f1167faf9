import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Workspaces end to end: templates saved as Vault records through `termind workspace …`,
/// opened inside a real tmux (the test's own server) by `termind serve`, each SSH pane a
/// durable session on a real sshd — reopened without authenticating again, typed into by
/// broadcast.
final class WorkspaceTemplateTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: ServeProcess!
    private var tmux: TmuxTerminal!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("termind-workspace")
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
        return environment
    }

    private var termind: String { FeatureHarness.buildDirectory + "/termind" }
    private var cli: TermindCLI { TermindCLI(environment: environment) }

    @discardableResult
    private func run(_ arguments: [String], status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        try cli.run(arguments, status: status, file: file, line: line)
    }

    private func json(_ arguments: [String]) throws -> JSONValue { try cli.json(arguments) }

    private func saveHosts() throws { try cli.saveHosts(["box", "db"], server: server, key: directory.file("id")) }

    private func logins() -> Int {
        ((try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
    }

    private func sessions() throws -> [JSONValue] {
        try json(["sessions"])["sessions"]?.arrayValue ?? []
    }

    private func waitFor(_ what: String, seconds: Double = 20, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTFail("timed out waiting for \(what)\n\(diagnostics())")
    }

    /// What the panes, the server and sshd said (for a failure's message).
    private func diagnostics() -> String {
        let panes = (try? tmux.tmux(["list-panes", "-a", "-F", "#{pane_id} #{window_name} #{pane_dead} #{pane_current_command}"])) ?? ""
        let texts = panes.split(separator: "\n").map { line in
            let id = String(line.split(separator: " ")[0])
            return "== \(line)\n" + ((try? paneText(id)) ?? "").split(separator: "\n").suffix(6).joined(separator: "\n")
        }
        let serve = (try? String(contentsOfFile: directory.file("serve-stderr.log"), encoding: .utf8)) ?? ""
        let sshd = (try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? ""
        return texts.joined(separator: "\n") + "\n-- serve:\n" + serve.suffix(2000) + "\n-- sshd:\n" + sshd.suffix(2000)
    }

    /// The panes of the window named `window` in the test's tmux: id, width, height, left, top.
    private func panes(_ window: String) throws -> [(id: String, width: Int, height: Int, left: Int, top: Int)] {
        let text = try tmux.tmux(["list-panes", "-t", "main:\(window)", "-F", "#{pane_id} #{pane_width} #{pane_height} #{pane_left} #{pane_top}"])
        return text.split(separator: "\n").map { line in
            let f = line.split(separator: " ").map(String.init)
            return (f[0], Int(f[1]) ?? 0, Int(f[2]) ?? 0, Int(f[3]) ?? 0, Int(f[4]) ?? 0)
        }
    }

    private func paneText(_ id: String) throws -> String {
        try tmux.tmux(["capture-pane", "-p", "-t", id])
    }

    /// Waits for `text` in the person's own window (main:0; the workspace's window is the
    /// active one once it opened).
    private func waitInFirstWindow(_ text: String) throws -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if try paneText("main:0").contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    private func windows() throws -> [String] {
        try tmux.tmux(["list-windows", "-t", "main", "-F", "#{window_name}"]).split(separator: "\n").map(String.init)
    }

    func testSavedWorkspacesAreVaultRecordsKeptByHostIdAndBadInputChangesNothing() throws {
        try saveHosts()
        let saved = try json(["workspace", "save", "dev", "h(box 60%, v(db, sftp:db))"])
        XCTAssertEqual(saved["layout"]?.stringValue, "h(box 60%, v(db, sftp:db) 40%)")
        XCTAssertEqual(saved["panes"]?.arrayValue?.map { $0["kind"]?.stringValue ?? "" }, ["ssh", "ssh", "sftp"])

        // Bad input: a clear error naming the problem, and the stored workspace untouched.
        let unknown = try run(["workspace", "save", "other", "h(box, nope)"], status: 1)
        XCTAssertTrue(unknown.stderr.contains("'nope' is not a saved host"), unknown.stderr)
        let malformed = try run(["workspace", "save", "other", "h(box 70%, db 40%)"], status: 2)
        XCTAssertTrue(malformed.stderr.contains("the shares add up to 110.0%"), malformed.stderr)
        let name = try run(["workspace", "save", "no good", "box"], status: 2)
        XCTAssertTrue(name.stderr.contains("'no good' is not a workspace name"), name.stderr)
        let taken = try run(["workspace", "save", "DEV", "box"], status: 1)
        XCTAssertTrue(taken.stderr.contains("a workspace is named 'dev' already (names match whatever their case)") && taken.stderr.contains("--replace"),
                      taken.stderr)
        XCTAssertEqual(try json(["workspace", "list"])["workspaces"]?.arrayValue?.map { $0["layout"]?.stringValue ?? "" },
                       ["h(box 60%, v(db, sftp:db) 40%)"])

        // Hosts are kept by id: a rename shows the new label; a deleted host's panes are marked.
        try run(["vault", "host", "edit", "box", "--label", "web"])
        XCTAssertEqual(try json(["workspace", "show", "dev"])["layout"]?.stringValue, "h(web 60%, v(db, sftp:db) 40%)")
        try run(["vault", "host", "delete", "db"])
        let shown = try json(["workspace", "show", "dev"])
        XCTAssertEqual(shown["panes"]?.arrayValue?.map { $0["missing"] == .bool(true) }, [false, true, true])

        // --replace with a grid of hosts keeps the record's id.
        let replaced = try json(["workspace", "save", "dev", "--hosts", "web,web,web", "--replace", "true"])
        XCTAssertEqual(replaced["id"], saved["id"])
        XCTAssertEqual(replaced["layout"]?.stringValue, "v(h(web, web), web)")
        XCTAssertEqual(try json(["workspace", "rm", "dev"])["name"]?.stringValue, "dev")
        XCTAssertEqual(try json(["workspace", "list"])["workspaces"]?.arrayValue?.count, 0)
        let gone = try run(["workspace", "show", "dev"], status: 1)
        XCTAssertTrue(gone.stderr.contains("No workspace is named 'dev'"), gone.stderr)
    }

    func testOpenBuildsTheLayoutInTmuxAndAReopenAttachesWithoutAuthenticatingAgain() throws {
        try saveHosts()
        try run(["workspace", "save", "dev", "h(box 60%, v(box, db))"])
        // A person's terminal: tmux (the test's own server) running a shell.
        try tmux.open("main", ["/bin/sh", "-c", "\"$0\" workspace open dev; echo \"[open $?]\"; exec sleep 100000", termind], columns: 160, rows: 40)
        try waitFor("the workspace's window") { try windows().contains("dev") }
        XCTAssertTrue(try waitInFirstWindow("[open 0]"), (try? paneText("main:0")) ?? "")
        let laid = try panes("dev")
        XCTAssertEqual(laid.count, 3)
        // h(box 60%, …): the first pane takes 60 % of the 160 columns (a border between).
        XCTAssertEqual(Double(laid[0].width) / 159, 0.6, accuracy: 0.02)
        XCTAssertEqual(laid[1].left, laid[2].left)
        XCTAssertLessThan(laid[1].top, laid[2].top)

        // Each SSH pane is a durable session of the server, tagged with its workspace pane.
        try waitFor("three attached sessions") { try sessions().filter { $0["state"]?.stringValue == "attached" }.count == 3 }
        let opened = try sessions()
        XCTAssertEqual(opened.map { $0["workspace"]?.stringValue ?? "" }, ["dev", "dev", "dev"])
        XCTAssertEqual(Set(opened.compactMap { $0["pane"]?.intValue }), [1, 2, 3])
        let ids = opened.compactMap { $0["id"]?.intValue }.sorted()
        let authenticated = logins()
        XCTAssertEqual(authenticated, 2, "one connection per saved host, shared by its panes")

        try tmux.tmux(["send-keys", "-t", laid[0].id, "-l", "echo PANE-ONE-$((40+2))\r"])
        try waitFor("the first pane's echo") { try paneText(laid[0].id).contains("PANE-ONE-42") }

        // Broadcast to the workspace: every one of its sessions gets the text.
        let typed = try json(["broadcast", "dev", "--", "echo BROAD-$((20+3))"])
        XCTAssertEqual(typed["deliveries"]?.arrayValue?.filter { $0["delivered"] == .bool(true) }.count, 3)
        for pane in laid {
            try waitFor("the broadcast in \(pane.id)") { try paneText(pane.id).contains("BROAD-23") }
        }
        // A name that is no workspace is said as such, not as one with no session running.
        let unknown = try run(["broadcast", "dve", "--", "echo never"], status: 1).stderr
        XCTAssertTrue(unknown.contains("No workspace is named 'dve'"), unknown)

        // Closing the window detaches its sessions; they go on.
        try tmux.tmux(["kill-window", "-t", "main:dev"])
        try waitFor("detached sessions") { try sessions().allSatisfy { $0["state"]?.stringValue == "detached" } }

        // Opened again: each pane attaches to its session, its screen redrawn; nothing logs in.
        try tmux.send("main", "")
        try tmux.tmux(["new-window", "-t", "main", "-n", "again", "/bin/sh -c '\"$0\" workspace open dev; echo \"[again $?]\"; exec sleep 100000' '\(termind)'"])
        try waitFor("the workspace's window again") { try windows().contains("dev") }
        let again = try panes("dev")
        XCTAssertEqual(again.count, 3)
        try waitFor("three attached sessions again") { try sessions().filter { $0["state"]?.stringValue == "attached" }.count == 3 }
        XCTAssertEqual(try sessions().compactMap { $0["id"]?.intValue }.sorted(), ids, "the same sessions, no new ones")
        try waitFor("the first pane's screen redrawn") { try paneText(again[0].id).contains("PANE-ONE-42") }
        XCTAssertEqual(logins(), authenticated, "no second authentication")

        // Opened again while another window shows it: refused, that window keeps its panes;
        // --take-over true moves the sessions.
        try tmux.tmux(["new-window", "-t", "main", "-n", "third", "/bin/sh -c '\"$0\" workspace open dev; echo \"[third $?]\"; exec sleep 100000' '\(termind)'"])
        try waitFor("the refusal") { try paneText("main:third").contains("[third 1]") }
        let refusal = try paneText("main:third")
        XCTAssertTrue(refusal.contains("Workspace dev is open already") && refusal.contains("--take-over true"), refusal)
        XCTAssertEqual(try panes("dev").count, 3, "the open window lost panes")
        XCTAssertEqual(try sessions().filter { $0["state"]?.stringValue == "attached" }.count, 3)

        // Closing one pane detaches only its session.
        try tmux.tmux(["kill-pane", "-t", again[2].id])
        try waitFor("one detached session") { try sessions().filter { $0["state"]?.stringValue == "detached" }.count == 1 }
        XCTAssertEqual(try sessions().filter { $0["state"]?.stringValue == "attached" }.count, 2)
    }

    func testBatchHostsDeletedHostsAndNoServer() throws {
        try saveHosts()
        try run(["workspace", "save", "ops", "v(db, empty, sftp:box)"])
        try run(["vault", "host", "delete", "db"])
        try tmux.open("main", ["/bin/sh", "-c", "\"$0\" workspace open ops; \"$0\" workspace open --hosts box,box; echo \"[open $?]\"; exec sleep 100000", termind],
                      columns: 120, rows: 30)
        XCTAssertTrue(try waitInFirstWindow("[open 0]"), (try? paneText("main:0")) ?? "")
        // The deleted host's pane is a local shell that says why; the empty pane a local shell.
        let ops = try panes("ops")
        XCTAssertEqual(ops.count, 3)
        try waitFor("the note in the deleted host's pane") { try paneText(ops[0].id).contains("no longer exists") }
        // The SFTP pane: termind's prompt on the host's files, through the server (tmux drops
        // the blank after a prompt).
        try waitFor("the SFTP pane's prompt") { try paneText(ops[2].id).contains("sftp box:") }
        try tmux.tmux(["send-keys", "-t", ops[2].id, "-l", "cd /\r"])
        try waitFor("the prompt in /") { try paneText(ops[2].id).contains("sftp box:/>") }
        try tmux.tmux(["send-keys", "-t", ops[2].id, "-l", "ls\r"])
        try waitFor("the listing of /") { let text = try paneText(ops[2].id); return text.contains("usr/") && text.contains("var/") }
        // Leaving it (Ctrl-D, read by the launcher) leaves a local shell in the pane.
        try tmux.tmux(["send-keys", "-t", ops[2].id, "C-d"])
        try tmux.tmux(["send-keys", "-t", ops[2].id, "-l", "echo LOCAL-$((2+3))\r"])
        try waitFor("a local shell after the prompt") { try paneText(ops[2].id).contains("LOCAL-5") }
        // --hosts: one pane per host, a workspace of its own.
        let batch = try XCTUnwrap(try windows().first { $0.hasPrefix("hosts-") })
        XCTAssertEqual(try panes(batch).count, 2)
        try waitFor("two sessions of the batch") { try sessions().filter { $0["workspace"]?.stringValue == batch }.count == 2 }

        // Without a server there are no durable sessions to put in panes: said, nothing opened.
        var alone = environment
        alone["TERMIND_SOCKET"] = directory.file("nowhere.sock")
        alone["TMUX"] = "\(tmux.socket),1,0"
        let refused = try ProcessRunner.run(termind, ["--store", directory.file("alone.sqlite"), "--secrets-key", directory.file("alone.key"), "workspace", "open", "--hosts", "box"],
                                            environment: alone)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("termind serve"), refused.stderr)
        XCTAssertEqual(try windows().count, 3, "nothing opened")
    }

    func testOpenStartsTmuxLikeAnyChildAndReturnsAndANewSessionStaysOnTheUsersTmuxServer() throws {
        // serve's own default tmux server lives in a folder of the test's.
        serve.stop()
        let tmuxFolder = directory.file("tmux-tmp")
        try FileManager.default.createDirectory(atPath: tmuxFolder, withIntermediateDirectories: true)
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TMUX_TMPDIR": tmuxFolder])
        let defaultSocket = "\(tmuxFolder)/tmux-\(getuid())/default"
        defer { _ = try? ProcessRunner.run("/usr/bin/tmux", ["-S", defaultSocket, "kill-server"]) }
        try saveHosts()

        // Inside a tmux on a non-default socket (the test's), --new-session makes the session
        // there, not on the default server of serve's environment.
        try tmux.open("main", ["/bin/sh", "-c", "\"$0\" workspace open --hosts box --new-session true; echo \"[open $?]\"; exec sleep 100000", termind],
                      columns: 120, rows: 30)
        XCTAssertTrue(try waitInFirstWindow("[open 0]"), (try? paneText("main:0")) ?? "")
        let sessionNames = try tmux.tmux(["list-sessions", "-F", "#{session_name}"]).split(separator: "\n")
        XCTAssertTrue(sessionNames.contains { $0.hasPrefix("hosts-") }, "sessions of the user's tmux: \(sessionNames)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: defaultSocket), "a tmux server was started on the default socket")

        // Outside tmux, with no tmux server yet (a first use): the command returns.
        var outside = environment
        outside["TMUX"] = nil
        outside["TMUX_PANE"] = nil
        let open = try SpawnedProcess(termind, ["workspace", "open", "--hosts", "db"], environment: outside, captureOutput: true)
        let returned = waitUntil(seconds: 30) { !open.isRunning }
        if !returned { open.signal(SIGKILL) }
        let (output, errors) = open.readAll()
        XCTAssertTrue(returned, "workspace open never returned once it had started a tmux server")
        XCTAssertEqual(open.wait(), 0, String(decoding: output + errors, as: UTF8.self))
        let server = try XCTUnwrap(Int32(try ProcessRunner.run("/usr/bin/tmux", ["-S", defaultSocket, "display-message", "-p", "#{pid}"])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "no tmux server on \(defaultSocket)")

        // The tmux server starts as any child of termind's: no signal blocked or ignored that
        // it did not choose, no descriptor of serve's.
        let status = try String(contentsOfFile: "/proc/\(server)/status", encoding: .utf8)
        func mask(_ field: String) -> UInt64 {
            let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
            return UInt64(line.dropFirst(field.count + 1).trimmingCharacters(in: .whitespaces), radix: 16) ?? .max
        }
        let term: UInt64 = 1 << (UInt64(SIGTERM) - 1)
        XCTAssertEqual(mask("SigBlk"), 0, status)
        XCTAssertEqual(mask("SigIgn") & term, 0, "the tmux server ignores SIGTERM\n\(status)")
        let shared = descriptors(of: serve.process.pid).intersection(descriptors(of: server))
        XCTAssertEqual(shared, [], "the tmux server holds descriptors of serve's")
        XCTAssertEqual(zombies(of: serve.process.pid), [], "serve left children unreaped")

        // It ends on SIGTERM, as a tmux server does.
        kill(server, SIGTERM)
        XCTAssertTrue(waitUntil { !Self.runs(server) }, "the tmux server did not end on SIGTERM")
    }

    func testALayoutTooLargeForTheWindowIsRefusedBeforeTmuxMakesAnything() throws {
        try saveHosts()
        try run(["workspace", "save", "wide", "h(box, db, box, db, box, db, box, db, box, db, box, db)"])
        try tmux.open("main", ["/bin/sh", "-c", "\"$0\" workspace open wide; echo \"[open $?]\"; exec sleep 100000", termind], columns: 20, rows: 12)
        XCTAssertTrue(try waitInFirstWindow("[open 1]"), (try? paneText("main:0")) ?? "")
        let said = try paneText("main:0").replacingOccurrences(of: "\n", with: "")
        XCTAssertTrue(said.contains("needs at least 23×1 cells") && said.contains("Nothing was opened"), said)
        XCTAssertEqual(try windows().count, 1, "a window was left")
        XCTAssertEqual(try sessions().count, 0, "sessions were opened")
    }

    /// What a process's descriptors are open on, but for what every process shares
    /// (/dev/null, terminals, epoll and event descriptors).
    private func descriptors(of pid: pid_t) -> Set<String> {
        let folder = "/proc/\(pid)/fd"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return Set(names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "\(folder)/\($0)") }.filter {
            $0 != "/dev/null" && !$0.hasPrefix("/dev/pts") && $0 != "/dev/ptmx" && !$0.hasPrefix("anon_inode:")
        })
    }

    /// Children of `pid` that ended and were never reaped.
    private func zombies(of pid: pid_t) -> [pid_t] {
        let all = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return all.compactMap(Int32.init).filter { child in
            guard let stat = try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && fields[0] == "Z" && Int32(fields[1]) == pid
        }
    }

    /// Whether `pid` is a live process (not gone, not a zombie).
    private static func runs(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].split(separator: " ").first != "Z"
    }
}
