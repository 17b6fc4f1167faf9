import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SyncAPI
import TermindCore
import TermindCrypto
import TermindStore
import VaultAPI
import VaultRules

/// Sync's journal of the Vault: each write of a synced entity adds a row in its own
/// transaction (every write path calls this; a remote apply does not need to — sync reads
/// back what it applied and finds nothing new).
enum VaultJournal {
    /// `at`: when, in milliseconds since 1970 — the time sync stamps the change with.
    static func changed(_ db: Database, _ kind: String, _ id: String) throws {
        try db.execute("INSERT INTO vault_sync_outbox (kind, id, at) VALUES (?, ?, ?)", [kind, id, SyncChanges.now()])
        signal.signal()
    }

    /// A trusted host key's entity id for sync: its line's digest, so two devices that
    /// trusted the same key hold one entity (and a removal on one removes it on both).
    static func knownHostID(_ line: String) -> String {
        "kh-" + Digest.sha256(Data(line.utf8)).prefix(16).hexEncoded
    }

    /// One Vault per process, so one signal.
    static let signal = SyncJournalSignal()
}

/// `vault.sync`: the Vault's zone for sync — hosts, identities (label and user name; with
/// secrets on, their password and key too), SSH keys (secret: only with secrets on),
/// snippets, workspace templates and host keys trusted for good. Changes come from
/// `vault_sync_outbox`, which every write fills in the same transaction (`VaultJournal`).
struct VaultSyncZone: SyncZone {
    let vault: VaultFeature
    var zone: String { "vault" }

    static let kinds = ["key", "identity", "host", "snippet", "workspace", "knownhost"]
    var secretKinds: Set<String> { ["key"] }

    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges {
        try await BlockingExecutor.store.run { [vault] in
            let db = try vault.database()
            let rows = try db.query("SELECT seq, kind, id, at FROM vault_sync_outbox WHERE seq > ? ORDER BY seq LIMIT ?", [cursor, max(1, limit) + 1])
            var changes: [SyncEntityRef: Int64] = [:]
            var last = cursor
            for row in rows.prefix(max(1, limit)) {
                guard let seq = row.int("seq"), let kind = row.string("kind"), let id = row.string("id"), let at = row.int("at") else {
                    throw TermindError.internalFailure("vault_sync_outbox has a row without seq, kind, id or at.")
                }
                last = Int64(seq)
                changes[SyncEntityRef(kind: kind, id: id)] = Int64(at)
            }
            return SyncChanges(changed: changes, cursor: last, more: rows.count > max(1, limit))
        }
    }

    func journaled() -> AsyncStream<Void> { VaultJournal.signal.subscribe() }

    func acknowledge(through cursor: Int64) async throws {
        try await BlockingExecutor.store.run { [vault] in try vault.database().execute("DELETE FROM vault_sync_outbox WHERE seq <= ?", [cursor]) }
    }

