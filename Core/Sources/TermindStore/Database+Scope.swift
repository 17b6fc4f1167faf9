import CSQLite
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// What one feature's connection may touch: its own tables and indexes (named
/// `<id>_…`, with `-` in the id written `_`; no views or triggers), SQLite's ordinary
/// functions, and the migrations table only for the bookkeeping statements `migrate` runs
/// itself. A table that is not its own is refused the same way whether or not it exists. The connection is also in SQLite's
/// defensive mode (no writable_schema, no schema-corrupting pragmas). Enforced by an SQLite authorizer when each statement is prepared, so no
/// SQL a feature writes can read or change another feature's data, attach another
/// database, or read the schema of others.
final class TableScope: Sendable {
    let owner: String
    let prefix: String
    /// `privileged` and `window`. Only its one connection's statements touch them, with that
    /// connection's lock held (a reader connection has a scope of its own), so this Mutex is
    /// never contended; it makes that a checked fact instead of a promise.
    private let marks = Mutex(Marks())
    private struct Marks {
        var privileged = false
        var window = Window.none
    }

    /// Set while `migrate` runs its own bookkeeping statements (never the feature's
    /// migration SQL).
    var privileged: Bool {
        get { marks.withLock { $0.privileged } }
        set { marks.withLock { $0.privileged = newValue } }
    }

    /// What the statement being prepared has shown itself to be, so SQLite's own nested
    /// statements for a feature's DDL (reading and rewriting its schema rows) may read
    /// sqlite_master while the feature's SQL may not. Reset before each statement is
    /// prepared (`beginStatement`).
    enum Window { case none, create, createAfterSelect, alter, drop }
    private(set) var window: Window {
        get { marks.withLock { $0.window } }
        set { marks.withLock { $0.window = newValue } }
    }

    func beginStatement() { window = .none }

    /// Inside a feature's own CREATE, ALTER or DROP; a CREATE that selects (CREATE TABLE …
    /// AS SELECT) loses the right, since its SELECT is the feature's SQL. ALTER and DROP
    /// carry no SQL of the feature's but names (subqueries are not allowed in column
    /// defaults, CHECK or generated columns).
    private var schemaReadable: Bool { window == .create || window == .alter || window == .drop }

    private func entered(_ window: Window, if allowed: Bool) -> Bool {
        if allowed && self.window == .none { self.window = window }
        return allowed
    }

    init(owner: String) {
        self.owner = owner
        prefix = owner.replacingUTF8("-", with: "_").lowercased() + "_"
    }

    private func own(_ name: String?) -> Bool { name.map { $0.lowercased().hasPrefix(prefix) } ?? false }

