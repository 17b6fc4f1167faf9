import FoundationEssentials
import TermindCore

/// ssh_config import: preview → selection → commit. Nothing in the file is executed.
/// Selecting a host imports its address, port, user and jump route — never credentials.
public enum ImportContracts {
    /// A file read by the preview, with its content digest.
    public struct FileDigest: Codable, Sendable, Equatable {
        public var path: String
        public var sha256: String
        public init(path: String, sha256: String) {
            self.path = path
            self.sha256 = sha256
        }
    }

    /// A `LocalForward`, `RemoteForward` or `DynamicForward` of a host, offered as a
    /// forwarding rule: saved (never started) only when a commit selects it by `id`.
    public struct ForwardCandidate: Codable, Sendable, Equatable {
        /// `ALIAS:N`, N counting the host's forwards from 1 in the order ssh applies them.
        public var id: String
        /// "local", "remote" or "dynamic".
        public var kind: String
        /// As `termind forward add` takes it (`--local-forward 127.0.0.1:8080:db:5432`); nil
        /// when termind cannot run it.
        public var spec: String?
        /// The rule's name when imported (`ALIAS-L8080`).
        public var name: String
        /// Why it cannot be imported (a Unix socket, a SOCKS proxy on the server), or nil.
        public var problem: String?
        public init(id: String, kind: String, spec: String?, name: String, problem: String? = nil) {
            self.id = id
            self.kind = kind
            self.spec = spec
            self.name = name
            self.problem = problem
        }
    }

    public struct Candidate: Codable, Sendable, Equatable {
        public var alias: String
        public var hostname: String
        public var user: String?
        public var port: Int
        /// Jump hops as written (`[user@]host[:port]`).
        public var jump: [String]
        /// Key files the config names (imported with keys, not with the host).
        public var identityFiles: [String]
        /// Its forwards as `ssh -G` prints them.
        public var forwards: [String]
        /// The same, as forwarding rules a commit may select (`forwards`).
        public var forwardCandidates: [ForwardCandidate]
        /// A saved host already has this label: it would be skipped, never overwritten.
        public var exists: Bool
        public var warnings: [String]
        /// Why this host cannot be imported (empty: it can): lines that apply to it and that
        /// OpenSSH would refuse (each naming file, line and what is wrong), or an alias that
        /// is not a valid host name. A commit selecting it is refused.
        public var problems: [String]
        /// Whether `problems` is empty.
        public var importable: Bool
        public init(alias: String, hostname: String, user: String?, port: Int, jump: [String], identityFiles: [String],
                    forwards: [String], forwardCandidates: [ForwardCandidate] = [], exists: Bool, warnings: [String], problems: [String] = []) {
            self.problems = problems
            self.forwardCandidates = forwardCandidates
            self.importable = problems.isEmpty
            self.alias = alias
            self.hostname = hostname
            self.user = user
            self.port = port
            self.jump = jump
            self.identityFiles = identityFiles
            self.forwards = forwards
            self.exists = exists
            self.warnings = warnings
        }
    }

    public enum Preview: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// The ssh_config file (e.g. ~/.ssh/config).
            public var path: String
            public init(path: String) { self.path = path }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var candidates: [Candidate]
            /// Lines read but not acted on (ProxyCommand and other commands are never run).
            public var warnings: [String]
            /// Lines OpenSSH would reject, each naming file:line.
            public var errors: [String]
            public var files: [FileDigest]
            public init(candidates: [Candidate], warnings: [String], errors: [String], files: [FileDigest]) {
                self.candidates = candidates
                self.warnings = warnings
                self.errors = errors
                self.files = files
            }
        }
        public static let name = "vault.import.preview"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Preview the hosts an ssh_config file would import (nothing is executed or saved)."
    }

    /// An identity to import for a host alias: its User with the chosen key files (at least
    /// one; an identity is never imported without a selected key).
    public struct IdentitySelection: Codable, Sendable, Equatable {
        public var alias: String
        /// Key files among the alias's IdentityFile entries.
        public var keys: [String]
        public init(alias: String, keys: [String]) {
            self.alias = alias
            self.keys = keys
        }
    }

    public enum Commit: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var path: String
            /// Aliases to import as hosts (address, port, user, jump route; never credentials).
            public var select: [String]
            /// Identities to import, each with its selected keys.
            public var identities: [IdentitySelection]?
            /// The digests the preview returned: the commit fails closed if any file changed.
            /// Required when importing identities (private keys); without it a hosts-only
            /// commit imports the file as it is now.
            public var files: [FileDigest]?
            /// Forward candidates (`ALIAS:N`) to save as forwarding rules, never started; each
            /// one's host must be selected or saved already.
            public var forwards: [String]?
            public init(path: String, select: [String], identities: [IdentitySelection]? = nil, files: [FileDigest]? = nil, forwards: [String]? = nil) {
                self.path = path
                self.select = select
                self.identities = identities
                self.files = files
                self.forwards = forwards
            }
        }
        public struct Skipped: Codable, Sendable, Equatable {
            public var alias: String
            public var reason: String
            public init(alias: String, reason: String) {
                self.alias = alias
                self.reason = reason
            }
        }
        /// A forward saved as a rule.
        public struct ImportedRule: Codable, Sendable, Equatable {
            public var candidate: String
            public var name: String
            public init(candidate: String, name: String) {
                self.candidate = candidate
                self.name = name
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var created: [HostRecord]
            public var identities: [IdentityRecord]
            public var keys: [KeyRecord]
            public var skipped: [Skipped]
            /// Forwarding rules saved (after the hosts), and the forwards that could not be
            /// (another rule has the name, port forwarding is not loaded), each with why.
            public var rules: [ImportedRule]
            public var skippedForwards: [Skipped]
            public init(created: [HostRecord], identities: [IdentityRecord], keys: [KeyRecord], skipped: [Skipped], rules: [ImportedRule] = [],
                        skippedForwards: [Skipped] = []) {
                self.created = created
                self.identities = identities
                self.keys = keys
                self.skipped = skipped
                self.rules = rules
                self.skippedForwards = skippedForwards
            }
        }
        public static let name = "vault.import.commit"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Import the selected hosts in one transaction; existing hosts are never overwritten."
    }
}
