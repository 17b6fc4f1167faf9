import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SyncAPI
import SyncRules
import TermindCore
import TermindStore

/// Sync's tables in the process database. Append-only: a change is a new migration.
///
/// - `sync_config`: the one folder this device syncs through, its device id, the secret
///   store handle of the sync key, consent per zone, pause, and the clock's last stamp.
/// - `sync_entities`: what every device agreed on each entity (per-field values and clocks,
///   the latest deletion) and, when the zone could not apply it yet, why (unresolved).
/// - `sync_cursors`: how far each zone's local journal was taken in.
/// - `sync_outgoing`: batches sealed and numbered but not yet on the server. Written in the
///   same transaction as the entity states and the cursor they came from (data and intent
///   together), removed once the server has the file.
/// - `sync_logs`: per device and zone, the next file to read (other devices) or the last
///   file written (this one).
/// - `sync_quarantine`: files and entities that were not taken in, with the reason.
enum SyncSchema {
    static let schema = Schema(feature: "sync", migrations: [
        Migration(1, "config, entities, cursors, outgoing, logs, quarantine", """
            CREATE TABLE sync_config (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                host TEXT NOT NULL,
                path TEXT NOT NULL,
                device_id TEXT NOT NULL,
                key_handle TEXT NOT NULL,
                paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
                secrets INTEGER NOT NULL DEFAULT 0 CHECK (secrets IN (0, 1)),
                zones TEXT NOT NULL,
                clock TEXT,
                last_sync TEXT,
                last_error TEXT);
            CREATE TABLE sync_entities (
                zone TEXT NOT NULL,
                kind TEXT NOT NULL,
                id TEXT NOT NULL,
                state TEXT NOT NULL,
                pending TEXT,
                PRIMARY KEY (zone, kind, id));
            CREATE INDEX sync_entities_pending ON sync_entities (zone) WHERE pending IS NOT NULL;
            CREATE TABLE sync_cursors (
                zone TEXT PRIMARY KEY,
                cursor INTEGER NOT NULL,
                inventoried INTEGER NOT NULL CHECK (inventoried IN (0, 1)));
            CREATE TABLE sync_outgoing (
                zone TEXT NOT NULL,
                idx INTEGER NOT NULL,
                sealed BLOB NOT NULL,
                PRIMARY KEY (zone, idx));
            CREATE TABLE sync_logs (
                device TEXT NOT NULL,
                zone TEXT NOT NULL,
                idx INTEGER NOT NULL,
                PRIMARY KEY (device, zone));
            CREATE TABLE sync_quarantine (
                what TEXT PRIMARY KEY,
                reason TEXT NOT NULL,
                at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            """),
        Migration(2, "a rescan after secrets were switched on; secret changes made without them", """
            ALTER TABLE sync_cursors ADD COLUMN rescan INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE sync_entities ADD COLUMN local_secrets TEXT;
            CREATE TABLE sync_secret_changes (
                zone TEXT NOT NULL,
                kind TEXT NOT NULL,
                id TEXT NOT NULL,
                at INTEGER NOT NULL,
                PRIMARY KEY (zone, kind, id));
            """,
                  // Released at 04b3108 (stop 46) with only its first statement, and the rest added in
                  // place afterwards: stores migrated then run the rest now instead of being refused.
                  releasedAs: ["ALTER TABLE sync_cursors ADD COLUMN rescan INTEGER NOT NULL DEFAULT 0;"]),
    ])
}

/// This device's sync configuration as stored.
struct SyncConfig: Sendable, Equatable {
    var host: String
    var path: String
    var device: String
    var keyHandle: String
    var paused: Bool
    var secrets: Bool
    var zones: [String: Bool]
    var clock: HLC?
    var lastSync: String?
    var lastError: String?

