import TermindCore

/// The process database's codes: contention, a feature reaching beyond its tables, damage,
/// permissions and migrations.
extension ErrorCode {
    /// Another process holds a write lock past the busy timeout.
    public static let storeBusy: ErrorCode = "store.busy"
    /// A feature reached beyond its own tables or schema.
    public static let storeDenied: ErrorCode = "store.denied"
    public static let storeConstraint: ErrorCode = "store.constraint"
    public static let storeOpenFailed: ErrorCode = "store.open_failed"
    /// The file is not a readable termind database.
    public static let storeCorrupt: ErrorCode = "store.corrupt"
    public static let storeReadOnly: ErrorCode = "store.read_only"
    /// Any other SQLite failure.
    public static let storeSQL: ErrorCode = "store.sql"
    public static let storeMigrationOrder: ErrorCode = "store.migration_order"
    public static let storeMigrationChanged: ErrorCode = "store.migration_changed"
    public static let storeMigrationFailed: ErrorCode = "store.migration_failed"
    /// The database was written by a newer termind.
    public static let storeTooNew: ErrorCode = "store.too_new"
}
