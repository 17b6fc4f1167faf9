import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Shell integration end to end, against real sshd and real login shells (bash and zsh of
/// throwaway accounts): the bootstrap is sent once the first prompt shows and nothing of it
/// shows on the terminal; commands, their status, duration and folder reach `termind
/// history`; a host set to disabled gets nothing; marks a shell prints itself count too;
/// history keeps 1,000 rows per host.
final class ShellIntegrationTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var tmux: TmuxTerminal!
    private var accounts: [ThrowawayAccount] = []

    override func setUpWithError() throws {
        try XCTSkipUnless(getuid() == 0, "needs root to create accounts with a chosen login shell")
        directory = try TemporaryDirectory("termind-shell")
        server = try SSHServerFixture.withNewKey(in: directory)
        // The accounts read the fixture's authorized_keys (sshd reads it as them).
        chmod(server.directory.path, 0o755)
        chmod(server.directory.file("authorized_keys"), 0o644)
        chmod(directory.path, 0o755)
        tmux = TmuxTerminal(directory: directory, environment: environment)
    }

    override func tearDown() {
        tmux?.stop()
        for account in accounts { account.remove() }
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("serve/control.sock"))
        environment["TERM"] = "xterm-256color"
        return environment
    }

    private var termind: String { FeatureHarness.buildDirectory + "/termind" }
    private var local: [String] { ["--local", "--store", directory.file("local.sqlite"), "--secrets-key", directory.file("local.key")] }

    /// An account whose login shell is `shell`, with a plain `$ ` prompt.
    private func account(shell: String) throws -> String {
        let home = directory.file("home-\(accounts.count)")
        let account = try ThrowawayAccount(shell: shell, home: home, files: [
            ".bash_profile": "PS1='$ '\n",
            ".zshrc": "PS1='$ '\nHISTFILE=~/.zsh_history\nSAVEHIST=100\nHISTSIZE=100\n",
        ])
        accounts.append(account)
        return account.name
    }

    private func target(_ user: String) -> String { "ssh -p \(server.port) -i \(directory.file("id")) \(user)@127.0.0.1" }

    @discardableResult
    private func run(_ arguments: [String], status expected: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try ProcessRunner.run(termind, arguments, environment: environment)
        XCTAssertEqual(result.status, expected, "termind \(arguments.joined(separator: " ")): \(result.stderr)", file: file, line: line)
        return result
    }

    private func history(_ arguments: [String]) throws -> [JSONValue] {
        try JSONCoding.parse(Data(try run(["--json"] + arguments).stdout.utf8), source: "history")["entries"]?.arrayValue ?? []
    }

    /// How many history entries `user`'s host has once it has `count` (or after 20 s).
    private func waitForHistory(_ user: String, count: Int) throws -> Int {
        var entries = 0
        _ = try waitUntil(seconds: 20) {
            entries = try history(["history", "\(user)@127.0.0.1:\(server.port)"]).count
            return entries >= count
        }
        return entries
    }

    /// Types `command` at the prompt and waits for the next one.
    private func type(_ name: String, _ command: String, marker: String) throws {
        try tmux.send(name, command + "\r")
        let shown = try tmux.wait(name, for: marker)
        XCTAssertTrue(shown.found, "\(command): \(shown.screen.joined(separator: "\n"))")
    }

    func testABashShellInsideServeReportsItsCommandsAndTheBootstrapNeverShows() throws {
        let user = try account(shell: "/bin/bash")
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        try run(["settings", "set", "terminal.preferences", "{\"shellIntegration\": true}"])
        try tmux.open("s", [termind, "ssh", target(user), "--accept-host-key", "once"], columns: 100, rows: 30)
        XCTAssertTrue(try tmux.wait("s", for: "$").found)
        // Typed at once: the keys wait for the bootstrap and follow it.
        try type("s", "echo one-$((0+1))", marker: "one-1")
        try type("s", "cd /tmp", marker: "$ cd /tmp")
        try type("s", "sleep 0.3; false", marker: "false")
        // (The markers match the typed echo: each command is known ended once its history
        // entry is there, written when the next prompt's marks arrive.)
        XCTAssertEqual(try waitForHistory(user, count: 3), 3)
        try type("s", "echo two \\\r  three", marker: "two three")
        XCTAssertEqual(try waitForHistory(user, count: 4), 4)
        // A subshell: bash runs no DEBUG trap for it in the shell itself.
        try type("s", "(exit 42)", marker: "$ (exit 42)")
        XCTAssertEqual(try waitForHistory(user, count: 5), 5)
        let screen = try tmux.screen("s").joined(separator: "\n")
        XCTAssertFalse(screen.contains("termind") || screen.contains("BASH_VERSION"), "the bootstrap showed:\n\(screen)")
        XCTAssertEqual(screen.components(separatedBy: "$ echo one-").count, 2, "one prompt line per prompt:\n\(screen)")

        let entries = try history(["history", "\(user)@127.0.0.1:\(server.port)"])
        XCTAssertEqual(entries.map { $0["command"]?.stringValue }, ["echo one-$((0+1))", "cd /tmp", "sleep 0.3; false", "echo two   three", "(exit 42)"], "\(entries)")
        XCTAssertEqual(entries.map { $0["exitStatus"]?.intValue }, [0, 0, 1, 0, 42])
        XCTAssertGreaterThanOrEqual(entries[2]["durationMilliseconds"]?.intValue ?? 0, 300, "the shell's own measure")
        XCTAssertEqual(entries[2]["directory"]?.stringValue, "/tmp", "the folder it ran in (OSC 7)")
        // The session's folder, as termind sessions shows it.
        let sessions = try JSONCoding.parse(Data(try run(["--json", "sessions"]).stdout.utf8), source: "sessions")["sessions"]?.arrayValue ?? []
        XCTAssertEqual(sessions.first?["directory"]?.stringValue, "/tmp")
        // --grep, and the human table shows first lines.
        XCTAssertEqual(try history(["history", "\(user)@127.0.0.1:\(server.port)", "--grep", "^(cd|false)"]).count, 1)
        let unclosed = try run(["history", "\(user)@127.0.0.1:\(server.port)", "--grep", "echo ["], status: 2).stderr
        XCTAssertTrue(unclosed.contains("--grep 'echo [' is not a valid regular expression") && unclosed.contains("\\["), unclosed)
        let table = try run(["history", "\(user)@127.0.0.1:\(server.port)", "--limit", "2"]).stdout
        XCTAssertTrue(table.contains("(exit 42)") && table.contains("echo two") && !table.contains("sleep 0.3"), table)
        try tmux.send("s", "exit 0\r")
        XCTAssertEqual(try tmux.waitForExit("s"), 0)
    }

    func testAZshShellInProcessAndAHostSetToDisabled() throws {
        let zsh = ["/usr/bin/zsh", "/bin/zsh"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let zsh else { throw XCTSkip("zsh is not installed (scripts/lib.sh installs it)") }
        let user = try account(shell: zsh)
        try run(local + ["settings", "set", "terminal.preferences", "{\"shellIntegration\": true}"])
        try tmux.open("z", [termind] + local + ["ssh", target(user), "--accept-host-key", "once"])
        XCTAssertTrue(try tmux.wait("z", for: "$").found)
        try type("z", "echo zsh-$((2*3))", marker: "zsh-6")
        try type("z", "cd /tmp; (exit 3)", marker: "(exit 3)")
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertFalse(try tmux.screen("z").joined().contains("ZSH_VERSION"))
        try tmux.send("z", "exit 0\r")
        XCTAssertEqual(try tmux.waitForExit("z"), 0)
        let entries = try history(local + ["history", "\(user)@127.0.0.1:\(server.port)"])
        // `exit` never finished (no status): it is not kept.
        XCTAssertEqual(entries.map { $0["command"]?.stringValue }, ["echo zsh-$((2*3))", "cd /tmp; (exit 3)"])
        XCTAssertEqual(entries.map { $0["exitStatus"]?.intValue }, [0, 3])

        // The same account as a saved host set to disabled: no bootstrap, no history.
        try run(local + ["vault", "key", "import", directory.file("id"), "--label", "ci"])
        try run(local + ["vault", "identity", "add", user, "--key", "ci"])
        try run(local + ["vault", "host", "add", "127.0.0.1", "--label", "quiet", "--port", "\(server.port)", "--identity", user, "--shellIntegration", "disabled"])
        try tmux.open("q", [termind] + local + ["ssh", "quiet", "--accept-host-key", "once"])
        XCTAssertTrue(try tmux.wait("q", for: "$").found)
        try type("q", "echo quiet-$((1+1))", marker: "quiet-2")
        try tmux.send("q", "exit\r")
        XCTAssertEqual(try tmux.waitForExit("q"), 0)
        XCTAssertEqual(try history(local + ["history", "quiet"]).count, 0)
        // The empty history's hint fits the name: a saved host's setting, or no such host.
        XCTAssertTrue(try run(local + ["history", "quiet"]).stdout.contains("termind vault host edit quiet --shellIntegration enabled"))
        let unknown = try run(local + ["history", "qiuet"]).stdout
        XCTAssertTrue(unknown.contains("no saved host is named qiuet"), unknown)
        XCTAssertFalse(unknown.contains("vault host edit"), unknown)
        XCTAssertFalse(unknown.hasSuffix("\n\n\n"), "an empty table adds no line under the title: \(unknown)")
    }

    /// A shell that prints its own marks (kitty's, VS Code's style) is read the same way, with
    /// no bootstrap at all; 1,005 commands leave the newest 1,000.
    func testMarksAShellPrintsItselfAreReadAndHistoryKeepsAThousandPerHost() throws {
        let user = try account(shell: "/bin/bash")
        try tmux.open("m", [termind] + local + ["ssh", target(user), "--accept-host-key", "once"])
        XCTAssertTrue(try tmux.wait("m", for: "$").found)
        let loop = "for i in $(seq 1 1005); do printf '\\033]7;file://h/srv/%d\\007\\033]133;C;cmdline_url=job%%20%d\\007\\033]133;D;%d\\007' $i $i $((i % 3)); done; echo looped"
        try type("m", loop, marker: "looped")
        try tmux.send("m", "exit\r")
        XCTAssertEqual(try tmux.waitForExit("m"), 0)
        let entries = try history(local + ["history", "\(user)@127.0.0.1:\(server.port)"])
        XCTAssertEqual(entries.count, 1000)
        XCTAssertEqual(entries.first?["command"]?.stringValue, "job 6")
        XCTAssertEqual(entries.last?["command"]?.stringValue, "job 1005")
        XCTAssertEqual(entries.last?["exitStatus"]?.intValue, 1005 % 3)
        XCTAssertEqual(entries.last?["directory"]?.stringValue, "/srv/1005")
    }
}