    /// SQLite's action codes (sqlite3.h, "Authorizer Action Codes") and what each may do.
    func allows(_ action: Int32, _ arg1: String?, _ arg2: String?) -> Bool {
        switch action {
        case SQLITE_SELECT:
            if window == .create { window = .createAfterSelect }
            return true
        case SQLITE_TRANSACTION, SQLITE_SAVEPOINT, SQLITE_RECURSIVE:
            return true
        case SQLITE_FUNCTION:
            // SQLite's ordinary functions; not fts3_tokenizer (it hands out a pointer),
            // load_extension or anything else. SQLite's own functions for a feature's ALTER
            // (rewriting its schema rows) run inside that ALTER only.
            guard let name = arg2?.lowercased() else { return false }
            return Self.functions.contains(name) || (window == .alter && name.hasPrefix("sqlite_") && name != "sqlite_compileoption_get")
        case SQLITE_READ, SQLITE_UPDATE, SQLITE_INSERT, SQLITE_DELETE:
            if own(arg1) { return true }
            // sqlite_sequence holds every feature's AUTOINCREMENT counters: only SQLite's own
            // statements for a feature's DDL (dropping its table) touch it.
            if arg1 == "sqlite_sequence" { return schemaReadable }
            // DDL on its own tables writes their schema rows (SQLite reports it as a change to
            // sqlite_master; writing that table directly is impossible in defensive mode).
            // Reading the schema would show other features' tables.
            let schema = arg1 == "sqlite_master" || arg1 == "sqlite_schema"
            if schema && (action != SQLITE_READ || schemaReadable) { return true }
            // ALTER … RENAME also rewrites the temporary schema (where features cannot
            // create anything).
            if (arg1 == "sqlite_temp_master" || arg1 == "sqlite_temp_schema") && schemaReadable { return true }
            return privileged && (arg1 == "termind_migrations" || schema)
        case SQLITE_CREATE_TABLE:
            // sqlite_sequence is created by the first AUTOINCREMENT table.
            if arg1 == "sqlite_sequence" { return window == .create }
            return entered(.create, if: own(arg1) || (privileged && arg1 == "termind_migrations"))
        case SQLITE_DROP_TABLE:
            return entered(.drop, if: own(arg1))
        case SQLITE_CREATE_INDEX, SQLITE_DROP_INDEX:
            // The index and its table are both the feature's (or SQLite's own index of a
            // UNIQUE or PRIMARY KEY constraint on such a table).
            let automatic = arg1?.hasPrefix("sqlite_autoindex_") == true
            let allowed = (own(arg1) || automatic) && (own(arg2) || (privileged && automatic && arg2 == "termind_migrations"))
            return entered(action == SQLITE_CREATE_INDEX ? .create : .drop, if: allowed)
        case SQLITE_CREATE_TRIGGER, SQLITE_CREATE_VIEW:
            // A view's SELECT and a trigger's body are not checked when they are created: one
            // could name another feature's tables and break that feature's table-rebuild
            // migrations. A feature keeps tables and indexes only.
            return false
        case SQLITE_DROP_TRIGGER, SQLITE_DROP_VIEW:
            return entered(.drop, if: own(arg1))
        case SQLITE_ALTER_TABLE:
            return entered(.alter, if: own(arg2))
        case SQLITE_ANALYZE, SQLITE_REINDEX:
            return arg1 == nil || own(arg1)
        case SQLITE_PRAGMA:
            // Reading the shape of its own tables, nothing else.
            let reading: Set<String> = ["table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"]
            return arg1.map { reading.contains($0.lowercased()) } == true && own(arg2)
        default:
            return false  // ATTACH, DETACH, virtual tables, temporary objects, anything new
        }
    }

    /// The SQL functions a feature's statements may call: SQLite's core scalar, aggregate,
    /// window, date and time, JSON and math functions.
    static let functions: Set<String> = [
        "abs", "changes", "char", "coalesce", "concat", "concat_ws", "format", "glob", "hex", "ifnull", "iif", "instr", "last_insert_rowid",
        "length", "like", "likelihood", "likely", "lower", "ltrim", "max", "min", "nullif", "octet_length", "printf", "quote", "random",
        "randomblob", "replace", "round", "rtrim", "sign", "substr", "substring", "total_changes", "trim", "typeof", "unhex", "unicode",
        "unlikely", "upper", "zeroblob", "avg", "count", "group_concat", "string_agg", "sum", "total",
        "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value", "last_value", "nth_value",
        "date", "time", "datetime", "julianday", "unixepoch", "strftime", "timediff",
        "json", "jsonb", "json_array", "jsonb_array", "json_array_length", "json_error_position", "json_extract", "jsonb_extract", "json_insert",
        "jsonb_insert", "json_object", "jsonb_object", "json_patch", "jsonb_patch", "json_pretty", "json_remove", "jsonb_remove", "json_replace",
        "jsonb_replace", "json_set", "jsonb_set", "json_type", "json_valid", "json_quote", "json_group_array", "jsonb_group_array",
        "json_group_object", "jsonb_group_object",
        "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos", "cosh", "degrees", "exp", "floor", "ln", "log",
        "log10", "log2", "mod", "pi", "pow", "power", "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
    ]

    /// Installs the authorizer on `handle`; the scope must outlive the connection.
    func install(on handle: OpaquePointer) {
        sqlite3_set_authorizer(handle, { context, action, arg1, arg2, _, _ in
            guard let context else { return SQLITE_DENY }
            let scope = Unmanaged<TableScope>.fromOpaque(context).takeUnretainedValue()
            return scope.allows(action, arg1.map { String(cString: $0) }, arg2.map { String(cString: $0) }) ? SQLITE_OK : SQLITE_DENY
        }, Unmanaged.passUnretained(self).toOpaque())
    }
}

extension Database {
    /// A connection of its own for feature `owner`, limited to the feature's tables (see
    /// `TableScope`): what the kernel hands a feature as its `kernel.store` port. Package:
    /// a view is made by the kernel, never widened by a feature.
    package func scoped(to owner: String) throws -> Database {
        try Database(path: path, option: option, scope: TableScope(owner: owner))
    }

    /// The feature this connection belongs to, or nil for the kernel's own.
    public var owner: String? { scope?.owner }
}
