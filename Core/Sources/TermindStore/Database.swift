import CSQLite
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The process database: one SQLite file in WAL mode, shared by every feature, each
/// owning its tables and ordered migrations (`Database+Migrations.swift`).
///
/// Ownership: the `sqlite3` handle is private to this object, used only under its lock
/// (one statement at a time on it) and closed in `deinit`. Reads that find it busy go to
/// up to two read-only connections of its own (`ReaderPool`), so a long write never holds
/// up a read of what is already committed. Several processes may
/// use the same file: SQLite's locking serialises writers (a busy writer waits up to
/// `busyTimeout`). `synchronous=FULL`: a committed transaction survives a killed process
/// and a power loss. A file that cannot be opened or is not a termind database is
/// reported and left untouched — never deleted or recreated.
///
/// `@unchecked Sendable`: `handle` (an OpaquePointer Swift cannot check) and `statements` are
/// used only under `lock` once init is done (`query`, `prepared`, `executeScript`, `transaction`,
/// `changes`); the connection is also opened with SQLITE_OPEN_FULLMUTEX.
public final class Database: @unchecked Sendable {
    public let path: String
    private let handle: OpaquePointer
    private let lock = RecursiveLock()
    /// The option that chooses this file (`--store`, `--secrets`), for remedies.
    let option: String
    /// A feature's connection: what it may touch (nil for the kernel's own).
    let scope: TableScope?
    /// A read-only connection of a reader pool (see `readers`).
    let isReader: Bool
    /// Read-only connections to the same file for reads that find this connection busy
    /// (nil on a reader itself).
    private let readers: ReaderPool?
    /// The path as the WAL hook gets it (freed once the connection is closed).
    private var walHookPath: UnsafeMutablePointer<CChar>?

