import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import TermindStore

/// Identities in the process database; their passwords live in the secret store,
/// referenced by handle. A secret is written before the record that references it and
/// removed again if that record cannot be saved, so neither store keeps an orphan.
struct IdentityRepository: Sendable {
    let db: Database
    let secrets: SecretStore
    let keys: KeyRepository

    func list() throws -> [IdentityRecord] {
        try db.query("SELECT * FROM vault_identities ORDER BY label COLLATE NOCASE").map(Self.record)
    }

    func find(_ ref: String) throws -> IdentityRecord? {
        if let byID = try db.query("SELECT * FROM vault_identities WHERE id = ?", [ref]).first { return try Self.record(byID) }
        return try db.query("SELECT * FROM vault_identities WHERE label = ? COLLATE NOCASE", [ref]).first.map(Self.record)
    }

    func get(_ ref: String) throws -> IdentityRecord {
        guard let identity = try find(ref) else {
            throw TermindError(.vaultIdentityNotFound, "No identity with id or label '\(ref)'. Run 'termind vault identity list'.")
        }
        return identity
    }

    /// The stored password of an identity, for the credentials port only.
    func password(of id: String) throws -> Secret? {
        guard let handle = try db.query("SELECT password_handle FROM vault_identities WHERE id = ?", [id]).first?.string("password_handle") else {
            return nil
        }
        return try secrets.secret(handle)
    }

    func add(_ r: VaultContracts.IdentityAdd.Request) throws -> IdentityRecord {
        let username = try VaultValidation.user(r.username, field: "username")
        let label = try VaultValidation.label(r.label ?? "").isEmpty ? username : VaultValidation.label(r.label ?? "")
        let id = RecordID.make("ident")
        if let password = r.password, password.isEmpty {
            throw TermindError.badRequest("password: an empty password cannot be saved; leave it out for an identity without one.")
        }
        let handle = try r.password.map { try secrets.store($0, purpose: "identity.password") }
        do {
            try db.transaction {
                try ensureLabelFree(label, excluding: nil)
                let key = try r.key.flatMap { $0.isEmpty ? nil : try keys.get($0).id }
                try db.execute("INSERT INTO vault_identities (id, label, username, password_handle, key_id) VALUES (?, ?, ?, ?, ?)",
                               [id, label, username, handle, key])
                try VaultJournal.changed(db, "identity", id)
            }
        } catch {
            if let handle { try? secrets.delete(handle) }
            throw error
        }
        return try get(id)
    }

    func update(_ r: VaultContracts.IdentityUpdate.Request) throws -> IdentityRecord {
        // A new password is stored first (the secret store is another file); the record,
        // read and written in one transaction, then points at it, and only after the commit
        // is the replaced secret removed — or the new one, if the transaction failed.
        let newHandle: String?? = try r.password.map { $0.isEmpty ? nil : try secrets.store($0, purpose: "identity.password") }
        let replaced: String?
        let id: String
        do {
            (id, replaced) = try db.transaction {
                let current = try get(r.identity)
                let oldHandle = try db.query("SELECT password_handle FROM vault_identities WHERE id = ?", [current.id]).first?.string("password_handle")
                let username = try r.username.map { try VaultValidation.user($0, field: "username") } ?? current.username
                var label = current.label
                if let requested = r.label {
                    let typed = try VaultValidation.label(requested)
                    label = typed.isEmpty ? username : typed
                    try ensureLabelFree(label, excluding: current.id)
                }
                let key = try r.key.map { $0.isEmpty ? nil : try keys.get($0).id } ?? current.key
                let handle = newHandle ?? oldHandle
                try db.execute("""
                    UPDATE vault_identities SET label = ?, username = ?, password_handle = ?, key_id = ?,
                        updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?
                    """, [label, username, handle, key, current.id])
                try VaultJournal.changed(db, "identity", current.id)
                return (current.id, newHandle != nil ? oldHandle : nil)
            }
        } catch {
            if case .some(.some(let h)) = newHandle { try? secrets.delete(h) }
            throw error
        }
        if let replaced { try? secrets.delete(replaced) }
        return try get(id)
    }

