import TermindCore
import VaultAPI

/// `vault.credentials`: the credential rules of `CredentialRequest`, applied to saved records.
struct VaultCredentials: CredentialProvider {
    let vault: VaultFeature

    func credentials(for request: CredentialRequest) async throws -> HostCredentials {
        try await BlockingExecutor.store.run { [vault] in try Self.credentials(vault, request) }
    }

    private static func credentials(_ vault: VaultFeature, _ request: CredentialRequest) throws -> HostCredentials {
        let (hosts, identities, keys) = try vault.repositories()
        let host = try hosts.get(request.host)
        let selected = try (request.explicitIdentity.map { try identities.get($0) })
            ?? host.identity.flatMap { try identities.find($0) }
        let username = request.explicitUser ?? selected?.username ?? host.user
        // The selected identity's key and password serve only its own user name.
        let own = selected.flatMap { username == $0.username ? $0 : nil }
        let privateKey = try own?.key.flatMap { try keys.privateKey($0) }
        if let explicit = request.explicitPassword {
            return HostCredentials(address: host.address, port: host.port, username: username, password: explicit,
                                   passwordSource: .explicit, identity: selected?.id, privateKey: privateKey)
        }
        if let own, own.hasPassword {
            return HostCredentials(address: host.address, port: host.port, username: username, password: try identities.password(of: own.id),
                                   passwordSource: .identity, identity: own.id, privateKey: privateKey)
        }
        return HostCredentials(address: host.address, port: host.port, username: username, password: nil, passwordSource: .none,
                               identity: selected?.id, privateKey: privateKey)
    }
}