    private static let walHook: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = { context, db, name, frames in
        // SQLite's default: a passive checkpoint once the log holds 1,000 frames.
        if frames >= 1000 { sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil) }
        if let context { StoreChangeWatch.committed(context.assumingMemoryBound(to: CChar.self)) }
        return SQLITE_OK
    }
    public static let busyTimeoutMilliseconds: Int32 = 5_000
    /// The SQLite library version in use, for `termind version`.
    public static var sqliteVersion: String { String(cString: sqlite3_libversion()) }

    /// Opens (creating if absent, with mode 0600 in a 0700 folder) the database at `path`.
    /// `option` is the command-line option that chooses this file, named in remedies.
    /// A database termind cannot write (a read-only mount or folder) is reported as such.
    /// Package: only the kernel opens a database (`StoreAccess` in TermindKernel); a feature
    /// gets its own view as its `kernel.store` port, never a way to open another.
    package convenience init(path: String, option: String = "--store") throws {
        try self.init(path: path, option: option, scope: nil)
    }

    init(path: String, option: String, scope: TableScope?, reader: Bool = false) throws {
        self.path = path
        self.option = option
        self.scope = scope
        isReader = reader
        readers = reader ? nil : ReaderPool()
        let directory = PathText.deletingLastComponent(path)
        if !directory.isEmpty && !FileManager.default.fileExists(atPath: directory) {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw StoreError.openFailed(path, "cannot create its folder \(directory)")
            }
        }
        if let reason = Self.readOnlyReason(directory: directory) {
            throw access(path, F_OK) == 0 ? StoreError.readOnly(path, reason, option: option)
                : StoreError.openFailed(path, "\(reason), so the database cannot be created there (choose another place with \(option) PATH)")
        }
        try Self.checkExisting(path, option: option)
        var db: OpaquePointer?
        let flags = (reader ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW
        let previous = umask(0o077)
        let status = sqlite3_open_v2(path, &db, flags, nil)
        umask(previous)
        guard status == SQLITE_OK, let db else {
            let reason = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            if let db { sqlite3_close_v2(db) }
            throw StoreError.openFailed(path, reason)
        }
        if !reader && sqlite3_db_readonly(db, "main") == 1 {
            sqlite3_close_v2(db)
            throw StoreError.readOnly(path, Self.readOnlyReason(directory: directory) ?? "the file is read-only", option: option)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, Self.busyTimeoutMilliseconds)
        if !reader {
            // After each commit is visible: the change stamp's signal (`StoreChangeWatch`),
            // and the checkpoint SQLite's own hook did (which this one replaces).
            walHookPath = strdup(path)
            sqlite3_wal_hook(db, Self.walHook, walHookPath)
        }
        // Never unlink on failure: another process may have created this file a moment ago
        // and be writing to it (seen: a losing opener deleted a live database).
        do {
            // Switching a new file to WAL needs a moment alone with it; several processes
            // opening it together wait their turn, bounded by the busy timeout.
            let deadline = Date().addingTimeInterval(Double(Self.busyTimeoutMilliseconds) / 1000)
            while !reader {
                do {
                    // Reading the schema validates the header: a file that is not SQLite fails here.
                    _ = try scalar("SELECT count(*) FROM sqlite_schema")
                    let mode = try scalar("PRAGMA journal_mode = WAL")
                    guard case .text(let m) = mode, m.lowercased() == "wal" else {
                        throw StoreError.openFailed(path, "it cannot use write-ahead logging (journal mode \(mode))")
                    }
                    break
                } catch let error as StoreError where error.is(.storeBusy) && Date() < deadline {
                    usleep(10_000)
                }
            }
            if !reader {
                try execute("PRAGMA synchronous = FULL")
                try execute("PRAGMA foreign_keys = ON")
            }
            if let scope {
                scope.install(on: db)
                // Statements prepared before the authorizer existed must not be reused after it.
                for statement in statements.values { sqlite3_finalize(statement) }
                statements.removeAll()
                termind_sqlite_defensive(db)
            }
        } catch let error as StoreError {
            sqlite3_close_v2(db)
            throw error.is(.storeSQL) ? StoreError.notADatabase(path, error.message, option: option) : error
        }
    }

    /// What is at `path` already must be a database file, or nothing (a new one is made):
    /// a symbolic link, a folder or another kind of file is refused with what it is; so is an
    /// empty file, which SQLite would silently take for a new database — it may be one whose
    /// data was lost (a truncated copy). A file another opener created a moment ago is empty
    /// only until that opener writes its header: it is given that moment.
    static func checkExisting(_ path: String, option: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            break
        case S_IFLNK:
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)).map { " (to \($0))" } ?? ""
            throw StoreError.openFailed(path, "it is a symbolic link\(target), and termind opens only a regular file there, so that a link cannot move "
                + "the database elsewhere; give \(option) the file's own path")
        case S_IFDIR:
            throw StoreError.openFailed(path, "it is a folder; give \(option) the path of a file in it (e.g. \(PathText.appending(path, "termind.sqlite")))")
        default:
            throw StoreError.openFailed(path, "it is not a regular file (a FIFO, socket or device); give \(option) the path of a file")
        }
        guard info.st_size == 0 else { return }
        let deadline = Date().addingTimeInterval(2)
        while Date() < deadline {
            usleep(20_000)
            if stat(path, &info) == 0, info.st_size > 0 { return }
        }
        throw StoreError(.storeCorrupt, "\(path) is empty (0 bytes): a database termind made holds at least its header, so this one may have lost its data "
            + "(a truncated copy, a full disk). It was left untouched; restore it from a backup, or remove it if it is new and termind creates a database there.")
    }

    /// Why termind cannot write the database, or nil: it writes the file and, beside it, the
    /// -wal and -shm files of write-ahead logging, so the folder must be writable too.
    static func readOnlyReason(directory: String) -> String? {
        let folder = directory.isEmpty ? "." : directory
        var info = statvfs()
        if statvfs(folder, &info) == 0, info.f_flag & UInt(ST_RDONLY) != 0 { return "it is on a read-only mount" }
        if access(folder, W_OK) != 0 && errno != ENOENT { return "its folder \(folder) is not writable" }
        return nil
    }

    deinit {
        // Readers first: while one is open the writer's close cannot checkpoint the WAL into
        // the file and remove it (the last reader, read-only, cannot either).
        readers?.closeAll()
        for statement in statements.values { sqlite3_finalize(statement) }
        if walHookPath != nil { sqlite3_wal_hook(handle, nil, nil) }
        sqlite3_close_v2(handle)
        free(walHookPath)
    }

    // MARK: - Statements

    /// Runs one statement (or several without bindings), discarding rows.
    public func execute(_ sql: String, _ bindings: [any SQLBindable] = []) throws {
        _ = try query(sql, bindings)
    }

    /// Runs one statement and returns its rows. Statements are prepared once and kept (up
    /// to `statementCacheLimit`); one prepared while a feature's migration ran with more
    /// rights is never kept, so it cannot be reused without them.
    ///
    /// A read that finds the connection busy on another thread (a write transaction, a
    /// long statement) does not wait for it: it runs on one of two read-only connections to
    /// the same file (`ReaderPool`, opened when first needed), which in WAL mode read the
    /// last committed state while the writer works. A statement that writes, and every
    /// statement of the thread that holds the connection (inside its own transaction, which
    /// must see its own changes), runs on this connection, one at a time.
    public func query(_ sql: String, _ bindings: [any SQLBindable] = []) throws -> [Row] {
        BlockingCheck.blocking("an SQLite statement")
        if !lock.try() {
            if let readers, let rows = try readers.query(sql, bindings, opening: openReader) { return rows }
            lock.lock()
        }
        defer { lock.unlock() }
        return try run(sql, bindings, readOnlyOnly: false)!
    }

    /// A read-only connection like this one (same file, same scope's limits).
    private func openReader() throws -> Database {
        try Database(path: path, option: option, scope: scope.map { TableScope(owner: $0.owner) }, reader: true)
    }

    /// Runs `sql` (lock held); with `readOnlyOnly`, nil instead of running a statement that
    /// would write or that belongs on the writer (`Self.writerOnly`).
    func run(_ sql: String, _ bindings: [any SQLBindable], readOnlyOnly: Bool) throws -> [Row]? {
        if readOnlyOnly {
            // The verdict is the text's alone: worked out once per statement text.
            let writer: Bool
            if let known = writerOnlyVerdicts[sql] {
                writer = known
            } else {
                writer = Self.writerOnly(sql)
                if writerOnlyVerdicts.count >= Self.statementCacheLimit { writerOnlyVerdicts.removeAll() }
                writerOnlyVerdicts[sql] = writer
            }
            if writer { return nil }
        }
        let statement = try prepared(sql)
        if readOnlyOnly && sqlite3_stmt_readonly(statement) == 0 {
            if statements[sql] != statement { sqlite3_finalize(statement) }
            return nil
        }
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
            if statements[sql] != statement { sqlite3_finalize(statement) }
        }
        var status: Int32
        for (index, value) in bindings.enumerated() {
            status = bind(value.sqlValue, to: statement, at: Int32(index + 1))
            guard status == SQLITE_OK else { throw failure(status, sql) }
        }
        var rows: [Row] = []
        let columnCount = sqlite3_column_count(statement)
        let columns = (0..<columnCount).map { String(cString: sqlite3_column_name(statement, $0)) }
        while true {
            status = sqlite3_step(statement)
            if status == SQLITE_DONE { break }
            guard status == SQLITE_ROW else { throw failure(status, sql) }
            rows.append(Row(columns: columns, values: (0..<columnCount).map { column(statement, $0) }))
        }
        return rows
    }

    /// Runs `sql` on this reader if it only reads (nil otherwise), under the reader's lock.
    /// The reader is left with no transaction open, whatever happened.
    func readOnlyQuery(_ sql: String, _ bindings: [any SQLBindable]) throws -> [Row]? {
        lock.lock()
        defer {
            if sqlite3_get_autocommit(handle) == 0 { sqlite3_exec(handle, "ROLLBACK", nil, nil, nil) }
            lock.unlock()
        }
        return try run(sql, bindings, readOnlyOnly: true)
    }

    /// Statements SQLite calls read-only that still belong on the writer: transaction control
    /// (a reader left inside a transaction would read a frozen snapshot and hold back every
    /// checkpoint), ATTACH and DETACH, and what reads the connection's own state rather than
    /// the file's (`last_insert_rowid()`, `changes()`, `total_changes()`).
    static func writerOnly(_ sql: String) -> Bool {
        let text = sql.lowercased()
        let first = text.split(whereSeparator: { !$0.isLetter }).first.map(String.init) ?? ""
        if ["begin", "commit", "end", "rollback", "savepoint", "release", "attach", "detach"].contains(first) { return true }
        return text.contains("last_insert_rowid") || text.contains("changes(") || text.contains("changes (")
    }

    /// How many prepared statements a connection keeps.
    public static let statementCacheLimit = 128
    private var statements: [String: OpaquePointer] = [:]
    private var writerOnlyVerdicts: [String: Bool] = [:]

    /// The statement for `sql`, from the cache or prepared now (lock held).
    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let cached = statements[sql] { return cached }
        var statement: OpaquePointer?
        var trailing = ""
        let keep = scope?.privileged != true
        scope?.beginStatement()
        defer { scope?.beginStatement() }
        let status = sql.withCString { text -> Int32 in
            var tail: UnsafePointer<CChar>?
            let status = sqlite3_prepare_v3(handle, text, -1, keep ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0, &statement, &tail)
            if let tail { trailing = String(cString: tail) }
            return status
        }
        guard status == SQLITE_OK, let statement else { throw failure(status, sql) }
        guard trailing.trimmedWhitespaceAndNewlines.isEmpty else {
            sqlite3_finalize(statement)
            throw StoreError.sql(path, "query runs one statement; use executeScript for several")
        }
        if keep {
            if statements.count >= Self.statementCacheLimit {
                for cached in statements.values { sqlite3_finalize(cached) }
                statements.removeAll()
            }
            statements[sql] = statement
        }
        return statement
    }

    /// Runs `body` (this file's own statements) with the scope's right to the migrations
    /// table; statements prepared meanwhile are not kept.
    func privileged<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        guard let scope, !scope.privileged else { return try body() }
        scope.privileged = true
        defer { scope.privileged = false }
        return try body()
    }

    /// Runs `body` with this database on the store's executor (never on the cooperative
    /// pool, never behind a key derivation or a name lookup), for reads.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await BlockingExecutor.store.run { try body(self) }
    }

    /// Runs `body` in one transaction on the store's executor, for writes.
    public func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await BlockingExecutor.store.run { try self.transaction { try body(self) } }
    }

    /// The first column of the first row.
    public func scalar(_ sql: String, _ bindings: [any SQLBindable] = []) throws -> SQLValue {
        try query(sql, bindings).first?.values.first ?? .null
    }

    /// Runs `body` in one immediate transaction: commits if it returns, rolls back if it
    /// throws. Nested calls join the outer transaction.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if sqlite3_get_autocommit(handle) == 0 { return try body() }
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Rows changed by the last statement.
    public var changes: Int { lock.withLock { Int(sqlite3_changes(handle)) } }

    /// A stamp of this database file that moves whenever any process may have changed it
    /// (`StoreChangeWatch`), read without a trip to the store's executor: what was read after
    /// taking a stamp may be used again while the stamp is the same. Nil: changes cannot be
    /// seen here, so nothing read may be kept.
    public func changeStamp() -> UInt64? { StoreChangeWatch.stamp(of: path) }

    // MARK: - Internals

    /// Runs several statements without bindings (migrations), one at a time: each is
    /// prepared, run to the end and finalized before the next, and a scoped connection
    /// sees each as its own statement (`TableScope.beginStatement`).
    public func executeScript(_ sql: String) throws {
        lock.lock()
        defer { lock.unlock() }
        try sql.withCString { start in
            var next: UnsafePointer<CChar>? = start
            while let text = next, text.pointee != 0 {
                var statement: OpaquePointer?
                var tail: UnsafePointer<CChar>?
                scope?.beginStatement()
                defer { scope?.beginStatement() }
                let status = sqlite3_prepare_v2(handle, text, -1, &statement, &tail)
                guard status == SQLITE_OK else { throw failure(status, sql) }
                next = tail
                guard let statement else { continue }  // only whitespace or a comment
                defer { sqlite3_finalize(statement) }
                var step = sqlite3_step(statement)
                while step == SQLITE_ROW { step = sqlite3_step(statement) }
                guard step == SQLITE_DONE else { throw failure(step, sql) }
            }
        }
    }

    private func bind(_ value: SQLValue, to statement: OpaquePointer, at index: Int32) -> Int32 {
        switch value {
        case .null: return sqlite3_bind_null(statement, index)
        case .integer(let i): return sqlite3_bind_int64(statement, index, i)
        case .real(let d): return sqlite3_bind_double(statement, index, d)
        case .text(let s): return sqlite3_bind_text(statement, index, s, -1, termind_sqlite_transient())
        case .blob(let d):
            return d.withUnsafeBytes { raw in
                sqlite3_bind_blob64(statement, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), UInt64(raw.count), termind_sqlite_transient())
            }
        }
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> SQLValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(statement, index)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let pointer = sqlite3_column_blob(statement, index) else { return .blob(Data()) }
            return .blob(Data(bytes: pointer, count: count))
        default: return .null
        }
    }

    /// A feature's statement reached beyond what its connection may touch.
    private var denied: StoreError {
        StoreError(.storeDenied, "Feature '\(scope?.owner ?? "?")' may use only its own tables (\(scope?.prefix ?? "")…) and SQLite's ordinary functions in \(path): "
            + "the statement reaches beyond them, so it was not run.")
    }

    /// The table named by SQLite's "no such table: main.x" (without its schema), or nil.
    static func missingTable(_ message: String) -> String? {
        guard let range = message.firstRange(of: "no such table: ") else { return nil }
        let name = message[range.upperBound...].split(separator: " ").first.map(String.init) ?? ""
        return name.split(separator: ".").last.map(String.init)
    }

    /// SQLite's message for the failure; never the statement's bound values.
    private func failure(_ status: Int32, _ sql: String) -> StoreError {
        let message = String(cString: sqlite3_errmsg(handle))
        switch status & 0xFF {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return StoreError(.storeBusy, "The database \(path) is busy (another termind process holds a write lock); try again.")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return StoreError.notADatabase(path, message, option: option)
        case SQLITE_AUTH:
            return denied
        case SQLITE_ERROR where scope != nil && message.hasPrefix("not authorized"):
            return denied  // a function the connection may not call
        case SQLITE_ERROR where scope != nil && Self.missingTable(message).map({ !$0.lowercased().hasPrefix(scope!.prefix) }) == true:
            // A table that is not the feature's gets the same answer whether or not it
            // exists: the error never tells a feature which other tables there are.
            return denied
        case SQLITE_READONLY:
            return StoreError.readOnly(path, "SQLite could not write it (\(message))", option: option)
        case SQLITE_CONSTRAINT:
            return StoreError(.storeConstraint, message)
        default:
            return StoreError.sql(path, message)
        }
    }
}

