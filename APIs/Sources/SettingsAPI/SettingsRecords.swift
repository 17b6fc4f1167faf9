import FoundationEssentials
import TermindCore

/// Where a settings record lives: synced to the user's other devices (through the journal,
/// once sync lands) or kept on this device only (a terminal's font, the MCP listener token).
public enum SettingsScope: String, Codable, Sendable, Equatable {
    case synced
    case deviceLocal = "device-local"
}

/// A value that breaks a record's rules, with the path of the field at fault
/// (`sftp.limits.perHost`), as `termind settings set` reports it.
public struct SettingsProblem: Sendable, Equatable, Codable, CustomStringConvertible {
    public var path: String
    public var message: String
    public init(_ path: String, _ message: String) {
        self.path = path
        self.message = message
    }
    public var description: String { "\(path): \(message)" }

    /// A value the record's type refused, named by the field it stopped at.
    public static func decoding(_ error: DecodingError, key: String) -> SettingsProblem {
        func path(_ context: DecodingError.Context) -> String {
            ([key] + context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }).joined(separator: ".")
        }
        switch error {
        case .typeMismatch(let type, let context): return SettingsProblem(path(context), "expected \(type)")
        case .valueNotFound(let type, let context): return SettingsProblem(path(context), "expected \(type), got null")
        case .keyNotFound(let missing, let context): return SettingsProblem(path(context) + ".\(missing.stringValue)", "required field is missing")
        case .dataCorrupted(let context): return SettingsProblem(path(context), context.debugDescription)
        @unknown default: return SettingsProblem(key, "the value does not decode")
        }
    }
}

/// A typed settings record a feature owns: its key, scope, defaults, and the rules its
/// value must keep beyond its type (ranges, one field bounded by another). Optional fields
/// decode to their defaults when missing, so a record an older termind wrote stays as it
/// was stored and still reads.
///
///     public struct Limits: SettingsRecord {
///         public static let key = "sftp.limits"
///         public static let scope = SettingsScope.synced
///         public static let summary = "Concurrent SFTP transfers."
///         public static var defaults: Limits { Limits(active: 30, perHost: 10) }
///         public var active: Int
///         public var perHost: Int
///         public func problems() -> [SettingsProblem] { ... }
///     }
public protocol SettingsRecord: Codable, Sendable, Equatable {
    /// Dotted lowercase, in the owning feature's namespace (`sftp.limits`).
    static var key: String { get }
    static var scope: SettingsScope { get }
    static var summary: String { get }
    static var defaults: Self { get }
    /// Problems beyond the type (each with its field's path); none by default.
    func problems() -> [SettingsProblem]
    /// Fields holding secret references (handles into the encrypted secret store, never a
    /// secret), as paths where `*` is any key of an object: `providers.*.secretRef`.
    static var secretReferences: [String] { get }
}

extension SettingsRecord {
    public func problems() -> [SettingsProblem] { [] }
    public static var secretReferences: [String] { [] }

    /// The record as the Settings feature handles it: schema derived from the type, defaults
    /// and rules run on decoded values.
    public static var declaration: SettingsRecordDeclaration {
        SettingsRecordDeclaration(key: key, scope: scope, summary: summary, schema: SchemaDerivation.schema(for: Self.self),
                                  defaults: (try? JSONCoding.parse(JSONCoding.encode(defaults), source: key)) ?? .object([:]),
                                  secretReferences: secretReferences) { value in
            let record: Self
            do {
                record = try JSONValueDecoder.decode(Self.self, from: value)
            } catch let error as DecodingError {
                return .invalid([SettingsProblem.decoding(error, key: key)])
            }
            let problems = record.problems()
            guard problems.isEmpty else { return .invalid(problems) }
            return .valid(try JSONCoding.parse(JSONCoding.encode(record), source: key))
        }
    }
}

/// What a record's rules say of a value: the effective value (missing optional fields
/// filled in), or each problem.
public enum SettingsCheck: Sendable {
    case valid(JSONValue)
    case invalid([SettingsProblem])
}

/// A record as registered with Settings: what it needs to validate, default and show a
/// record without knowing its type.
public struct SettingsRecordDeclaration: Sendable {
    public let key: String
    public let scope: SettingsScope
    public let summary: String
    public let schema: JSONSchema
    public let defaults: JSONValue
    /// Decodes a value that passed the schema and checks its rules: the effective value
    /// (missing optional fields filled in), or the problems. Throws when it does not decode.
    public let normalize: @Sendable (JSONValue) throws -> SettingsCheck
    /// See `SettingsRecord.secretReferences`.
    public let secretReferences: [String]

    public init(key: String, scope: SettingsScope, summary: String, schema: JSONSchema, defaults: JSONValue, secretReferences: [String] = [],
                normalize: @escaping @Sendable (JSONValue) throws -> SettingsCheck) {
        self.secretReferences = secretReferences
        self.key = key
        self.scope = scope
        self.summary = summary
        self.schema = schema
        self.defaults = defaults
        self.normalize = normalize
    }
}

/// A record's state as readers and `termind settings` see it.
public struct SettingsValue: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Nothing stored (or reset): the defaults apply.
        case `default`
        /// A stored value that validates: it applies.
        case saved
        /// A stored value that no longer validates: never applied, never deleted; the
        /// defaults apply until it is repaired.
        case quarantined
    }
    public var key: String
    public var scope: SettingsScope
    public var summary: String
    public var state: State
    /// What applies now: the saved value, or the defaults.
    public var value: JSONValue
    /// The stored record's revision (0 when nothing was ever stored); a change based on
    /// another revision is refused.
    public var revision: Int
    /// For a quarantined record: why, and what is stored.
    public var reason: String?
    public var stored: JSONValue?

    public init(key: String, scope: SettingsScope, summary: String, state: State, value: JSONValue, revision: Int,
                reason: String? = nil, stored: JSONValue? = nil) {
        self.key = key
        self.scope = scope
        self.summary = summary
        self.state = state
        self.value = value
        self.revision = revision
        self.reason = reason
        self.stored = stored
    }
}

extension SettingsRecordDeclaration {
    /// The secret references `value` holds: (concrete field path, handle), non-empty handles
    /// only unless `includingEmpty` (a reference field that is there but cleared).
    public func references(in value: JSONValue, includingEmpty: Bool = false) -> [(path: String, handle: String)] {
        var found: [(String, String)] = []
        func walk(_ value: JSONValue, _ parts: ArraySlice<Substring>, _ path: String) {
            guard let part = parts.first else {
                if case .string(let handle) = value, includingEmpty || !handle.isEmpty { found.append((path, handle)) }
                return
            }
            guard case .object(let fields) = value else { return }
            if part == "*" {
                for name in fields.keys.sorted() { walk(fields[name]!, parts.dropFirst(), path + "." + name) }
            } else if let next = fields[String(part)] {
                walk(next, parts.dropFirst(), path + "." + part)
            }
        }
        for pattern in secretReferences { walk(value, pattern.split(separator: ".")[...], key) }
        return found
    }

    /// Whether `path` (relative to the record, `providers.openai.secretRef`) is one of its
    /// secret reference fields.
    public func isSecretReference(_ path: String) -> Bool {
        let parts = path.split(separator: ".")
        return secretReferences.contains { pattern in
            let expected = pattern.split(separator: ".")
            return expected.count == parts.count && zip(expected, parts).allSatisfy { $0 == "*" || $0 == $1 }
        }
    }
}
