import Foundation
import TermindCore
import TermindSSH
import VaultAPI

/// What most transport tests start from: a folder of their own, a client key made by
/// `ssh-keygen` (ed25519 unless said), a real sshd that accepts it, and — with `vault` — the
/// real Vault booted from its .so deciding host-key trust. One place for the set-up the
/// tests used to copy: `stop()` undoes all of it, in order.
public final class SSHTestbed {
    public let directory: TemporaryDirectory
    /// The client key's file and its text (the public half beside it, `.pub`).
    public let keyPath: String
    public let clientKey: String
    public let server: SSHServerFixture
    public let user = NSUserName()
    /// The Vault and its trust port, when asked for.
    public let vault: HarnessSession?
    public let trust: (any HostKeyTrust)?

    /// `keyName`: the key's file name in the folder; `extraConfig`: lines for sshd_config.
    public init(keyType: String = "ed25519", keyName: String = "client", extraConfig: [String] = [], vault: Bool = true) async throws {
        directory = try TemporaryDirectory()
        keyPath = directory.file(keyName)
        do {
            let made = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", keyType, "-N", "", "-f", keyPath])
            guard made.status == 0 else { throw TermindError(code: "fixture.keygen", message: "ssh-keygen -t \(keyType) failed: \(made.stderr)") }
            clientKey = try String(contentsOfFile: keyPath, encoding: .utf8)
            server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)], extraConfig: extraConfig)
        } catch {
            directory.remove()
            throw error
        }
        if vault {
            do {
                let session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
                guard let trust = session.kernel.port(.hostKeyTrust) else {
                    await session.shutdown()
                    throw TermindError(code: "fixture.vault", message: "the Vault provides no host-key trust port")
                }
                self.vault = session
                self.trust = trust
            } catch {
                server.stop()
                directory.remove()
                throw error
            }
        } else {
            self.vault = nil
            trust = nil
        }
    }

    /// The server as a target for `user`.
    public var target: SSHTarget { SSHTarget(host: "127.0.0.1", port: server.port, username: user) }

    /// Credentials with the client key (and no agent).
    public var credentials: SSHCredentials { SSHCredentials(privateKey: Secret(clientKey), agentSocket: "") }

    /// The server stopped (a frozen one continued first), the Vault shut down, the folder removed.
    public func stop() async {
        server.signalAll(SIGCONT)
        server.stop()
        await vault?.shutdown()
        directory.remove()
    }
}
