import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// One step of a feature's schema. Migrations are append-only: once released, a
/// migration's SQL never changes (its checksum is recorded and verified), and a schema
/// change is a new migration at the end.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String
    /// A migration that was released shorter and had statements added afterwards (a mistake
    /// that must not strand the stores it reached): each earlier text, which `sql` begins
    /// with. A store migrated with one runs what `sql` adds after it, in the same transaction
    /// as the other migrations, and its record then names the current text.
    public let releasedAs: [String]

    public init(_ version: Int, _ name: String, _ sql: String, releasedAs: [String] = []) {
        precondition(releasedAs.allSatisfy(sql.hasPrefix), "migration \(version): a text it was released as must be where its SQL begins")
        self.version = version
        self.name = name
        self.sql = sql
        self.releasedAs = releasedAs
    }

    var checksum: String { Self.checksum(sql) }
    static func checksum(_ sql: String) -> String { Data(Digest.sha256(Data(sql.utf8)).prefix(8)).hexEncoded }
}

/// A feature's tables: its id and ordered migrations (versions 1, 2, 3, … without gaps).
public struct Schema: Sendable {
    public let feature: String
    public let migrations: [Migration]

    public init(feature: String, migrations: [Migration]) {
        self.feature = feature
        self.migrations = migrations
    }

    public var latestVersion: Int { migrations.last?.version ?? 0 }
}

extension Database {
    /// What `migrate` did.
    public struct MigrationReport: Sendable, Equatable {
        public let feature: String
        public let from: Int
        public let to: Int
        public var applied: [Int] { from < to ? Array((from + 1)...to) : [] }
    }

    /// `migrate(_:)` on the store's executor: what a feature's `start` calls (its statements
    /// never run on the cooperative pool).
    @discardableResult
    public func migrate(_ schema: Schema) async throws -> MigrationReport {
        try await BlockingExecutor.store.run { try self.migrate(schema) }
    }

    /// Brings the feature's tables to its latest version in one transaction: either every
    /// pending migration is applied or none is. Refuses a database written by a newer
    /// termind (it knows versions this build does not) and migrations edited after release.
    @discardableResult
    public func migrate(_ schema: Schema) throws -> MigrationReport {
        for (index, migration) in schema.migrations.enumerated() where migration.version != index + 1 {
            throw StoreError(.storeMigrationOrder, "Feature '\(schema.feature)': migration '\(migration.name)' has version \(migration.version); versions must be 1, 2, 3, … in order.")
        }
        if let scope, scope.owner != schema.feature {
            throw StoreError(.storeDenied, "Feature '\(scope.owner)' cannot migrate the schema of '\(schema.feature)'.")
        }
        return try transaction {
            // The bookkeeping below is this function's own SQL, run with the right to the
            // migrations table; the feature's migration SQL never is.
            try privileged {
                try execute("""
                    CREATE TABLE IF NOT EXISTS termind_migrations (
                        feature TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
                        checksum TEXT NOT NULL, applied_at TEXT NOT NULL,
                        PRIMARY KEY (feature, version))
                    """)
            }
            let applied = try privileged {
                try query("SELECT version, name, checksum FROM termind_migrations WHERE feature = ? ORDER BY version", [schema.feature])
            }
            let current = applied.last?.int("version") ?? 0
            if current > schema.latestVersion {
                throw StoreError(.storeTooNew, "The database \(path) holds version \(current) of '\(schema.feature)', but this termind knows only up to \(schema.latestVersion): it was written by a newer termind. Upgrade termind; the database was left untouched.")
            }
            for row in applied {
                guard let version = row.int("version"), version >= 1, version <= schema.migrations.count else { continue }
                let migration = schema.migrations[version - 1]
                guard let recorded = row.string("checksum"), recorded != migration.checksum else { continue }
                // A text this migration was released as: the store is brought up to the current one.
                guard let earlier = migration.releasedAs.first(where: { Migration.checksum($0) == recorded }) else {
                    throw StoreError(.storeMigrationChanged, "Migration \(version) ('\(migration.name)') of '\(schema.feature)' differs from the one applied to \(path). Released migrations must not change; add a new one instead.")
                }
                try runScript(String(migration.sql.dropFirst(earlier.count))) {
                    "Migration \(version) ('\(migration.name)') of '\(schema.feature)' could not be brought up from the text it was released as on \(path), nothing was changed: \($0)"
                }
                try privileged {
                    try execute("UPDATE termind_migrations SET name = ?, checksum = ? WHERE feature = ? AND version = ?",
                                [migration.name, migration.checksum, schema.feature, version])
                }
            }
            for migration in schema.migrations where migration.version > current {
                try runScript(migration.sql) {
                    "Migration \(migration.version) ('\(migration.name)') of '\(schema.feature)' failed on \(path), nothing was changed: \($0)"
                }
                try privileged {
                    try execute("INSERT INTO termind_migrations (feature, version, name, checksum, applied_at) VALUES (?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                                [schema.feature, migration.version, migration.name, migration.checksum])
                }
            }
            return MigrationReport(feature: schema.feature, from: current, to: schema.latestVersion)
        }
    }

    /// Runs a migration's SQL; a failure becomes `store.migration_failed` with `message(why)`.
    private func runScript(_ sql: String, failure message: (String) -> String) throws {
        do { try executeScript(sql) } catch let error as StoreError { throw StoreError(.storeMigrationFailed, message(error.message)) }
    }

    /// The applied version of a feature's schema (0 when none); a feature's connection asks
    /// only about its own.
    public func schemaVersion(of feature: String) throws -> Int {
        if let scope, scope.owner != feature {
            throw StoreError(.storeDenied, "Feature '\(scope.owner)' cannot read the schema version of '\(feature)'.")
        }
        return try privileged {
            let exists = try scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'termind_migrations'")
            guard exists == .integer(1) else { return 0 }
            if case .integer(let v) = try scalar("SELECT max(version) FROM termind_migrations WHERE feature = ?", [feature]) { return Int(v) }
            return 0
        }
    }
}
