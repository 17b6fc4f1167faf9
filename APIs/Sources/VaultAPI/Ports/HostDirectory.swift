import FoundationEssentials
import TermindCore

/// A saved host as other features see it: public metadata only, never credentials.
public struct HostSummary: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    public var address: String
    public var port: Int
    public var user: String?
    public var tags: [String]
    /// Whether termind's shell bootstrap goes to this host's interactive shells (default:
    /// as `terminal.preferences` says for every host).
    public var shellIntegration: ShellIntegration
    /// Its sessions forward the local agent (`ssh -A`) unless they say otherwise.
    public var forwardAgent: Bool

    public init(id: String, label: String, address: String, port: Int = 22, user: String? = nil, tags: [String] = [],
                shellIntegration: ShellIntegration = .default, forwardAgent: Bool = false) {
        self.forwardAgent = forwardAgent
        self.id = id
        self.label = label
        self.address = address
        self.port = port
        self.user = user
        self.tags = tags
        self.shellIntegration = shellIntegration
    }

    enum CodingKeys: String, CodingKey { case id, label, address, port, user, tags, shellIntegration, forwardAgent }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(id: try c.decode(String.self, forKey: .id), label: try c.decode(String.self, forKey: .label), address: try c.decode(String.self, forKey: .address),
                  port: try c.decodeIfPresent(Int.self, forKey: .port) ?? 22, user: try c.decodeIfPresent(String.self, forKey: .user),
                  tags: try c.decodeIfPresent([String].self, forKey: .tags) ?? [],
                  shellIntegration: try c.decodeIfPresent(ShellIntegration.self, forKey: .shellIntegration) ?? .default,
                  forwardAgent: try c.decodeIfPresent(Bool.self, forKey: .forwardAgent) ?? false)
    }

    /// The value of a `key=value` tag, e.g. `mac` for `mac=00:11:22:33:44:55`.
    public func tagValue(_ key: String) -> String? {
        for tag in tags {
            let parts = tag.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0] == key { return String(parts[1]) }
        }
        return nil
    }
}

/// A saved host changed in a way that matters to connections made to it.
public struct HostChange: Sendable, Equatable {
    /// The host edited or deleted.
    public var host: String
    public var deleted: Bool
    /// The saved hosts whose connections are made differently now: this one (its address,
    /// port, user, identity or jump route changed, or it is gone) and those whose route
    /// runs through it. A label or tags alone change nothing here (empty).
    public var affected: [String]

    public init(host: String, deleted: Bool, affected: [String]) {
        self.host = host
        self.deleted = deleted
        self.affected = affected
    }
}

/// Host lookup, provided by the Vault feature.
public protocol HostDirectory: Sendable {
    /// The host whose id or label equals `name`, or nil.
    func host(named name: String) async throws -> HostSummary?
    func allHosts() async throws -> [HostSummary]
    /// Edits and deletions of saved hosts in this process from now on (a feature that keeps
    /// connections open, a forward, restarts what they affect).
    func changes() -> AsyncStream<HostChange>
}

extension HostDirectory {
    /// A directory that never changes (a test's fixed hosts).
    public func changes() -> AsyncStream<HostChange> { AsyncStream { $0.finish() } }
}

extension PortKey where P == any HostDirectory {
    public static var hostDirectory: Self { PortKey("vault.hosts") }
}
