import Foundation
import TermindHarness
import VaultRules
import XCTest

/// known_hosts rules against the real OpenSSH tools: keys from `ssh-keygen`, our exports looked
/// up with `ssh-keygen -F`, and files hashed by `ssh-keygen -H` read back by us.
final class KnownHostsOpenSSHTests: XCTestCase {
    static let sshKeygen = "/usr/bin/ssh-keygen"
    var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("known-hosts")
    }

    override func tearDown() {
        directory?.remove()
    }

    /// Generates a key pair with ssh-keygen and returns its public key.
    func generateKey(_ name: String, type: String, bits: Int? = nil) throws -> HostKey {
        var arguments = ["-q", "-t", type, "-N", "", "-C", name, "-f", directory.file(name)]
        if let bits { arguments += ["-b", String(bits)] }
        let result = try ProcessRunner.run(Self.sshKeygen, arguments)
        XCTAssertEqual(result.status, 0, result.stderr)
        return try HostKey(openSSHLine: String(contentsOfFile: directory.file(name + ".pub"), encoding: .utf8))
    }

    func keygenFind(_ lookupName: String, in file: String) throws -> ProcessResult {
        try ProcessRunner.run(Self.sshKeygen, ["-F", lookupName, "-f", file])
    }

    func testFingerprintsMatchSSHKeygenForGeneratedKeys() throws {
        let kinds: [(String, Int?, String)] = [("ed25519", nil, "ssh-ed25519"), ("ecdsa", 256, "ecdsa-sha2-nistp256"),
                                                ("ecdsa", 384, "ecdsa-sha2-nistp384"), ("ecdsa", 521, "ecdsa-sha2-nistp521"),
                                                ("rsa", 2048, "ssh-rsa")]
        for (index, (type, bits, algorithm)) in kinds.enumerated() {
            let key = try generateKey("k\(index)", type: type, bits: bits)
            XCTAssertEqual(key.algorithm, algorithm)
            let listed = try ProcessRunner.run(Self.sshKeygen, ["-l", "-E", "sha256", "-f", directory.file("k\(index).pub")])
            XCTAssertEqual(listed.status, 0, listed.stderr)
            // "256 SHA256:... comment (ED25519)"
            let fields = listed.stdout.split(separator: " ")
            XCTAssertGreaterThan(fields.count, 2, listed.stdout)
            XCTAssertEqual(key.fingerprintSHA256, fields.count > 1 ? String(fields[1]) : "", "\(type) \(bits ?? 0)")
        }
    }

    func testSSHKeygenFindsExportedPlainAndHashedEntries() throws {
        let key = try generateKey("host", type: "ed25519")
        let other = try generateKey("other", type: "ecdsa")
        let entries = [
            KnownHostEntry(host: "plain.example", port: 22, key: key, hashed: false),
            KnownHostEntry(host: "hashed.example", port: 22, key: key, hashed: true),
            KnownHostEntry(host: "Plain.Example", port: 2222, key: other, hashed: false),
            KnownHostEntry(host: "hashed.example", port: 2222, key: other, hashed: true, comment: "exported by termind"),
        ]
        let file = try directory.write("known_hosts", KnownHosts.render(entries))
        let lookups = ["plain.example", "hashed.example", "[plain.example]:2222", "[hashed.example]:2222"]
        for (index, lookup) in lookups.enumerated() {
            let found = try keygenFind(lookup, in: file)
            XCTAssertEqual(found.status, 0, "ssh-keygen -F \(lookup): \(found.stderr)")
            let lines = found.stdout.split(separator: "\n").map(String.init)
            XCTAssertEqual(lines.first?.trimmingCharacters(in: .whitespaces), "# Host \(lookup) found: line \(index + 1)")
            XCTAssertEqual(lines.dropFirst().first, entries[index].lineText)
            XCTAssertEqual(lines.count, 2, found.stdout)
        }
        let missing = try keygenFind("[plain.example]:2200", in: file)
        XCTAssertEqual(missing.status, 1)
        XCTAssertEqual(missing.stdout, "")
    }

    func testWeMatchEntriesAfterSSHKeygenHashedTheFile() throws {
        let keyA = try generateKey("a", type: "ed25519")
        let keyB = try generateKey("b", type: "rsa", bits: 2048)
        let plain = "example.com,192.0.2.1 \(keyA.openSSHText)\n[example.com]:2222 \(keyB.openSSHText) b\n"
        let file = try directory.write("known_hosts", plain)
        let hashing = try ProcessRunner.run(Self.sshKeygen, ["-H", "-f", file])
        XCTAssertEqual(hashing.status, 0, hashing.stderr)

        let text = try String(contentsOfFile: file, encoding: .utf8)
        let (entries, problems) = KnownHosts.parse(text, source: file)
        XCTAssertEqual(problems, [])
        XCTAssertEqual(entries.count, 3, "ssh-keygen -H writes one hashed line per name:\n\(text)")
        for entry in entries {
            guard case .hashed = entry.names else { return XCTFail("not hashed: \(entry.lineText)") }
        }
        XCTAssertFalse(text.contains("example.com"))

        func isTrusted(_ host: String, _ port: Int, _ key: HostKey) -> Bool {
            if case .trusted = KnownHosts.check(host: host, port: port, key: key, entries: entries) { return true }
            return false
        }
        XCTAssertTrue(isTrusted("example.com", 22, keyA))
        XCTAssertTrue(isTrusted("EXAMPLE.COM", 22, keyA))
        XCTAssertTrue(isTrusted("192.0.2.1", 22, keyA))
        XCTAssertTrue(isTrusted("example.com", 2222, keyB))
        XCTAssertEqual(KnownHosts.check(host: "example.com", port: 2222, key: keyA, entries: entries), .otherKeyTypes(known: [keyB]))
        XCTAssertEqual(KnownHosts.check(host: "example.org", port: 22, key: keyA, entries: entries), .unknown)

        // Our hash of each name under ssh-keygen's salt is the very text ssh-keygen wrote.
        let names = ["example.com", "192.0.2.1", "[example.com]:2222"]
        for (entry, name) in zip(entries, names) {
            guard case .hashed(let salt, _) = entry.names else { continue }
            XCTAssertEqual(KnownHosts.hashedName(name, salt: salt), entry.namesText)
        }
    }

    func testSSHKeygenAndWeAgreeOnWhichLinesNameAHost() throws {
        let key = try generateKey("k", type: "ed25519")
        let text = """
        *.example.com,!bad.example.com \(key.openSSHText)
        [*.example.com]:22?? \(key.openSSHText)
        ex?mple.org \(key.openSSHText)
        """
        let file = try directory.write("known_hosts", text + "\n")
        let entries = KnownHosts.parse(text, source: file).entries
        for lookup in ["www.example.com", "bad.example.com", "[www.example.com]:2222", "[www.example.com]:22",
                       "example.org", "exxample.org", "EXAMPLE.ORG", "[bad.example.com]:2201"] {
            let ours = entries.filter { KnownHosts.matches($0, lookupName: lookup) }.map(\.line)
            let found = try keygenFind(lookup, in: file)
            let theirs = found.stdout.split(separator: "\n").compactMap { line -> Int? in
                guard line.hasPrefix("# Host"), let number = line.split(separator: " ").last else { return nil }
                return Int(number)
            }
            XCTAssertEqual(ours, theirs, "lines naming \(lookup)")
            XCTAssertEqual(found.status, theirs.isEmpty ? 1 : 0)
        }
    }
}
