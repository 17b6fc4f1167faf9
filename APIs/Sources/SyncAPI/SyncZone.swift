import Foundation
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
    public init(changed: [SyncEntityRef: Int64], cursor: Int64, more: Bool) {
        self.changed = changed
        self.cursor = cursor
        self.more = more
    }

    /// The wall clock as journals record it.
    public static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
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
    /// Every entity the zone holds now (the first sync sends them all).
    func inventory() async throws -> [SyncEntityRef]
    /// The entities' values now; an absent entity is missing from the answer.
    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]]
    /// Applies agreed values (nil: delete), in one transaction, in an order where what an
    /// entity refers to comes first. A field whose value is null is cleared.
    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome]
}

extension PortKey where P == any SyncZone {
    /// The Vault's zone: hosts, identities' non-secret fields, snippets.
    public static var vaultSyncZone: Self { PortKey("vault.sync") }
}
