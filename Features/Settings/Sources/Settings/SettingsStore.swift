import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import SyncAPI
import TermindCore
import TermindCrypto
import TermindStore

/// Settings' tables in the process database. Append-only: a change is a new migration.
///
/// `settings_records` holds one row per record ever stored: its JSON (NULL once reset — a
/// tombstone sync will carry), its revision (monotonic per record) and which device wrote
/// it. `settings_outbox` is the journal sync will send: one row per change of a synced
/// record, committed in the same transaction as the change. `settings_device` names this
/// device once.
enum SettingsSchema {
    static let schema = Schema(feature: "settings", migrations: [
        Migration(1, "records, outbox, device", """
            CREATE TABLE settings_records (
                key TEXT PRIMARY KEY,
                value TEXT,
                revision INTEGER NOT NULL CHECK (revision >= 1),
                device_id TEXT NOT NULL,
                updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE TABLE settings_outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                key TEXT NOT NULL,
                revision INTEGER NOT NULL,
                tombstone INTEGER NOT NULL CHECK (tombstone IN (0, 1)),
                digest TEXT,
                device_id TEXT NOT NULL,
                at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE TABLE settings_device (id TEXT NOT NULL);
            INSERT INTO settings_device (id) VALUES (lower(hex(randomblob(16))));
            """),
    ])
}

/// Reads and writes records. Every write is one immediate transaction (SQLite serialises
/// writers across processes), so a revision is read and bumped atomically and a reader
/// sees a record before or after a change, never half of one.
///
/// Secret references: a record's reference fields hold handles into Settings' own view of
/// the secret store. A write may add only a handle that names a readable secret here; a
/// handle a write drops (a provider deleted, a key replaced) is deleted from the secret
/// store once the write committed.
struct SettingsStore: Sendable {
    let db: Database
    let secrets: SecretStore

    var deviceID: String {
        get throws {
            guard case .text(let id) = try db.scalar("SELECT id FROM settings_device LIMIT 1") else {
                throw TermindError.internalFailure("The settings tables have no device id.")
            }
            return id
        }
    }

    /// The record as it applies now.
    func current(_ declaration: SettingsRecordDeclaration) throws -> SettingsValue {
        let row = try db.query("SELECT value, revision FROM settings_records WHERE key = ?", [declaration.key]).first
        return Self.evaluate(declaration, stored: row?.string("value"), revision: row?.int("revision") ?? 0)
    }

    /// What a stored value means: the defaults when none (or reset), the effective value when
    /// it validates, else quarantined with the reason (never applied, never deleted).
    static func evaluate(_ declaration: SettingsRecordDeclaration, stored: String?, revision: Int) -> SettingsValue {
        func value(_ state: SettingsValue.State, _ value: JSONValue, reason: String? = nil, stored: JSONValue? = nil) -> SettingsValue {
            SettingsValue(key: declaration.key, scope: declaration.scope, summary: declaration.summary, state: state, value: value,
                          revision: revision, reason: reason, stored: stored)
        }
        guard let stored else { return value(.default, declaration.defaults) }
        guard let json = try? JSONCoding.parse(Data(stored.utf8), source: declaration.key) else {
            return value(.quarantined, declaration.defaults, reason: "the stored value is not JSON (\(stored.utf8.count) bytes)")
        }
        switch validate(declaration, json) {
        case .valid(let effective): return value(.saved, effective)
        case .invalid(let problems): return value(.quarantined, declaration.defaults, reason: problems.joined(separator: "; "), stored: json)
        }
    }

    /// The effective value of `json` for `declaration`, or every problem with its field path.
    static func validate(_ declaration: SettingsRecordDeclaration, _ json: JSONValue) -> Validation {
        let problems = declaration.schema.problems(in: json, at: declaration.key)
        guard problems.isEmpty else { return .invalid(problems) }
        do {
            switch try declaration.normalize(json) {
            case .valid(let effective): return .valid(effective)
            case .invalid(let problems): return .invalid(problems.map(\.description))
            }
        } catch {
            return .invalid(["\(declaration.key): the value does not decode (\(error))"])
        }
    }

    enum Validation {
        case valid(JSONValue)
        case invalid([String])
    }

