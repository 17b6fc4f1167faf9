import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import TermindCrypto
import TermindStore

/// SSH keys: public parts in the database, private keys (re-encoded as unencrypted OpenSSH
/// text) only in the secret store. A passphrase given at import decrypts the file once and
/// is not kept: the secret store protects the key from then on.
struct KeyRepository: Sendable {
    let db: Database
    let secrets: SecretStore

    func list() throws -> [KeyRecord] {
        try db.query("SELECT * FROM vault_keys ORDER BY label COLLATE NOCASE").map(Self.record)
    }

    func find(_ ref: String) throws -> KeyRecord? {
        if let row = try db.query("SELECT * FROM vault_keys WHERE id = ?", [ref]).first { return try Self.record(row) }
        if let row = try db.query("SELECT * FROM vault_keys WHERE label = ? COLLATE NOCASE", [ref]).first { return try Self.record(row) }
        // A fingerprint identifies a key too.
        return try db.query("SELECT * FROM vault_keys WHERE fingerprint = ?", [ref]).first.map(Self.record)
    }

    func get(_ ref: String) throws -> KeyRecord {
        guard let key = try find(ref) else {
            throw TermindError(.vaultKeyNotFound, "No key with id, label or fingerprint '\(ref)'. Run 'termind vault key list'.")
        }
        return key
    }

    func generate(_ r: KeyContracts.Generate.Request) throws -> KeyRecord {
        let algorithm: SSHKeyAlgorithm
        switch r.kind {
        case .ed25519: algorithm = .ed25519
        case .ecdsa256: algorithm = .ecdsaP256
        case .ecdsa384: algorithm = .ecdsaP384
        case .ecdsa521: algorithm = .ecdsaP521
        case .rsa: algorithm = .rsa
        }
        let bits = r.bits ?? 4096
        if r.kind == .rsa {
            guard (2048...8192).contains(bits), bits % 8 == 0 else { throw TermindError.badRequest("bits: RSA keys are 2048–8192 bits (a multiple of 8); \(bits) given.") }
        } else if r.bits != nil {
            throw TermindError.badRequest("bits: only RSA keys take a size; \(r.kind.rawValue) keys have a fixed one.")
        }
        let key = try SSHPrivateKey.generate(algorithm, rsaBits: bits, comment: r.comment ?? "")
        return try save(key, label: r.label)
    }

    func importFile(_ r: KeyContracts.Import.Request) throws -> KeyRecord {
        guard let data = FileManager.default.contents(atPath: r.path) else {
            throw TermindError(.vaultKeyUnreadable, "Cannot read the key file \(r.path).")
        }
        guard data.count <= 64 * 1024 else { throw TermindError(.keyMalformed, "\(r.path) is too large to be a private key.") }
        let text = Secret(String(decoding: data, as: UTF8.self))
        let key: SSHPrivateKey
        do {
            key = try SSHPrivateKey.parse(text, passphrase: r.passphrase.flatMap { $0.isEmpty ? nil : $0 })
        } catch let error as TermindError {
            let hint = error.is(.keyPassphraseRequired) ? " Give it with --passphrase - (read from standard input)." : ""
            throw TermindError(code: error.code, message: "\(r.path): \(error.message)\(hint)")
        }
        return try save(key, label: r.label)
    }

    /// Stores the private key first, then the record; the secret is removed if the record fails.
    private func save(_ key: SSHPrivateKey, label requested: String?) throws -> KeyRecord {
        try save(key, label: requested, defaultLabel: Self.shortName(key.algorithm)).record
    }

    /// As `save`, returning the secret handle so a caller's larger transaction can remove
    /// it if that transaction fails later.
    func save(_ key: SSHPrivateKey, label requested: String?, defaultLabel: String) throws -> (record: KeyRecord, handle: String) {
        let id = RecordID.make("key")
        let handle = try secrets.store(key.openSSHPrivateKeyText(), purpose: "key.private")
        do {
            try db.transaction {
                let label = try uniqueLabel(requested, default: defaultLabel)
                try db.execute("""
                    INSERT INTO vault_keys (id, label, algorithm, bits, fingerprint, public_key, private_handle)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """, [id, label, key.algorithm.rawValue, key.publicKey.bits, key.publicKey.fingerprintSHA256,
                          key.publicKey.openSSHLine(comment: key.comment.isEmpty ? nil : key.comment), handle])
                try VaultJournal.changed(db, "key", id)
            }
        } catch {
            try? secrets.delete(handle)
            throw error
        }
        return (try get(id), handle)
    }

    func delete(_ ref: String) throws -> String {
        let key = try get(ref)
        let users = try db.query("SELECT label FROM vault_identities WHERE key_id = ? ORDER BY label COLLATE NOCASE", [key.id]).compactMap { $0.string("label") }
        guard users.isEmpty else {
            throw TermindError(.vaultKeyInUse, "Key '\(key.label)' is used by \(users.count == 1 ? "identity" : "identities") \(users.map { "'\($0)'" }.joined(separator: ", ")); detach it first.")
        }
        let handle = try db.query("SELECT private_handle FROM vault_keys WHERE id = ?", [key.id]).first?.string("private_handle")
        try db.transaction {
            try db.execute("DELETE FROM vault_keys WHERE id = ?", [key.id])
            try VaultJournal.changed(db, "key", key.id)
        }
        if let handle { try? secrets.delete(handle) }
        return key.id
    }

    /// The private key text, for the credentials port only.
    func privateKey(_ id: String) throws -> Secret? {
        guard let handle = try db.query("SELECT private_handle FROM vault_keys WHERE id = ?", [id]).first?.string("private_handle") else { return nil }
        return try secrets.secret(handle)
    }

    /// The seed's default: the algorithm's name; "ed25519 2", "ed25519 3", … when taken.
    private func uniqueLabel(_ requested: String?, default base: String) throws -> String {
        let typed = try VaultValidation.label(requested ?? "")
        func taken(_ label: String) throws -> Bool {
            try !db.query("SELECT 1 FROM vault_keys WHERE label = ? COLLATE NOCASE", [label]).isEmpty
        }
        if !typed.isEmpty {
            guard try !taken(typed) else { throw TermindError(.vaultLabelTaken, "label: '\(typed)' is already used by another key; choose a label.") }
            return typed
        }
        if try !taken(base) { return base }
        var n = 2
        while try taken("\(base) \(n)") { n += 1 }
        return "\(base) \(n)"
    }

    static func shortName(_ algorithm: SSHKeyAlgorithm) -> String {
        switch algorithm {
        case .ed25519: "ed25519"
        case .ecdsaP256: "ecdsa-p256"
        case .ecdsaP384: "ecdsa-p384"
        case .ecdsaP521: "ecdsa-p521"
        case .rsa: "rsa"
        }
    }

    static func record(_ row: Row) throws -> KeyRecord {
        KeyRecord(id: try row.text("id"), label: try row.text("label"), algorithm: try row.text("algorithm"),
                  bits: try row.integer("bits"), fingerprint: try row.text("fingerprint"), publicKey: try row.text("public_key"),
                  createdAt: try row.text("created_at"))
    }
}