    /// The zones in the order a sync takes them (what others refer to first), each with the
    /// consent switch that covers it: forwarding rules go with the Vault.
    static let zones: [(zone: String, consent: String)] = [("vault", "vault"), ("forwarding", "vault"), ("settings", "settings"), ("metrics", "metrics")]
    /// The consent switches (`sync zones`), in that order.
    static let zoneNames = zones.map(\.consent).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
    /// Consent a new set-up starts with: every zone on, secrets off.
    static let defaultZones = Dictionary(uniqueKeysWithValues: zoneNames.map { ($0, true) })
}

struct SyncStore: Sendable {
    let db: Database

    func config() throws -> SyncConfig? {
        guard let row = try db.query("SELECT * FROM sync_config WHERE id = 1").first else { return nil }
        func text(_ column: String) throws -> String {
            guard let value = row.string(column) else { throw TermindError.internalFailure("sync_config has no \(column).") }
            return value
        }
        guard let paused = row.bool("paused"), let secrets = row.bool("secrets") else {
            throw TermindError.internalFailure("sync_config has no paused or secrets flag.")
        }
        let zones = try JSONDecoder().decode([String: Bool].self, from: Data(try text("zones").utf8))
        return SyncConfig(host: try text("host"), path: try text("path"), device: try text("device_id"), keyHandle: try text("key_handle"),
                          paused: paused, secrets: secrets, zones: zones, clock: row.string("clock").flatMap(HLC.init),
                          lastSync: row.string("last_sync"), lastError: row.string("last_error"))
    }

