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

    public struct Candidate: Codable, Sendable, Equatable {
        public var alias: String
        public var hostname: String
        public var user: String?
        public var port: Int
        /// Jump hops as written (`[user@]host[:port]`).
        public var jump: [String]
        /// Key files the config names (imported with keys, not with the host).
        public var identityFiles: [String]
        /// Forwarding rules, kept for the forwarding feature.
        public var forwards: [String]
        /// A saved host already has this label: it would be skipped, never overwritten.
        public var exists: Bool
        public var warnings: [String]
        public init(alias: String, hostname: String, user: String?, port: Int, jump: [String], identityFiles: [String],
                    forwards: [String], exists: Bool, warnings: [String]) {
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
        public static let version = 1
        public static let summary = "Preview the hosts an ssh_config file would import (nothing is executed or saved)."
    }

    public enum Commit: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var path: String
            /// Aliases to import.
            public var select: [String]
            /// The digests the preview returned: the commit fails closed if any file changed.
            public var files: [FileDigest]?
            public init(path: String, select: [String], files: [FileDigest]? = nil) {
                self.path = path
                self.select = select
                self.files = files
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
        public struct Response: Codable, Sendable, Equatable {
            public var created: [HostRecord]
            public var skipped: [Skipped]
            public init(created: [HostRecord], skipped: [Skipped]) {
                self.created = created
                self.skipped = skipped
            }
        }
        public static let name = "vault.import.commit"
        public static let version = 1
        public static let summary = "Import the selected hosts in one transaction; existing hosts are never overwritten."
    }
}
