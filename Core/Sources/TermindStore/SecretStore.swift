import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// The encrypted store for passwords, passphrases and private keys, kept apart from the
/// process database and referenced from records by opaque handles (`sec_…`).
///
/// Layout: its own SQLite file. Each secret is sealed with AES-256-GCM under a random
/// 256-bit data key, with its handle as associated data (a row moved to another handle
/// fails to open). The data key is stored wrapped (AES-256-GCM) under a key-encryption
/// key that comes from a key file (32 random bytes, mode 0600, created on first use) or
/// from a passphrase through scrypt (N=2^15, r=8, p=1; salt and cost stored). Changing
/// the protection rotates the data key: every secret is re-sealed under a new one and the
/// new key wrapped under the new source, in one transaction (no secret is lost), so an old
/// key file or passphrase with an old copy of the store never opens what is stored after.
/// A key file given up is then overwritten and removed. Plaintext never reaches the file,
/// logs or errors.
///
/// Secrets are namespaced by owning feature: the kernel hands each feature a view
/// (`scoped(to:)`) that stores under its id and sees, reads, changes and lists only its own
/// handles; another feature's handle is simply missing there.
public final class SecretStore: Sendable {
    /// Where the key-encryption key comes from.
    public enum KeySource: Sendable {
        /// A 32-byte key file; created (mode 0600) when absent, refused if others can read it.
        case keyFile(String)
        case passphrase(Secret)
    }

    public let path: String
    private let database: Database
    /// The key state every view of the store shares.
    ///
    /// `@unchecked Sendable`: `dataKey` and `source` are read and written only while `lock` is
    /// held (every SecretStore method that uses them takes it).
    private final class Keys: @unchecked Sendable {
        /// Guards `dataKey` and `source`, and makes every seal-and-write atomic against a
        /// rotation (a secret sealed under a retired key would be unreadable).
        let lock = RecursiveLock()
        var dataKey: SymmetricKey
        var source: KeySource
        init(dataKey: SymmetricKey, source: KeySource) {
            self.dataKey = dataKey
            self.source = source
        }
    }
    private let keys: Keys
    /// The feature this view belongs to; nil for the kernel's own view of every secret.
    public let owner: String?
    private var lock: RecursiveLock { keys.lock }
    private var dataKey: SymmetricKey {
        get { keys.dataKey }
        set { keys.dataKey = newValue }
    }
    private var source: KeySource {
        get { keys.source }
        set { keys.source = newValue }
    }

    private static let wrapAAD = Data("termind-secrets-data-key-v1".utf8)
    private static let schema = Schema(feature: "secrets", migrations: [
        Migration(1, "create secret tables", """
            CREATE TABLE secret_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
            CREATE TABLE secrets (
                handle TEXT PRIMARY KEY,
                purpose TEXT NOT NULL,
                sealed BLOB NOT NULL,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            """),
        Migration(2, "secrets belong to a feature", """
            ALTER TABLE secrets ADD COLUMN owner TEXT NOT NULL DEFAULT '';
            CREATE INDEX secrets_owner ON secrets (owner);
            """),
    ])

