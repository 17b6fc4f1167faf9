import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// SSH keys against the real OpenSSH tools: what we write `ssh-keygen` reads, what it
/// writes we read, with the same public keys and fingerprints. Failure messages compare
/// fingerprints and error codes only, never key material or passphrases.
final class SSHKeyTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private let passphrase = "pass phrase"
    private static let fastTypes: [(SSHKeyAlgorithm, [String])] = [
        (.ed25519, ["-t", "ed25519"]), (.ecdsaP256, ["-t", "ecdsa", "-b", "256"]),
        (.ecdsaP384, ["-t", "ecdsa", "-b", "384"]), (.ecdsaP521, ["-t", "ecdsa", "-b", "521"]),
        (.rsa, ["-t", "rsa", "-b", "2048"]),
    ]

    override func setUpWithError() throws { directory = try TemporaryDirectory("termind-sshkey") }
    override func tearDown() { directory?.remove() }

    // MARK: - Keys we generate, read by ssh-keygen

    func testGeneratedKeysOfEveryTypeAreAcceptedBySSHKeygenWithTheSamePublicKeyAndFingerprint() throws {
        for (algorithm, _) in Self.fastTypes {
            let key = try SSHPrivateKey.generate(algorithm, rsaBits: 2048, comment: "termind@test")
            XCTAssertEqual(key.publicKey.algorithm, algorithm)
            let path = try writePrivateKey(key.openSSHPrivateKeyText(), "generated-\(algorithm.rawValue)")
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            XCTAssertEqual(mode, 0o600)
            try assertSSHKeygenReads(path, as: key.publicKey)
            XCTAssertEqual(try sshKeygenFingerprint(path), "\(key.publicKey.bits) \(key.publicKey.fingerprintSHA256)", "\(algorithm)")
        }
    }

    func testGeneratedRSAKeysDefaultTo4096BitsAndSSHKeygenAcceptsThem() throws {
        let key = try SSHPrivateKey.generate(.rsa)
        XCTAssertEqual(key.publicKey.bits, 4096)
        let path = try writePrivateKey(key.openSSHPrivateKeyText(), "rsa4096")
        try assertSSHKeygenReads(path, as: key.publicKey)
        XCTAssertEqual(try sshKeygenFingerprint(path), "4096 \(key.publicKey.fingerprintSHA256)")
    }

    func testKeysWeEncryptWithAPassphraseOpenInSSHKeygenAndParseBack() throws {
        let key = try SSHPrivateKey.generate(.ecdsaP256, comment: "encrypted")
        let text = try key.openSSHPrivateKeyText(passphrase: Secret(passphrase))
        let path = try writePrivateKey(text, "ours-encrypted")
        try assertSSHKeygenReads(path, as: key.publicKey, passphrase: passphrase)
        XCTAssertEqual(try SSHPrivateKey.inspect(text).encrypted, true)
        let parsed = try SSHPrivateKey.parse(text, passphrase: Secret(passphrase))
        XCTAssertEqual(parsed.publicKey, key.publicKey)
        XCTAssertEqual(parsed.comment, "encrypted")
    }

    func testPublicKeyLinesRoundTripAndRejectAMismatchedType() throws {
        let key = try SSHPrivateKey.generate(.ed25519)
        let line = key.publicKey.openSSHLine(comment: "me@host")
        XCTAssertTrue(line.hasSuffix(" me@host"))
        XCTAssertEqual(try SSHPublicKey(openSSHLine: line), key.publicKey)
        XCTAssertEqual(key.publicKey.openSSHLine(comment: nil).split(separator: " ").count, 2)
        let renamed = line.replacingOccurrences(of: "ssh-ed25519", with: "ssh-rsa")
        assertKeyError("key.malformed") { _ = try SSHPublicKey(openSSHLine: renamed) }
        XCTAssertEqual(String(describing: key), "SSHPrivateKey(ssh-ed25519 \(key.publicKey.fingerprintSHA256))")
    }

    // MARK: - Keys ssh-keygen generates, read by us

    func testUnencryptedKeysFromSSHKeygenParseToItsPublicKeyAndSurviveReencoding() throws {
        for (algorithm, options) in Self.fastTypes {
            let path = try sshKeygenGenerate(options, name: "plain-\(algorithm.rawValue)")
            let key = try SSHPrivateKey.parse(try read(path), passphrase: nil)
            try assertMatchesSSHKeygen(key, privatePath: path)
            XCTAssertEqual(key.comment, "keygen@test")
            let inspected = try SSHPrivateKey.inspect(try read(path))
            XCTAssertFalse(inspected.encrypted)
            XCTAssertEqual(inspected.publicKey, key.publicKey)
        }
    }

    func testPassphraseProtectedKeysFromSSHKeygenNeedTheRightPassphrase() throws {
        let cases: [(String, [String])] = [
            ("ed25519", ["-t", "ed25519"]), ("ecdsa", ["-t", "ecdsa", "-b", "384"]), ("rsa", ["-t", "rsa", "-b", "2048"]),
            ("ed25519-gcm", ["-t", "ed25519", "-Z", "aes256-gcm@openssh.com"]),
            ("ecdsa-aes128", ["-t", "ecdsa", "-Z", "aes128-ctr"]),
        ]
        for (name, options) in cases {
            let path = try sshKeygenGenerate(options, name: "enc-\(name)", passphrase: passphrase)
            let text = try read(path)
            let inspected = try SSHPrivateKey.inspect(text)
            XCTAssertTrue(inspected.encrypted, name)
            XCTAssertEqual(inspected.publicKey, try SSHPublicKey(openSSHLine: String(contentsOfFile: path + ".pub", encoding: .utf8)), name)
            assertKeyError("key.passphrase_required") { _ = try SSHPrivateKey.parse(text, passphrase: nil) }
            assertKeyError("key.wrong_passphrase") { _ = try SSHPrivateKey.parse(text, passphrase: Secret("not the passphrase")) }
            let key = try SSHPrivateKey.parse(text, passphrase: Secret(passphrase))
            try assertMatchesSSHKeygen(key, privatePath: path, passphrase: passphrase)
        }
    }

    func testPEMAndPKCS8KeysFromSSHKeygenParseWithAndWithoutAPassphrase() throws {
        let cases: [(String, [String])] = [
            ("rsa-pem", ["-t", "rsa", "-b", "2048", "-m", "PEM"]), ("ecdsa-pem", ["-t", "ecdsa", "-m", "PEM"]),
            ("rsa-pkcs8", ["-t", "rsa", "-b", "2048", "-m", "PKCS8"]), ("ecdsa-pkcs8", ["-t", "ecdsa", "-b", "521", "-m", "PKCS8"]),
        ]
        for (name, options) in cases {
            let plain = try sshKeygenGenerate(options, name: "\(name)-plain")
            XCTAssertFalse(try read(plain).withPlaintext { $0.hasPrefix("-----BEGIN OPENSSH") }, name)
            let key = try SSHPrivateKey.parse(try read(plain), passphrase: nil)
            try assertMatchesSSHKeygen(key, privatePath: plain)
            XCTAssertEqual(try SSHPrivateKey.inspect(try read(plain)).publicKey, key.publicKey, name)

            let locked = try sshKeygenGenerate(options, name: "\(name)-locked", passphrase: passphrase)
            let text = try read(locked)
            let inspected = try SSHPrivateKey.inspect(text)
            XCTAssertTrue(inspected.encrypted, name)
            XCTAssertNil(inspected.publicKey, name)
            assertKeyError("key.passphrase_required") { _ = try SSHPrivateKey.parse(text, passphrase: nil) }
            assertKeyError("key.wrong_passphrase") { _ = try SSHPrivateKey.parse(text, passphrase: Secret("wrong passphrase")) }
            try assertMatchesSSHKeygen(try SSHPrivateKey.parse(text, passphrase: Secret(passphrase)), privatePath: locked, passphrase: passphrase)
        }
    }

    func testKeysFromOpenSSLParseIncludingEd25519PKCS8AndCompressedECPoints() throws {
        let ed25519 = directory.file("openssl-ed25519")
        let made = try ProcessRunner.run("/usr/bin/openssl", ["genpkey", "-algorithm", "ed25519", "-out", ed25519])
        try XCTSkipIf(made.status != 0, "openssl cannot generate Ed25519 keys here")
        let edKey = try SSHPrivateKey.parse(try read(ed25519), passphrase: nil)
        XCTAssertEqual(edKey.publicKey.algorithm, .ed25519)
        try assertSSHKeygenReads(try writePrivateKey(edKey.openSSHPrivateKeyText(), "openssl-ed25519-ours"), as: edKey.publicKey)

        let uncompressed = directory.file("openssl-ec"), compressed = directory.file("openssl-ec-compressed")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", uncompressed]).status, 0)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["ec", "-in", uncompressed, "-conv_form", "compressed", "-out", compressed]).status, 0)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: compressed)
        let ecKey = try SSHPrivateKey.parse(try read(compressed), passphrase: nil)
        XCTAssertEqual(ecKey.publicKey.algorithm, .ecdsaP256)
        try assertSSHKeygenReads(compressed, as: ecKey.publicKey)
        try assertSSHKeygenReads(try writePrivateKey(ecKey.openSSHPrivateKeyText(), "openssl-ec-ours"), as: ecKey.publicKey)
    }

    // MARK: - Damaged and unsupported input

    func testDamagedOpenSSHFilesAreReportedByWhatIsWrong() throws {
        let key = try SSHPrivateKey.generate(.ed25519, comment: "damage")
        let text = key.openSSHPrivateKeyText().withPlaintext { $0 }
        var lines = text.split(separator: "\n").map(String.init)
        let body = try XCTUnwrap(Data(base64Encoded: lines[1..<(lines.count - 1)].joined()))

        var truncated = lines
        truncated[1] = String(truncated[1].dropLast(3))
        assertKeyError("key.malformed") { _ = try SSHPrivateKey.parse(Secret(truncated.joined(separator: "\n")), passphrase: nil) }
        let shortBody = KeyFileText.armour(body.prefix(body.count - 40))
        assertKeyError("key.malformed") { _ = try SSHPrivateKey.parse(Secret(shortBody), passphrase: nil) }

        // The private section starts after the clear public key blob and its length field.
        let blobRange = try XCTUnwrap(body.range(of: key.publicKey.blob))
        let sectionStart = blobRange.upperBound + 4
        assertKeyError("key.corrupt") { _ = try SSHPrivateKey.parse(Secret(KeyFileText.armour(flip(body, at: sectionStart + 1))), passphrase: nil) }
        let seedOffset = sectionStart + 8 + 4 + 11 + 4 + 32 + 4   // checkints, type, public key, then the seed
        assertKeyError("key.corrupt") { _ = try SSHPrivateKey.parse(Secret(KeyFileText.armour(flip(body, at: seedOffset + 5))), passphrase: nil) }

        lines[lines.count - 1] = "-----END RSA PRIVATE KEY-----"
        assertKeyError("key.malformed") { _ = try SSHPrivateKey.parse(Secret(lines.joined(separator: "\n")), passphrase: nil) }
        assertKeyError("key.not_a_private_key") { _ = try SSHPrivateKey.parse(Secret(key.publicKey.openSSHLine(comment: nil)), passphrase: nil) }
        assertKeyError("key.not_a_private_key") { _ = try SSHPrivateKey.parse(Secret("hello"), passphrase: nil) }
    }

    func testEveryFlippedByteOfAKeyFileIsAnErrorOrTheSameKeyNeverACrash() throws {
        let key = try SSHPrivateKey.generate(.ecdsaP256, comment: "c")
        let body = try XCTUnwrap(Data(base64Encoded: key.openSSHPrivateKeyText().withPlaintext {
            $0.split(separator: "\n").dropFirst().dropLast().joined()
        }))
        var codes: Set<String> = []
        for offset in 0..<body.count {
            do {
                let parsed = try SSHPrivateKey.parse(Secret(KeyFileText.armour(flip(body, at: offset))), passphrase: nil)
                XCTAssertEqual(parsed.publicKey, key.publicKey, "offset \(offset) parsed as another key")
            } catch let error as TermindError {
                XCTAssertTrue(error.code.hasPrefix("key."), "offset \(offset): \(error.code)")
                codes.insert(error.code)
            }
        }
        XCTAssertTrue(codes.isSuperset(of: ["key.malformed", "key.corrupt", "key.unsupported"]), "\(codes.sorted())")
    }

    func testDSAAndSecurityKeyTypesAreUnsupported() throws {
        let dsa = try sshKeygenGenerate(["-t", "dsa"], name: "dsa")
        assertKeyError("key.unsupported") { _ = try SSHPrivateKey.parse(try read(dsa), passphrase: nil) }
        let dsaPEM = try sshKeygenGenerate(["-t", "dsa", "-m", "PEM"], name: "dsa-pem")
        assertKeyError("key.unsupported") { _ = try SSHPrivateKey.parse(try read(dsaPEM), passphrase: nil) }

        // ssh-keygen needs a hardware token for ed25519-sk, so build such a file by hand.
        var blob = SSHWireWriter()
        blob.string("sk-ssh-ed25519@openssh.com")
        blob.string([UInt8](repeating: 7, count: 32))
        blob.string("ssh:")
        var file = SSHWireWriter()
        file.raw(Array("openssh-key-v1".utf8) + [0])
        for field in ["none", "none", ""] { file.string(field) }
        file.uint32(1)
        file.string(blob.bytes)
        file.string([UInt8](repeating: 0, count: 16))
        assertKeyError("key.unsupported") { _ = try SSHPrivateKey.parse(Secret(KeyFileText.armour(Data(file.bytes))), passphrase: nil) }
        assertKeyError("key.unsupported") { _ = try SSHPrivateKey.inspect(Secret(KeyFileText.armour(Data(file.bytes)))) }
    }

    // MARK: - bcrypt_pbkdf and Blowfish

    func testBlowfishTablesAreTheHexDigitsOfPi() {
        XCTAssertEqual(BlowfishTables.initialState.count, 1042)
        XCTAssertEqual(BlowfishTables.p(0), 0x243F_6A88)
        XCTAssertEqual(BlowfishTables.p(1), 0x85A3_08D3)
        XCTAssertEqual(BlowfishTables.p(17), 0x8979_FB1B)
        XCTAssertEqual(BlowfishTables.s(0, 0), 0xD131_0BA6)
        XCTAssertEqual(BlowfishTables.s(1, 0), 0x4B7A_70E9)
        XCTAssertEqual(BlowfishTables.s(2, 0), 0xE93D_5A68)
        XCTAssertEqual(BlowfishTables.s(3, 0), 0x3A39_CE37)
        XCTAssertEqual(BlowfishTables.s(3, 255), 0x3AC3_72E6)
    }

    /// OpenBSD's bcrypt_pbkdf regression vectors (as carried by RustCrypto's bcrypt-pbkdf tests).
    func testBcryptPBKDFMatchesOpenBSDKnownAnswers() throws {
        let vectors: [(String, [UInt8], Int, String)] = [
            ("password", Array("salt".utf8), 4, "5bbf0cc293587f1c3635555c27796598d47e579071bf427e9d8fbe842aba34d9"),
            ("password", [0], 4, "c12b566235eee04c212598970a579a67"),
            ("\0", Array("salt".utf8), 4, "6051be18c2f4f82cbf0efee5471b4bb9"),
            ("password\0", Array("salt\0".utf8), 4, "7410e44cf4fa07bfaac8a928b1727fac001375e7bf7384370f48efd121743050"),
            ("password", Array("salt".utf8), 8,
             "e1367ec5151a33faac4cc1c144cd23fa15d5548493ecc99b9b5d9c0d3b27bec76227ea66088b849b20ab7aa478010246e74bba51723fefa9f9474d6508845e8d"),
        ]
        for (password, salt, rounds, expected) in vectors {
            let key = try BcryptPBKDF.deriveKey(password: Array(password.utf8), salt: salt, rounds: rounds, length: expected.count / 2)
            XCTAssertEqual(key.map { String(format: "%02x", $0) }.joined(), expected, "rounds \(rounds), \(expected.count / 2) bytes")
        }
        let oneRound = try BcryptPBKDF.deriveKey(password: Array("password".utf8), salt: Array("salt".utf8), rounds: 1, length: 48)
        XCTAssertNotEqual(oneRound, Data(count: 48), "a single round must still produce key material")
        assertKeyError("key.unsupported") { _ = try BcryptPBKDF.deriveKey(password: [UInt8](), salt: [1], rounds: 4, length: 32) }
    }

    // MARK: - Helpers

    private func assertKeyError(_ code: String, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
        do {
            try body()
            XCTFail("expected the error \(code), got success", file: file, line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, code, error.message, file: file, line: line)
            XCTAssertFalse(error.message.contains(passphrase), "the message quotes the passphrase", file: file, line: line)
        } catch {
            XCTFail("expected a TermindError \(code), got \(type(of: error))", file: file, line: line)
        }
    }

    /// ssh-keygen -y on the file prints our public key; -l on the re-encoded key prints our fingerprint.
    private func assertMatchesSSHKeygen(_ key: SSHPrivateKey, privatePath: String, passphrase: String? = nil,
                                        file: StaticString = #filePath, line: UInt = #line) throws {
        try assertSSHKeygenReads(privatePath, as: key.publicKey, passphrase: passphrase, file: file, line: line)
        XCTAssertEqual(try sshKeygenFingerprint(privatePath + ".pub"), "\(key.publicKey.bits) \(key.publicKey.fingerprintSHA256)",
                       file: file, line: line)
        let reencoded = try writePrivateKey(key.openSSHPrivateKeyText(), URL(fileURLWithPath: privatePath).lastPathComponent + "-ours")
        try assertSSHKeygenReads(reencoded, as: key.publicKey, file: file, line: line)
    }

    private func assertSSHKeygenReads(_ path: String, as expected: SSHPublicKey, passphrase: String? = nil,
                                      file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try sshKeygen(["-y", "-P", passphrase ?? "", "-f", path])
        XCTAssertEqual(result.status, 0, "ssh-keygen -y failed: \(result.stderr)", file: file, line: line)
        XCTAssertEqual(try SSHPublicKey(openSSHLine: result.stdout), expected, file: file, line: line)
    }

    /// "BITS SHA256:…" from `ssh-keygen -l -E sha256`.
    private func sshKeygenFingerprint(_ path: String) throws -> String {
        let result = try sshKeygen(["-l", "-E", "sha256", "-f", path])
        return result.stdout.split(separator: " ").prefix(2).joined(separator: " ")
    }

    private func sshKeygenGenerate(_ options: [String], name: String, passphrase: String = "") throws -> String {
        let path = directory.file(name)
        let result = try sshKeygen(["-q"] + options + ["-N", passphrase, "-C", "keygen@test", "-f", path])
        XCTAssertEqual(result.status, 0, "ssh-keygen \(options) failed: \(result.stderr)")
        return path
    }

    private func sshKeygen(_ arguments: [String]) throws -> ProcessResult {
        try ProcessRunner.run("/usr/bin/ssh-keygen", arguments)
    }

    private func writePrivateKey(_ text: Secret, _ name: String) throws -> String {
        let path = directory.file(name)
        let written = FileManager.default.createFile(atPath: path, contents: Data(text.withPlaintext { $0 }.utf8),
                                                     attributes: [.posixPermissions: 0o600])
        XCTAssertTrue(written, "could not write \(name)")
        return path
    }

    private func read(_ path: String) throws -> Secret { Secret(try String(contentsOfFile: path, encoding: .utf8)) }

    private func flip(_ data: Data, at offset: Int) -> Data {
        var copy = data
        copy[copy.startIndex + offset] ^= 0x01
        return copy
    }
}

/// Re-armours a (possibly altered) openssh-key-v1 body the way OpenSSH writes it.
private enum KeyFileText {
    static func armour(_ body: Data) -> String {
        let base64 = Array(body.base64EncodedString())
        let lines = stride(from: 0, to: base64.count, by: 70).map { String(base64[$0..<min($0 + 70, base64.count)]) }
        return (["-----BEGIN OPENSSH PRIVATE KEY-----"] + lines + ["-----END OPENSSH PRIVATE KEY-----", ""]).joined(separator: "\n")
    }
}