    /// A new configuration: the logs, cursors and agreed states of any earlier folder go
    /// (they belong to another folder), this device's clock goes on.
    func replaceConfig(_ config: SyncConfig) throws {
        try db.transaction {
            try db.execute("DELETE FROM sync_config")
            for table in ["sync_entities", "sync_cursors", "sync_outgoing", "sync_logs", "sync_quarantine", "sync_secret_changes"] { try db.execute("DELETE FROM \(table)") }
            try db.execute("""
                INSERT INTO sync_config (id, host, path, device_id, key_handle, paused, secrets, zones, clock) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [config.host, config.path, config.device, config.keyHandle, config.paused, config.secrets,
                      String(decoding: try JSONCoding.encode(config.zones), as: UTF8.self), config.clock?.description])
        }
    }

    func update(paused: Bool? = nil, secrets: Bool? = nil, zones: [String: Bool]? = nil) throws {
        try db.transaction {
            if let paused { try db.execute("UPDATE sync_config SET paused = ?", [paused]) }
            if let secrets {
                // Switched on: every zone's next sync takes in the secrets it had left out.
                if secrets, try config()?.secrets == false { try db.execute("UPDATE sync_cursors SET rescan = 1") }
                try db.execute("UPDATE sync_config SET secrets = ?", [secrets])
            }
            if let zones { try db.execute("UPDATE sync_config SET zones = ?", [String(decoding: try JSONCoding.encode(zones), as: UTF8.self)]) }
        }
    }

    func finished(error: String?) throws {
        if let error {
            try db.execute("UPDATE sync_config SET last_error = ?", [error])
        } else {
            try db.execute("UPDATE sync_config SET last_sync = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), last_error = NULL")
        }
    }

    func saveClock(_ clock: HLC) throws { try db.execute("UPDATE sync_config SET clock = ?", [clock.description]) }

    // MARK: Entities

    func states(_ zone: String, _ entities: [SyncEntityRef]) throws -> [SyncEntityRef: EntityState] {
        var states: [SyncEntityRef: EntityState] = [:]
        for entity in entities {
            guard let row = try db.query("SELECT state FROM sync_entities WHERE zone = ? AND kind = ? AND id = ?", [zone, entity.kind, entity.id]).first else { continue }
            guard let text = row.string("state") else { throw TermindError.internalFailure("sync_entities has a row without state.") }
            states[entity] = try JSONDecoder().decode(EntityState.self, from: Data(text.utf8))
        }
        return states
    }

    func save(_ zone: String, _ states: [SyncEntityRef: EntityState]) throws {
        for (entity, state) in states {
            try db.execute("""
                INSERT INTO sync_entities (zone, kind, id, state) VALUES (?, ?, ?, ?)
                ON CONFLICT (zone, kind, id) DO UPDATE SET state = excluded.state
                """, [zone, entity.kind, entity.id, String(decoding: try JSONCoding.encode(state), as: UTF8.self)])
        }
    }

    /// Every entity of `zone` the devices agreed on (live or deleted).
    func entities(_ zone: String) throws -> [SyncEntityRef] {
        try db.query("SELECT kind, id FROM sync_entities WHERE zone = ?", [zone]).map { SyncEntityRef(kind: try $0.text("kind"), id: try $0.text("id")) }
    }

    func setPending(_ zone: String, _ entity: SyncEntityRef, _ reason: String?) throws {
        try db.execute("UPDATE sync_entities SET pending = ? WHERE zone = ? AND kind = ? AND id = ?", [reason, zone, entity.kind, entity.id])
    }

    func pending(_ zone: String) throws -> [SyncEntityRef] {
        try db.query("SELECT kind, id FROM sync_entities WHERE zone = ? AND pending IS NOT NULL ORDER BY kind, id", [zone]).compactMap { row in
            guard let kind = row.string("kind"), let id = row.string("id") else { return nil }
            return SyncEntityRef(kind: kind, id: id)
        }
    }

    func unresolved() throws -> [SyncStatus.Problem] {
        try db.query("SELECT zone, kind, id, pending FROM sync_entities WHERE pending IS NOT NULL ORDER BY zone, kind, id").map { row in
            SyncStatus.Problem(what: "\(try row.text("zone")) \(try row.text("kind")) \(try row.text("id"))", reason: try row.text("pending"))
        }
    }

    // MARK: Cursors and logs

    func cursor(_ zone: String) throws -> (cursor: Int64, inventoried: Bool, rescan: Bool) {
        guard let row = try db.query("SELECT cursor, inventoried, rescan FROM sync_cursors WHERE zone = ?", [zone]).first else { return (0, false, false) }
        return (Int64(try row.integer("cursor")), try row.integer("inventoried") == 1, try row.integer("rescan") == 1)
    }

    /// The rescan ran: what waited for it went with it.
    func rescanned(_ zone: String) throws {
        try db.execute("UPDATE sync_cursors SET rescan = 0 WHERE zone = ?", [zone])
        try db.execute("DELETE FROM sync_secret_changes WHERE zone = ?", [zone])
    }

    /// Entities whose secret changed here while secrets were off, with the change's time
    /// (ms): the rescan sends them as changes.
    func noteSecretChanges(_ zone: String, _ changes: [SyncEntityRef: Int64]) throws {
        for (entity, at) in changes {
            try db.execute("""
                INSERT INTO sync_secret_changes (zone, kind, id, at) VALUES (?, ?, ?, ?)
                ON CONFLICT (zone, kind, id) DO UPDATE SET at = max(at, excluded.at)
                """, [zone, entity.kind, entity.id, at])
        }
    }

    /// The MACs of this device's secrets per entity as sync last read or wrote them.
    func localSecrets(_ zone: String, _ entities: [SyncEntityRef]) throws -> [SyncEntityRef: String] {
        var noted: [SyncEntityRef: String] = [:]
        for entity in entities {
            if let digest = try db.query("SELECT local_secrets FROM sync_entities WHERE zone = ? AND kind = ? AND id = ?", [zone, entity.kind, entity.id]).first?.string("local_secrets") {
                noted[entity] = digest
            }
        }
        return noted
    }

    /// Notes them (for entities the devices agreed on; others have nothing to compare with).
    func setLocalSecrets(_ zone: String, _ digests: [SyncEntityRef: String]) throws {
        for (entity, digest) in digests {
            try db.execute("UPDATE sync_entities SET local_secrets = ? WHERE zone = ? AND kind = ? AND id = ?", [digest, zone, entity.kind, entity.id])
        }
    }

    func secretChanges(_ zone: String) throws -> [SyncEntityRef: Int64] {
        var changes: [SyncEntityRef: Int64] = [:]
        for row in try db.query("SELECT kind, id, at FROM sync_secret_changes WHERE zone = ?", [zone]) {
            changes[SyncEntityRef(kind: try row.text("kind"), id: try row.text("id"))] = Int64(try row.integer("at"))
        }
        return changes
    }

    func setCursor(_ zone: String, _ cursor: Int64) throws {
        try db.execute("""
            INSERT INTO sync_cursors (zone, cursor, inventoried) VALUES (?, ?, 1)
            ON CONFLICT (zone) DO UPDATE SET cursor = excluded.cursor, inventoried = 1
            """, [zone, cursor])
    }

    /// For another device, the last file taken in; for this one, the last file on the server.
    func logIndex(device: String, zone: String) throws -> Int {
        try db.query("SELECT idx FROM sync_logs WHERE device = ? AND zone = ?", [device, zone]).first?.int("idx") ?? 0
    }

    func setLogIndex(device: String, zone: String, _ index: Int) throws {
        try db.execute("""
            INSERT INTO sync_logs (device, zone, idx) VALUES (?, ?, ?) ON CONFLICT (device, zone) DO UPDATE SET idx = excluded.idx
            """, [device, zone, index])
    }

    func logs() throws -> [SyncStatus.Device] {
        try db.query("SELECT device, zone, idx FROM sync_logs ORDER BY device, zone").map { row in
            SyncStatus.Device(id: try row.text("device"), zone: try row.text("zone"), index: try row.integer("idx"))
        }
    }

    // MARK: Outgoing

    /// The last index taken by this device's log of `zone`: on the server or waiting to go.
    func lastOutgoing(_ zone: String, device: String) throws -> Int {
        let waiting = try db.query("SELECT MAX(idx) AS idx FROM sync_outgoing WHERE zone = ?", [zone]).first?.int("idx") ?? 0
        return max(waiting, try logIndex(device: device, zone: zone))
    }

    func addOutgoing(_ zone: String, _ index: Int, _ sealed: Data) throws {
        try db.execute("INSERT INTO sync_outgoing (zone, idx, sealed) VALUES (?, ?, ?)", [zone, index, sealed])
    }

    func outgoing() throws -> [(zone: String, index: Int, sealed: Data)] {
        try db.query("SELECT zone, idx, sealed FROM sync_outgoing ORDER BY zone, idx").map { row in
            guard let zone = row.string("zone"), let index = row.int("idx"), case .blob(let sealed) = row["sealed"] else {
                throw TermindError.internalFailure("sync_outgoing has a malformed row.")
            }
            return (zone, index, sealed)
        }
    }

    func sent(_ zone: String, _ index: Int, device: String) throws {
        try db.transaction {
            try db.execute("DELETE FROM sync_outgoing WHERE zone = ? AND idx = ?", [zone, index])
            try setLogIndex(device: device, zone: zone, index)
        }
    }

    // MARK: Quarantine

    func quarantine(_ what: String, _ reason: String) throws {
        try db.execute("INSERT INTO sync_quarantine (what, reason) VALUES (?, ?) ON CONFLICT (what) DO UPDATE SET reason = excluded.reason", [what, reason])
    }

    /// Entities of `zone` quarantined here (tried again at every sync: what made them
    /// invalid here — a label another entity held — may be gone).
    func quarantinedEntities(_ zone: String) throws -> [SyncEntityRef] {
        try db.query("SELECT what FROM sync_quarantine WHERE what LIKE ? ESCAPE '\\'", [zone + " %"]).compactMap { row in
            let parts = try row.text("what").split(separator: " ")
            return parts.count == 3 ? SyncEntityRef(kind: String(parts[1]), id: String(parts[2])) : nil
        }
    }

    func release(_ what: String) throws { try db.execute("DELETE FROM sync_quarantine WHERE what = ?", [what]) }

    func quarantined() throws -> [SyncStatus.Problem] {
        try db.query("SELECT what, reason FROM sync_quarantine ORDER BY what").map { SyncStatus.Problem(what: try $0.text("what"), reason: try $0.text("reason")) }
    }
}