    /// Opens the store at `path` (creating it with a new data key when it is new).
    /// A wrong passphrase or key file is reported as such; nothing is changed.
    /// Package: only the kernel opens the secret store (`StoreAccess` in TermindKernel).
    package init(path: String, keySource: KeySource) throws {
        self.path = path
        let database = try Database(path: path, option: "--secrets")
        try database.migrate(Self.schema)
        self.database = database
        owner = nil
        // A staged key file means a rotation is under way or was cut short: wait for the
        // rotating process (it holds the key's lock from staging to renaming), then decide.
        var keyLock: Int32 = -1
        if case .keyFile(let keyPath) = keySource, access(keyPath + ".new", F_OK) == 0 { keyLock = KeyFile.lock(keyPath) }
        defer { KeyFile.unlock(keyLock) }
        let dataKey: SymmetricKey = try database.transaction {
            if let wrapped = try database.query("SELECT value FROM secret_meta WHERE name = 'data_key'").first?.data("value") {
                let passphraseProtected = try !database.query("SELECT 1 FROM secret_meta WHERE name = 'kdf'").isEmpty
                if case .keyFile = keySource, passphraseProtected {
                    throw TermindError(.secretWrongKey, "The secret store \(path) is protected by a passphrase, not a key file (give it with --secrets-passphrase-file FILE). Nothing was changed.")
                }
                // A rotation to a new key file that committed but did not move the file into
                // place: finish it. One that did not commit: its staged file is discarded.
                if case .keyFile(let keyPath) = keySource, let staged = KeyFile.staged(keyPath) {
                    if let raw = Self.unwrap(wrapped, staged) {
                        try KeyFile.finishReplacement(keyPath)
                        return SymmetricKey(bytes: raw)
                    }
                    KeyFile.discardReplacement(keyPath)
                }
                let kek = try Self.keyEncryptionKey(keySource, database: database, creating: false, storePath: path)
                guard let raw = Self.unwrap(wrapped, kek) else { throw Self.wrongKey(keySource, path: path) }
                return SymmetricKey(bytes: raw)
            }
            let kek = try Self.keyEncryptionKey(keySource, database: database, creating: true, storePath: path)
            let key = SymmetricKey.random()
            try database.execute("INSERT INTO secret_meta (name, value) VALUES ('data_key', ?)",
                                 [AEAD.seal(key.data, key: kek, associatedData: Self.wrapAAD).combined])
            try Self.recordRotation(database)
            return key
        }
        keys = Keys(dataKey: dataKey, source: keySource)
    }

    private init(path: String, database: Database, keys: Keys, owner: String) {
        self.path = path
        self.database = database
        self.keys = keys
        self.owner = owner
    }

    /// The view of feature `owner`: it stores under that id and sees only its own secrets.
    /// Package: made by the kernel, never widened by a feature.
    package func scoped(to owner: String) -> SecretStore {
        SecretStore(path: path, database: database, keys: keys, owner: owner)
    }

    /// Gives secrets stored before they had owners to `owner` (the kernel does this once, for
    /// the built-in feature that stored them). Returns how many. Only the kernel's own store
    /// may: a feature's view is refused.
    @discardableResult
    package func claimUnowned(for owner: String) throws -> Int {
        guard self.owner == nil else {
            throw TermindError(.capabilityDenied, "Feature '\(self.owner!)' may not claim secrets that belong to nobody: only termind does that, once, at start.")
        }
        try database.execute("UPDATE secrets SET owner = ? WHERE owner = ''", [owner])
        return database.changes
    }

    /// The SQL condition limiting a statement to this view's secrets (the kernel's sees all).
    private var mine: (clause: String, bindings: [any SQLBindable]) {
        owner.map { (" AND owner = ?", [$0]) } ?? ("", [])
    }

    /// The data key wrapped under `kek`, or nil when `kek` does not open it.
    private static func unwrap(_ wrapped: Data, _ kek: SymmetricKey) -> Data? {
        guard let box = AEAD.SealedBox(combined: wrapped), let raw = try? AEAD.open(box, key: kek, associatedData: wrapAAD),
              raw.count == AEAD.keyLength else { return nil }
        return raw
    }

    /// How the store is protected, for `termind secrets status`.
    public func protection() throws -> String {
        try database.query("SELECT value FROM secret_meta WHERE name = 'kdf'").first.map { _ in "passphrase (scrypt)" } ?? "key file"
    }

    /// When the data key was made (created or last rotated), as an ISO 8601 UTC time; nil
    /// for a store from before termind recorded it.
    public func keyRotatedAt() throws -> String? {
        try database.query("SELECT value FROM secret_meta WHERE name = 'key_rotated_at'").first?.data("value").map { String(decoding: $0, as: UTF8.self) }
    }