    /// Changes a record: `patch` merged into the value that applies now (or, `replace`, the
    /// whole value), checked, stored with the next revision and, for a synced record, a
    /// journal row — all or nothing.
    func set(_ declaration: SettingsRecordDeclaration, patch: [String: JSONValue], replace: Bool, expectedRevision: Int?) throws -> SettingsValue {
        try keepingSecrets(declaration) { try db.transaction {
            let now = try current(declaration)
            try check(now, expectedRevision)
            var fields: [String: JSONValue] = [:]
            if !replace, case .object(let applying) = now.value { fields = applying }
            for (name, value) in patch { fields[name] = value }
            let effective: JSONValue
            switch Self.validate(declaration, .object(fields)) {
            case .valid(let value): effective = value
            case .invalid(let problems):
                throw TermindError(.settingsInvalid, "\(declaration.key) was not changed: \(problems.joined(separator: "; ")).")
            }
            let text = String(decoding: try JSONCoding.encode(effective), as: UTF8.self)
            try write(declaration, value: text, revision: now.revision + 1)
            return try current(declaration)
        } }
    }

    /// Keeps `secret` for the reference field `field` of the record (`providers.openai.secretRef`):
    /// stored in the secret store first, its handle written into the record; an empty
    /// secret clears the field. The secret it replaces is deleted once the record committed;
    /// a new one whose record write failed is deleted again.
    func setSecret(_ declaration: SettingsRecordDeclaration, field: String, secret: Secret, expectedRevision: Int?) throws -> SettingsValue {
        guard declaration.isSecretReference(field) else {
            let fields = declaration.secretReferences.isEmpty ? "it has none" : "they are \(declaration.secretReferences.joined(separator: ", ")) (* is a name)"
            throw TermindError(.settingsInvalid, "\(declaration.key).\(field) is not a secret reference field of \(declaration.key); \(fields).")
        }
        return try keepingSecrets(declaration) {
            let handle = secret.isEmpty ? "" : try secrets.store(secret, purpose: Self.secretPurpose(declaration.key, field))
            do {
                return try db.transaction {
                    let now = try current(declaration)
                    try check(now, expectedRevision)
                    guard now.state != .quarantined else {
                        throw TermindError(.settingsInvalid, "\(declaration.key) is quarantined (\(now.reason ?? "")); repair it first (termind settings repair \(declaration.key) reset|keep).")
                    }
                    guard let updated = Self.replacing(field, in: now.value, with: .string(handle)) else {
                        let parent = field.split(separator: ".").dropLast().joined(separator: ".")
                        throw TermindError(.settingsInvalid, "\(declaration.key).\(parent) does not exist; add it first (termind settings set \(declaration.key) ...), then its secret.")
                    }
                    let effective: JSONValue
                    switch Self.validate(declaration, updated) {
                    case .valid(let value): effective = value
                    case .invalid(let problems):
                        throw TermindError(.settingsInvalid, "\(declaration.key) was not changed: \(problems.joined(separator: "; ")).")
                    }
                    try write(declaration, value: String(decoding: try JSONCoding.encode(effective), as: UTF8.self), revision: now.revision + 1)
                    return try current(declaration)
                }
            } catch {
                if !handle.isEmpty { try? secrets.delete(handle) }
                throw error
            }
        }
    }

    /// The purpose a record's secrets are stored under: `settings:KEY:FIELD` (a key holds
    /// no colon), so a record's own secrets are found without ambiguity.
    static func secretPurpose(_ key: String, _ field: String) -> String { "settings:\(key):\(field)" }

    /// Deletes the secrets of records' reference fields that their stored values no longer
    /// reference: left by a crash between a write's commit and its cleanup. Only records
    /// registered now and not quarantined are looked at (a disabled feature's and a value
    /// this termind cannot read keep theirs), and only
    /// secrets stored over a minute ago (a writer elsewhere may be about to reference a
    /// newer one). Returns how many went.
    func sweepSecrets(_ declarations: [SettingsRecordDeclaration]) -> Int {
        var removed = 0
        for declaration in declarations where !declaration.secretReferences.isEmpty {
            // A quarantined value may reference what this termind cannot read: keep all.
            guard (try? current(declaration))?.state != .quarantined,
                  let referenced = try? storedHandles(declaration),
                  let stored = try? secrets.handles(purposePrefix: Self.secretPurpose(declaration.key, ""), olderThan: 60) else { continue }
            for handle in stored where !referenced.contains(handle) {
                if (try? secrets.delete(handle)) != nil { removed += 1 }
            }
        }
        return removed
    }