    func inventory() async throws -> [SyncEntityRef: Int64] {
        try await BlockingExecutor.store.run { [vault] in
            let db = try vault.database()
            var all: [SyncEntityRef: Int64] = [:]
            for row in try db.query("SELECT id, \(SyncChanges.millisecondsSQL("created_at")) AS at FROM vault_keys") {
                all[SyncEntityRef(kind: "key", id: try row.text("id"))] = Int64(try row.integer("at"))
            }
            for (kind, table) in [("identity", "vault_identities"), ("host", "vault_hosts"), ("snippet", "vault_snippets"), ("workspace", "vault_workspaces")] {
                for row in try db.query("SELECT id, \(SyncChanges.millisecondsSQL("updated_at")) AS at FROM \(table)") {
                    all[SyncEntityRef(kind: kind, id: try row.text("id"))] = Int64(try row.integer("at"))
                }
            }
            // Host keys saved for good (a key accepted once is never stored, so never synced).
            for row in try db.query("SELECT line, \(SyncChanges.millisecondsSQL("created_at")) AS at FROM vault_known_hosts") {
                all[SyncEntityRef(kind: "knownhost", id: VaultJournal.knownHostID(try row.text("line")))] = Int64(try row.integer("at"))
            }
            return all
        }
    }

    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]] {
        try await values(of: entities, secrets: false)
    }

    func values(of entities: [SyncEntityRef], secrets withSecrets: Bool) async throws -> [SyncEntityRef: [String: JSONValue]] {
        let secrets = try vault.secretStore()
        return try await BlockingExecutor.store.run { [vault] in
            let db = try vault.database()
            var values: [SyncEntityRef: [String: JSONValue]] = [:]
            for entity in entities {
                if var value = try Self.value(of: entity, db) {
                    if withSecrets { try Self.addSecrets(of: entity, to: &value, db, secrets) }
                    values[entity] = value
                }
            }
            return values
        }
    }

    /// An identity's password and key, a key's private part, in sync's secret form (read
    /// only when the user chose to sync secrets; sync seals them before they go anywhere).
    static func addSecrets(of entity: SyncEntityRef, to value: inout [String: JSONValue], _ db: Database, _ secrets: SecretStore) throws {
        switch entity.kind {
        case "identity":
            guard let row = try db.query("SELECT password_handle, key_id FROM vault_identities WHERE id = ?", [entity.id]).first else { return }
            // A password whose secret cannot be read here is kept as agreed (never sent as cleared).
            if let handle = row.string("password_handle") {
                value["password"] = (try? secrets.secret(handle)).map { password in SyncSecret.wrap(password.withPlaintext { .string($0) }) } ?? SyncSecret.keep
            } else {
                value["password"] = SyncSecret.wrap(.null)
            }
            value["key"] = SyncSecret.wrap(row.string("key_id").map(JSONValue.string) ?? .null)
        case "key":
            guard let handle = try db.query("SELECT private_handle FROM vault_keys WHERE id = ?", [entity.id]).first?.string("private_handle") else { return }
            value["private"] = (try? secrets.secret(handle)).map { key in SyncSecret.wrap(key.withPlaintext { .string($0) }) } ?? SyncSecret.keep
        default:
            return
        }
    }

    static func value(of entity: SyncEntityRef, _ db: Database) throws -> [String: JSONValue]? {
        func optional(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        switch entity.kind {
        case "host":
            // The repository's own reading of a row (it fails loudly on a broken one).
            guard let host = try db.query("SELECT * FROM vault_hosts WHERE id = ?", [entity.id]).first.map(HostRepository.record) else { return nil }
            return [
                "label": .string(host.label), "address": .string(host.address), "port": .integer(Int64(host.port)),
                "user": optional(host.user), "identity": optional(host.identity), "jump": .array(host.jump.map(JSONValue.string)),
                "tags": .array(host.tags.map(JSONValue.string)), "shellIntegration": .string(host.shellIntegration.rawValue),
                "forwardAgent": .bool(host.forwardAgent == true),
            ]
        case "key":
            // Its label only: the rest is the private key (a secret) and what it implies.
            guard let row = try db.query("SELECT label FROM vault_keys WHERE id = ?", [entity.id]).first else { return nil }
            return ["label": .string(try row.text("label"))]
        case "identity":
            guard let row = try db.query("SELECT label, username FROM vault_identities WHERE id = ?", [entity.id]).first else { return nil }
            return ["label": .string(try row.text("label")), "username": .string(try row.text("username"))]
        case "snippet":
            guard let row = try db.query("SELECT label, body FROM vault_snippets WHERE id = ?", [entity.id]).first else { return nil }
            return ["label": .string(try row.text("label")), "body": .string(try row.text("body"))]
        case "knownhost":
            guard let line = try knownHostLine(entity.id, db) else { return nil }
            return ["line": .string(line)]
        case "workspace":
            guard let row = try db.query("SELECT name, layout FROM vault_workspaces WHERE id = ?", [entity.id]).first else { return nil }
            return ["name": .string(try row.text("name")), "layout": try JSONCoding.parse(Data(try row.text("layout").utf8), source: "workspace \(entity.id)")]
        default:
            return nil
        }
    }

    /// The stored line whose digest is `id` (few rows: a scan).
    static func knownHostLine(_ id: String, _ db: Database) throws -> String? {
        try db.query("SELECT line FROM vault_known_hosts").lazy.compactMap { $0.string("line") }.first { VaultJournal.knownHostID($0) == id }
    }

    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome] {
        let secrets = try vault.secretStore()
        let (outcomes, handles, hosts) = try await BlockingExecutor.store.run { [vault] in
            let db = try vault.database()
            var apply = VaultSyncApply(db: db, secrets: secrets)
            do {
                return try db.transaction { try apply.run(changes) }
            } catch {
                // Secrets stored for a transaction that did not commit.
                for handle in apply.created { try? secrets.delete(handle) }
                throw error
            }
        }
        for handle in handles { try? secrets.delete(handle) }
        for (host, deleted) in hosts { vault.hostChanges.send(HostChange(host: host, deleted: deleted, affected: [host])) }
        return outcomes
    }
}

