import CSQLite
import Foundation
import TermindCore

/// What one feature's connection may touch: its own tables and indexes (named
/// `<id>_…`, with `-` in the id written `_`), and the migrations table only while its own
/// `migrate` runs. Enforced by an SQLite authorizer when each statement is prepared, so no
/// SQL a feature writes can read or change another feature's data, attach another
/// database, or read the schema of others.
final class TableScope: @unchecked Sendable {
    let owner: String
    let prefix: String
    /// Set (under the database's lock) while `migrate` of the owner's schema runs.
    var privileged = false

    init(owner: String) {
        self.owner = owner
        prefix = owner.replacingOccurrences(of: "-", with: "_").lowercased() + "_"
    }

    private func own(_ name: String?) -> Bool { name.map { $0.lowercased().hasPrefix(prefix) } ?? false }

    /// SQLite's action codes (sqlite3.h, "Authorizer Action Codes") and what each may do.
    func allows(_ action: Int32, _ arg1: String?, _ arg2: String?) -> Bool {
        switch action {
        case SQLITE_SELECT, SQLITE_TRANSACTION, SQLITE_SAVEPOINT, SQLITE_FUNCTION, SQLITE_RECURSIVE:
            return true
        case SQLITE_READ, SQLITE_UPDATE, SQLITE_INSERT, SQLITE_DELETE:
            if own(arg1) || arg1 == "sqlite_sequence" { return true }
            return privileged && (arg1 == "termind_migrations" || arg1 == "sqlite_schema" || arg1 == "sqlite_master")
        case SQLITE_CREATE_TABLE, SQLITE_DROP_TABLE:
            return own(arg1) || (privileged && arg1 == "termind_migrations" && action == SQLITE_CREATE_TABLE)
        case SQLITE_CREATE_INDEX, SQLITE_DROP_INDEX:
            // The index and its table are both the feature's (or SQLite's own index of a
            // UNIQUE or PRIMARY KEY constraint on such a table).
            let automatic = arg1?.hasPrefix("sqlite_autoindex_") == true
            return (own(arg1) || automatic) && (own(arg2) || (privileged && automatic && arg2 == "termind_migrations"))
        case SQLITE_CREATE_TRIGGER, SQLITE_DROP_TRIGGER:
            return own(arg1) && own(arg2)
        case SQLITE_CREATE_VIEW, SQLITE_DROP_VIEW:
            return own(arg1)
        case SQLITE_ALTER_TABLE:
            return own(arg2)
        case SQLITE_ANALYZE, SQLITE_REINDEX:
            return arg1 == nil || own(arg1)
        case SQLITE_PRAGMA:
            // Reading the shape of its own tables; anything else only inside migrate.
            if privileged { return true }
            let reading: Set<String> = ["table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"]
            return arg1.map { reading.contains($0.lowercased()) } == true && own(arg2)
        default:
            return false  // ATTACH, DETACH, virtual tables, temporary objects, anything new
        }
    }

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
    /// `TableScope`): what the kernel hands a feature as its `kernel.store` port.
    public func scoped(to owner: String) throws -> Database {
        try Database(path: path, option: option, scope: TableScope(owner: owner))
    }

    /// The feature this connection belongs to, or nil for the kernel's own.
    public var owner: String? { scope?.owner }
}