    /// `value` with the field at `field` (`providers.openai.secretRef`) set to `new`; nil
    /// when an object on the way is not there.
    static func replacing(_ field: String, in value: JSONValue, with new: JSONValue) -> JSONValue? {
        func set(_ parts: ArraySlice<Substring>, _ value: JSONValue) -> JSONValue? {
            guard let part = parts.first else { return new }
            guard case .object(var fields) = value, parts.count == 1 || fields[String(part)] != nil else { return nil }
            guard let inner = set(parts.dropFirst(), fields[String(part)] ?? .null) else { return nil }
            fields[String(part)] = inner
            return .object(fields)
        }
        return set(field.split(separator: ".")[...], value)
    }

    /// Runs `body`, a change of `declaration`'s record, then deletes the secrets its stored
    /// value referenced before and no longer does.
    private func keepingSecrets<T>(_ declaration: SettingsRecordDeclaration, _ body: () throws -> T) throws -> T {
        guard !declaration.secretReferences.isEmpty else { return try body() }
        let before = try storedHandles(declaration)
        let result = try body()
        for handle in before.subtracting(try storedHandles(declaration)) { try? secrets.delete(handle) }
        return result
    }

    /// The handles the stored value (applied or quarantined) references.
    private func storedHandles(_ declaration: SettingsRecordDeclaration) throws -> Set<String> {
        guard let text = try db.query("SELECT value FROM settings_records WHERE key = ?", [declaration.key]).first?.string("value"),
              let json = try? JSONCoding.parse(Data(text.utf8), source: declaration.key) else { return [] }
        return Set(declaration.references(in: json).map(\.handle))
    }

    /// A handle a local write adds must name a readable, non-empty secret of Settings'.
    private func checkReferences(_ declaration: SettingsRecordDeclaration, adding value: String, comparedTo old: Set<String>) throws {
        guard !declaration.secretReferences.isEmpty, let json = try? JSONCoding.parse(Data(value.utf8), source: declaration.key) else { return }
        for (path, handle) in declaration.references(in: json) where !old.contains(handle) {
            guard readable(handle, key: declaration.key, path: path) else {
                throw TermindError(.settingsSecretMissing, "\(path) names no secret kept for it on this device; a reference field is set with termind settings secret \(declaration.key) FIELD --secret -.")
            }
        }
    }

    /// Whether `handle` names a readable, non-empty secret stored for exactly this field
    /// (`path`: `KEY.FIELD`): a handle of another record's or field's secret never counts,
    /// so a value cannot send one record's key where another's goes.
    func readable(_ handle: String, key: String, path: String) -> Bool {
        let field = path.hasPrefix(key + ".") ? String(path.dropFirst(key.count + 1)) : path
        guard (try? secrets.purpose(handle)) == Self.secretPurpose(key, field),
              let secret = try? secrets.secret(handle), !secret.isEmpty else { return false }
        return true
    }

    /// Resets a record to its defaults (a tombstone with the next revision); nothing
    /// happens to a record that was never stored or is already reset.
    func reset(_ declaration: SettingsRecordDeclaration, expectedRevision: Int?) throws -> SettingsValue {
        try keepingSecrets(declaration) { try db.transaction {
            let now = try current(declaration)
            try check(now, expectedRevision)
            let stored = try db.query("SELECT value FROM settings_records WHERE key = ?", [declaration.key]).first
            guard let stored, stored.string("value") != nil else { return now }
            try write(declaration, value: nil, revision: now.revision + 1)
            return try current(declaration)
        } }
    }

    /// A quarantined record: `reset` drops the stored value; `keep` leaves it as it is.
    func repair(_ declaration: SettingsRecordDeclaration, action: SettingsContracts.Repair.Action, expectedRevision: Int?) throws -> SettingsValue {
        try keepingSecrets(declaration) { try db.transaction {
            let now = try current(declaration)
            guard now.state == .quarantined else {
                throw TermindError(.settingsNotQuarantined, "\(declaration.key) is not quarantined (it is \(now.state.rawValue)); nothing to repair.")
            }
            try check(now, expectedRevision)
            switch action {
            case .keep: return now
            case .reset:
                try write(declaration, value: nil, revision: now.revision + 1)
                return try current(declaration)
            }
        } }
    }