    private static func recordRotation(_ database: Database) throws {
        let now = Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date())
        try database.execute("INSERT OR REPLACE INTO secret_meta (name, value) VALUES ('key_rotated_at', ?)", [Data(now.utf8)])
    }

    // MARK: - Secrets

    /// Stores a secret and returns its new handle.
    public func store(_ secret: Secret, purpose: String) throws -> String {
        let handle = "sec_" + SecureRandom.bytes(16).hexEncoded
        try lock.withLock {
            let sealed = secret.withPlaintext { AEAD.seal(Data($0.utf8), key: dataKey, associatedData: Data(handle.utf8)) }
            try database.execute("INSERT INTO secrets (handle, purpose, sealed, owner) VALUES (?, ?, ?, ?)", [handle, purpose, sealed.combined, owner ?? ""])
        }
        return handle
    }

    /// The secret behind `handle`. Throws `secret.missing` or `secret.tampered`.
    public func secret(_ handle: String) throws -> Secret {
        try lock.withLock { try unlockedSecret(handle) }
    }

    private func unlockedSecret(_ handle: String) throws -> Secret {
        guard let sealed = try database.query("SELECT sealed FROM secrets WHERE handle = ?" + mine.clause, [handle] + mine.bindings).first?.data("sealed") else {
            throw TermindError(.secretMissing, "No secret with handle \(handle) in \(path).")
        }
        guard let box = AEAD.SealedBox(combined: sealed),
              let plain = try? AEAD.open(box, key: dataKey, associatedData: Data(handle.utf8)) else {
            throw TermindError(.secretTampered, "The secret \(handle) in \(path) failed authentication: the store was modified or damaged. Other secrets are unaffected.")
        }
        return Secret(String(decoding: plain, as: UTF8.self))
    }

    /// Replaces the secret behind an existing handle.
    public func update(_ handle: String, to secret: Secret) throws {
        try lock.withLock {
            let sealed = secret.withPlaintext { AEAD.seal(Data($0.utf8), key: dataKey, associatedData: Data(handle.utf8)) }
            try database.transaction {
                try database.execute("UPDATE secrets SET sealed = ? WHERE handle = ?" + mine.clause, [sealed.combined, handle] + mine.bindings)
                guard database.changes == 1 else { throw TermindError(.secretMissing, "No secret with handle \(handle) in \(path).") }
            }
        }
    }

    public func delete(_ handle: String) throws {
        try database.execute("DELETE FROM secrets WHERE handle = ?" + mine.clause, [handle] + mine.bindings)
    }

    /// This view's handles whose purpose starts with `prefix`, stored more than
    /// `olderThan` seconds ago (a sweep leaves alone what a writer is about to reference).
    public func handles(purposePrefix prefix: String, olderThan seconds: Double) throws -> [String] {
        // Compared byte for byte (LIKE would fold case and read % and _).
        try database.query("SELECT handle FROM secrets WHERE substr(purpose, 1, length(?)) = ? AND created_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
                           + mine.clause + " ORDER BY handle", [prefix, prefix, "-\(max(0, Int(seconds))) seconds"] + mine.bindings)
            .compactMap { $0.string("handle") }
    }

    /// The purpose `handle` was stored with, if this view holds it.
    public func purpose(_ handle: String) throws -> String? {
        try database.query("SELECT purpose FROM secrets WHERE handle = ?" + mine.clause, [handle] + mine.bindings).first?.string("purpose")
    }

    /// This view's handles (the kernel's view: every handle).
    public func handles() throws -> [String] {
        try database.query("SELECT handle FROM secrets WHERE 1" + mine.clause + " ORDER BY handle", mine.bindings).compactMap { $0.string("handle") }
    }

    /// Runs `body` in one transaction of the secret store (e.g. several stores that must
    /// all happen or none).
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        // The key lock first, as every seal-and-write takes it: never the other order.
        try lock.withLock { try database.transaction(body) }
    }

    // MARK: - Protection

    /// Rotates the data key and protects it with `newSource`, in one transaction: every
    /// secret is re-sealed under a new random data key (a secret that fails authentication
    /// stops it: nothing changes), the new key is wrapped under the new source, and the
    /// rotation time recorded. A key file source always gets a new key file (written beside
    /// it first, moved into place after the commit; a crash in between is finished on the
    /// next open). A key file given up for a passphrase is overwritten and removed after the
    /// commit (best effort on copy-on-write or flash storage). The current source must be
    /// right (it opened this store).
    public func changeProtection(to newSource: KeySource) throws {
        if let owner {
            throw TermindError(.capabilityDenied, "Feature '\(owner)' may not change how the secret store is protected: only termind secrets protect does.")
        }
        guard owner == nil else {
            throw TermindError(.secretDenied, "Only the kernel changes how the secret store is protected (feature '\(owner!)' asked).")
        }
        try lock.withLock {
            let newKey = SymmetricKey.random()
            var staged: (path: String, key: SymmetricKey)?
            // Other processes opening the store wait on the key's lock while a new key file is
            // staged, so none can discard it before the commit or race the rename after it.
            var keyLock: Int32 = -1
            defer { KeyFile.unlock(keyLock) }
            if case .keyFile(let keyPath) = newSource {
                keyLock = KeyFile.lock(keyPath)
                staged = (keyPath, try KeyFile.stageReplacement(keyPath))
            }
            do {
                try database.transaction {
                    for row in try database.query("SELECT handle FROM secrets ORDER BY handle") {
                        guard let handle = row.string("handle") else { continue }
                        let secret = try unlockedSecret(handle)
                        let sealed = secret.withPlaintext { AEAD.seal(Data($0.utf8), key: newKey, associatedData: Data(handle.utf8)) }
                        try database.execute("UPDATE secrets SET sealed = ? WHERE handle = ?", [sealed.combined, handle])
                    }
                    try database.execute("DELETE FROM secret_meta WHERE name = 'kdf'")
                    let kek = try staged?.key ?? Self.keyEncryptionKey(newSource, database: database, creating: true, storePath: path)
                    try database.execute("UPDATE secret_meta SET value = ? WHERE name = 'data_key'",
                                         [AEAD.seal(newKey.data, key: kek, associatedData: Self.wrapAAD).combined])
                    try Self.recordRotation(database)
                }
            } catch {
                if let staged { KeyFile.discardReplacement(staged.path) }
                throw error
            }
            // Committed: from now on everything is sealed under the new key, whatever follows.
            let oldSource = source
            dataKey = newKey
            source = newSource
            if let staged { try KeyFile.finishReplacement(staged.path) }
            if case .keyFile(let oldPath) = oldSource, case .passphrase = newSource { KeyFile.destroy(oldPath) }
        }
    }

    private static func keyEncryptionKey(_ source: KeySource, database: Database, creating: Bool, storePath: String) throws -> SymmetricKey {
        switch source {
        case .keyFile(let keyPath):
            return try KeyFile.load(keyPath, create: creating)
        case .passphrase(let passphrase):
            guard !passphrase.isEmpty else {
                throw TermindError(.secretPassphraseEmpty, "The secret store passphrase must not be empty.")
            }
            let parameters: KeyDerivation.ScryptParameters
            let salt: Data
            if let stored = try database.query("SELECT value FROM secret_meta WHERE name = 'kdf'").first?.data("value") {
                guard let kdf = try? JSONDecoder().decode(StoredKDF.self, from: stored) else {
                    throw TermindError(.secretStoreDamaged, "The key-derivation settings in \(storePath) are unreadable; the store was left untouched.")
                }
                parameters = kdf.scrypt
                salt = kdf.salt
            } else if creating {
                parameters = .standard
                salt = SecureRandom.bytes(16)
                try database.execute("INSERT INTO secret_meta (name, value) VALUES ('kdf', ?)",
                                     [try JSONCoding.encode(StoredKDF(salt: salt, scrypt: parameters))])
            } else {
                throw TermindError(.secretWrongKey, "The secret store \(storePath) is protected by a key file, not a passphrase.")
            }
            do {
                return try KeyDerivation.scrypt(passphrase: passphrase, salt: salt, parameters: parameters)
            } catch {
                throw TermindError(.secretKdfFailed, "Deriving the key of \(storePath) from the passphrase failed (scrypt N=2^\(parameters.logN), r=\(parameters.r), p=\(parameters.p)).")
            }
        }
    }

    private static func wrongKey(_ source: KeySource, path: String) -> TermindError {
        switch source {
        case .passphrase:
            TermindError(.secretWrongPassphrase, "Wrong passphrase for the secret store \(path). Nothing was changed.")
        case .keyFile(let keyPath):
            TermindError(.secretWrongKey, "The key file \(keyPath) does not open the secret store \(path) (another key, or the store is passphrase-protected). Nothing was changed.")
        }
    }

    private struct StoredKDF: Codable {
        var salt: Data
        var scrypt: KeyDerivation.ScryptParameters
    }
}

