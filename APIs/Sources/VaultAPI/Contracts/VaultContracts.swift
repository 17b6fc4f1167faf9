import FoundationEssentials
import TermindCore

/// The Vault's contracts. Records are addressed by id or label (`ref`).
///
/// Optional-name defaults (seed, "Saved values"): a blank host label saves the address, a
/// blank identity label the username, a blank snippet label the snippet's first line. A
/// non-empty label stays as typed; setting it to "" asks for the default again.
public enum VaultContracts {
    // MARK: Hosts

    public enum HostList: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Only hosts carrying this tag.
            public var tag: String?
            public init(tag: String? = nil) { self.tag = tag }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var hosts: [HostRecord]
            public init(hosts: [HostRecord]) { self.hosts = hosts }
        }
        public static let name = "vault.host.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List saved hosts (optionally with a tag), by label."
    }

    public enum HostGet: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public init(host: String) { self.host = host }
        }
        public typealias Response = HostRecord
        public static let name = "vault.host.get"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Show one host by id or label."
    }

    public enum HostAdd: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var address: String
            public var label: String?
            public var port: Int?
            public var user: String?
            /// Identity id or label.
            public var identity: String?
            /// Jump hosts (ids or labels), in order.
            public var jump: [String]?
            public var tags: [String]?
            public var shellIntegration: ShellIntegration?
            /// Forward the local agent to this host's sessions (`ssh -A`), off unless true.
            public var forwardAgent: Bool?
            public init(address: String, label: String? = nil, port: Int? = nil, user: String? = nil, identity: String? = nil,
                        jump: [String]? = nil, tags: [String]? = nil, shellIntegration: ShellIntegration? = nil, forwardAgent: Bool? = nil) {
                self.forwardAgent = forwardAgent
                self.address = address
                self.label = label
                self.port = port
                self.user = user
                self.identity = identity
                self.jump = jump
                self.tags = tags
                self.shellIntegration = shellIntegration
            }
        }
        public typealias Response = HostRecord
        public static let name = "vault.host.add"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a host; a blank label saves the address."
    }

    /// Changes only the fields present. `label: ""` asks for the default label again;
    /// `user: ""`, `identity: ""` clear those fields.
    public enum HostUpdate: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public var label: String?
            public var address: String?
            public var port: Int?
            public var user: String?
            public var identity: String?
            public var jump: [String]?
            public var tags: [String]?
            public var shellIntegration: ShellIntegration?
            public var forwardAgent: Bool?
            public init(host: String, label: String? = nil, address: String? = nil, port: Int? = nil, user: String? = nil,
                        identity: String? = nil, jump: [String]? = nil, tags: [String]? = nil, shellIntegration: ShellIntegration? = nil,
                        forwardAgent: Bool? = nil) {
                self.forwardAgent = forwardAgent
                self.host = host
                self.label = label
                self.address = address
                self.port = port
                self.user = user
                self.identity = identity
                self.jump = jump
                self.tags = tags
                self.shellIntegration = shellIntegration
            }
        }
        public typealias Response = HostRecord
        public static let name = "vault.host.update"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Change fields of a host; label \"\" restores the default label."
    }

    /// Deleting a host never changes host-key trust (known hosts are independent).
    public enum HostDelete: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public init(host: String) { self.host = host }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public init(deleted: String) { self.deleted = deleted }
        }
        public static let name = "vault.host.delete"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Delete a host (its trusted host keys stay). Refused while another host jumps through it."
    }

    // MARK: Identities

    public enum IdentityList: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var identities: [IdentityRecord]
            public init(identities: [IdentityRecord]) { self.identities = identities }
        }
        public static let name = "vault.identity.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List identities (usernames, whether a password is stored, which key)."
    }

    public enum IdentityAdd: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var username: String
            public var label: String?
            public var password: Secret?
            /// Key id or label.
            public var key: String?
            public init(username: String, label: String? = nil, password: Secret? = nil, key: String? = nil) {
                self.username = username
                self.label = label
                self.password = password
                self.key = key
            }
        }
        public typealias Response = IdentityRecord
        public static let name = "vault.identity.add"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Save an identity; its password goes to the encrypted secret store."
    }

    /// `password: ""` removes the stored password; `key: ""` detaches the key.
    public enum IdentityUpdate: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var identity: String
            public var label: String?
            public var username: String?
            public var password: Secret?
            public var key: String?
            public init(identity: String, label: String? = nil, username: String? = nil, password: Secret? = nil, key: String? = nil) {
                self.identity = identity
                self.label = label
                self.username = username
                self.password = password
                self.key = key
            }
        }
        public typealias Response = IdentityRecord
        public static let name = "vault.identity.update"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Change an identity; password \"\" removes the stored password."
    }

    public enum IdentityDelete: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var identity: String
            public init(identity: String) { self.identity = identity }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public init(deleted: String) { self.deleted = deleted }
        }
        public static let name = "vault.identity.delete"
        public static let effect: Effect = Effect(.destructive, secrets: true)
        public static let version = 1
        public static let summary = "Delete an identity and its stored password; refused while hosts use it (they are named)."
    }

    // MARK: Snippets

    public enum SnippetList: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var snippets: [SnippetRecord]
            public init(snippets: [SnippetRecord]) { self.snippets = snippets }
        }
        public static let name = "vault.snippet.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List saved command snippets."
    }

    public enum SnippetAdd: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var body: String
            public var label: String?
            public init(body: String, label: String? = nil) {
                self.body = body
                self.label = label
            }
        }
        public typealias Response = SnippetRecord
        public static let name = "vault.snippet.add"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a command snippet; a blank label saves its first line."
    }

    public enum SnippetDelete: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var snippet: String
            public init(snippet: String) { self.snippet = snippet }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public init(deleted: String) { self.deleted = deleted }
        }
        public static let name = "vault.snippet.delete"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Delete a snippet."
    }

    // MARK: Workspaces

    public enum WorkspaceList: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var workspaces: [WorkspaceRecord]
            public init(workspaces: [WorkspaceRecord]) { self.workspaces = workspaces }
        }
        public static let name = "vault.workspace.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List saved workspaces (templates of panes), by name."
    }

    public enum WorkspaceGet: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var workspace: String
            public init(workspace: String) { self.workspace = workspace }
        }
        public typealias Response = WorkspaceRecord
        public static let name = "vault.workspace.get"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "One saved workspace, by id or name."
    }

    public enum WorkspaceSave: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            public var layout: WorkspaceLayout
            /// Replace a workspace of that name (else a taken name is an error).
            public var replace: Bool?
            public init(name: String, layout: WorkspaceLayout, replace: Bool? = nil) {
                self.name = name
                self.layout = layout
                self.replace = replace
            }
        }
        public typealias Response = WorkspaceRecord
        public static let name = "vault.workspace.save"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a workspace: its panes' hosts must be saved hosts (by id); replace keeps its id."
    }

    public enum WorkspaceDelete: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var workspace: String
            public init(workspace: String) { self.workspace = workspace }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public init(deleted: String) { self.deleted = deleted }
        }
        public static let name = "vault.workspace.delete"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Delete a saved workspace (its open sessions go on)."
    }
}