    /// Writes every record of `document` (each whole, as `set --replace`) in one
    /// transaction after all of them passed their checks; a record equal to the one that
    /// applies now is left alone.
    func importDocument(_ document: SettingsContracts.Document, declarations: (String) throws -> SettingsRecordDeclaration) throws -> SettingsContracts.Import.Response {
        guard document.termindSettings == 1 else {
            throw TermindError(.settingsInvalid, "The settings document has layout \(document.termindSettings); this termind reads layout 1. Nothing was imported.")
        }
        var checked: [(SettingsRecordDeclaration, JSONValue)] = []
        var problems: [String] = []
        for key in document.records.keys.sorted() {
            let declaration: SettingsRecordDeclaration
            do { declaration = try declarations(key) } catch {
                problems.append("\(key): no such settings record here")
                continue
            }
            switch Self.validate(declaration, document.records[key]!) {
            case .valid(let effective): checked.append((declaration, effective))
            case .invalid(let found): problems += found
            }
        }
        guard problems.isEmpty else {
            throw TermindError(.settingsInvalid, "Nothing was imported: \(problems.joined(separator: "; ")).")
        }
        let before = try checked.map { (declaration, _) in (declaration, try storedHandles(declaration)) }
        defer {
            for (declaration, handles) in before {
                for handle in handles.subtracting((try? storedHandles(declaration)) ?? handles) { try? secrets.delete(handle) }
            }
        }
        return try db.transaction {
            var changed: [SettingsValue] = []
            var unchanged: [String] = []
            for (declaration, effective) in checked {
                let now = try current(declaration)
                if now.state == .saved && now.value == effective { unchanged.append(declaration.key); continue }
                try write(declaration, value: String(decoding: try JSONCoding.encode(effective), as: UTF8.self), revision: now.revision + 1)
                changed.append(try current(declaration))
            }
            return .init(changed: changed, unchanged: unchanged)
        }
    }

    /// A change from another device: stored when newer than what is here (its revision
    /// and device as sent), with no journal row, so it is never sent back. A value that does
    /// not validate here is stored all the same and reads quarantined.
    func applyRemote(_ declaration: SettingsRecordDeclaration, _ change: SettingsRemoteChange) throws -> (SettingsValue, applied: Bool) {
        guard change.revision >= 1 else {
            throw TermindError(.settingsInvalid, "A remote change of \(change.key) has revision \(change.revision); revisions start at 1.")
        }
        return try db.transaction {
            let row = try db.query("SELECT value, revision, device_id FROM settings_records WHERE key = ?", [declaration.key]).first
            let now = try current(declaration)
            // Newer wins; at the same revision (two devices changed it from the same one) the
            // higher device id, so every device ends on the same value.
            let newer = change.revision > now.revision || (change.revision == now.revision && change.device > (row?.string("device_id") ?? ""))
            guard newer else { return (now, false) }
            // Secrets never sync: this device keeps its own handle in each reference field
            // the remote value also has (another device's handle means nothing here), and no
            // secret of this device is deleted by a remote change.
            var value = change.value
            if let remote = value, !declaration.secretReferences.isEmpty,
               let text = row?.string("value"), let local = try? JSONCoding.parse(Data(text.utf8), source: declaration.key) {
                let mine = Dictionary(declaration.references(in: local).map { ($0.path, $0.handle) }, uniquingKeysWith: { a, _ in a })
                var merged = remote
                for (path, _) in declaration.references(in: remote) {
                    if let handle = mine[path] { merged = Self.replacing(String(path.dropFirst(declaration.key.count + 1)), in: merged, with: .string(handle)) ?? merged }
                }
                value = merged
            }
            let text = try value.map { String(decoding: try JSONCoding.encode($0), as: UTF8.self) }
            try store(declaration.key, text, revision: change.revision, device: change.device)
            return (try current(declaration), true)
        }
    }

