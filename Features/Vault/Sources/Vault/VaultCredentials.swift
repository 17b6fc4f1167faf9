import TermindCore

/// `vault.credentials`: the credential rules of `CredentialRequest`, applied to saved records.
struct VaultCredentials: CredentialProvider {
    let vault: VaultFeature

    func credentials(for request: CredentialRequest) async throws -> HostCredentials {
        let (hosts, identities) = try vault.repositories()
        let host = try hosts.get(request.host)
        let selected = try (request.explicitIdentity.map { try identities.get($0) })
            ?? host.identity.flatMap { try identities.find($0) }
        let username = request.explicitUser ?? selected?.username ?? host.user
        if let explicit = request.explicitPassword {
            return HostCredentials(address: host.address, port: host.port, username: username, password: explicit,
                                   passwordSource: .explicit, identity: selected?.id)
        }
        // Only the selected identity's password, and only for its own user name.
        if let selected, selected.hasPassword, username == selected.username {
            return HostCredentials(address: host.address, port: host.port, username: username,
                                   password: try identities.password(of: selected.id), passwordSource: .identity, identity: selected.id)
        }
        return HostCredentials(address: host.address, port: host.port, username: username, password: nil, passwordSource: .none, identity: selected?.id)
    }
}