/// Errors of the store: what failed, on which file, what to do. Never statement values.
public struct StoreError: TermindErrorConvertible, Sendable, Equatable, CustomStringConvertible {
    public let code: String
    public let message: String
    public var description: String { message }

    public var termindError: TermindError { TermindError(code: code, message: message) }

    init(_ code: ErrorCode, _ message: String) {
        self.code = code.rawValue
        self.message = message
    }

    /// Whether this error has `code`.
    public func `is`(_ code: ErrorCode) -> Bool { self.code == code.rawValue }

    static func openFailed(_ path: String, _ reason: String) -> StoreError {
        StoreError(.storeOpenFailed, "Cannot open the database \(path): \(reason). It was left untouched.")
    }
    static func notADatabase(_ path: String, _ reason: String, option: String) -> StoreError {
        StoreError(.storeCorrupt, "\(path) is not a readable termind database (\(reason)). It was left untouched; restore it from a backup, or move it aside and start over (termind creates a new one there, or elsewhere with \(option) PATH).")
    }
    static func readOnly(_ path: String, _ reason: String, option: String) -> StoreError {
        StoreError(.storeReadOnly, "The database \(path) cannot be written: \(reason). Nothing is wrong with its data, and it was left untouched. "
            + "termind writes the file and its -wal and -shm files beside it: make the folder writable, or copy the database to a writable folder and use \(option) NEWPATH.")
    }
    static func sql(_ path: String, _ reason: String) -> StoreError {
        StoreError(.storeSQL, "A database operation on \(path) failed: \(reason).")
    }
}