    /// Values the devices agreed on (sync's Settings zone), all in one transaction with no
    /// journal row (never sent back): each stored at the next revision, nil a reset. This
    /// device keeps its own handle in every reference field the value also has, unless the
    /// change carries that field's secret (`secrets`, by field path; nil: cleared — synced
    /// with secrets on): then a secret that differs from this device's is stored under a
    /// new handle. Secrets no longer referenced go once the transaction committed; those
    /// stored for a transaction that failed go too.
    func applyMerged(_ changes: [(SettingsRecordDeclaration, JSONValue?, [String: String?])]) throws -> [SettingsValue] {
        var created: [String] = []
        var obsolete: Set<String> = []
        let applied: [SettingsValue]
        do {
            applied = try db.transaction {
                let device = try deviceID
                var applied: [SettingsValue] = []
                for (declaration, incoming, secrets) in changes {
                    let row = try db.query("SELECT value, revision FROM settings_records WHERE key = ?", [declaration.key]).first
                    let before = try storedHandles(declaration)
                    var value = incoming
                    if let remote = value, !declaration.secretReferences.isEmpty {
                        let local = row?.string("value").flatMap { try? JSONCoding.parse(Data($0.utf8), source: declaration.key) }
                        let mine = Dictionary((local.map { declaration.references(in: $0) } ?? []).map { (String($0.path.dropFirst(declaration.key.count + 1)), $0.handle) },
                                              uniquingKeysWith: { a, _ in a })
                        var merged = remote
                        for (field, handle) in mine where secrets[field] == nil {
                            merged = Self.replacing(field, in: merged, with: .string(handle)) ?? merged
                        }
                        for (field, plaintext) in secrets where Self.replacing(field, in: merged, with: .string("")) != nil {
                            var handle = ""
                            if let plaintext {
                                if let own = mine[field], readable(own, key: declaration.key, path: declaration.key + "." + field),
                                   try self.secrets.secret(own).withPlaintext({ $0 == plaintext }) {
                                    handle = own
                                } else {
                                    handle = try self.secrets.store(Secret(plaintext), purpose: Self.secretPurpose(declaration.key, field))
                                    created.append(handle)
                                }
                            }
                            merged = Self.replacing(field, in: merged, with: .string(handle)) ?? merged
                        }
                        value = merged
                    }
                    let text = try value.map { String(decoding: try JSONCoding.encode($0), as: UTF8.self) }
                    try store(declaration.key, text, revision: (row?.int("revision") ?? 0) + 1, device: device)
                    obsolete.formUnion(before.subtracting(try storedHandles(declaration)))
                    applied.append(try current(declaration))
                }
                return applied
            }
        } catch {
            for handle in created { try? secrets.delete(handle) }
            throw error
        }
        for handle in obsolete { try? secrets.delete(handle) }
        return applied
    }

    /// A record's row as given (nil: a tombstone), with its revision and writing device.
    private func store(_ key: String, _ value: String?, revision: Int, device: String) throws {
        try db.execute("""
            INSERT INTO settings_records (key, value, revision, device_id) VALUES (?, ?, ?, ?)
            ON CONFLICT (key) DO UPDATE SET value = excluded.value, revision = excluded.revision, device_id = excluded.device_id,
                updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            """, [key, value, revision, device])
    }

    /// Signals sync (inside serve) after a synced record was journaled.
    static let journalSignal = SyncJournalSignal()

    /// Journal rows after `sequence`, oldest first.
    func outbox(after sequence: Int, limit: Int) throws -> [SettingsJournalEntry] {
        try db.query("SELECT seq, key, revision, tombstone, digest, device_id, at FROM settings_outbox WHERE seq > ? ORDER BY seq LIMIT ?",
                     [sequence, max(1, min(limit, 10_000))]).map { row in
            SettingsJournalEntry(sequence: try row.integer("seq"), key: try row.text("key"), revision: try row.integer("revision"),
                                 tombstone: try row.integer("tombstone") == 1, digest: row.string("digest"), device: try row.text("device_id"),
                                 at: try row.text("at"))
        }
    }

    private func check(_ now: SettingsValue, _ expected: Int?) throws {
        guard let expected, expected != now.revision else { return }
        throw TermindError(.settingsStaleRevision, "\(now.key) is at revision \(now.revision), but the change was based on revision \(expected); "
            + "read it again (termind settings get \(now.key)) and retry.")
    }

    private func write(_ declaration: SettingsRecordDeclaration, value: String?, revision: Int) throws {
        if let value { try checkReferences(declaration, adding: value, comparedTo: try storedHandles(declaration)) }
        let device = try deviceID
        try store(declaration.key, value, revision: revision, device: device)
        // A device-local record never leaves this device: nothing for sync to send.
        guard declaration.scope == .synced else { return }
        let digest = value.map { Digest.sha256(Data($0.utf8)).hexEncoded }
        try db.execute("INSERT INTO settings_outbox (key, revision, tombstone, digest, device_id) VALUES (?, ?, ?, ?, ?)",
                       [declaration.key, revision, value == nil ? 1 : 0, digest, device])
        Self.journalSignal.signal()
    }
}