/// The secret store's key file: 32 random bytes, mode 0600, refused when group or others
/// can read or write it (as OpenSSH refuses private keys with loose permissions).
enum KeyFile {
    /// An exclusive lock on `path.lock` (created 0600), held while a rotation stages and
    /// moves a key file and while an opener looks at a staged one; -1 when it cannot be taken.
    static func lock(_ path: String) -> Int32 {
        let fd = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return -1 }
        while flock(fd, LOCK_EX) != 0 && errno == EINTR {}
        return fd
    }

    static func unlock(_ fd: Int32) {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
    }

    /// Writes a new key to `path.new` (0600, synced) for a rotation and returns it.
    static func stageReplacement(_ path: String) throws -> SymmetricKey {
        let staged = path + ".new"
        unlink(staged)
        return try write(SymmetricKey.random(), to: staged)
    }

    /// The staged key of an unfinished rotation, if a well-formed one is there.
    static func staged(_ path: String) -> SymmetricKey? {
        var info = stat()
        guard lstat(path + ".new", &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o077 == 0, info.st_uid == getuid(),
              let data = FileManager.default.contents(atPath: path + ".new"), data.count == AEAD.keyLength else { return nil }
        return SymmetricKey(bytes: data)
    }

    /// Moves the staged key file into place once the store committed to it (the old key
    /// file, if any, is overwritten first).
    static func finishReplacement(_ path: String) throws {
        let staged = path + ".new"
        if access(path, F_OK) == 0 { destroy(path, unlinking: false) }
        guard rename(staged, path) == 0 else {
            throw TermindError(.secretKeyCreateFailed, "Cannot move the new key file \(staged) to \(path): \(String(cString: strerror(errno))).")
        }
        syncDirectory(of: path)
    }

    static func discardReplacement(_ path: String) { destroy(path + ".new") }

    /// Overwrites the key file with zeros, syncs and (unless told not to) removes it.
    static func destroy(_ path: String, unlinking: Bool = true) {
        let fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd >= 0 {
            let zeros = [UInt8](repeating: 0, count: AEAD.keyLength)
            _ = zeros.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            fsync(fd)
            close(fd)
        }
        if unlinking {
            unlink(path)
            syncDirectory(of: path)
        }
    }

    private static func syncDirectory(of path: String) {
        let fd = open(PathText.deletingLastComponent(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { fsync(fd); close(fd) }
    }

    private static func write(_ key: SymmetricKey, to path: String) throws -> SymmetricKey {
        let directory = PathText.deletingLastComponent(path)
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw TermindError(.secretKeyCreateFailed, "Cannot create the key file \(path): \(String(cString: strerror(errno))).")
        }
        let written = key.withBytes { Glibc.write(fd, $0, AEAD.keyLength) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == AEAD.keyLength, synced else {
            unlink(path)
            throw TermindError(.secretKeyCreateFailed, "Cannot write the key file \(path).")
        }
        return key
    }

    static func load(_ path: String, create: Bool) throws -> SymmetricKey {
        var info = stat()
        if stat(path, &info) != 0 {
            guard create, errno == ENOENT else {
                throw TermindError(.secretKeyMissing, "The secret store's key file \(path) is missing; without it the stored secrets cannot be read.")
            }
            return try write(SymmetricKey.random(), to: path)
        }
        guard info.st_mode & 0o077 == 0 else {
            throw TermindError(.secretKeyPermissions, "The key file \(path) is accessible by others (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod 600 on it.")
        }
        guard info.st_uid == getuid() else {
            throw TermindError(.secretKeyPermissions, "The key file \(path) belongs to another user.")
        }
        guard let data = FileManager.default.contents(atPath: path), data.count == AEAD.keyLength else {
            throw TermindError(.secretKeyInvalid, "The key file \(path) is not a termind key (expected \(AEAD.keyLength) bytes).")
        }
        return SymmetricKey(bytes: data)
    }
}
