import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import TermindSSH
import VaultAPI
import XCTest

/// termind's libssh2 (Debian's 1.11.1 with the patch series in scripts/deps/libssh2, which
/// changes how the ciphers are called) against OpenSSH's sshd: every cipher and every MAC
/// both support, forced one at a time on the server, moves data intact both ways while the
/// server rekeys every megabyte, and at the packet-size edges.
///
/// The payload is `TERMIND_INTEROP_MIB` MiB each way (8 by default, so that `make test`
/// stays short; `make interop` runs the full 256 MiB) of random bytes, checked with SHA-256.
final class SSHCipherInteropTests: XCTestCase {
    /// What libssh2 offers and OpenSSH 9.2 accepts (`ssh -Q cipher`; libssh2 also has
    /// blowfish, cast128 and arcfour, which OpenSSH removed).
    static let ciphers = [
        "chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com",
        "aes256-ctr", "aes192-ctr", "aes128-ctr", "aes256-cbc", "aes192-cbc", "aes128-cbc", "3des-cbc",
    ]
    /// The MACs both sides have (libssh2's hmac-ripemd160 is not in OpenSSH). The AEAD
    /// ciphers carry their own MAC, so these run under aes128-ctr and, for the
    /// encrypt-then-MAC decrypt path, aes128-cbc.
    static let macs = [
        "hmac-sha2-256", "hmac-sha2-256-etm@openssh.com", "hmac-sha2-512", "hmac-sha2-512-etm@openssh.com",
        "hmac-sha1", "hmac-sha1-etm@openssh.com", "hmac-sha1-96", "hmac-md5", "hmac-md5-96",
    ]
    /// 1 byte, either side of one 32 KiB channel packet, and several packets.
    static let edgeSizes = [1, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 256 * 1024]
    /// chacha20-poly1305 crypts a payload of up to 256 bytes, and MACs up to 256, with the
    /// portable code and anything bigger with libcrypto's (patch 0006): channel data of
    /// these sizes (one packet each) puts the payload and the MAC on either side of that
    /// limit, together and apart, in every padding.
    static let chachaEdgeSizes = Array(228...262)

