import Foundation
import TermindCore
import TermindSSH
import VaultAPI
import TermindHarness
import XCTest

/// Known hosts through the Vault's contracts and trust port, with keys made by ssh-keygen.
final class VaultKnownHostsTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        let manifest = try FeatureHarness.registryManifest(id: "vault")
        session = try await FeatureHarness.boot(manifest)
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    /// A fresh public key line from ssh-keygen.
    private func key(_ type: String, _ name: String) throws -> String {
        let path = directory.file(name)
        let result = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", type, "-N", "", "-C", name, "-f", path])
        XCTAssertEqual(result.status, 0, result.stderr)
        return try String(contentsOfFile: path + ".pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func check(_ host: String, _ port: Int?, _ key: String) async throws -> KnownHostContracts.Check.Response {
        try await session.call(KnownHostContracts.Check.self, .init(host: host, port: port, key: key))
    }

    func testImportIsBoundedInSizeAndLineLengthAndReadsOnlyRegularFiles() async throws {
        let web = try key("ed25519", "web")
        // Over the 8 MiB bound: refused before it is read, naming the file; nothing is imported.
        let huge = directory.file("huge_known_hosts")
        XCTAssertTrue(FileManager.default.createFile(atPath: huge, contents: Data(repeating: UInt8(ascii: "#"), count: (8 << 20) + 1)))
        do {
            _ = try await session.call(KnownHostContracts.Import.self, .init(path: huge))
            XCTFail("an oversized known_hosts must be refused")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.import_unreadable")
            XCTAssertTrue(error.message.contains(huge) && error.message.contains("at most 8388608 bytes"), error.message)
        }
        let fifo = directory.file("fifo")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        do {
            _ = try await session.call(KnownHostContracts.Import.self, .init(path: fifo))
            XCTFail("a FIFO is not a known_hosts file")
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("is a FIFO"), error.message)
        }
        // A line over 16 KiB is skipped and named; the other lines are imported.
        let long = "long.example ssh-ed25519 " + String(repeating: "A", count: 17_000)
        let path = try directory.write("known_hosts", "\(long)\nweb.example \(web)\n")
        let imported = try await session.call(KnownHostContracts.Import.self, .init(path: path))
        XCTAssertEqual(imported.imported, 1)
        XCTAssertEqual(imported.problems, ["\(path):1: the line is 17025 bytes; lines longer than 16384 bytes are not read"])
        let listed = try await session.call(KnownHostContracts.List.self, .init())
        XCTAssertEqual(listed.entries.map(\.names), ["web.example"])
    }

    func testImportedOpenSSHFileDrivesTheVerdicts() async throws {
        let web = try key("ed25519", "web"), other = try key("ed25519", "other"), bad = try key("ecdsa", "bad")
        let text = """
        # written by hand
        web.example,10.0.0.1 \(web)
        [web.example]:2222 \(other)
        @revoked * \(bad)
        this line is broken
        """
        let path = try directory.write("known_hosts", text + "\n")
        // Hash a copy the way OpenSSH does, and import both.
        let hashedPath = try directory.write("hashed_known_hosts", "db.example \(other)\n")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-H", "-f", hashedPath]).status, 0)
        let imported = try await session.call(KnownHostContracts.Import.self, .init(path: path))
        XCTAssertEqual(imported.imported, 3)
        XCTAssertEqual(imported.problems.count, 1)
        XCTAssertTrue(imported.problems[0].contains("known_hosts:5"), imported.problems[0])
        let hashed = try await session.call(KnownHostContracts.Import.self, .init(path: hashedPath))
        XCTAssertEqual(hashed.imported, 1)
        let again = try await session.call(KnownHostContracts.Import.self, .init(path: path))
        XCTAssertEqual(again.imported, 0)
        XCTAssertEqual(again.duplicates, 3)

        let trusted = try await check("web.example", nil, web)
        XCTAssertEqual(trusted.verdict, "trusted")
        let viaIP = try await check("10.0.0.1", 22, web)
        XCTAssertEqual(viaIP.verdict, "trusted")
        let changed = try await check("web.example", 2222, web)
        XCTAssertEqual(changed.verdict, "changed", "[web.example]:2222 holds another key")
        XCTAssertEqual(changed.knownFingerprints.count, 1)
        let unknown = try await check("new.example", nil, web)
        XCTAssertEqual(unknown.verdict, "unknown")
        let revoked = try await check("web.example", nil, bad)
        XCTAssertEqual(revoked.verdict, "revoked")
        let hashedTrusted = try await check("db.example", nil, other)
        XCTAssertEqual(hashedTrusted.verdict, "trusted")
        let fingerprint = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", directory.file("web.pub")]).stdout
        XCTAssertTrue(fingerprint.contains(trusted.fingerprint), "\(fingerprint) vs \(trusted.fingerprint)")
    }

    func testTrustIsIndependentOfHosts() async throws {
        let web = try key("ed25519", "web")
        let host = try await session.call(VaultContracts.HostAdd.self, .init(address: "web.example", label: "web"))
        _ = try await session.call(KnownHostContracts.Add.self, .init(host: "web.example", key: web))
        _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: host.id, address: "web2.example"))
        let afterEdit = try await check("web.example", nil, web)
        XCTAssertEqual(afterEdit.verdict, "trusted", "editing a host never changes trust")
        _ = try await session.call(VaultContracts.HostDelete.self, .init(host: host.id))
        let afterDelete = try await check("web.example", nil, web)
        XCTAssertEqual(afterDelete.verdict, "trusted", "deleting a host never changes trust")
    }

    func testTheTrustPortAddsAfterApprovalAndExportIsReadByOpenSSH() async throws {
        let keyLine = try key("ed25519", "srv")
        let parts = keyLine.split(separator: " ")
        let blob = try XCTUnwrap(Data(base64Encoded: String(parts[1])))
        let trust = try XCTUnwrap(session.kernel.port(.hostKeyTrust))
        let publicKey = PublicHostKey(algorithm: String(parts[0]), blob: blob)
        let before = try await trust.verdict(host: "srv.example", port: 2222, key: publicKey)
        XCTAssertEqual(before, .unknown)
        try await trust.trust(host: "srv.example", port: 2222, key: publicKey)
        let after = try await trust.verdict(host: "srv.example", port: 2222, key: publicKey)
        XCTAssertEqual(after, .trusted)
        _ = try await session.call(KnownHostContracts.Add.self, .init(host: "hashed.example", key: keyLine, hashed: true))

        let exported = directory.file("exported_known_hosts")
        let reply = try await session.call(KnownHostContracts.Export.self, .init(path: exported))
        XCTAssertEqual(reply.entries, 2)
        for lookup in ["[srv.example]:2222", "hashed.example"] {
            let found = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-F", lookup, "-f", exported])
            let file = try String(contentsOfFile: exported, encoding: .utf8)
            XCTAssertEqual(found.status, 0, "ssh-keygen -F \(lookup) did not find the exported entry:\n\(file)")
        }
        var info = stat()
        XCTAssertEqual(stat(exported, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        do {
            _ = try await session.call(KnownHostContracts.Export.self, .init(path: exported))
            XCTFail("an existing file is never overwritten")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.export_failed")
        }
    }

    func testAChangedKeyIsRefusedWithBothFingerprintsAndTheWayToResolveIt() async throws {
        let old = try key("ed25519", "old"), new = try key("ed25519", "new")
        let added = try await session.call(KnownHostContracts.Add.self, .init(host: "db.example", port: 2222, key: old))
        let parts = new.split(separator: " ")
        let presented = PublicHostKey(algorithm: String(parts[0]), blob: try XCTUnwrap(Data(base64Encoded: String(parts[1]))))
        let trust = try XCTUnwrap(session.kernel.port(.hostKeyTrust))
        let message = try await trust.refusal(host: "db.example", port: 2222, key: presented)
        let text = try XCTUnwrap(message)
        XCTAssertTrue(text.contains("[db.example]:2222 has CHANGED"), text)
        XCTAssertTrue(text.contains(trust.fingerprint(presented)), text)
        XCTAssertTrue(text.contains(added.fingerprint), text)
        XCTAssertTrue(text.contains("termind vault knownhost remove \(added.id)"), text)
        let trustedOne = PublicHostKey(algorithm: String(old.split(separator: " ")[0]), blob: try XCTUnwrap(Data(base64Encoded: String(old.split(separator: " ")[1]))))
        let none = try await trust.refusal(host: "db.example", port: 2222, key: trustedOne)
        XCTAssertNil(none)
    }

    func testABadKeyIsRejectedWithItsReason() async throws {
        do {
            _ = try await session.call(KnownHostContracts.Add.self, .init(host: "x.example", key: "ssh-ed25519 !!!notbase64"))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "request.invalid")
            XCTAssertTrue(error.message.hasPrefix("key: "), error.message)
        }
        let entries = try await session.call(KnownHostContracts.List.self, .init()).entries
        XCTAssertEqual(entries, [])
    }
}
