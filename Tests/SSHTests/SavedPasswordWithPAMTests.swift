import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindSSH
import XCTest

/// A saved password against the common PAM set-up (`UsePAM yes`, keyboard-interactive on):
/// it goes to the `password` method first, answers one keyboard-interactive password prompt
/// when that is all the server offers, and never reaches any other prompt.
final class SavedPasswordWithPAMTests: XCTestCase {
    private var vault: HarnessSession!
    private var trust: (any HostKeyTrust)!
    private var directory: TemporaryDirectory!
    private let secret = "zq-saved-Password-7"

    override func setUp() async throws {
        try XCTSkipUnless(KeyboardInteractiveFixture.isAvailable, "needs root, cc and the PAM headers")
        directory = try TemporaryDirectory()
        vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
    }

    override func tearDown() async throws {
        await vault?.shutdown()
        directory?.remove()
    }

    private func open(_ fixture: KeyboardInteractiveFixture, password: String?, key: String? = nil,
                      responder: KeyboardInteractiveResponder?) async throws -> SSHConnection {
        try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: fixture.port, username: "root"),
                                     credentials: SSHCredentials(password: password.map(Secret.init), privateKey: key.map(Secret.init), agentSocket: ""),
                                     trust: trust, keyboardInteractive: responder) { _ in .acceptOnce }
    }

    func testASavedPasswordGoesToThePasswordMethodBeforeKeyboardInteractive() async throws {
        // sshd's password method runs the same PAM stack: the module's one prompt gets the password.
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Password: ", answer: secret))],
                                                     authenticationMethods: nil, extraConfig: ["PasswordAuthentication yes"])
        defer { fixture.stop() }
        let asked = ChallengeLog()
        let connection = try await open(fixture, password: secret) { challenge in
            asked.append(challenge)
            return nil
        }
        XCTAssertEqual(connection.authenticatedWith, "password")
        XCTAssertTrue(asked.all.isEmpty, "the person is not asked for a password the Vault holds")
        XCTAssertTrue(fixture.log.contains("auth success"), fixture.log.joined(separator: "\n"))
        await connection.close()
    }

    func testWithoutATerminalASavedPasswordAnswersTheOnePasswordPromptOfKeyboardInteractive() async throws {
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Password: ", answer: secret))])
        defer { fixture.stop() }
        let connection = try await open(fixture, password: secret, responder: nil)
        XCTAssertEqual(connection.authenticatedWith, "keyboard-interactive")
        XCTAssertEqual(fixture.log.filter { $0.hasSuffix("prompt 1 ok") }.count, 1, fixture.log.joined(separator: "\n"))
        await connection.close()
    }

    func testTheSavedPasswordNeverAnswersOtherPromptsAndARejectedOneIsNotSentAgain() async throws {
        // A password prompt, then a one-time code: the password is filled, the code is the person's.
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Password: ", answer: secret)),
                                                              PAMRound(.prompt("Verification code: ", answer: "424242"))])
        defer { fixture.stop() }
        let asked = ChallengeLog()
        let connection = try await open(fixture, password: secret) { challenge in
            asked.append(challenge)
            return challenge.prompts.map { _ in Secret("424242") }
        }
        XCTAssertEqual(connection.authenticatedWith, "keyboard-interactive")
        XCTAssertEqual(asked.all.flatMap(\.prompts).map(\.text), ["Verification code: "])
        await connection.close()

        // A saved password the server rejects: the next attempt's password prompt goes to the person.
        try fixture.setRounds([PAMRound(.prompt("Password: ", answer: "the-right-one"))])
        let retried = ChallengeLog()
        let second = try await open(fixture, password: secret) { challenge in
            retried.append(challenge)
            return challenge.prompts.map { _ in Secret("the-right-one") }
        }
        XCTAssertEqual(second.authenticatedWith, "keyboard-interactive")
        XCTAssertEqual(retried.all.flatMap(\.prompts).map(\.text), ["Password: "], "asked once, after the saved password was rejected")
        XCTAssertEqual(fixture.log.filter { $0.hasSuffix("prompt 1 wrong") }.count, 1, "the rejected password was sent once")
        await second.close()

        // Without anyone to ask, a rejected password ends it: it is never sent twice.
        let before = fixture.log.filter { $0.hasSuffix("wrong") }.count
        do {
            _ = try await open(fixture, password: secret, responder: nil)
            XCTFail("a wrong password cannot authenticate")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed", error.message)
            XCTAssertTrue(error.message.contains("the password (at a keyboard-interactive prompt) was rejected"), error.message)
            XCTAssertFalse(error.message.contains(secret), "secrets never appear in errors")
        }
        XCTAssertEqual(fixture.log.filter { $0.hasSuffix("wrong") }.count, before + 1)
    }

    func testARejectedPublicKeyOnAPAMServerSaysSoWhenNobodyCanAnswerThePrompts() async throws {
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("stranger")]).status, 0)
        let key = try String(contentsOfFile: directory.file("stranger"), encoding: .utf8)
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Password: ", answer: secret))], authenticationMethods: nil)
        defer { fixture.stop() }
        do {
            _ = try await open(fixture, password: nil, key: key) { _ in nil }  // as `termind exec` without a terminal
            XCTFail("an unknown key cannot authenticate")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_cancelled", "someone who can answer might still get in: \(error.message)")
            XCTAssertTrue(error.message.contains("the public key was rejected"), error.message)
            XCTAssertTrue(error.message.contains("nobody answered the keyboard-interactive prompts"), error.message)
        }
        XCTAssertFalse(fixture.log.contains { $0.contains("prompt 1") }, "nothing was answered for the person: \(fixture.log)")
    }

    func testExecWithASavedIdentityPasswordRunsWithoutATerminalOnAPAMServer() throws {
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Password: ", answer: secret))], authenticationMethods: nil,
                                                     extraConfig: ["PasswordAuthentication yes"])
        defer { fixture.stop() }
        func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
            var environment = ProcessInfo.processInfo.environment
            environment["TERMIND_SOCKET"] = directory.file("none.sock")
            environment["SSH_AUTH_SOCK"] = nil
            return try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                                         ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments,
                                         environment: environment, stdin: stdin)
        }
        XCTAssertEqual(try termind(["vault", "identity", "add", "root", "--password", "-"], stdin: secret + "\n").status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "pam", "--port", "\(fixture.port)", "--identity", "root"]).status, 0)
        let result = try termind(["exec", "pam", "--accept-host-key", "once", "--", "echo via-pam"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout, "via-pam\n")
        XCTAssertFalse(result.stderr.contains(secret))
    }
}
