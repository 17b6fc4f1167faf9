import FoundationEssentials
import TermindCore

/// A saved host. `label` defaults to the address (see `VaultContracts`); credentials are
/// referenced through `identity`, never embedded.
public struct HostRecord: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    public var address: String
    public var port: Int
    public var user: String?
    /// Identity id, or nil.
    public var identity: String?
    /// Jump hosts in order (host ids), at most seven before the target.
    public var jump: [String]
    public var tags: [String]
    public var shellIntegration: ShellIntegration
    /// Sessions forward the local agent (`ssh -A`) unless they say otherwise; nil: off.
    public var forwardAgent: Bool?
    public var createdAt: String
    public var updatedAt: String

    public init(id: String, label: String, address: String, port: Int, user: String?, identity: String?, jump: [String],
                tags: [String], shellIntegration: ShellIntegration, forwardAgent: Bool? = nil, createdAt: String, updatedAt: String) {
        self.forwardAgent = forwardAgent
        self.id = id
        self.label = label
        self.address = address
        self.port = port
        self.user = user
        self.identity = identity
        self.jump = jump
        self.tags = tags
        self.shellIntegration = shellIntegration
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// The public view other features get through `HostDirectory`.
    public var summary: HostSummary {
        HostSummary(id: id, label: label, address: address, port: port, user: user, tags: tags, shellIntegration: shellIntegration,
                    forwardAgent: forwardAgent == true)
    }
}

/// The seed's per-host shell integration choice: follow the global default, or force it.
public enum ShellIntegration: String, Sendable, Codable, SchemaEnum {
    case `default`, enabled, disabled
}

/// Who to log in as: a username and, optionally, a stored password and/or key. Secrets
/// are never returned — only whether one is stored.
public struct IdentityRecord: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    public var username: String
    public var hasPassword: Bool
    /// Key id, or nil.
    public var key: String?
    public var createdAt: String
    public var updatedAt: String

    public init(id: String, label: String, username: String, hasPassword: Bool, key: String?, createdAt: String, updatedAt: String) {
        self.id = id
        self.label = label
        self.username = username
        self.hasPassword = hasPassword
        self.key = key
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// A saved command.
public struct SnippetRecord: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    public var body: String
    public var createdAt: String
    public var updatedAt: String

    public init(id: String, label: String, body: String, createdAt: String, updatedAt: String) {
        self.id = id
        self.label = label
        self.body = body
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// A trusted (or revoked) host key entry, as OpenSSH's known_hosts holds it.
public struct KnownHostRecord: Sendable, Equatable, Codable {
    public var id: String
    /// "" for plain entries, or "@revoked" / "@cert-authority".
    public var marker: String
    /// The host field as written: patterns (`[host]:port`, wildcards) or a hashed `|1|…` name.
    public var names: String
    public var hashed: Bool
    public var keyType: String
    public var fingerprint: String
    public var comment: String?
    public var createdAt: String

    public init(id: String, marker: String, names: String, hashed: Bool, keyType: String, fingerprint: String, comment: String?, createdAt: String) {
        self.id = id
        self.marker = marker
        self.names = names
        self.hashed = hashed
        self.keyType = keyType
        self.fingerprint = fingerprint
        self.comment = comment
        self.createdAt = createdAt
    }
}