    private var directory: TemporaryDirectory!
    private var clientKey: String!
    private var publicKey: String!
    private var payload: String!
    private var payloadSize = 0
    /// SHA-256 of the payload's first N bytes, computed once per N.
    private var expectedDigests: [Int: String] = [:]
    private var vault: HarnessSession!
    private var trust: (any HostKeyTrust)!
    /// As root, a throwaway account whose /bin/sh starts light (root's shell start-up costs
    /// about 100 ms an exec here, and each cipher runs a dozen).
    private var account: ThrowawayAccount?
    private var user: String { account?.name ?? NSUserName() }

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        let path = directory.file("client")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", path]).status, 0)
        clientKey = try String(contentsOfFile: path, encoding: .utf8)
        publicKey = try String(contentsOfFile: path + ".pub", encoding: .utf8)
        let mib = Int(ProcessInfo.processInfo.environment["TERMIND_INTEROP_MIB"] ?? "") ?? 8
        payloadSize = mib << 20
        // sshd runs on this machine, so the remote side reads the same file.
        payload = directory.file("payload")
        let made = try ProcessRunner.run("/bin/sh", ["-c", "head -c \(payloadSize) /dev/urandom > '\(payload!)'"])
        XCTAssertEqual(made.status, 0)
        chmod(payload, 0o644)
        chmod(directory.path, 0o755)
        if getuid() == 0 { account = try ThrowawayAccount() }
        vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
    }

    override func tearDown() async throws {
        await vault?.shutdown()
        account?.remove()
        directory?.remove()
    }

    func testEveryCipherMovesDataIntactBothWaysAcrossRekeying() async throws {
        for cipher in Self.ciphers {
            try await exercise(cipher: cipher, mac: nil, bytes: payloadSize)
        }
    }

    func testEveryMACMovesDataIntactBothWaysAcrossRekeying() async throws {
        for mac in Self.macs {
            for cipher in ["aes128-ctr", "aes128-cbc"] {
                try await exercise(cipher: cipher, mac: mac, bytes: min(payloadSize, 4 << 20))
            }
        }
    }

    /// Starts an sshd that accepts only `cipher` (and `mac`), rekeying every megabyte, then
    /// moves `bytes` of the payload down and up and the edge sizes both ways.
    private func exercise(cipher: String, mac: String?, bytes: Int) async throws {
        let label = mac.map { "\(cipher) + \($0)" } ?? cipher
        let server = try SSHServerFixture(authorizedKeys: [publicKey], extraConfig: [
            "Ciphers \(cipher)", "MACs \(mac ?? "hmac-sha2-256-etm@openssh.com,hmac-sha2-256")",
            "RekeyLimit 1M", "LogLevel DEBUG1",
        ], hostKeyTypes: ["ed25519"])
        defer { server.stop() }
        chmod(server.directory.file("authorized_keys"), 0o644)  // sshd reads it as the account
        let connection = try await SSHConnection.open(
            SSHTarget(host: "127.0.0.1", port: server.port, username: user),
            credentials: SSHCredentials(privateKey: Secret(clientKey), agentSocket: ""), trust: trust) { _ in .acceptOnce }

        let down = try await download(connection, "head -c \(bytes) '\(payload!)'")
        XCTAssertEqual(down.count, bytes, "\(label): bytes down")
        XCTAssertEqual(down.digest, try expected(bytes), "\(label): SHA-256 down")
        let up = try await upload(connection, bytes: bytes)
        XCTAssertEqual(up, try expected(bytes), "\(label): SHA-256 up")

        for size in Self.edgeSizes + (cipher.hasPrefix("chacha20") ? Self.chachaEdgeSizes : []) {
            let want = try expected(size)
            let small = try await download(connection, "head -c \(size) '\(payload!)'")
            XCTAssertEqual(small.count, size, "\(label): \(size) bytes down")
            XCTAssertEqual(small.digest, want, "\(label): \(size) bytes down")
            let sent = try await upload(connection, bytes: size)
            XCTAssertEqual(sent, want, "\(label): \(size) bytes up")
        }
        await connection.close()

        // The server used what it was told to, both ways, and rekeyed along the way.
        let log = server.log
        let negotiated = "cipher: \(cipher) MAC: \(mac ?? "<implicit>")"
        for direction in ["client->server", "server->client"] {
            if mac != nil {
                XCTAssertTrue(log.contains("kex: \(direction) \(negotiated)"), "\(label): sshd negotiated \(direction) otherwise")
            } else {
                XCTAssertTrue(log.contains("kex: \(direction) cipher: \(cipher) "), "\(label): sshd negotiated \(direction) otherwise")
            }
        }
        let kexCount = log.components(separatedBy: "kex: client->server cipher:").count - 1
        XCTAssertGreaterThan(kexCount, bytes >> 20, "\(label): sshd rekeyed about once a megabyte each way")
    }

    /// Runs `command` and hashes its standard output as it arrives.
    private func download(_ connection: SSHConnection, _ command: String) async throws -> (count: Int, digest: String) {
        let channel = try await connection.openChannel(.exec(command))
        let digest = IncrementalDigest(.sha256)
        var count = 0
        while let (stream, chunk) = try await channel.next() {
            guard stream == .stdout else { continue }
            digest.update(chunk)
            count += chunk.count
        }
        return (count, digest.finish().hexEncoded)
    }

    /// Streams the payload's first `bytes` into the server's sha256sum and returns its answer.
    private func upload(_ connection: SSHConnection, bytes: Int) async throws -> String {
        let channel = try await connection.openChannel(.exec("sha256sum | cut -d' ' -f1"))
        let file = try XCTUnwrap(FileHandle(forReadingAtPath: payload))
        defer { try? file.close() }
        var left = bytes
        while left > 0 {
            let chunk = try XCTUnwrap(try file.read(upToCount: min(left, 256 * 1024)))
            XCTAssertFalse(chunk.isEmpty)
            try await channel.write(chunk)
            left -= chunk.count
        }
        channel.closeInput()
        var out = Data()
        while let (stream, chunk) = try await channel.next() {
            if stream == .stdout { out += chunk }
        }
        return String(decoding: out, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func expected(_ bytes: Int) throws -> String {
        if let known = expectedDigests[bytes] { return known }
        let digest = try Self.digest(ofFile: payload, limit: bytes)
        expectedDigests[bytes] = digest
        return digest
    }

    private static func digest(ofFile path: String, limit: Int) throws -> String {
        let file = try XCTUnwrap(FileHandle(forReadingAtPath: path))
        defer { try? file.close() }
        let digest = IncrementalDigest(.sha256)
        var left = limit
        while left > 0, let chunk = try file.read(upToCount: min(left, 1 << 20)), !chunk.isEmpty {
            digest.update(chunk)
            left -= chunk.count
        }
        return digest.finish().hexEncoded
    }
}
