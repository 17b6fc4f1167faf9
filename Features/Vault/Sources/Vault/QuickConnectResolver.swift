import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import VaultRules

/// Turns a quick-connect line into a route over saved hosts, and saves it on request.
struct QuickConnectResolver {
    let hosts: HostRepository

    func resolve(_ input: String) throws -> ConnectContracts.Resolve.Response {
        let target = try QuickConnect.parse(input)
        let targetHop = SSHJumpHop(user: target.user, host: target.host, port: target.portIsExplicit ? target.port : nil)
        let route = try (target.jumpRoute + [targetHop]).map(endpoint)
        // Bounds and cycles on the resolved endpoints (an alias and its address are the same host).
        try QuickConnect.validateRoute(route.dropLast().map { SSHJumpHop(user: $0.user, host: $0.address, port: $0.port) },
                                       to: SSHJumpHop(user: route.last!.user, host: route.last!.address, port: route.last!.port))
        return .init(route: route, identityFiles: target.identityFiles)
    }

    /// An exact saved label supplies address, port and user; explicit values win and make
    /// the endpoint a new one (the saved record is never changed).
    private func endpoint(_ hop: SSHJumpHop) throws -> ConnectContracts.Endpoint {
        guard let saved = try hosts.db.query("SELECT id FROM vault_hosts WHERE label = ? COLLATE NOCASE", [hop.host]).first?.string("id"),
              let record = try hosts.find(saved) else {
            return .init(address: try VaultValidation.address(hop.host), port: hop.port ?? 22, user: hop.user, savedHost: nil, alias: nil)
        }
        let port = hop.port ?? record.port
        let user = hop.user ?? record.user
        let unchanged = port == record.port && user == record.user
        return .init(address: record.address, port: port, user: user, savedHost: unchanged ? record.id : nil, alias: record.label)
    }

    func save(_ request: ConnectContracts.Save.Request, identities: IdentityRepository) throws -> ConnectContracts.Save.Response {
        let resolved = try resolve(request.input)
        return try hosts.db.transaction {
            var created: [HostRecord] = []
            var jump: [String] = []
            for (index, endpoint) in resolved.route.enumerated() {
                let isTarget = index == resolved.route.count - 1
                if let saved = endpoint.savedHost, let record = try hosts.find(saved), !isTarget || record.jump == jump {
                    if isTarget { return .init(host: record, created: created) }
                    jump.append(saved)
                    continue
                }
                let record = try hosts.add(.init(address: endpoint.address, label: isTarget ? request.label : nil, port: endpoint.port,
                                                 user: endpoint.user, jump: jump), identities: identities)
                created.append(record)
                if isTarget { return .init(host: record, created: created) }
                jump.append(record.id)
            }
            throw TermindError.internalFailure("A quick-connect route without a target.")
        }
    }
}
