import FoundationEssentials
import Synchronization
import TermindCore

/// One entity of a zone: a host, an identity, a snippet of the Vault; a record of Settings.
public struct SyncEntityRef: Codable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var kind: String
    public var id: String
    public init(kind: String, id: String) {
        self.kind = kind
        self.id = id
    }
    public static func < (a: Self, b: Self) -> Bool { (a.kind, a.id) < (b.kind, b.id) }
    public var description: String { "\(kind) \(id)" }
}

/// Local changes after a cursor: which entities changed, each with the time of its latest
/// change (milliseconds since 1970, the zone's journal's), and where to read next.
public struct SyncChanges: Sendable, Equatable {
    public var changed: [SyncEntityRef: Int64]
    public var cursor: Int64
    /// More changes wait after `cursor`.
    public var more: Bool
    /// `changed` is every entity the zone holds (a zone without a journal): one the devices
    /// agreed on that is missing from it was deleted here.
    public var snapshot: Bool
    public init(changed: [SyncEntityRef: Int64], cursor: Int64, more: Bool, snapshot: Bool = false) {
        self.changed = changed
        self.cursor = cursor
        self.more = more
        self.snapshot = snapshot
    }

    /// The wall clock as journals record it.
    public static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// SQL for a column holding SQLite's `strftime('%Y-%m-%dT%H:%M:%fZ', …)` text as
    /// milliseconds since 1970, computed by SQLite in the query (no date parsing per row).
    public static func millisecondsSQL(_ column: String) -> String {
        "CAST(round((julianday(\(column)) - 2440587.5) * 86400000) AS INTEGER)"
    }
}

/// What became of an entity sync asked its zone to apply.
public enum SyncApplyOutcome: Sendable, Equatable {
    case applied
    /// It refers to something this device does not have yet (a host's identity, a jump
    /// host), or something here still refers to what it deletes: kept, applied once that is
    /// resolved, never dropped.
    case unresolved(String)
    /// It does not validate here (a value out of range, a label another entity holds):
    /// quarantined, never applied, never deleted.
    case invalid(String)
}

/// A zone of synced data as its owning feature shows it to the sync engine: which entities
/// changed here (a journal committed with each change, in the same transaction), what an
/// entity is now (as JSON fields), and applying what the devices agreed. The engine keeps
/// the per-field clocks and merges; the zone only reads and writes its own tables. Values
/// the zone would not send (secrets, device-local fields) never appear in `values`.
public protocol SyncZone: Sendable {
    /// The zone's name in the log (`vault`, `settings`, `metrics`).
    var zone: String { get }
    /// Entities changed after `cursor` (0: from the start of the journal), at most `limit`.
    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges
    /// Journal rows up to `cursor` were sent: they may be dropped.
    func acknowledge(through cursor: Int64) async throws
    /// Every entity the zone holds now with the time of its last change (milliseconds since
    /// 1970): the first sync after a set-up sends them all, each stamped with that time so a
    /// stale copy never outranks a later change another device made.
    func inventory() async throws -> [SyncEntityRef: Int64]
    /// The entities' values now; an absent entity is missing from the answer.
    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]]
    /// As `values(of:)`; with `secrets` (the user chose `sync zones --secrets on`) each
    /// secret field is there too, as `SyncSecret.wrap(plaintext)`, and so are the entities
    /// of `secretKinds`. Sync seals them under the sync key before they are stored or sent.
    func values(of entities: [SyncEntityRef], secrets: Bool) async throws -> [SyncEntityRef: [String: JSONValue]]
    /// Kinds that are all secret (SSH keys): synced only with secrets on, never compared,
    /// applied or deleted otherwise.
    var secretKinds: Set<String> { get }
    /// Applies agreed values (nil: delete), in one transaction, in an order where what an
    /// entity refers to comes first. A field whose value is null is cleared.
    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome]
    /// Yields after a local change was journaled in this process (a sync inside `serve`
    /// follows, debounced). A subscriber that falls behind gets one signal, never blocks a write.
    func journaled() -> AsyncStream<Void>
}

extension SyncZone {
    public func values(of entities: [SyncEntityRef], secrets: Bool) async throws -> [SyncEntityRef: [String: JSONValue]] {
        try await values(of: entities)
    }
    public var secretKinds: Set<String> { [] }
}

/// A secret field's value between a zone and sync, in memory only: `{"$secret": VALUE}`
/// (VALUE null: there is none). Sync never stores or sends this form: it seals it first.
/// An apply gets the form back, opened, only for a field the devices agreed on with
/// secrets on; a field missing from an apply means "keep this device's own".
public enum SyncSecret {
    public static let marker = "$secret"

    public static func wrap(_ plaintext: JSONValue) -> JSONValue { .object([marker: plaintext]) }

    /// The plaintext inside `value` when it is the secret form.
    public static func plaintext(_ value: JSONValue?) -> JSONValue? {
        guard case .object(let fields)? = value, fields.count == 1, let inner = fields[marker] else { return nil }
        return inner
    }

    /// Whether `value` is the secret form.
    public static func isSecret(_ value: JSONValue?) -> Bool { plaintext(value) != nil }

    /// A secret this device has but cannot read now (its secret store entry is damaged):
    /// sync keeps what the devices agreed on for the field, and never reads it as cleared.
    public static let keep: JSONValue = .object(["$keep": .bool(true)])
}

/// Fans "something was journaled" out to every subscriber, each holding at most one
/// pending signal.
public final class SyncJournalSignal: Sendable {
    private let subscribers = Mutex<[UInt64: AsyncStream<Void>.Continuation]>([:])
    private let next = Mutex<UInt64>(0)

    public init() {}

    public func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = next.withLock { $0 += 1; return $0 }
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    public func signal() {
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield() }
    }
}

extension PortKey where P == any SyncZone {
    /// The Vault's zone: hosts, identities' non-secret fields, snippets.
    public static var vaultSyncZone: Self { PortKey("vault.sync") }
    /// Settings' zone: the records marked synced, per top-level field.
    public static var settingsSyncZone: Self { PortKey("settings.zone") }
    /// Metrics' zone: the monitored hosts and their chosen interfaces.
    public static var metricsSyncZone: Self { PortKey("metrics.sync") }
    /// Port forwarding's zone: the saved rules (consent: the Vault's switch).
    public static var forwardingSyncZone: Self { PortKey("forwarding.sync") }
}