/// A writer's read-only connections: at most `limit`, opened when a read first finds the
/// writer busy and kept for the next, each serving one read at a time. When all are busy,
/// or one cannot be opened, the read waits for the writer as before.
final class ReaderPool: Sendable {
    static let limit = 2
    private let state = Mutex<(idle: [Database], opened: Int)>(([], 0))

    /// Lets go of the readers (their connections close as they go): the writer closes next.
    func closeAll() {
        state.withLock { $0.idle.removeAll() }
    }

    /// The rows of `sql` read on a reader; nil when it writes, failed there, or no reader is free.
    func query(_ sql: String, _ bindings: [any SQLBindable], opening: () throws -> Database) throws -> [Row]? {
        let taken: Database?? = state.withLock { state in
            if let reader = state.idle.popLast() { return .some(reader) }
            guard state.opened < Self.limit else { return .none }
            state.opened += 1
            return .some(nil)  // open one, outside the lock
        }
        guard case .some(let idle) = taken else { return nil }
        let reader: Database
        if let idle {
            reader = idle
        } else {
            guard let opened = try? opening() else {
                state.withLock { $0.opened -= 1 }
                return nil
            }
            reader = opened
        }
        defer { state.withLock { $0.idle.append(reader) } }
        do {
            return try reader.readOnlyQuery(sql, bindings)
        } catch let error as StoreError where error.is(.storeDenied) {
            throw error  // the same scope says the same on the writer
        } catch {
            // A read is safe to run again: what the reader could not do (a table or column a
            // migration is adding right now) goes to the writer, whose answer counts.
            return nil
        }
    }
}
