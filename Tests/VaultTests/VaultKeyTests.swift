import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import XCTest

/// SSH keys through the Vault, checked against ssh-keygen.
final class VaultKeyTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    /// The private key the credentials port hands out for a host using `key`, written 0600.
    private func privateKeyFile(for key: KeyRecord) async throws -> String {
        let identity = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "u-\(key.id)", key: key.id))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "h-\(key.id).example", identity: identity.id))
        let credentials = try XCTUnwrap(session.kernel.port(.credentials))
        let granted = try await credentials.credentials(for: CredentialRequest(host: "h-\(key.id).example"))
        let text = try XCTUnwrap(granted.privateKey?.withPlaintext { $0 }, "the identity's key is handed to the transport")
        let path = directory.file("key-\(key.id)")
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]))
        return path
    }

    func testGeneratedKeysAreAcceptedByOpenSSHWithMatchingFingerprints() async throws {
        for (kind, bits) in [(KeyKind.ed25519, 256), (.ecdsa256, 256), (.ecdsa384, 384), (.ecdsa521, 521), (.rsa, 4096)] {
            let key = try await session.call(KeyContracts.Generate.self, .init(kind: kind, comment: "test@termind"))
            XCTAssertEqual(key.bits, bits, kind.rawValue)
            let path = try await privateKeyFile(for: key)
            let derived = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-y", "-f", path])
            XCTAssertEqual(derived.status, 0, "ssh-keygen -y rejected the \(kind.rawValue) key")
            XCTAssertEqual(derived.stdout.split(separator: " ").prefix(2), key.publicKey.split(separator: " ").prefix(2), kind.rawValue)
            let listed = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", path])
            XCTAssertTrue(listed.stdout.hasPrefix("\(bits) \(key.fingerprint) "), "\(kind.rawValue): \(listed.stdout)")
        }
        let labels = try await session.call(KeyContracts.List.self, Empty()).keys.map(\.label)
        XCTAssertEqual(Set(labels), ["ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa"], "the default label is the algorithm")
    }

    func testImportsKeysWithAndWithoutAPassphraseAndNeverStoresThePassphrase() async throws {
        let passphrase = "import pass \(UUID().uuidString)"
        let plain = directory.file("plain"), locked = directory.file("locked"), pem = directory.file("pem")
        for (path, type, extra) in [(plain, "ed25519", ["-N", ""]), (locked, "ed25519", ["-N", passphrase]), (pem, "ecdsa", ["-N", "", "-m", "PEM"])] {
            XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", type, "-f", path] + extra).status, 0)
        }
        let imported = try await session.call(KeyContracts.Import.self, .init(path: plain, label: "laptop"))
        let expected = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", plain]).stdout
        XCTAssertTrue(expected.contains(imported.fingerprint), expected)
        XCTAssertEqual(imported.label, "laptop")
        let fromPEM = try await session.call(KeyContracts.Import.self, .init(path: pem))
        XCTAssertTrue(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", pem]).stdout.contains(fromPEM.fingerprint))

        for (given, code) in [(nil as Secret?, "key.passphrase_required"), (Secret("not it"), "key.wrong_passphrase")] {
            do {
                _ = try await session.call(KeyContracts.Import.self, .init(path: locked, passphrase: given))
                XCTFail(code)
            } catch let error as TermindError {
                XCTAssertEqual(error.code, code, error.message)
                XCTAssertTrue(error.message.contains(locked), error.message)
                XCTAssertFalse(error.message.contains(passphrase))
            }
        }
        let unlocked = try await session.call(KeyContracts.Import.self, .init(path: locked, passphrase: Secret(passphrase)))
        XCTAssertTrue(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", locked + ".pub"]).stdout.contains(unlocked.fingerprint))
        // The key now opens without the passphrase (the secret store protects it); the
        // passphrase and the private key text are nowhere in plaintext.
        let path = try await privateKeyFile(for: unlocked)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-y", "-P", "", "-f", path]).status, 0)
        let privateText = try String(contentsOfFile: path, encoding: .utf8)
        let body = privateText.split(separator: "\n").dropFirst().first.map(String.init) ?? ""
        for file in try FileManager.default.contentsOfDirectory(atPath: session.storeDirectory) {
            let bytes = try XCTUnwrap(FileManager.default.contents(atPath: session.storeDirectory + "/" + file))
            XCTAssertNil(bytes.range(of: Data(passphrase.utf8)), "passphrase stored in \(file)")
            XCTAssertNil(bytes.range(of: Data(body.utf8)), "private key text in plaintext in \(file)")
        }
    }

    func testBadKeysAndInUseKeysAreRefusedWithReasons() async throws {
        let garbage = try directory.write("garbage", "-----BEGIN OPENSSH PRIVATE KEY-----\nnot base64 at all!\n-----END OPENSSH PRIVATE KEY-----\n")
        do {
            _ = try await session.call(KeyContracts.Import.self, .init(path: garbage))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertTrue(error.code.hasPrefix("key."), error.code)
            XCTAssertTrue(error.message.hasPrefix(garbage), error.message)
        }
        do {
            _ = try await session.call(KeyContracts.Generate.self, .init(kind: .ed25519, bits: 4096))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("only RSA keys take a size"), error.message)
        }
        let key = try await session.call(KeyContracts.Generate.self, .init(kind: .ed25519))
        _ = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "ops", key: key.label))
        do {
            _ = try await session.call(KeyContracts.Delete.self, .init(key: key.fingerprint))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.key_in_use")
            XCTAssertTrue(error.message.contains("identity 'ops'"), error.message)
        }
        _ = try await session.call(VaultContracts.IdentityUpdate.self, .init(identity: "ops", key: ""))
        _ = try await session.call(KeyContracts.Delete.self, .init(key: key.id))
        let remaining = try await session.call(KeyContracts.List.self, Empty()).keys
        XCTAssertEqual(remaining, [])
    }
}
