import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind ssh -A`: the local ssh-agent reaches the remote side (its key listed there by
/// `ssh-add -l`), in-process and inside `termind serve`; off unless asked or set on the
/// saved host; a session that did not ask never sees the agent, even beside one that did.
final class AgentForwardingTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var agent: SpawnedProcess!
    private var serve: ServeProcess?
    private var fingerprint = ""

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("termind-agent")
        server = try SSHServerFixture.withNewKey(in: directory)
        agent = try SpawnedProcess("/usr/bin/ssh-agent", ["-D", "-a", socket], captureOutput: false)
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socket), Date() < deadline { usleep(20_000) }
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "agent-key", "-f", directory.file("agent-key")]).status, 0)
        let added = try ProcessRunner.run("/usr/bin/ssh-add", [directory.file("agent-key")], environment: ["SSH_AUTH_SOCK": socket])
        XCTAssertEqual(added.status, 0, added.stderr)
        fingerprint = String(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-lf", directory.file("agent-key.pub")]).stdout.split(separator: " ")[1])
    }

    override func tearDown() {
        serve?.stop()
        agent?.signal(SIGTERM)
        agent?.wait()
        server?.stop()
        directory?.remove()
    }

    private var socket: String { directory.file("agent.sock") }

    private var environment: [String: String] {
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("serve/control.sock"))
        environment["SSH_AUTH_SOCK"] = socket
        return environment
    }

    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    @discardableResult
    private func run(_ arguments: [String], status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        try TermindCLI(environment: environment).run(arguments, status: status, file: file, line: line)
    }

    private func saveHost() throws { try TermindCLI(environment: environment).saveHosts(["box"], server: server, key: directory.file("id")) }

    /// What `ssh-add -l` says on the remote side, and whether it sees an agent at all.
    private func remoteAgent(_ arguments: [String]) throws -> String {
        try run(["ssh"] + arguments + ["--", "ssh-add -l 2>&1; echo \"[${SSH_AUTH_SOCK:+agent}]\""]).stdout
    }

    func testDashAForwardsTheAgentInProcessAndTheHostSettingMakesItTheDefault() throws {
        try saveHost()
        XCTAssertTrue(try remoteAgent(["box"]).contains("[]"), "off unless asked")
        let forwarded = try remoteAgent(["-A", "box"])
        XCTAssertTrue(forwarded.contains(fingerprint), forwarded)
        XCTAssertTrue(forwarded.contains("[agent]"), forwarded)

        try run(["vault", "host", "edit", "box", "--forward-agent", "true"])
        XCTAssertTrue(try remoteAgent(["box"]).contains(fingerprint), "the host's setting")
        XCTAssertTrue(try remoteAgent(["box", "--forward-agent", "false"]).contains("[]"), "overridden for one session")

        // No agent here: said, and the session runs without one.
        var bare = environment
        bare.removeValue(forKey: "SSH_AUTH_SOCK")
        let without = try ProcessRunner.run(termind, ["ssh", "-A", "box", "--", "echo \"[${SSH_AUTH_SOCK:+agent}]\""], environment: bare)
        XCTAssertEqual(without.status, 0, without.stderr)
        XCTAssertTrue(without.stderr.contains("No agent to forward: SSH_AUTH_SOCK is not set"), without.stderr)
        XCTAssertTrue(without.stdout.contains("[]"), without.stdout)
    }

    func testInsideServeOnlyTheSessionsThatAskedSeeTheAgent() throws {
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["SSH_AUTH_SOCK": socket])
        try saveHost()
        // A session without the agent first (its connection stays in the server's pool),
        // then one with it, then one without again: sshd would give the agent to every
        // session of a connection once one asked, so -A sessions use connections of their own.
        XCTAssertTrue(try remoteAgent(["box"]).contains("[]"))
        XCTAssertTrue(try remoteAgent(["-A", "box"]).contains(fingerprint))
        let after = try remoteAgent(["box"])
        XCTAssertTrue(after.contains("[]"), after)
        XCTAssertFalse(after.contains(fingerprint), after)
        let logins = ((try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
        XCTAssertEqual(logins, 2, "one pooled connection without the agent, one with it")
    }
}