/// One apply, inside one transaction. A host whose identity or jump host is missing waits,
/// unresolved; a label another entity holds here is invalid (quarantined) unless a change in
/// the same apply frees it.
private struct VaultSyncApply {
    let db: Database
    let secrets: SecretStore
    var outcomes: [SyncEntityRef: SyncApplyOutcome] = [:]
    /// Secrets no longer referenced (deleted or replaced passwords and keys), deleted from
    /// the secret store after commit.
    var handles: [String] = []
    /// Secrets stored by this apply: deleted again if its transaction fails.
    var created: [String] = []
    var hosts: [(String, Bool)] = []

    init(db: Database, secrets: SecretStore) {
        self.db = db
        self.secrets = secrets
    }

    /// Every change is tried; those that waited for another (a label a deletion frees, an
    /// identity a put brings, a host another host routes through) are tried again while any
    /// got in, so the order records came in does not decide the outcome.
    mutating func run(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) throws -> ([SyncEntityRef: SyncApplyOutcome], [String], [(String, Bool)]) {
        let rank = { (change: (SyncEntityRef, [String: JSONValue]?)) -> Int in
            // Deletions of hosts and snippets first (they free labels), then puts in
            // reference order, then identities' deletions (their hosts are gone by then).
            switch (change.0.kind, change.1 == nil) {
            case ("host", true), ("snippet", true): 0
            case ("key", false): 1
            case ("identity", false): 2
            case ("host", false): 3
            case ("snippet", false), ("workspace", false), ("knownhost", false): 4
            case ("workspace", true), ("knownhost", true): 0
            case ("identity", true): 5
            default: 6
            }
        }
        var waiting = changes.sorted { rank($0) < rank($1) }
        while !waiting.isEmpty {
            var next: [(SyncEntityRef, [String: JSONValue]?)] = []
            for (entity, value) in waiting {
                let outcome = try attempt { try change(entity, value) }
                outcomes[entity] = outcome
                if outcome != .applied { next.append((entity, value)) }
            }
            if next.count == waiting.count { break }
            waiting = next
        }
        return (outcomes, handles, hosts)
    }

    private mutating func change(_ entity: SyncEntityRef, _ value: [String: JSONValue]?) throws -> SyncApplyOutcome {
        guard let value else { return try delete(entity) }
        switch entity.kind {
        case "key": return try putKey(entity.id, value)
        case "identity": return try putIdentity(entity.id, value)
        case "host": return try putHost(entity.id, value)
        case "snippet": return try putSnippet(entity.id, value)
        case "workspace": return try putWorkspace(entity.id, value)
        case "knownhost": return try putKnownHost(entity.id, value)
        default: return .invalid("the Vault has no kind '\(entity.kind)'")
        }
    }


    /// A rule failing is the entity's outcome; the store failing is everyone's.
    private func attempt(_ body: () throws -> SyncApplyOutcome) throws -> SyncApplyOutcome {
        do { return try body() } catch let error as TermindError where error.is(.requestInvalid) || error.is(.vaultLabelTaken) {
            return .invalid(error.message)
        }
    }