    /// Refused while hosts use the identity; the hosts are named.
    func delete(_ ref: String, hosts: HostRepository) throws -> String {
        let (id, handle): (String, String?) = try db.transaction {
            let identity = try get(ref)
            let users = try hosts.labels(usingIdentity: identity.id)
            guard users.isEmpty else {
                throw TermindError(.vaultIdentityInUse, "Identity '\(identity.label)' is used by \(users.count == 1 ? "host" : "hosts") \(users.map { "'\($0)'" }.joined(separator: ", ")); change or delete \(users.count == 1 ? "it" : "them") first.")
            }
            let handle = try db.query("SELECT password_handle FROM vault_identities WHERE id = ?", [identity.id]).first?.string("password_handle")
            try db.execute("DELETE FROM vault_identities WHERE id = ?", [identity.id])
            try VaultJournal.changed(db, "identity", identity.id)
            return (identity.id, handle)
        }
        if let handle { try? secrets.delete(handle) }
        return id
    }

    private func ensureLabelFree(_ label: String, excluding id: String?) throws {
        let owner = try db.query("SELECT id FROM vault_identities WHERE label = ? COLLATE NOCASE", [label]).first?.string("id")
        if let owner, owner != id {
            throw TermindError(.vaultLabelTaken, "label: '\(label)' is already used by another identity; choose a label.")
        }
    }

    static func record(_ row: Row) throws -> IdentityRecord {
        IdentityRecord(id: try row.text("id"), label: try row.text("label"), username: try row.text("username"),
                       hasPassword: row.string("password_handle") != nil, key: row.string("key_id"),
                       createdAt: try row.text("created_at"), updatedAt: try row.text("updated_at"))
    }
}

/// Snippets: saved commands.
struct SnippetRepository: Sendable {
    let db: Database

    func list() throws -> [SnippetRecord] {
        try db.query("SELECT * FROM vault_snippets ORDER BY label COLLATE NOCASE").map(Self.record)
    }

    func add(_ r: VaultContracts.SnippetAdd.Request) throws -> SnippetRecord {
        guard !r.body.trimmedWhitespaceAndNewlines.isEmpty else { throw TermindError.badRequest("body: must not be empty.") }
        guard r.body.utf8.count <= 65_536 else { throw TermindError.badRequest("body: at most 64 KiB.") }
        var label = try VaultValidation.label(r.label ?? "")
        if label.isEmpty {
            let first = r.body.split(separator: "\n").first.map { $0.trimmedWhitespace } ?? ""
            label = String(first.prefix(60))
        }
        let id = RecordID.make("snip")
        try db.transaction {
            try db.execute("INSERT INTO vault_snippets (id, label, body) VALUES (?, ?, ?)", [id, label, r.body])
            try VaultJournal.changed(db, "snippet", id)
        }
        return try db.query("SELECT * FROM vault_snippets WHERE id = ?", [id]).map(Self.record)[0]
    }

    func delete(_ ref: String) throws -> String {
        guard let id = try db.query("SELECT id FROM vault_snippets WHERE id = ?", [ref]).first?.string("id")
                ?? db.query("SELECT id FROM vault_snippets WHERE label = ? LIMIT 1", [ref]).first?.string("id") else {
            throw TermindError(.vaultSnippetNotFound, "No snippet with id or label '\(ref)'.")
        }
        try db.transaction {
            try db.execute("DELETE FROM vault_snippets WHERE id = ?", [id])
            try VaultJournal.changed(db, "snippet", id)
        }
        return id
    }

    static func record(_ row: Row) throws -> SnippetRecord {
        SnippetRecord(id: try row.text("id"), label: try row.text("label"), body: try row.text("body"),
                      createdAt: try row.text("created_at"), updatedAt: try row.text("updated_at"))
    }
}
