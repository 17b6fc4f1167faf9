import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import SyncAPI
import TermindCore
import TermindStore

/// The rules' table in the process database. Append-only migrations. A rule's fields are
/// its columns (no JSON blob to drift): the name is unique without regard to case; the host
/// is a saved host's id (its label may change) or a quick-connect line.
enum ForwardingSchema {
    static let schema = Schema(feature: "forwarding", migrations: [
        Migration(1, "rules", """
            CREATE TABLE forwarding_rules (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                kind TEXT NOT NULL CHECK (kind IN ('local', 'remote', 'dynamic')),
                bind_address TEXT NOT NULL,
                bind_port INTEGER NOT NULL CHECK (bind_port BETWEEN 0 AND 65535),
                target_host TEXT,
                target_port INTEGER CHECK (target_port BETWEEN 1 AND 65535),
                host TEXT NOT NULL,
                color TEXT,
                tags TEXT NOT NULL DEFAULT '',
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            """),
        // Sync's journal: a row per change of a rule, in the transaction of the change.
        Migration(2, "sync journal", """
            CREATE TABLE forwarding_sync_outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL,
                at INTEGER NOT NULL);
            """),
    ])
}

struct RuleStore: Sendable {
    let db: Database

    func all() async throws -> [ForwardRule] {
        try await db.read { db in try db.query("SELECT * FROM forwarding_rules ORDER BY created_at, name").map(Self.rule) }
    }

    /// The rule named `name` (case-insensitive) or with that id.
    func find(_ name: String) async throws -> ForwardRule? {
        try await db.read { db in
            try db.query("SELECT * FROM forwarding_rules WHERE id = ? OR name = ? COLLATE NOCASE ORDER BY id = ? DESC LIMIT 1", [name, name, name]).first.map(Self.rule)
        }
    }

    func insert(_ rule: ForwardRule) async throws {
        try await write { db in
            try db.execute("""
                INSERT INTO forwarding_rules (id, name, kind, bind_address, bind_port, target_host, target_port, host, color, tags)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, Self.values(rule))
            try Self.journal(db, rule.id)
        }
    }

    func update(_ rule: ForwardRule) async throws {
        try await write { db in
            try db.execute("""
                UPDATE forwarding_rules SET name = ?2, kind = ?3, bind_address = ?4, bind_port = ?5, target_host = ?6, target_port = ?7,
                    host = ?8, color = ?9, tags = ?10 WHERE id = ?1
                """, Self.values(rule))
            try Self.journal(db, rule.id)
        }
    }

    func delete(_ id: String) async throws {
        try await write { db in
            try db.execute("DELETE FROM forwarding_rules WHERE id = ?", [id])
            try Self.journal(db, id)
        }
    }

    /// Sync's journal row for a change of rule `id` (in the change's transaction).
    static func journal(_ db: Database, _ id: String) throws {
        try db.execute("INSERT INTO forwarding_sync_outbox (id, at) VALUES (?, ?)", [id, SyncChanges.now()])
        journalSignal.signal()
    }

    static let journalSignal = SyncJournalSignal()

    /// Rules the devices agreed on, upserted (nil: deleted) in one transaction with no
    /// journal row; a name another rule holds here is the rule's own failure.
    func apply(_ changes: [(String, ForwardRule?)]) async throws -> [String: SyncApplyOutcome] {
        try await db.write { db in
            try db.transaction {
                var outcomes: [String: SyncApplyOutcome] = [:]
                for (id, rule) in changes {
                    guard let rule else {
                        try db.execute("DELETE FROM forwarding_rules WHERE id = ?", [id])
                        outcomes[id] = .applied
                        continue
                    }
                    if let owner = try db.query("SELECT id FROM forwarding_rules WHERE name = ? COLLATE NOCASE", [rule.name]).first?.string("id"), owner != id {
                        outcomes[id] = .invalid("name: '\(rule.name)' is already used by another rule here (\(owner))")
                        continue
                    }
                    try db.execute("""
                        INSERT INTO forwarding_rules (id, name, kind, bind_address, bind_port, target_host, target_port, host, color, tags)
                        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                        ON CONFLICT (id) DO UPDATE SET name = ?2, kind = ?3, bind_address = ?4, bind_port = ?5, target_host = ?6,
                            target_port = ?7, host = ?8, color = ?9, tags = ?10
                        """, Self.values(rule))
                    outcomes[id] = .applied
                }
                return outcomes
            }
        }
    }

    /// A second rule with the same name is a clear error, not a constraint's.
    private func write(_ body: @escaping @Sendable (Database) throws -> Void) async throws {
        do {
            try await db.write { db in try body(db) }
        } catch let error as StoreError where error.message.contains("UNIQUE") {
            throw TermindError(.forwardingNameTaken, "Another rule already has that name (names are unique, whatever their case); choose another with --name.")
        } catch let error as StoreError {
            throw error.termindError
        }
    }

    private static func values(_ rule: ForwardRule) -> [any SQLBindable] {
        let targetHost: SQLValue = rule.targetHost.map { .text($0) } ?? .null
        let targetPort: SQLValue = rule.targetPort.map { .integer(Int64($0)) } ?? .null
        let color: SQLValue = rule.color.map { .text($0) } ?? .null
        return [rule.id, rule.name, rule.kind.rawValue, rule.bindAddress, rule.bindPort, targetHost, targetPort, rule.host, color,
                rule.tags.joined(separator: ",")]
    }

    static func rule(_ row: Row) throws -> ForwardRule {
        guard let id = row.string("id"), let name = row.string("name"), let kind = row.string("kind").flatMap(ForwardKind.init(rawValue:)),
              let bind = row.string("bind_address"), let port = row.int("bind_port"), let host = row.string("host") else {
            throw TermindError.internalFailure("A forwarding rule's row is incomplete.")
        }
        let tags = try row.text("tags").split(separator: ",").map(String.init)
        return ForwardRule(id: id, name: name, kind: kind, bindAddress: bind, bindPort: port, targetHost: row.string("target_host"),
                           targetPort: row.int("target_port"), host: host, color: row.string("color"), tags: tags)
    }
}
