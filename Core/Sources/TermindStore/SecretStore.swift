import Foundation
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
/// the passphrase re-wraps the data key only, in one transaction: no secret is lost.
/// Plaintext never reaches the file, logs or errors.
public final class SecretStore: @unchecked Sendable {
    /// Where the key-encryption key comes from.
    public enum KeySource: Sendable {
        /// A 32-byte key file; created (mode 0600) when absent, refused if others can read it.
        case keyFile(String)
        case passphrase(Secret)
    }

    public let path: String
    private let database: Database
    private let dataKey: SymmetricKey

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
    ])

    /// Opens the store at `path` (creating it with a new data key when it is new).
    /// A wrong passphrase or key file is reported as such; nothing is changed.
    public init(path: String, keySource: KeySource) throws {
        self.path = path
        let database = try Database(path: path)
        try database.migrate(Self.schema)
        self.database = database
        dataKey = try database.transaction {
            if let wrapped = try database.query("SELECT value FROM secret_meta WHERE name = 'data_key'").first?.data("value") {
                let passphraseProtected = try !database.query("SELECT 1 FROM secret_meta WHERE name = 'kdf'").isEmpty
                if case .keyFile = keySource, passphraseProtected {
                    throw TermindError(code: "secret.wrong_key", message: "The secret store \(path) is protected by a passphrase, not a key file (give it with --secrets-passphrase-file FILE). Nothing was changed.")
                }
                let kek = try Self.keyEncryptionKey(keySource, database: database, creating: false, storePath: path)
                guard let box = AEAD.SealedBox(combined: wrapped),
                      let raw = try? AEAD.open(box, key: kek, associatedData: Self.wrapAAD), raw.count == AEAD.keyLength else {
                    throw Self.wrongKey(keySource, path: path)
                }
                return SymmetricKey(bytes: raw)
            }
            let kek = try Self.keyEncryptionKey(keySource, database: database, creating: true, storePath: path)
            let key = SymmetricKey.random()
            try database.execute("INSERT INTO secret_meta (name, value) VALUES ('data_key', ?)",
                                 [AEAD.seal(key.data, key: kek, associatedData: Self.wrapAAD).combined])
            return key
        }
    }

    /// How the store is protected, for `termind vault secrets status`.
    public func protection() throws -> String {
        try database.query("SELECT value FROM secret_meta WHERE name = 'kdf'").first.map { _ in "passphrase (scrypt)" } ?? "key file"
    }

    // MARK: - Secrets

    /// Stores a secret and returns its new handle.
    public func store(_ secret: Secret, purpose: String) throws -> String {
        let handle = "sec_" + SecureRandom.bytes(16).hexEncoded
        let sealed = secret.withPlaintext { AEAD.seal(Data($0.utf8), key: dataKey, associatedData: Data(handle.utf8)) }
        try database.execute("INSERT INTO secrets (handle, purpose, sealed) VALUES (?, ?, ?)", [handle, purpose, sealed.combined])
        return handle
    }

    /// The secret behind `handle`. Throws `secret.missing` or `secret.tampered`.
    public func secret(_ handle: String) throws -> Secret {
        guard let sealed = try database.query("SELECT sealed FROM secrets WHERE handle = ?", [handle]).first?.data("sealed") else {
            throw TermindError(code: "secret.missing", message: "No secret with handle \(handle) in \(path).")
        }
        guard let box = AEAD.SealedBox(combined: sealed),
              let plain = try? AEAD.open(box, key: dataKey, associatedData: Data(handle.utf8)) else {
            throw TermindError(code: "secret.tampered", message: "The secret \(handle) in \(path) failed authentication: the store was modified or damaged. Other secrets are unaffected.")
        }
        return Secret(String(decoding: plain, as: UTF8.self))
    }

    /// Replaces the secret behind an existing handle.
    public func update(_ handle: String, to secret: Secret) throws {
        let sealed = secret.withPlaintext { AEAD.seal(Data($0.utf8), key: dataKey, associatedData: Data(handle.utf8)) }
        try database.transaction {
            try database.execute("UPDATE secrets SET sealed = ? WHERE handle = ?", [sealed.combined, handle])
            guard database.changes == 1 else { throw TermindError(code: "secret.missing", message: "No secret with handle \(handle) in \(path).") }
        }
    }

    public func delete(_ handle: String) throws {
        try database.execute("DELETE FROM secrets WHERE handle = ?", [handle])
    }

    public func handles() throws -> [String] {
        try database.query("SELECT handle FROM secrets ORDER BY handle").compactMap { $0.string("handle") }
    }

    /// Runs `body` in one transaction of the secret store (e.g. several stores that must
    /// all happen or none).
    public func transaction<T>(_ body: () throws -> T) throws -> T { try database.transaction(body) }

    // MARK: - Protection

    /// Re-wraps the data key under a new key source in one transaction; every secret
    /// stays readable. The current source must be right (it opened this store).
    public func changeProtection(to newSource: KeySource) throws {
        try database.transaction {
            try database.execute("DELETE FROM secret_meta WHERE name = 'kdf'")
            let kek = try Self.keyEncryptionKey(newSource, database: database, creating: true, storePath: path)
            try database.execute("UPDATE secret_meta SET value = ? WHERE name = 'data_key'",
                                 [AEAD.seal(dataKey.data, key: kek, associatedData: Self.wrapAAD).combined])
        }
    }

    private static func keyEncryptionKey(_ source: KeySource, database: Database, creating: Bool, storePath: String) throws -> SymmetricKey {
        switch source {
        case .keyFile(let keyPath):
            return try KeyFile.load(keyPath, create: creating)
        case .passphrase(let passphrase):
            guard !passphrase.isEmpty else {
                throw TermindError(code: "secret.passphrase_empty", message: "The secret store passphrase must not be empty.")
            }
            let parameters: KeyDerivation.ScryptParameters
            let salt: Data
            if let stored = try database.query("SELECT value FROM secret_meta WHERE name = 'kdf'").first?.data("value") {
                guard let kdf = try? JSONDecoder().decode(StoredKDF.self, from: stored) else {
                    throw TermindError(code: "secret.store_damaged", message: "The key-derivation settings in \(storePath) are unreadable; the store was left untouched.")
                }
                parameters = kdf.scrypt
                salt = kdf.salt
            } else if creating {
                parameters = .standard
                salt = SecureRandom.bytes(16)
                try database.execute("INSERT INTO secret_meta (name, value) VALUES ('kdf', ?)",
                                     [try JSONCoding.encode(StoredKDF(salt: salt, scrypt: parameters))])
            } else {
                throw TermindError(code: "secret.wrong_key", message: "The secret store \(storePath) is protected by a key file, not a passphrase.")
            }
            do {
                return try KeyDerivation.scrypt(passphrase: passphrase, salt: salt, parameters: parameters)
            } catch {
                throw TermindError(code: "secret.kdf_failed", message: "Deriving the key of \(storePath) from the passphrase failed (scrypt N=2^\(parameters.logN), r=\(parameters.r), p=\(parameters.p)).")
            }
        }
    }

    private static func wrongKey(_ source: KeySource, path: String) -> TermindError {
        switch source {
        case .passphrase:
            TermindError(code: "secret.wrong_passphrase", message: "Wrong passphrase for the secret store \(path). Nothing was changed.")
        case .keyFile(let keyPath):
            TermindError(code: "secret.wrong_key", message: "The key file \(keyPath) does not open the secret store \(path) (another key, or the store is passphrase-protected). Nothing was changed.")
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
    static func load(_ path: String, create: Bool) throws -> SymmetricKey {
        var info = stat()
        if stat(path, &info) != 0 {
            guard create, errno == ENOENT else {
                throw TermindError(code: "secret.key_missing", message: "The secret store's key file \(path) is missing; without it the stored secrets cannot be read.")
            }
            let directory = (path as NSString).deletingLastPathComponent
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw TermindError(code: "secret.key_create_failed", message: "Cannot create the key file \(path): \(String(cString: strerror(errno))).")
            }
            let key = SymmetricKey.random()
            let written = key.withBytes { write(fd, $0, AEAD.keyLength) }
            let synced = fsync(fd) == 0
            close(fd)
            guard written == AEAD.keyLength, synced else {
                unlink(path)
                throw TermindError(code: "secret.key_create_failed", message: "Cannot write the key file \(path).")
            }
            return key
        }
        guard info.st_mode & 0o077 == 0 else {
            throw TermindError(code: "secret.key_permissions", message: "The key file \(path) is accessible by others (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod 600 on it.")
        }
        guard info.st_uid == getuid() else {
            throw TermindError(code: "secret.key_permissions", message: "The key file \(path) belongs to another user.")
        }
        guard let data = FileManager.default.contents(atPath: path), data.count == AEAD.keyLength else {
            throw TermindError(code: "secret.key_invalid", message: "The key file \(path) is not a termind key (expected \(AEAD.keyLength) bytes).")
        }
        return SymmetricKey(bytes: data)
    }
}
