import TermindStore

/// Opening the process's stores and making a feature's views of them: the kernel's alone.
/// A feature gets its views as the `kernel.store` and `kernel.secrets` ports and has no way
/// to open another database or widen a view (the initialisers are `package`); features never
/// import TermindKernel (ArchitectureTests). For the host, tools and tests.
public enum StoreAccess {
    /// The database at `path` (created mode 0600 when absent), with every table.
    public static func database(path: String, option: String = "--store") throws -> Database {
        try Database(path: path, option: option)
    }

    /// A connection of `owner`'s own to `database`'s file, limited to its tables.
    public static func scoped(_ database: Database, to owner: String) throws -> Database {
        try database.scoped(to: owner)
    }

    /// The secret store at `path`, opened with `keySource`.
    public static func secrets(path: String, keySource: SecretStore.KeySource) throws -> SecretStore {
        try SecretStore(path: path, keySource: keySource)
    }

    /// `owner`'s view of `store`: its own secrets only.
    public static func scoped(_ store: SecretStore, to owner: String) -> SecretStore {
        store.scoped(to: owner)
    }

    /// Gives secrets stored before they had owners to `owner`.
    @discardableResult
    public static func claimUnowned(_ store: SecretStore, for owner: String) throws -> Int {
        try store.claimUnowned(for: owner)
    }
}
