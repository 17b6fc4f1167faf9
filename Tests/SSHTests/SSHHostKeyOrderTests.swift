import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindSSH
import XCTest

/// known_hosts files written by OpenSSH's own `ssh -o StrictHostKeyChecking=accept-new`
/// against an sshd with ED25519, ECDSA and RSA host keys, imported into the real Vault: the
/// transport asks for the recorded key type first (as OpenSSH's order_hostkeyalgs does), so
/// each file OpenSSH accepts is accepted without a question and no correct entry looks changed.
final class SSHHostKeyOrderTests: XCTestCase {
    private var bed: SSHTestbed!
    private var directory: TemporaryDirectory { bed.directory }
    private var server: SSHServerFixture { bed.server }
    private let user = NSUserName()

    override func setUp() async throws {
        bed = try await SSHTestbed(vault: false)
        XCTAssertEqual(Set(server.hostKeys.keys), ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"])
    }

    override func tearDown() async throws {
        await bed?.stop()
    }

    /// Runs OpenSSH's client against the fixture with `options`; true when it logged in.
    private func openSSH(_ knownHosts: String, _ options: [String]) throws -> Bool {
        let arguments = ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=\(knownHosts)", "-o", "GlobalKnownHostsFile=/dev/null",
                         "-o", "CheckHostIP=no", "-o", "IdentitiesOnly=yes", "-i", directory.file("client"), "-p", "\(server.port)"]
            + options + ["\(user)@127.0.0.1", "true"]
        return try ProcessRunner.run("/usr/bin/ssh", arguments).status == 0
    }

    private func connect(_ vault: HarnessSession, asked: AskedLog) async throws -> SSHConnection {
        let trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
        return try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: user),
                                            credentials: bed.credentials, trust: trust) { question in
            asked.append(question)
            return .reject
        }
    }

    func testKnownHostsWrittenByOpenSSHAreAcceptedForEveryKeyTypePlainHashedAndPortless() async throws {
        let types = [("ssh-ed25519", "ssh-ed25519"), ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"), ("rsa-sha2-512", "ssh-rsa")]
        for (algorithm, keyType) in types {
            for form in ["plain", "hashed", "portless"] {
                let file = directory.file("known_hosts-\(keyType)-\(form)")
                // The key OpenSSH records is the type it negotiated: forced here to cover all three.
                var record = ["-o", "StrictHostKeyChecking=accept-new", "-o", "HostKeyAlgorithms=\(algorithm)",
                              "-o", "HashKnownHosts=\(form == "hashed" ? "yes" : "no")"]
                if form == "portless" { record += ["-o", "HostKeyAlias=127.0.0.1"] }  // written as "127.0.0.1 key", no [host]:port
                XCTAssertTrue(try openSSH(file, record), "ssh recorded \(keyType) \(form)")
                let text = try String(contentsOfFile: file, encoding: .utf8)
                XCTAssertTrue(text.contains(keyType + " "), text)
                XCTAssertEqual(text.hasPrefix("|1|"), form == "hashed", text)
                XCTAssertEqual(text.hasPrefix("[127.0.0.1]:"), form != "hashed" && form != "portless", text)

                let vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
                let imported = try await vault.call(KnownHostContracts.Import.self, .init(path: file))
                XCTAssertEqual(imported.imported, 1)
                let asked = AskedLog()
                do {
                    let connection = try await connect(vault, asked: asked)
                    XCTAssertEqual(connection.hostKey.algorithm, keyType, "\(form): the recorded type was asked for first")
                    XCTAssertEqual(server.hostKeys[keyType], "\(keyType) \(connection.hostKey.blob.base64EncodedString())")
                    await connection.close()
                } catch {
                    XCTFail("\(keyType) \(form): \(error)")
                }
                XCTAssertEqual(asked.questions.count, 0, "\(keyType) \(form): nothing to ask about a trusted key")
                await vault.shutdown()
                // OpenSSH, with its own default order, on the same file: where it accepts, so do we.
                // (It does not for a port-less non-ED25519 line: it asks for ED25519 first, finds no
                // [host]:port line, and the port-less check then sees another type; termind also
                // prefers the port-less lines' types, which only ever finds a key already trusted.)
                if form != "portless" || keyType == "ssh-ed25519" {
                    XCTAssertTrue(try openSSH(file, ["-o", "StrictHostKeyChecking=yes"]), "OpenSSH accepts \(keyType) \(form)")
                }
            }
        }
    }

    func testOnlyKeysOfAnotherTypeKnownFailsClosedAndSaysSo() async throws {
        // The server keeps only its ECDSA key; the Vault trusts an ED25519 key for it (as a
        // known_hosts from before a key change would). OpenSSH refuses this as CHANGED.
        let ecdsaOnly = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("client.pub"), encoding: .utf8)],
                                             extraConfig: ["HostKeyAlgorithms ecdsa-sha2-nistp256"])
        defer { ecdsaOnly.stop() }
        let file = directory.file("known_hosts-ed25519")
        try "[127.0.0.1]:\(ecdsaOnly.port) \(server.hostKeys["ssh-ed25519"]!)\n".write(toFile: file, atomically: true, encoding: .utf8)
        let refusedByOpenSSH = try ProcessRunner.run("/usr/bin/ssh", ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=\(file)",
                                                                      "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
                                                                      "-i", directory.file("client"), "-p", "\(ecdsaOnly.port)", "\(user)@127.0.0.1", "true"])
        XCTAssertNotEqual(refusedByOpenSSH.status, 0)
        XCTAssertTrue(refusedByOpenSSH.stderr.contains("HOST IDENTIFICATION HAS CHANGED"), refusedByOpenSSH.stderr)

        let vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        _ = try await vault.call(KnownHostContracts.Import.self, .init(path: file))
        let trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
        let asked = AskedLog()
        do {
            _ = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: ecdsaOnly.port, username: user),
                                             credentials: bed.credentials, trust: trust) { question in
                asked.append(question)
                return .acceptAndSave
            }
            XCTFail("a key of a type nobody trusted, while another type is trusted, must fail closed")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.host_key_type_changed", error.message)
            XCTAssertTrue(error.message.contains("presents ecdsa-sha2-nistp256"), error.message)
            XCTAssertTrue(error.message.contains("trusts only ssh-ed25519"), error.message)
            XCTAssertTrue(error.message.contains("termind vault knownhost add 127.0.0.1 'ecdsa-sha2-nistp256 "), error.message)
            XCTAssertFalse(error.message.contains("has CHANGED"), "not called a changed key of the same type: \(error.message)")
        }
        XCTAssertEqual(asked.questions.count, 0, "never offered for acceptance")
        let check = try await vault.call(KnownHostContracts.Check.self, .init(host: "127.0.0.1", port: ecdsaOnly.port,
                                                                              key: ecdsaOnly.hostKeys["ecdsa-sha2-nistp256"]!))
        XCTAssertEqual(check.verdict, "other-key-types")
        XCTAssertEqual(check.knownFingerprints.count, 1)
        await vault.shutdown()
    }
}
