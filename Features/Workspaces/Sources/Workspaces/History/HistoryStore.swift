import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindStore
import WorkspacesAPI

/// Workspaces' tables in the process database (device-local: nothing here syncs).
/// Append-only migrations.
enum WorkspacesSchema {
    static let schema = Schema(feature: "workspaces", migrations: [
        Migration(1, "history", """
            CREATE TABLE workspaces_history (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                host TEXT NOT NULL,
                command TEXT NOT NULL,
                exit_status INTEGER,
                duration_ms INTEGER CHECK (duration_ms IS NULL OR duration_ms >= 0),
                directory TEXT,
                finished_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
            CREATE INDEX workspaces_history_host ON workspaces_history (host, id);
            """),
    ])
}

/// The commands a shell reported (OSC 133), per host: a saved host's id, or `user@host[:port]`
/// for a quick-connect target. At most `limit` rows per host; the oldest go first.
struct HistoryStore: Sendable {
    static let limit = 1000
    let db: Database

    /// Adds `entries` in order, and trims the host's oldest beyond the limit, in one transaction.
    func record(host: String, _ entries: [WorkspacesContracts.HistoryEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await db.write { db in
            for entry in entries {
                let status: SQLValue = entry.exitStatus.map { .integer(Int64($0)) } ?? .null
                let duration: SQLValue = entry.durationMilliseconds.map { .integer(Int64($0)) } ?? .null
                let directory: SQLValue = entry.directory.map { .text($0) } ?? .null
                try db.execute("INSERT INTO workspaces_history (host, command, exit_status, duration_ms, directory) VALUES (?, ?, ?, ?, ?)",
                               [host, entry.command, status, duration, directory])
            }
            try db.execute("""
                DELETE FROM workspaces_history WHERE host = ?1 AND id <= (
                    SELECT id FROM workspaces_history WHERE host = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
                """, [host, Self.limit])
        }
    }

    /// The host's commands, oldest first.
    func entries(host: String) async throws -> [WorkspacesContracts.HistoryEntry] {
        try await db.read { db in
            try db.query("SELECT * FROM workspaces_history WHERE host = ? ORDER BY id", [host]).map { row in
                WorkspacesContracts.HistoryEntry(command: try row.text("command"), exitStatus: row.int("exit_status").map { Int32(truncatingIfNeeded: $0) },
                                                 durationMilliseconds: row.int("duration_ms"), directory: row.string("directory"),
                                                 finished: try row.text("finished_at"))
            }
        }
    }

    /// Rows kept for `host` (tests, diagnostics).
    func count(host: String) async throws -> Int {
        try await db.read { db in
            if case .integer(let n) = try db.scalar("SELECT count(*) FROM workspaces_history WHERE host = ?", [host]) { return Int(n) }
            return 0
        }
    }
}
