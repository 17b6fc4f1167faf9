import Foundation
import SettingsAPI
import SyncAPI
import TermindCore
import TermindStore

/// `settings.zone`: the synced Settings records as a sync zone. Each record is one entity
/// (kind `record`, id its key) whose fields are the record's top-level fields that differ
/// from its defaults, so two devices changing different fields of one record both keep
/// their change. Secret
/// references never leave the device: they go out empty, and a record that arrives keeps
/// this device's own handles where it has them. Device-local records are not in the zone.
struct SettingsSyncZone: SyncZone {
    let feature: SettingsFeature
    var zone: String { "settings" }
    static let kind = "record"
    /// The field a record's value sits in when it is not a JSON object.
    static let whole = "_value"

    func journaled() -> AsyncStream<Void> { SettingsStore.journalSignal.subscribe() }

    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges {
        let store = try feature.current()
        return try await store.db.read { db in
            let rows = try db.query("SELECT seq, key, \(SyncChanges.millisecondsSQL("at")) AS at FROM settings_outbox WHERE seq > ? ORDER BY seq LIMIT ?",
                                    [cursor, max(1, limit) + 1])
            var changed: [SyncEntityRef: Int64] = [:]
            var last = cursor
            for row in rows.prefix(max(1, limit)) {
                let key = try row.text("key")
                // A record no loaded feature declares cannot be read, and must never look
                // deleted: stop before it (its owner loads with sync's commands and in serve).
                guard (try? feature.registry.declaration(key)) != nil else {
                    return SyncChanges(changed: changed, cursor: last, more: false)
                }
                last = Int64(try row.integer("seq"))
                changed[SyncEntityRef(kind: Self.kind, id: key)] = Int64(try row.integer("at"))
            }
            return SyncChanges(changed: changed, cursor: last, more: rows.count > max(1, limit))
        }
    }

    func acknowledge(through cursor: Int64) async throws {
        let store = try feature.current()
        try await store.db.write { db in try db.execute("DELETE FROM settings_outbox WHERE seq <= ?", [cursor]) }
    }

    func inventory() async throws -> [SyncEntityRef: Int64] {
        let store = try feature.current()
        let synced = Set(feature.registry.all.filter { $0.scope == .synced }.map(\.key))
        let rows = try await store.db.read { db in
            try db.query("SELECT key, \(SyncChanges.millisecondsSQL("updated_at")) AS at FROM settings_records").map { (try $0.text("key"), Int64(try $0.integer("at"))) }
        }
        var all: [SyncEntityRef: Int64] = [:]
        for (key, at) in rows where synced.contains(key) { all[SyncEntityRef(kind: Self.kind, id: key)] = at }
        return all
    }

    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]] {
        let store = try feature.current()
        let declarations = entities.compactMap { entity -> (SyncEntityRef, SettingsRecordDeclaration)? in
            guard entity.kind == Self.kind, let declaration = try? feature.registry.declaration(entity.id), declaration.scope == .synced else { return nil }
            return (entity, declaration)
        }
        return try await store.db.read { db in
            var values: [SyncEntityRef: [String: JSONValue]] = [:]
            for (entity, declaration) in declarations {
                guard let text = try db.query("SELECT value FROM settings_records WHERE key = ?", [declaration.key]).first?.string("value"),
                      let json = try? JSONCoding.parse(Data(text.utf8), source: declaration.key) else { continue }
                values[entity] = Self.fields(Self.withoutSecrets(declaration, json), defaults: declaration.defaults)
            }
            return values
        }
    }

    /// Every secret reference emptied: a handle means nothing on another device.
    static func withoutSecrets(_ declaration: SettingsRecordDeclaration, _ value: JSONValue) -> JSONValue {
        var result = value
        for (path, _) in declaration.references(in: value) {
            result = SettingsStore.replacing(String(path.dropFirst(declaration.key.count + 1)), in: result, with: .string("")) ?? result
        }
        return result
    }

    /// A record's fields as sync sees them: those that differ from the record's defaults.
    /// Two devices that each changed one field from the defaults then changed different
    /// fields, and both changes survive the merge.
    static func fields(_ value: JSONValue, defaults: JSONValue) -> [String: JSONValue] {
        guard case .object(let fields) = value else { return [whole: value] }
        guard case .object(let standard) = defaults else { return fields }
        return fields.filter { standard[$0.key] != $0.value }
    }

    /// The record the merged fields make: the defaults with each field that is not null laid over.
    static func value(_ fields: [String: JSONValue], defaults: JSONValue) -> JSONValue {
        if fields.count == 1, let whole = fields[whole] { return whole }
        var result: [String: JSONValue] = [:]
        if case .object(let standard) = defaults { result = standard }
        for (name, value) in fields where value != .null { result[name] = value }
        return .object(result)
    }

    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome] {
        let store = try feature.current()
        var outcomes: [SyncEntityRef: SyncApplyOutcome] = [:]
        var accepted: [(SettingsRecordDeclaration, JSONValue?)] = []
        for (entity, fields) in changes {
            guard entity.kind == Self.kind else { outcomes[entity] = .invalid("Settings has no kind '\(entity.kind)'"); continue }
            guard let declaration = try? feature.registry.declaration(entity.id) else {
                outcomes[entity] = .unresolved("no feature here declares \(entity.id)")
                continue
            }
            guard declaration.scope == .synced else { outcomes[entity] = .invalid("\(entity.id) is device-local here"); continue }
            guard let fields else { accepted.append((declaration, nil)); continue }
            let value = Self.value(fields, defaults: declaration.defaults)
            // Checked with this device's rules before anything is written (references empty).
            switch SettingsStore.validate(declaration, value) {
            case .invalid(let problems): outcomes[entity] = .invalid(problems.joined(separator: "; "))
            case .valid: accepted.append((declaration, value))
            }
        }
        let writes = accepted
        let applied = try await store.db.write { _ in try store.applyMerged(writes) }
        for value in applied {
            outcomes[SyncEntityRef(kind: Self.kind, id: value.key)] = .applied
            feature.registry.publish(value)
        }
        return outcomes
    }
}
