import FoundationEssentials
import TermindCore

/// Quick connect: `user@host:port`, `ssh -p N -l user -i key -J a,b host`, parsed without a
/// shell. Exact saved labels supply metadata (address, port, user); what the input states
/// explicitly wins. Resolving saves nothing; `save` copies changed endpoints as new records.
public enum ConnectContracts {
    /// One endpoint of a resolved route.
    public struct Endpoint: Codable, Sendable, Equatable {
        public var address: String
        public var port: Int
        public var user: String?
        /// The saved host this endpoint is, unchanged; nil when it is new or overridden.
        public var savedHost: String?
        /// The label the input used when it named a saved host.
        public var alias: String?
        public init(address: String, port: Int, user: String?, savedHost: String?, alias: String?) {
            self.address = address
            self.port = port
            self.user = user
            self.savedHost = savedHost
            self.alias = alias
        }
    }

    public enum Resolve: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var input: String
            public init(input: String) { self.input = input }
        }
        public struct Response: Codable, Sendable, Equatable {
            /// Jump hosts in order, then the target last.
            public var route: [Endpoint]
            public var identityFiles: [String]
            public init(route: [Endpoint], identityFiles: [String]) {
                self.route = route
                self.identityFiles = identityFiles
            }
        }
        public static let name = "vault.connect.resolve"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Parse a quick-connect line into a route (at most 8 hosts, no cycles); saves nothing."
    }

    public enum Save: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var input: String
            /// Label for the target's new record (default: its address).
            public var label: String?
            public init(input: String, label: String? = nil) {
                self.input = input
                self.label = label
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            /// The target's record (new, or the saved one when nothing changed).
            public var host: HostRecord
            /// Records created (jump hosts first); saved originals are never changed.
            public var created: [HostRecord]
            public init(host: HostRecord, created: [HostRecord]) {
                self.host = host
                self.created = created
            }
        }
        public static let name = "vault.connect.save"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a quick-connect route: new endpoints become hosts in one transaction; originals stay."
    }
}
