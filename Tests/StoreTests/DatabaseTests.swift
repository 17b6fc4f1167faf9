import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import TermindStore
import XCTest

final class DatabaseTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private let notes = Schema(feature: "notes", migrations: [
        Migration(1, "create notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"),
        Migration(2, "add tags", "ALTER TABLE notes ADD COLUMN tags TEXT NOT NULL DEFAULT ''; CREATE INDEX notes_tags ON notes (tags);"),
    ])

    func testANewDatabaseIsOwnerOnlyAndInWALMode() throws {
        let path = directory.file("state/termind.sqlite")
        let db = try StoreAccess.database(path: path)
        XCTAssertEqual(try db.scalar("PRAGMA journal_mode"), .text("wal"))
        XCTAssertEqual(try db.scalar("PRAGMA synchronous"), .integer(2), "FULL")
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(stat(directory.file("state"), &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o700)
    }

    func testARowMissingARequiredColumnFailsLoudlyNamingItInsteadOfReadingEmpty() throws {
        let db = try StoreAccess.database(path: directory.file("rows.sqlite"))
        try db.execute("CREATE TABLE t (label, port)")
        try db.execute("INSERT INTO t VALUES ('web', 22), (NULL, 'x'), (7, 22)")
        let rows = try db.query("SELECT label, port FROM t ORDER BY rowid")
        XCTAssertEqual(try rows[0].text("label"), "web")
        XCTAssertEqual(try rows[0].integer("port"), 22)
        for (row, column, found) in [(rows[1], "label", "NULL"), (rows[1], "port", "<text>"), (rows[2], "label", "<integer>"), (rows[0], "nope", "no such column")] {
            XCTAssertThrowsError(column == "port" ? String(try row.integer(column)) : try row.text(column)) { error in
                let failure = TermindError.from(error)
                XCTAssertTrue(failure.is(.storeCorrupt), "\(failure)")
                XCTAssertTrue(failure.message.contains("'\(column)'") && failure.message.contains(found), failure.message)
            }
        }
    }

    func testMigrationsApplyInOrderOnceAndAreRecorded() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        let first = try db.migrate(notes)
        XCTAssertEqual(first.applied, [1, 2])
        XCTAssertEqual(try db.migrate(notes).applied, [], "a second run applies nothing")
        try db.execute("INSERT INTO notes (body, tags) VALUES (?, ?)", ["hello", "a"])
        XCTAssertEqual(try db.query("SELECT body, tags FROM notes").first?.string("tags"), "a")
        XCTAssertEqual(try db.schemaVersion(of: "notes"), 2)
        XCTAssertEqual(try db.query("SELECT name FROM termind_migrations ORDER BY version").map { $0.string("name") }, ["create notes", "add tags"])
    }

    func testMigratingFromEveryPastVersionReachesTheSameSchemaAndKeepsData() throws {
        for version in 0..<notes.latestVersion {
            let db = try StoreAccess.database(path: directory.file("v\(version).sqlite"))
            if version > 0 {
                // The database exactly as a build with `version` migrations left it, with data.
                try db.migrate(Schema(feature: "notes", migrations: Array(notes.migrations.prefix(version))))
                try db.execute("INSERT INTO notes (body) VALUES ('kept')")
            }
            XCTAssertEqual(try db.migrate(notes).applied, Array((version + 1)...notes.latestVersion))
            XCTAssertEqual(try db.query("SELECT name FROM pragma_table_info('notes') ORDER BY cid").compactMap { $0.string("name") }, ["id", "body", "tags"])
            XCTAssertEqual(try db.query("SELECT body FROM notes").compactMap { $0.string("body") }, version > 0 ? ["kept"] : [])
        }
    }

    func testAFailingMigrationChangesNothing() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(Schema(feature: "notes", migrations: [notes.migrations[0]]))
        try db.execute("INSERT INTO notes (body) VALUES ('precious')")
        let broken = Schema(feature: "notes", migrations: [notes.migrations[0], Migration(2, "broken", "ALTER TABLE notes ADD COLUMN x TEXT; CREATE TABLE notes (id INTEGER);")])
        XCTAssertThrowsError(try db.migrate(broken)) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.migration_failed")
            XCTAssertTrue("\(error)".contains("Migration 2 ('broken') of 'notes' failed"), "\(error)")
        }
        XCTAssertEqual(try db.schemaVersion(of: "notes"), 1)
        XCTAssertEqual(try db.query("SELECT name FROM pragma_table_info('notes')").count, 2, "the half-applied ALTER was rolled back")
        XCTAssertEqual(try db.scalar("SELECT body FROM notes"), .text("precious"))
    }

    func testADatabaseFromANewerTermindOrAnEditedMigrationIsRefused() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        XCTAssertThrowsError(try db.migrate(Schema(feature: "notes", migrations: [notes.migrations[0]]))) {
            XCTAssertEqual(($0 as? StoreError)?.code, "store.too_new")
            XCTAssertTrue("\($0)".contains("written by a newer termind"))
        }
        let edited = Schema(feature: "notes", migrations: [notes.migrations[0], Migration(2, "add tags", "ALTER TABLE notes ADD COLUMN labels TEXT;")])
        XCTAssertThrowsError(try db.migrate(edited)) { XCTAssertEqual(($0 as? StoreError)?.code, "store.migration_changed") }
        XCTAssertThrowsError(try db.migrate(Schema(feature: "x", migrations: [Migration(2, "gap", "SELECT 1;")]))) {
            XCTAssertEqual(($0 as? StoreError)?.code, "store.migration_order")
        }
    }

    func testAFileThatIsNotADatabaseIsReportedAndLeftUntouched() throws {
        let path = try directory.write("garbage.sqlite", String(repeating: "not a database at all ", count: 100))
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try StoreAccess.database(path: path)) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.corrupt")
            XCTAssertTrue("\(error)".contains("left untouched"), "\(error)")
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before)
    }

    func testATruncatedDatabaseIsReportedAndLeftUntouched() throws {
        let path = directory.file("t.sqlite")
        do {
            let db = try StoreAccess.database(path: path)
            try db.migrate(notes)
            let body = String(repeating: "x", count: 2000)
            try db.transaction { for _ in 0..<200 { try db.execute("INSERT INTO notes (body) VALUES (?)", [body]) } }
            try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        let full = try Data(contentsOf: URL(fileURLWithPath: path))
        try full.prefix(full.count / 3).write(to: URL(fileURLWithPath: path))
        let truncated = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            let db = try StoreAccess.database(path: path)
            _ = try db.query("SELECT count(*), sum(length(body)) FROM notes")
            XCTFail("reading a truncated database must fail")
        } catch let error as StoreError {
            XCTAssertEqual(error.code, "store.corrupt", error.message)
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), truncated)
    }

    func testAnEmptyFileALinkAFolderOrAFIFOAtTheStoresPathIsRefusedWithWhatItIs() throws {
        // Empty: SQLite would take it for a new database; it may be one that lost its data.
        let empty = try directory.write("empty.sqlite", "")
        XCTAssertThrowsError(try StoreAccess.database(path: empty)) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.corrupt")
            XCTAssertTrue("\(error)".contains("is empty (0 bytes)") && "\(error)".contains("left untouched"), "\(error)")
        }
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: empty)[.size] as? Int, 0, "the empty file was written")
        // A symbolic link, even to a good database: refused, naming it.
        let real = directory.file("real.sqlite")
        try StoreAccess.database(path: real).migrate(notes)
        let link = directory.file("link.sqlite")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: real)
        XCTAssertThrowsError(try StoreAccess.database(path: link)) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.open_failed")
            XCTAssertTrue("\(error)".contains("is a symbolic link (to \(real))"), "\(error)")
        }
        // A folder, and a FIFO.
        let folder = directory.file("folder.sqlite")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        XCTAssertThrowsError(try StoreAccess.database(path: folder)) { error in
            XCTAssertTrue("\(error)".contains("it is a folder") && "\(error)".contains("--store"), "\(error)")
        }
        let fifo = directory.file("fifo.sqlite")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        XCTAssertThrowsError(try StoreAccess.database(path: fifo)) { error in
            XCTAssertTrue("\(error)".contains("not a regular file"), "\(error)")
        }
    }

    func testStatementValuesNeverAppearInErrors() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        try db.execute("CREATE UNIQUE INDEX notes_body ON notes (body)")
        try db.execute("INSERT INTO notes (body) VALUES (?)", ["hunter2-password"])
        XCTAssertThrowsError(try db.execute("INSERT INTO notes (body) VALUES (?)", ["hunter2-password"])) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.constraint")
            XCTAssertFalse("\(error)".contains("hunter2"), "\(error)")
        }
        XCTAssertThrowsError(try db.query("SELECT 1; SELECT 2")) { XCTAssertTrue("\($0)".contains("one statement")) }
    }

    func testTransactionsRollBackOnError() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        struct Stop: Error {}
        XCTAssertThrowsError(try db.transaction {
            try db.execute("INSERT INTO notes (body) VALUES ('a')")
            throw Stop()
        })
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes"), .integer(0))
    }

    func testProcessesOpeningANewDatabaseTogetherAllSucceedAndShareIt() throws {
        // A losing opener once deleted the file the winner was writing: race fresh opens.
        let writer = FeatureHarness.buildDirectory + "/termind-test-store-writer"
        for round in 0..<20 {
            let path = directory.file("race-\(round).sqlite")
            let writers = try ["a", "b", "c"].map { try SpawnedProcess(writer, [path, $0, "3"], captureOutput: false) }
            for process in writers { XCTAssertEqual(process.wait(), 0, "round \(round): a writer failed") }
            let db = try StoreAccess.database(path: path)
            XCTAssertEqual(try db.scalar("SELECT count(*) FROM rows"), .integer(9), "round \(round): every writer's rows are in the one file")
        }
    }

    func testConcurrentProcessesNeverCorruptAndAKilledWriterLosesNothingCommitted() throws {
        let path = directory.file("shared.sqlite")
        let writer = FeatureHarness.buildDirectory + "/termind-test-store-writer"
        // Two steady writers and one that is killed mid-way.
        var processes: [(Process, Pipe)] = []
        for (name, count, slow) in [("a", 300, false), ("b", 300, false), ("victim", 100_000, true)] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: writer)
            process.arguments = [path, name, String(count)] + (slow ? ["--slow"] : [])
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            processes.append((process, pipe))
        }
        // Let the victim commit some rows, then SIGKILL it.
        let victim = processes[2]
        var acknowledged = -1
        var buffer = Data()
        while acknowledged < 50 {
            let chunk = victim.1.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            buffer += chunk
            let lines = String(decoding: buffer, as: UTF8.self).split(separator: "\n")
            acknowledged = lines.compactMap { Int($0) }.max() ?? -1
        }
        XCTAssertGreaterThanOrEqual(acknowledged, 50, "the victim must have committed rows before it is killed")
        kill(victim.0.processIdentifier, SIGKILL)
        victim.0.waitUntilExit()
        for (process, _) in processes.prefix(2) {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }
        let db = try StoreAccess.database(path: path)
        XCTAssertEqual(try db.scalar("PRAGMA integrity_check"), .text("ok"))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM rows WHERE writer = 'a'"), .integer(300))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM rows WHERE writer = 'b'"), .integer(300))
        guard case .integer(let kept) = try db.scalar("SELECT count(*) FROM rows WHERE writer = 'victim'") else { return XCTFail() }
        XCTAssertGreaterThanOrEqual(Int(kept), acknowledged + 1, "every row the victim reported committed is there")
        XCTAssertEqual(try db.scalar("SELECT max(sequence) + 1 = count(*) FROM rows WHERE writer = 'victim'"), .integer(1), "no gaps")
    }

    func testAHealthyDatabaseOnAReadOnlyMountIsReportedAsReadOnlyNotAsDamaged() throws {
        guard getuid() == 0 else { throw XCTSkip("a read-only bind mount needs root") }
        let source = directory.file("src"), mountPoint = directory.file("ro")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        do {
            let db = try StoreAccess.database(path: source + "/termind.sqlite")
            try db.migrate(notes)
            try db.execute("INSERT INTO notes (body) VALUES ('precious')")
        }  // closed: no -wal or -shm left beside it
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/mount", ["--bind", source, mountPoint]).status, 0)
        defer { _ = try? ProcessRunner.run("/usr/bin/umount", [mountPoint]) }
        let remount = try ProcessRunner.run("/usr/bin/mount", ["-o", "remount,ro,bind", mountPoint])
        guard remount.status == 0 else { throw XCTSkip("cannot remount read-only here: \(remount.stderr)") }
        XCTAssertThrowsError(try StoreAccess.database(path: mountPoint + "/termind.sqlite")) { error in
            let failure = error as? StoreError
            XCTAssertEqual(failure?.code, "store.read_only", "\(error)")
            XCTAssertTrue(failure?.message.contains("read-only mount") ?? false, "\(error)")
            XCTAssertTrue(failure?.message.contains("Nothing is wrong with its data") ?? false, "\(error)")
            XCTAssertFalse(failure?.message.contains("not a readable") ?? true, "\(error)")
        }
        // A new database cannot be made there either, and the error says why.
        XCTAssertThrowsError(try StoreAccess.database(path: mountPoint + "/new.sqlite")) { error in
            XCTAssertTrue("\(error)".contains("read-only mount"), "\(error)")
        }
        _ = try ProcessRunner.run("/usr/bin/umount", [mountPoint])
        let reopened = try StoreAccess.database(path: source + "/termind.sqlite")
        XCTAssertEqual(try reopened.query("SELECT body FROM notes").first?.string("body"), "precious")
    }

    func testADamagedFileNamesTheOptionThatChoosesIt() throws {
        let path = try directory.write("secrets.sqlite", String(repeating: "not sqlite ", count: 100))
        XCTAssertThrowsError(try StoreAccess.secrets(path: path, keySource: .keyFile(directory.file("k")))) { error in
            XCTAssertTrue("\(error)".contains("--secrets PATH"), "\(error)")
            XCTAssertFalse("\(error)".contains("--store"), "\(error)")
        }
        XCTAssertThrowsError(try StoreAccess.database(path: path)) { XCTAssertTrue("\($0)".contains("--store PATH"), "\($0)") }
    }

    func testReadsAndWritesRunOnTheStoresExecutorNeverTheCooperativePool() async throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try await db.migrate(notes)
        let writer = try await db.write { db -> String in
            try db.execute("INSERT INTO notes (body) VALUES ('queued')")
            return BlockingExecutor.currentExecutorName ?? "not an executor thread"
        }
        // The store's own executor: never behind key derivation or a name lookup.
        XCTAssertEqual(writer, "termind.store")
        let reader = try await db.read { _ in BlockingExecutor.currentExecutorName ?? "not an executor thread" }
        XCTAssertEqual(reader, "termind.store")
        let count = try await db.read { db in try db.scalar("SELECT count(*) FROM notes") }
        XCTAssertEqual(count, .integer(1))
    }

    func testPreparedStatementsAreReusedAndOnesPreparedWithAMigrationsRightsAreNot() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        for index in 0..<500 { try db.execute("INSERT INTO notes (body) VALUES (?)", ["note \(index)"]) }  // one statement, 500 runs
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes WHERE body LIKE ?", ["note %"]), .integer(500))
        // More distinct statements than the cache holds: still correct.
        for index in 0..<(Database.statementCacheLimit + 10) {
            XCTAssertEqual(try db.scalar("SELECT \(index)"), .integer(Int64(index)))
        }
        // A feature's migration may read the migrations table; the same statement afterwards may not.
        let jot = Schema(feature: "jot", migrations: [Migration(1, "create entries", "CREATE TABLE jot_entries (id INTEGER PRIMARY KEY, body TEXT);")])
        let feature = try StoreAccess.scoped(db, to: "jot")
        try feature.migrate(jot)
        XCTAssertThrowsError(try feature.query("SELECT version, name, checksum FROM termind_migrations WHERE feature = ? ORDER BY version", ["jot"])) {
            XCTAssertEqual(($0 as? StoreError)?.code, "store.denied", "\($0)")
        }
        XCTAssertThrowsError(try feature.scalar("SELECT count(*) FROM notes"), "another schema's table")
        XCTAssertEqual(try feature.scalar("SELECT count(*) FROM jot_entries"), .integer(0))
    }

    func testAFeaturesMigrationSQLGetsNoMoreRightsThanItsOtherSQL() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        let feature = try StoreAccess.scoped(db, to: "jot")
        for sql in ["CREATE TABLE jot_a (x); DELETE FROM termind_migrations;",
                    "CREATE TABLE jot_b (x); PRAGMA writable_schema = ON;",
                    "CREATE TABLE jot_c (x); INSERT INTO notes (body) VALUES ('planted');"] {
            XCTAssertThrowsError(try feature.migrate(Schema(feature: "jot", migrations: [Migration(1, "sneaky", sql)]))) { error in
                XCTAssertEqual((error as? StoreError)?.code, "store.migration_failed", "\(sql): \(error)")
            }
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM termind_migrations WHERE feature = 'notes'"), .integer(2), "the others' records are intact")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes"), .integer(0))
        XCTAssertThrowsError(try feature.schemaVersion(of: "notes"), "another feature's schema version is not its business")
        XCTAssertEqual(try feature.schemaVersion(of: "jot"), 0)
    }

    /// A feature's DDL works whole (SQLite's own statements rewrite its schema rows), yet
    /// no statement of the feature's reads the schema, not even folded into a CREATE.
    func testAFeatureChangesItsOwnSchemaButNeverReadsTheSchemaOfOthers() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        let feature = try StoreAccess.scoped(db, to: "jot")
        var migrations = [
            Migration(1, "tables", """
                CREATE TABLE jot_items (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT UNIQUE);
                CREATE INDEX jot_items_body ON jot_items (body);
                """),
            Migration(2, "rebuild", """
                CREATE TABLE jot_items_new (id INTEGER PRIMARY KEY, body TEXT, added TEXT DEFAULT 'now');
                INSERT INTO jot_items_new (id, body) SELECT id, body FROM jot_items;
                DROP TABLE jot_items;
                ALTER TABLE jot_items_new RENAME TO jot_items;
                ALTER TABLE jot_items ADD COLUMN done INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE jot_items RENAME COLUMN added TO created;
                """)
        ]
        try feature.migrate(Schema(feature: "jot", migrations: migrations))
        try feature.execute("INSERT INTO jot_items (body) VALUES ('x')")
        XCTAssertEqual(try feature.scalar("SELECT count(*) FROM jot_items WHERE done = 0 AND created = 'now'"), .integer(1))
        XCTAssertEqual(try feature.schemaVersion(of: "jot"), 2)

        for sql in ["SELECT name, sql FROM sqlite_schema",
                    "SELECT count(*) FROM jot_items WHERE body IN (SELECT name FROM sqlite_master)",
                    "CREATE TABLE jot_leak AS SELECT name, sql FROM sqlite_schema",
                    "CREATE TABLE jot_leak2 AS SELECT body FROM jot_items"] {
            XCTAssertThrowsError(try feature.execute(sql), sql) { error in
                XCTAssertEqual((error as? StoreError)?.code, "store.denied", "\(sql): \(error)")
            }
        }
        migrations.append(Migration(3, "leak", "CREATE TABLE jot_copy AS SELECT sql FROM sqlite_master"))
        XCTAssertThrowsError(try feature.migrate(Schema(feature: "jot", migrations: migrations)), "a migration's SELECT is the feature's SQL too") { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.migration_failed")
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'jot_leak%' OR name = 'jot_copy'"), .integer(0))
    }

    /// Holds `db`'s connection in a write transaction on a thread of its own for `seconds`
    /// (after inserting `body`); returns once the transaction has begun, and a wait for its end.
    private func holdWriter(_ db: Database, inserting body: String, for seconds: Double) throws -> () -> Void {
        let begun = DispatchSemaphore(value: 0), ended = DispatchSemaphore(value: 0)
        Thread {
            try? db.transaction {
                try db.execute("INSERT INTO notes (body) VALUES (?)", [body])
                begun.signal()
                Thread.sleep(forTimeInterval: seconds)
            }
            ended.signal()
        }.start()
        XCTAssertEqual(begun.wait(timeout: .now() + 10), .success)
        return { _ = ended.wait(timeout: .now() + 30) }
    }

    func testAReadDoesNotWaitForAnotherThreadsWriteAndSeesWhatWasCommitted() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        try db.execute("INSERT INTO notes (body) VALUES ('committed')")
        let finished = try holdWriter(db, inserting: "in flight", for: 2)
        let started = Date()
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes"), .integer(1), "the committed state, not the transaction's")
        XCTAssertEqual(try db.query("SELECT body FROM notes").map { try $0.text("body") }, ["committed"])
        XCTAssertLessThan(Date().timeIntervalSince(started), 1, "answered while the write transaction still runs")
        // A statement that writes waits its turn on the one connection, and is not lost.
        try db.execute("INSERT INTO notes (body) VALUES ('after')")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 1.5, "the write waited for the transaction")
        finished()
        XCTAssertEqual(Set(try db.query("SELECT body FROM notes").map { try $0.text("body") }), ["committed", "in flight", "after"])
    }

    func testTransactionControlAndTheConnectionsOwnStateStayOnTheWriterBesideABusyOne() throws {
        let path = directory.file("t.sqlite")
        do {
            let db = try StoreAccess.database(path: path)
            try db.migrate(notes)
            let finished = try holdWriter(db, inserting: "held", for: 1)
            // A reader would answer 0 for the writer's last row, and a BEGIN there would leave it
            // reading a frozen snapshot: these wait for the writer instead.
            XCTAssertEqual(try db.scalar("SELECT last_insert_rowid()"), .integer(1))
            finished()
            try db.execute("INSERT INTO notes (body) VALUES ('later')")
            let second = try holdWriter(db, inserting: "held again", for: 1)
            XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes"), .integer(2), "a reader sees the latest commit, not an old snapshot")
            second()
        }
        // Closed, readers and all: the WAL was checkpointed into the file and removed. (The
        // last reference may be the holding thread's, let go a moment after its transaction
        // ended: the close is waited for.)
        XCTAssertTrue(waitUntil { !FileManager.default.fileExists(atPath: path + "-wal") }, "no WAL left beside a closed database")
    }

    func testInsideItsOwnTransactionAThreadReadsItsOwnChanges() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        let seen = try db.transaction { () -> SQLValue in
            try db.execute("INSERT INTO notes (body) VALUES ('mine')")
            return try db.scalar("SELECT count(*) FROM notes")
        }
        XCTAssertEqual(seen, .integer(1))
    }

    func testAFeaturesReadsBesideABusyWriterKeepToItsOwnTables() throws {
        let db = try StoreAccess.database(path: directory.file("t.sqlite"))
        try db.migrate(notes)
        let feature = try StoreAccess.scoped(db, to: "jot")
        try feature.migrate(Schema(feature: "jot", migrations: [Migration(1, "create", "CREATE TABLE jot_entries (id INTEGER PRIMARY KEY, body TEXT);")]))
        try feature.execute("INSERT INTO jot_entries (body) VALUES ('one')")
        // The feature's own connection is busy on another thread.
        let begun = DispatchSemaphore(value: 0), ended = DispatchSemaphore(value: 0)
        Thread {
            try? feature.transaction {
                try feature.execute("INSERT INTO jot_entries (body) VALUES ('two')")
                begun.signal()
                Thread.sleep(forTimeInterval: 2)
            }
            ended.signal()
        }.start()
        XCTAssertEqual(begun.wait(timeout: .now() + 10), .success)
        let started = Date()
        XCTAssertEqual(try feature.scalar("SELECT count(*) FROM jot_entries"), .integer(1))
        XCTAssertThrowsError(try feature.scalar("SELECT count(*) FROM notes")) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.denied", "\(error)")
        }
        XCTAssertThrowsError(try feature.scalar("SELECT count(*) FROM sqlite_schema")) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.denied", "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 1, "the reads and refusals came from a reader, without waiting")
        _ = ended.wait(timeout: .now() + 30)
        XCTAssertEqual(try feature.scalar("SELECT count(*) FROM jot_entries"), .integer(2))
    }

    func testAMigrationChangedAfterItsReleaseBringsUpTheStoresItReachedAndStillRefusesOtherText() throws {
        let path = directory.file("t.sqlite")
        let released = Schema(feature: "notes", migrations: [
            Migration(1, "create notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"),
        ])
        do {
            let db = try StoreAccess.database(path: path)
            try db.migrate(released)
            try db.execute("INSERT INTO notes (body) VALUES ('kept')")
        }
        // The same migration as it is now: a statement added after its release.
        let current = Schema(feature: "notes", migrations: [
            Migration(1, "create notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);\nALTER TABLE notes ADD COLUMN tags TEXT;",
                      releasedAs: ["CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"]),
            Migration(2, "index", "CREATE INDEX notes_tags ON notes (tags);"),
        ])
        let db = try StoreAccess.database(path: path)
        let report = try db.migrate(current)
        XCTAssertEqual(report.to, 2)
        XCTAssertEqual(try db.query("SELECT body, tags FROM notes").map { try $0.text("body") }, ["kept"], "the rows stay")
        try db.execute("UPDATE notes SET tags = 'a'")
        XCTAssertEqual(try db.migrate(current).from, 2, "brought up once; the record now names the current text")
        // Text that was never released is still refused, and nothing changes.
        let edited = Schema(feature: "notes", migrations: [
            Migration(1, "create notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY);\nALTER TABLE notes ADD COLUMN x TEXT;",
                      releasedAs: ["CREATE TABLE notes (id INTEGER PRIMARY KEY);"]),
            Migration(2, "index", "CREATE INDEX notes_tags ON notes (tags);"),
        ])
        XCTAssertThrowsError(try db.migrate(edited)) { error in
            XCTAssertEqual((error as? StoreError)?.code, "store.migration_changed", "\(error)")
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes"), .integer(1))
    }

    /// The stamp a reader keeps its reads by moves with every commit, whoever makes it (this
    /// connection, another one, the sqlite3 tool in another process), and only then: reads,
    /// other files of the folder and a checkpoint-free idle leave it; lost events count as a
    /// change; a removed folder leaves a watch that answers nil (nothing may be kept).
    func testTheChangeStampMovesWithEveryCommitFromAnyProcessAndOnlyThen() throws {
        let path = directory.file("watched/termind.sqlite")
        var db: Database! = try StoreAccess.database(path: path)
        try db.execute("CREATE TABLE t (n INTEGER)")
        let first = try XCTUnwrap(db.changeStamp(), "inotify is available here")
        XCTAssertEqual(db.changeStamp(), first, "nothing changed")

        // Reads, here and on another connection, and other files of the folder.
        _ = try db.query("SELECT count(*) FROM t")
        var other: Database! = try StoreAccess.database(path: path)
        _ = try other.query("SELECT * FROM t")
        try Data("key".utf8).write(to: URL(fileURLWithPath: directory.file("watched/secrets.key")))
        XCTAssertEqual(db.changeStamp(), first, "a read or another file is not a change")

        // Commits: this connection's, another's, another process's.
        try db.execute("INSERT INTO t VALUES (1)")
        let second = try XCTUnwrap(db.changeStamp())
        XCTAssertNotEqual(second, first)
        try other.execute("INSERT INTO t VALUES (2)")
        let third = try XCTUnwrap(db.changeStamp())
        XCTAssertNotEqual(third, second)
        for n in 3...12 {
            let before = try XCTUnwrap(db.changeStamp())
            let tool = try ProcessRunner.run("/usr/bin/sqlite3", [path, "INSERT INTO t VALUES (\(n))"])
            XCTAssertEqual(tool.status, 0, tool.stderr)
            XCTAssertNotEqual(db.changeStamp(), before, "the sqlite3 tool's commit \(n) returned, and the stamp had not moved")
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(12))

        // More events than the kernel queues (16,384 by default), all for other files: some
        // were lost, so it counts as a change.
        let settled = try XCTUnwrap(db.changeStamp())
        let names = [directory.file("watched/a"), directory.file("watched/b")]
        for round in 0..<20_000 {
            let fd = open(names[round % 2], O_WRONLY | O_CREAT, 0o600)
            _ = write(fd, "x", 1)
            close(fd)
        }
        XCTAssertNotEqual(db.changeStamp(), settled, "an overflowed queue counts as a change")

        // Another database in the same folder has a stamp of its own.
        var neighbour: Database! = try StoreAccess.database(path: directory.file("watched/other.sqlite"))
        try neighbour.execute("CREATE TABLE u (n INTEGER)")
        let mine = try XCTUnwrap(db.changeStamp()), theirs = try XCTUnwrap(neighbour.changeStamp())
        try neighbour.execute("INSERT INTO u VALUES (1)")
        XCTAssertEqual(db.changeStamp(), mine, "a commit to another database of the folder")
        XCTAssertNotEqual(neighbour.changeStamp(), theirs)
        try db.execute("INSERT INTO t VALUES (13)")
        XCTAssertNotEqual(db.changeStamp(), mine)

        // termind's writers touch the database file once a commit is visible (SQLite's WAL
        // hook): that counts; a touch of another file of the folder does not.
        let touched = try XCTUnwrap(db.changeStamp())
        _ = utimensat(AT_FDCWD, directory.file("watched/a"), nil, 0)
        XCTAssertEqual(db.changeStamp(), touched)
        StoreChangeWatch.committed(path)
        XCTAssertNotEqual(db.changeStamp(), touched)

        // The folder goes (once nothing holds its files open: until then the kernel keeps it,
        // and the connections read the files they have open, as what they kept says): nothing
        // is seen there, so nothing may be kept. A new database made at the same path gets a
        // stamp no earlier one had, so nothing kept before matches it.
        var given: Set<UInt64> = [first, second, third, settled, mine]
        for _ in 0..<3 { given.insert(try XCTUnwrap(db.changeStamp())) }
        db = nil
        other = nil
        neighbour = nil
        try FileManager.default.removeItem(atPath: directory.file("watched"))
        XCTAssertNil(StoreChangeWatch.stamp(of: path))
        XCTAssertNil(StoreChangeWatch.stamp(of: path), "and stays so while there is no folder")
        let again = try StoreAccess.database(path: path)
        let fresh = try XCTUnwrap(again.changeStamp(), "the new folder is watched")
        XCTAssertFalse(given.contains(fresh), "\(fresh) was given before: \(given.sorted())")
        try again.execute("CREATE TABLE v (n INTEGER)")
        XCTAssertNotEqual(again.changeStamp(), fresh)
    }

    /// The WAL hook that signals commits replaces SQLite's own, which checkpointed the log
    /// every 1,000 frames: it still does, so the log does not grow with every commit.
    func testTheLogIsStillCheckpointedAsItGrows() throws {
        let path = directory.file("log/termind.sqlite")
        let db = try StoreAccess.database(path: path)
        try db.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
        for n in 0..<3_000 { try db.execute("INSERT INTO t VALUES (?, ?)", [n, String(repeating: "x", count: 100)]) }
        var info = stat()
        XCTAssertEqual(stat(path + "-wal", &info), 0)
        XCTAssertLessThan(info.st_size, 8 << 20, "3,000 commits of a page each: without checkpoints the log would hold about 12 MiB")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(3_000))
    }
}
