import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import SyncAPI
import TermindCore
import TermindStore

/// `settings.zone`: the synced Settings records as a sync zone. Each record is one entity
/// (kind `record`, id its key) whose fields are the record's top-level fields that differ
/// from its defaults, so two devices changing different fields of one record both keep
/// their change. Secret references (handles into this device's secret store) go out empty,
/// and a record that arrives keeps this device's own handles where it has them. With
/// secrets on, each reference field's secret is a field of its own too,
/// `secret:providers.openai.secretRef`, in sync's secret form (sync seals it); applied, it
/// is stored in this device's secret store under a handle of its own. Device-local records
/// are not in the zone.
struct SettingsSyncZone: SyncZone {
    let feature: SettingsFeature
    var zone: String { "settings" }
    static let kind = "record"
    /// The field a record's value sits in when it is not a JSON object.
    static let whole = "_value"
    /// The prefix of a field that carries a reference field's secret (secrets on only).
    static let secretPrefix = "secret:"

    func journaled() -> AsyncStream<Void> { SettingsStore.journalSignal.subscribe() }

    /// A record no loaded feature declares (its feature disabled) cannot be read, and must
    /// never look deleted: its journal rows are passed over and kept (`acknowledge` leaves
    /// them), and taken in by the first capture after its feature is back — the records
    /// after it sync meanwhile.
    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges {
        let store = try feature.current()
        let declared = Set(feature.registry.all.map(\.key))
        return try await store.db.read { db in
            let rows = try db.query("SELECT seq, key, \(SyncChanges.millisecondsSQL("at")) AS at FROM settings_outbox WHERE seq > ? ORDER BY seq LIMIT ?",
                                    [cursor, max(1, limit) + 1])
            var changed: [SyncEntityRef: Int64] = [:]
            var last = cursor
            for row in rows.prefix(max(1, limit)) {
                last = Int64(try row.integer("seq"))
                let key = try row.text("key")
                guard declared.contains(key) else { continue }
                let entity = SyncEntityRef(kind: Self.kind, id: key)
                changed[entity] = max(changed[entity] ?? 0, Int64(try row.integer("at")))
            }
            // Rows passed over earlier whose record is declared again.
            for row in try db.query("SELECT key, \(SyncChanges.millisecondsSQL("at")) AS at FROM settings_outbox WHERE seq <= ?", [cursor]) {
                let key = try row.text("key")
                guard declared.contains(key) else { continue }
                let entity = SyncEntityRef(kind: Self.kind, id: key)
                changed[entity] = max(changed[entity] ?? 0, Int64(try row.integer("at")))
            }
            return SyncChanges(changed: changed, cursor: last, more: rows.count > max(1, limit))
        }
    }

    func acknowledge(through cursor: Int64) async throws {
        let store = try feature.current()
        let declared = feature.registry.all.map(\.key)
        try await store.db.write { db in
            let marks = Array(repeating: "?", count: declared.count).joined(separator: ", ")
            try db.execute("DELETE FROM settings_outbox WHERE seq <= ? AND key IN (\(marks))", [cursor] + declared.map { SQLValue.text($0) })
        }
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
        try await values(of: entities, secrets: false)
    }

    func values(of entities: [SyncEntityRef], secrets withSecrets: Bool) async throws -> [SyncEntityRef: [String: JSONValue]] {
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
                var fields = Self.fields(Self.withoutSecrets(declaration, json), defaults: declaration.defaults)
                if withSecrets {
                    for (path, handle) in declaration.references(in: json, includingEmpty: true) {
                        let field = String(path.dropFirst(declaration.key.count + 1))
                        // Empty: cleared. A handle whose secret cannot be read here is kept as
                        // agreed (never sent as cleared).
                        if handle.isEmpty {
                            fields[Self.secretPrefix + field] = SyncSecret.wrap(.null)
                        } else if store.readable(handle, key: declaration.key, path: path), let secret = try? store.secrets.secret(handle) {
                            fields[Self.secretPrefix + field] = SyncSecret.wrap(secret.withPlaintext { .string($0) })
                        } else {
                            fields[Self.secretPrefix + field] = SyncSecret.keep
                        }
                    }
                }
                values[entity] = fields
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
        var accepted: [(SettingsRecordDeclaration, JSONValue?, [String: String?])] = []
        for (entity, fields) in changes {
            guard entity.kind == Self.kind else { outcomes[entity] = .invalid("Settings has no kind '\(entity.kind)'"); continue }
            guard let declaration = try? feature.registry.declaration(entity.id) else {
                outcomes[entity] = .unresolved("no feature here declares \(entity.id)")
                continue
            }
            guard declaration.scope == .synced else { outcomes[entity] = .invalid("\(entity.id) is device-local here"); continue }
            guard let all = fields else { accepted.append((declaration, nil, [:])); continue }
            // The secrets the devices agreed on (secrets on), apart from the record's fields.
            var secrets: [String: String?] = [:]
            var fields: [String: JSONValue] = [:]
            var bad: String?
            for (name, value) in all {
                guard name.hasPrefix(Self.secretPrefix) else { fields[name] = value; continue }
                let field = String(name.dropFirst(Self.secretPrefix.count))
                guard declaration.isSecretReference(field) else { bad = "\(name): not one of \(entity.id)'s reference fields"; continue }
                switch SyncSecret.plaintext(value) {
                case .null?: secrets[field] = .some(nil)
                case .string(let text)?: secrets[field] = .some(text)
                case nil: continue  // not in secret form: this device keeps its own
                default: bad = "\(name): a secret that is not text"
                }
            }
            if let bad { outcomes[entity] = .invalid(bad); continue }
            let value = Self.value(fields, defaults: declaration.defaults)
            // Checked with this device's rules before anything is written (references empty).
            switch SettingsStore.validate(declaration, value) {
            case .invalid(let problems): outcomes[entity] = .invalid(problems.joined(separator: "; "))
            case .valid: accepted.append((declaration, value, secrets))
            }
        }
        let writes = accepted
        // Its own transaction: the secrets it replaces go only after that committed.
        let applied = try await BlockingExecutor.store.run { try store.applyMerged(writes) }
        for value in applied {
            outcomes[SyncEntityRef(kind: Self.kind, id: value.key)] = .applied
            feature.registry.publish(value)
        }
        return outcomes
    }
}
