import FoundationEssentials
import TermindCore

/// Known hosts: trusted host keys, independent of saved hosts.
public enum KnownHostContracts {
    public enum List: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Only entries that apply to this host (and port), hashed ones included.
            public var host: String?
            public var port: Int?
            public init(host: String? = nil, port: Int? = nil) {
                self.host = host
                self.port = port
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var entries: [KnownHostRecord]
            public init(entries: [KnownHostRecord]) { self.entries = entries }
        }
        public static let name = "vault.knownhost.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List trusted host keys (optionally those matching a host and port)."
    }

    public enum Add: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public var port: Int?
            /// "type base64 [comment]" as in a .pub file or ssh-keyscan output.
            public var key: String
            /// Store the name hashed (|1|salt|hash), as `HashKnownHosts yes` does.
            public var hashed: Bool?
            public init(host: String, port: Int? = nil, key: String, hashed: Bool? = nil) {
                self.host = host
                self.port = port
                self.key = key
                self.hashed = hashed
            }
        }
        public typealias Response = KnownHostRecord
        public static let name = "vault.knownhost.add"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Trust a host key for host[:port]."
    }

    public enum Remove: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var removed: String
            public init(removed: String) { self.removed = removed }
        }
        public static let name = "vault.knownhost.remove"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Stop trusting one entry (by id)."
    }

    public enum Check: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public var port: Int?
            public var key: String
            public init(host: String, port: Int? = nil, key: String) {
                self.host = host
                self.port = port
                self.key = key
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            /// trusted, trusted-without-port, unknown, changed (another key of this type is trusted),
            /// other-key-types (only keys of other types are trusted; refused like changed), revoked
            public var verdict: String
            public var fingerprint: String
            public var knownFingerprints: [String]
            public init(verdict: String, fingerprint: String, knownFingerprints: [String]) {
                self.verdict = verdict
                self.fingerprint = fingerprint
                self.knownFingerprints = knownFingerprints
            }
        }
        public static let name = "vault.knownhost.check"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "What OpenSSH's rules say about a host key for host[:port]."
    }

    public enum Import: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// A known_hosts file to read (e.g. ~/.ssh/known_hosts).
            public var path: String
            public init(path: String) { self.path = path }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var imported: Int
            public var duplicates: Int
            /// Lines that were skipped, each naming file:line and why.
            public var problems: [String]
            public init(imported: Int, duplicates: Int, problems: [String]) {
                self.imported = imported
                self.duplicates = duplicates
                self.problems = problems
            }
        }
        public static let name = "vault.knownhost.import"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Import a known_hosts file; duplicates are skipped, bad lines reported."
    }

    public enum Export: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Write to this file (created 0600, refused if it exists) instead of returning the text.
            public var path: String?
            public init(path: String? = nil) { self.path = path }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var entries: Int
            public var text: String?
            public init(entries: Int, text: String?) {
                self.entries = entries
                self.text = text
            }
        }
        public static let name = "vault.knownhost.export"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Export trusted keys as a known_hosts file OpenSSH reads."
    }
}
