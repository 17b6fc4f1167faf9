import FoundationEssentials
import TermindCore

/// `termind settings …`: every registered record, read and changed by key.
public enum SettingsContracts {
    public enum List: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Response: Codable, Sendable, Equatable {
            public var records: [SettingsValue]
            public init(records: [SettingsValue]) { self.records = records }
        }
        public static let name = "settings.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List every settings record: scope, state (default, saved, quarantined with the reason) and the value that applies."
    }

    public enum Get: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            public init(key: String) { self.key = key }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var record: SettingsValue
            public var defaults: JSONValue
            /// The JSON Schema a value must match (besides the record's own rules).
            public var schema: JSONValue
            public init(record: SettingsValue, defaults: JSONValue, schema: JSONValue) {
                self.record = record
                self.defaults = defaults
                self.schema = schema
            }
        }
        public static let name = "settings.get"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Show one settings record with its defaults and schema."
    }

    public enum Set: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            /// Fields to change (merged into the value that applies now), or with `replace`
            /// the whole record (missing optional fields take their defaults).
            public var value: [String: JSONValue]
            public var replace: Bool?
            /// The revision the change is based on (from get/list): refused when the record
            /// moved on meanwhile. Absent: whatever is stored now.
            public var revision: Int?
            public init(key: String, value: [String: JSONValue], replace: Bool? = nil, revision: Int? = nil) {
                self.key = key
                self.value = value
                self.replace = replace
                self.revision = revision
            }
        }
        public typealias Response = SettingsValue
        public static let name = "settings.set"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Change a settings record: checked against its schema and rules first (each problem named by field); nothing is written on failure."
    }

    public enum Reset: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            public var revision: Int?
            public init(key: String, revision: Int? = nil) {
                self.key = key
                self.revision = revision
            }
        }
        public typealias Response = SettingsValue
        public static let name = "settings.reset"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Reset a settings record to its defaults (a quarantined one too)."
    }
}

extension SettingsContracts {
    public enum Repair: Contract {
        public enum Action: String, Codable, Sendable, Equatable {
            /// Drop the stored value: the defaults apply and are saved as the record.
            case reset
            /// Leave it stored and quarantined (a newer termind may read it again).
            case keep
        }
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            public var action: Action
            public var revision: Int?
            public init(key: String, action: Action, revision: Int? = nil) {
                self.key = key
                self.action = action
                self.revision = revision
            }
        }
        public typealias Response = SettingsValue
        public static let name = "settings.repair"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Repair a quarantined settings record: reset it to its defaults, or keep it stored as it is (still not applied)."
    }

    /// What `export` writes and `import` reads: the saved records by key.
    public struct Document: Codable, Sendable, Equatable {
        /// 1: this layout.
        public var termindSettings: Int
        public var records: [String: JSONValue]
        public init(records: [String: JSONValue]) {
            termindSettings = 1
            self.records = records
        }
    }

    public enum Export: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Device-local records too (off: only what syncs).
            public var includeDeviceLocal: Bool?
            public init(includeDeviceLocal: Bool? = nil) { self.includeDeviceLocal = includeDeviceLocal }
        }
        public typealias Response = Document
        public static let name = "settings.export"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Export the saved settings records (not defaults, not quarantined ones) as a JSON document for import."
    }

    public enum Import: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// A file holding a settings document (`termind --json settings export > FILE`).
            public var path: String?
            /// Or the document itself.
            public var document: Document?
            public init(path: String? = nil, document: Document? = nil) {
                self.path = path
                self.document = document
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var changed: [SettingsValue]
            public var unchanged: [String]
            public init(changed: [SettingsValue], unchanged: [String]) {
                self.changed = changed
                self.unchanged = unchanged
            }
        }
        public static let name = "settings.import"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Import a settings document: every record is checked first, then all are written in one transaction, or none."
    }
}

extension SettingsContracts {
    public enum SetSecret: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            /// The reference field, from the record (`providers.openai.secretRef`).
            public var field: String
            /// The secret; the CLI reads it from standard input (`--secret -`), never the
            /// command line. Empty: the field is cleared (anonymous) and the old secret removed.
            public var secret: Secret
            public var revision: Int?
            public init(key: String, field: String, secret: Secret, revision: Int? = nil) {
                self.key = key
                self.field = field
                self.secret = secret
                self.revision = revision
            }
        }
        public typealias Response = SettingsValue
        public static let name = "settings.secret"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Keep a secret for a record's reference field (an API key, say) in the encrypted secret store; the record holds only its handle."
    }
}