    private func string(_ value: [String: JSONValue], _ field: String) throws -> String? {
        switch value[field] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case let other?: throw TermindError.badRequest("\(field): a \(other.typeName), where text belongs.")
        }
    }

    private func required(_ value: [String: JSONValue], _ field: String) throws -> String {
        guard let text = try string(value, field) else { throw TermindError.badRequest("\(field): missing.") }
        return text
    }

    private func strings(_ value: [String: JSONValue], _ field: String) throws -> [String] {
        switch value[field] {
        case nil, .null?: return []
        case .array(let items)?:
            return try items.map { item in
                guard case .string(let text) = item else { throw TermindError.badRequest("\(field): an item that is not text.") }
                return text
            }
        case let other?: throw TermindError.badRequest("\(field): a \(other.typeName), where a list belongs.")
        }
    }

    private func labelOwner(_ table: String, _ label: String) throws -> String? {
        try db.query("SELECT id FROM \(table) WHERE label = ? COLLATE NOCASE", [label]).first?.string("id")
    }

    private func exists(_ table: String, _ id: String) throws -> Bool {
        try !db.query("SELECT 1 FROM \(table) WHERE id = ?", [id]).isEmpty
    }

    /// A secret field as the apply gets it: absent (keep this device's own), or the
    /// plaintext the devices agreed on, null meaning none. Anything else in the field (a
    /// plain null from a device that predates synced secrets) keeps this device's own too.
    private func secret(_ value: [String: JSONValue], _ field: String) throws -> String?? {
        guard let plaintext = SyncSecret.plaintext(value[field]) else { return .none }
        switch plaintext {
        case .null: return .some(nil)
        case .string(let text): return .some(text)
        default: throw TermindError.badRequest("\(field): a secret that is not text")
        }
    }

    private mutating func putIdentity(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let label = try VaultValidation.label(try required(value, "label"))
        let username = try VaultValidation.user(try required(value, "username"), field: "username")
        if let owner = try labelOwner("vault_identities", label), owner != id {
            return .invalid("label: '\(label)' is already used by another identity here (\(owner))")
        }
        let password = try secret(value, "password")
        let key = try secret(value, "key")
        if case .some(.some(let keyID)) = key, try !exists("vault_keys", keyID) { return .unresolved("waits for key \(keyID)") }
        if case .some(.some(let text)) = password, text.isEmpty { return .invalid("password: empty") }
        try db.execute("""
            INSERT INTO vault_identities (id, label, username) VALUES (?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET label = excluded.label, username = excluded.username,
                updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            """, [id, label, username])
        if case .some(let keyID) = key { try db.execute("UPDATE vault_identities SET key_id = ? WHERE id = ?", [keyID, id]) }
        if case .some(let text) = password {
            let old = try db.query("SELECT password_handle FROM vault_identities WHERE id = ?", [id]).first?.string("password_handle")
            // A stored password that no longer reads counts as different: replaced.
            let same = old.flatMap { (try? secrets.secret($0))?.withPlaintext { $0 } } == text
            if !same {
                let handle = try text.map { text in try secrets.store(Secret(text), purpose: "identity.password") }
                if let handle { created.append(handle) }
                try db.execute("UPDATE vault_identities SET password_handle = ? WHERE id = ?", [handle, id])
                if let old { handles.append(old) }
            }
        }
        return .applied
    }

    /// An SSH key (secrets on only): its private part must parse; what the database keeps
    /// of it (algorithm, fingerprint, public line) is derived here, not taken from the record.
    private mutating func putKey(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let label = try VaultValidation.label(try required(value, "label"))
        guard !label.isEmpty else { return .invalid("label: empty") }
        guard case .some(.some(let text)) = try secret(value, "private") else { return .invalid("private: missing") }
        let key: SSHPrivateKey
        do {
            key = try SSHPrivateKey.parse(Secret(text), passphrase: nil)
        } catch {
            return .invalid("private: not an unencrypted private key")
        }
        if let owner = try labelOwner("vault_keys", label), owner != id {
            return .invalid("label: '\(label)' is already used by another key here (\(owner))")
        }
        if let row = try db.query("SELECT fingerprint FROM vault_keys WHERE id = ?", [id]).first {
            guard try row.text("fingerprint") == key.publicKey.fingerprintSHA256 else {
                return .invalid("private: another key than the one this id names here")
            }
            try db.execute("UPDATE vault_keys SET label = ? WHERE id = ?", [label, id])
            return .applied
        }
        // Kept as it arrived (it parsed): re-encoding would give other bytes (OpenSSH's
        // random check value), which would read as a change of the key.
        let handle = try secrets.store(Secret(text), purpose: "key.private")
        created.append(handle)
        try db.execute("""
            INSERT INTO vault_keys (id, label, algorithm, bits, fingerprint, public_key, private_handle) VALUES (?, ?, ?, ?, ?, ?, ?)
            """, [id, label, key.algorithm.rawValue, key.publicKey.bits, key.publicKey.fingerprintSHA256,
                  key.publicKey.openSSHLine(comment: key.comment.isEmpty ? nil : key.comment), handle])
        return .applied
    }

    private mutating func putHost(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let label = try VaultValidation.label(try required(value, "label"))
        guard !label.isEmpty else { return .invalid("label: empty") }
        let address = try VaultValidation.address(try required(value, "address"))
        guard case .integer(let rawPort)? = value["port"] else { return .invalid("port: missing or not a number") }
        let port = try VaultValidation.port(Int(rawPort))
        let user = try string(value, "user").map { try VaultValidation.user($0) }
        let identity = try string(value, "identity")
        let jump = try strings(value, "jump")
        let tags = try VaultValidation.tags(try strings(value, "tags"))
        let shell = try string(value, "shellIntegration") ?? ShellIntegration.default.rawValue
        guard ShellIntegration(rawValue: shell) != nil else { return .invalid("shellIntegration: '\(shell)' is not default, enabled or disabled") }
        let forward: Bool
        switch value["forwardAgent"] {
        case nil, .null?: forward = false
        case .bool(let on)?: forward = on
        default: return .invalid("forwardAgent: not true or false")
        }
        guard jump.count < VaultValidation.maximumRoute, !jump.contains(id), Set(jump).count == jump.count else {
            return .invalid("jump: not a route of at most \(VaultValidation.maximumRoute - 1) distinct other hosts")
        }
        if let identity, try !exists("vault_identities", identity) { return .unresolved("waits for identity \(identity)") }
        if let missing = try jump.first(where: { try !exists("vault_hosts", $0) }) { return .unresolved("waits for jump host \(missing)") }
        if let owner = try labelOwner("vault_hosts", label), owner != id {
            return .invalid("label: '\(label)' is already used by another host here (\(owner))")
        }
        try db.execute("""
            INSERT INTO vault_hosts (id, label, address, port, user, identity_id, jump, tags, shell_integration, forward_agent)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET label = excluded.label, address = excluded.address, port = excluded.port, user = excluded.user,
                identity_id = excluded.identity_id, jump = excluded.jump, tags = excluded.tags, shell_integration = excluded.shell_integration,
                forward_agent = excluded.forward_agent, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            """, [id, label, address, port, user, identity, try HostRepository.json(jump), try HostRepository.json(tags), shell, forward ? 1 : 0])
        hosts.append((id, false))
        return .applied
    }

    private mutating func putSnippet(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let label = try VaultValidation.label(try required(value, "label"))
        let body = try required(value, "body")
        try db.execute("""
            INSERT INTO vault_snippets (id, label, body) VALUES (?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET label = excluded.label, body = excluded.body, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            """, [id, label, body])
        return .applied
    }

    /// A trusted host key: one well-formed known_hosts line whose digest is the entity's id.
    private func putKnownHost(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let line = try required(value, "line")
        let parsed = KnownHosts.parse(line, source: "a synced known host")
        guard parsed.problems.isEmpty, parsed.entries.count == 1, parsed.entries[0].lineText == line else {
            return .invalid("line: not one known_hosts line termind writes")
        }
        guard VaultJournal.knownHostID(line) == id else { return .invalid("line: does not match its id") }
        if try db.query("SELECT 1 FROM vault_known_hosts WHERE line = ?", [line]).isEmpty {
            try db.execute("INSERT INTO vault_known_hosts (id, line) VALUES (?, ?)", [RecordID.make("kh"), line])
        }
        return .applied
    }

    /// A workspace template: its panes' hosts must be here (else it waits for them).
    private mutating func putWorkspace(_ id: String, _ value: [String: JSONValue]) throws -> SyncApplyOutcome {
        let name = try WorkspaceRepository.name(try required(value, "name"))
        guard let layoutValue = value["layout"] else { return .invalid("layout: missing") }
        let layout: WorkspaceLayout
        do {
            layout = try JSONValueDecoder.decode(WorkspaceLayout.self, from: layoutValue).validated()
        } catch {
            return .invalid("layout: \(TermindError.from(error).message)")
        }
        if let missing = try layout.panes.compactMap(\.host).first(where: { try !exists("vault_hosts", $0) }) {
            return .unresolved("waits for host \(missing)")
        }
        if let owner = try db.query("SELECT id FROM vault_workspaces WHERE name = ? COLLATE NOCASE", [name]).first?.string("id"), owner != id {
            return .invalid("name: '\(name)' is already used by another workspace here (\(owner))")
        }
        try db.execute("""
            INSERT INTO vault_workspaces (id, name, layout) VALUES (?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET name = excluded.name, layout = excluded.layout, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            """, [id, name, String(decoding: try JSONCoding.encode(layout), as: UTF8.self)])
        return .applied
    }

    private mutating func delete(_ entity: SyncEntityRef) throws -> SyncApplyOutcome {
        switch entity.kind {
        case "host":
            let through = try db.query("SELECT label, jump FROM vault_hosts WHERE jump != '[]'")
                .filter { HostRepository.strings($0.string("jump")).contains(entity.id) }.compactMap { $0.string("label") }
            guard through.isEmpty else { return .unresolved("a jump host for \(through.joined(separator: ", ")) here") }
            try db.execute("DELETE FROM vault_hosts WHERE id = ?", [entity.id])
            hosts.append((entity.id, true))
        case "identity":
            let users = try db.query("SELECT label FROM vault_hosts WHERE identity_id = ?", [entity.id]).compactMap { $0.string("label") }
            guard users.isEmpty else { return .unresolved("used by \(users.joined(separator: ", ")) here") }
            if let handle = try db.query("SELECT password_handle FROM vault_identities WHERE id = ?", [entity.id]).first?.string("password_handle") {
                handles.append(handle)
            }
            try db.execute("DELETE FROM vault_identities WHERE id = ?", [entity.id])
        case "key":
            let users = try db.query("SELECT label FROM vault_identities WHERE key_id = ?", [entity.id]).compactMap { $0.string("label") }
            guard users.isEmpty else { return .unresolved("used by identity \(users.joined(separator: ", ")) here") }
            if let handle = try db.query("SELECT private_handle FROM vault_keys WHERE id = ?", [entity.id]).first?.string("private_handle") {
                handles.append(handle)
            }
            try db.execute("DELETE FROM vault_keys WHERE id = ?", [entity.id])
        case "snippet":
            try db.execute("DELETE FROM vault_snippets WHERE id = ?", [entity.id])
        case "workspace":
            try db.execute("DELETE FROM vault_workspaces WHERE id = ?", [entity.id])
        case "knownhost":
            if let line = try VaultSyncZone.knownHostLine(entity.id, db) { try db.execute("DELETE FROM vault_known_hosts WHERE line = ?", [line]) }
        default:
            return .invalid("the Vault has no kind '\(entity.kind)'")
        }
        return .applied
    }
}
