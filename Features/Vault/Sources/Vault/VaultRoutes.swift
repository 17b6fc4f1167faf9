import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto
import TermindSSH
import TermindStore
import VaultAPI

/// `vault.routes`: saved hosts and quick-connect lines as routes with per-hop credentials.
struct VaultRoutes: RouteResolver {
    let vault: VaultFeature
    let credentials: VaultCredentials

    func route(for request: RouteRequest, askPassphrase: @escaping @Sendable (String) async -> Secret?) async throws -> ResolvedRoute {
        let localUser = LocalUser.name
        var hops: [SSHTarget] = []
        var secrets: [String: SSHCredentials] = [:]
        func saved(_ host: String, isTarget: Bool) async throws {
            let granted = try await credentials.credentials(for: CredentialRequest(host: host, explicitUser: isTarget ? request.user : nil,
                                                                                     explicitIdentity: isTarget ? request.identity : nil))
            let hop = SSHTarget(host: granted.address, port: granted.port, username: granted.username ?? localUser)
            hops.append(hop)
            secrets[ResolvedRoute.key(hop)] = SSHCredentials(password: granted.password, privateKey: granted.privateKey)
        }
        let vault = self.vault
        let target = request.target
        if let record = try await BlockingExecutor.store.run({ try vault.repositories().0.find(target) }) {
            for jump in record.jump { try await saved(jump, isTarget: false) }
            try await saved(record.id, isTarget: true)
            return ResolvedRoute(route: SSHRoute(hops), credentials: secrets, targetIsSaved: true)
        }
        let resolved = try await BlockingExecutor.store.run { try QuickConnectResolver(hosts: try vault.repositories().0).resolve(target) }
        for (index, endpoint) in resolved.route.enumerated() {
            let isTarget = index == resolved.route.count - 1
            if let id = endpoint.savedHost, !(isTarget && (request.user != nil || request.identity != nil || !resolved.identityFiles.isEmpty)) {
                try await saved(id, isTarget: isTarget)
                continue
            }
            let hop = SSHTarget(host: endpoint.address, port: endpoint.port, username: (isTarget ? request.user : nil) ?? endpoint.user ?? localUser)
            hops.append(hop)
            var key: Secret?, passphrase: Secret?
            if isTarget, let file = resolved.identityFiles.first {
                let path = LocalPath.absolute(file, relativeTo: request.workingDirectory)
                let text = try await BlockingExecutor.run { try BoundedFile.read(path, limit: 64 << 10, what: "key file", code: .execKeyUnreadable) }
                key = Secret(String(decoding: text, as: UTF8.self))
                passphrase = try await Self.unlock(key!, path: path, askPassphrase: askPassphrase)
            }
            secrets[ResolvedRoute.key(hop)] = SSHCredentials(privateKey: key, passphrase: passphrase)
        }
        // A saved label with another port or user (`prod:2222`) still names a saved host.
        return ResolvedRoute(route: SSHRoute(hops), credentials: secrets, targetIsSaved: resolved.route.last?.alias != nil)
    }

    /// The passphrase of a protected key file (checked here, so a wrong one is named before
    /// anything connects), or nil for an unprotected one.
    static func unlock(_ key: Secret, path: String, askPassphrase: @Sendable (String) async -> Secret?) async throws -> Secret? {
        do {
            _ = try SSHPrivateKey.parse(key, passphrase: nil)
            return nil
        } catch let error as TermindError where error.is(.keyPassphraseRequired) {
            guard let passphrase = await askPassphrase(path) else {
                throw TermindError(.keyPassphraseRequired, "The key file \(path) is passphrase-protected and there is no terminal to ask for it. "
                    + "Import it once (termind vault key import \(path) --passphrase -) and use a saved identity, or add it to ssh-agent (ssh-add \(path)).")
            }
            do {
                _ = try await BlockingExecutor.crypto.run { try SSHPrivateKey.parse(key, passphrase: passphrase) }
            } catch let error as TermindError where error.is(.keyWrongPassphrase) {
                throw TermindError(code: error.code, message: "Wrong passphrase for the key file \(path); nothing was sent to the server.")
            }
            return passphrase
        }
    }
}
