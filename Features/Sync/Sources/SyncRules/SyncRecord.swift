import TermindCore

/// One synced change: an entity of a zone (a host of the Vault) put with every field it has,
/// each with the clock of its last change, or deleted. A put carries the whole entity — not
/// only what changed — so a device that never saw the entity, or saw it deleted, can apply
/// it; the clocks let every device keep, per field, the latest change whichever order the
/// records arrive in.
public struct SyncRecord: Codable, Equatable, Sendable {
    public enum Op: String, Codable, Sendable { case put, delete }

    public struct Field: Codable, Equatable, Sendable {
        public var value: JSONValue
        public var clock: HLC
        public init(value: JSONValue, clock: HLC) {
            self.value = value
            self.clock = clock
        }
    }

    public var zone: String
    public var kind: String
    public var id: String
    public var op: Op
    /// A put's fields (empty for a delete).
    public var fields: [String: Field]
    /// When the change was made: the newest of the fields' clocks for a put, the deletion's.
    public var clock: HLC
    public var device: String

    private enum CodingKeys: String, CodingKey { case zone, kind, id, op, fields, clock, device }

    /// A field on the wire: its value, and its clock only where it is not the record's
    /// (most fields of a record changed together): a third of the bytes of spelling each.
    private struct WireField: Codable {
        var v: JSONValue
        var c: HLC?
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        zone = try container.decode(String.self, forKey: .zone)
        kind = try container.decode(String.self, forKey: .kind)
        id = try container.decode(String.self, forKey: .id)
        op = try container.decode(Op.self, forKey: .op)
        clock = try container.decode(HLC.self, forKey: .clock)
        device = try container.decode(String.self, forKey: .device)
        let wire = try container.decodeIfPresent([String: WireField].self, forKey: .fields) ?? [:]
        fields = wire.mapValues { [clock] in Field(value: $0.v, clock: $0.c ?? clock) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(zone, forKey: .zone)
        try container.encode(kind, forKey: .kind)
        try container.encode(id, forKey: .id)
        try container.encode(op, forKey: .op)
        try container.encode(clock, forKey: .clock)
        try container.encode(device, forKey: .device)
        if !fields.isEmpty { try container.encode(fields.mapValues { WireField(v: $0.value, c: $0.clock == clock ? nil : $0.clock) }, forKey: .fields) }
    }

    public init(zone: String, kind: String, id: String, op: Op, fields: [String: Field], clock: HLC, device: String) {
        self.zone = zone
        self.kind = kind
        self.id = id
        self.op = op
        self.fields = fields
        self.clock = clock
        self.device = device
    }

    /// What is wrong with a record as read from another device's log (nil: nothing).
    public func problem(zone expected: String, device writer: String) -> String? {
        if zone != expected { return "it names zone '\(zone)' but sits in the log of zone '\(expected)'" }
        if device != writer { return "it names device '\(device)' but sits in the log of device '\(writer)'" }
        if kind.isEmpty || id.isEmpty { return "it has no kind or id" }
        switch op {
        case .delete where !fields.isEmpty: return "a delete carries fields"
        case .put where fields.isEmpty: return "a put carries no fields"
        case .put where fields.values.map(\.clock).max() != clock: return "its clock is not its newest field's"
        default: return nil
        }
    }
}

/// The records of one log file, and the file's place in its log.
public struct SyncBatch: Codable, Equatable, Sendable {
    public static let version = 1
    public var version: Int
    public var device: String
    public var zone: String
    public var index: Int
    public var records: [SyncRecord]

    public init(device: String, zone: String, index: Int, records: [SyncRecord]) {
        version = Self.version
        self.device = device
        self.zone = zone
        self.index = index
        self.records = records
    }
}

/// What every device knows of one entity: each field's latest value with its clock, and the
/// latest deletion. Merging is per field by clock (a later change wins; the device id inside
/// the clock breaks ties), commutative, associative and idempotent, so devices that took the
/// same records in any order hold the same state.
public struct EntityState: Codable, Equatable, Sendable {
    public var fields: [String: SyncRecord.Field]
    public var deleted: HLC?

    public init(fields: [String: SyncRecord.Field] = [:], deleted: HLC? = nil) {
        self.fields = fields
        self.deleted = deleted
    }

    /// The newest change to any field.
    public var newest: HLC? { fields.values.map(\.clock).max() }

    /// Present unless a deletion is later than every field's change (an edit made after a
    /// delete, on another device, brings the entity back whole; a delete after it removes it).
    public var isLive: Bool {
        guard let newest else { return false }
        guard let deleted else { return true }
        return newest > deleted
    }

    /// The entity's value as it applies now, nil when it does not exist.
    public var value: [String: JSONValue]? { isLive ? fields.mapValues(\.value) : nil }

    /// Takes in a record; true when anything changed.
    @discardableResult
    public mutating func merge(_ record: SyncRecord) -> Bool {
        let before = self
        switch record.op {
        case .delete:
            if deleted.map({ record.clock > $0 }) ?? true { deleted = record.clock }
        case .put:
            for (name, field) in record.fields where fields[name].map({ field.clock > $0.clock }) ?? true {
                fields[name] = field
            }
        }
        return self != before
    }

    /// The record that turns `self` (what was synced) into `current` (the entity as it is in
    /// this device's store now, nil when absent), stamped `clock`; nil when nothing changed.
    /// Fields that differ get the new clock; a field the entity no longer has is an explicit
    /// clear (null). Equal values are no change, so applying a remote record and reading it
    /// back never writes it out again (no echo).
    ///
    /// A sealed secret the entity lacks is not a clear: a device with secrets off never
    /// has them. `onlyNewFields` (the first sync after secrets were switched on) adds the
    /// fields the devices have not agreed on yet and changes nothing they have.
    public func change(to current: [String: JSONValue]?, zone: String, kind: String, id: String, clock: HLC, onlyNewFields: Bool = false) -> SyncRecord? {
        guard let current else {
            return isLive && !onlyNewFields ? SyncRecord(zone: zone, kind: kind, id: id, op: .delete, fields: [:], clock: clock, device: clock.device) : nil
        }
        let synced = value
        if onlyNewFields && synced == nil && (!fields.isEmpty || deleted != nil) { return nil }
        var fields = synced == nil ? [:] : self.fields
        var changed = false
        for (name, new) in current where synced?[name] != new && (!onlyNewFields || synced?[name] == nil) {
            fields[name] = .init(value: new, clock: clock)
            changed = true
        }
        if let synced, !onlyNewFields {
            for (name, old) in synced where current[name] == nil && old != .null && !SecretSealer.isSealed(old) {
                fields[name] = .init(value: .null, clock: clock)
                changed = true
            }
        }
        guard changed else { return nil }
        return SyncRecord(zone: zone, kind: kind, id: id, op: .put, fields: fields, clock: clock, device: clock.device)
    }
}
