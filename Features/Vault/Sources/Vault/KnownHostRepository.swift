import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindSSH
import VaultAPI
import TermindStore
import VaultRules

/// Trusted host keys, stored one OpenSSH known_hosts line per row so the one parser in
/// VaultRules is the only interpretation. Independent of hosts: no host operation touches
/// this table.
struct KnownHostRepository: Sendable {
    let db: Database

    struct Stored {
        let id: String
        let entry: KnownHostEntry
        let createdAt: String
    }

    func all() throws -> [Stored] {
        try db.query("SELECT id, line, created_at FROM vault_known_hosts ORDER BY created_at, id").compactMap { row in
            guard let id = row.string("id"), let line = row.string("line"),
                  let entry = KnownHosts.parse(line, source: "vault").entries.first else { return nil }
            return Stored(id: id, entry: entry, createdAt: try row.text("created_at"))
        }
    }

    func list(host: String?, port: Int?) throws -> [KnownHostRecord] {
        let stored = try all()
        guard let host else { return stored.map(Self.record) }
        let name = KnownHosts.lookupName(host: host, port: port ?? 22)
        return stored.filter { KnownHosts.matches($0.entry, lookupName: name) }.map(Self.record)
    }

    func check(host: String, port: Int, key: HostKey) throws -> TrustDecision {
        KnownHosts.check(host: host, port: port, key: key, entries: try all().map(\.entry))
    }

    func knownKeyTypes(host: String, port: Int) throws -> [String] {
        KnownHosts.knownKeyTypes(host: host, port: port, entries: try all().map(\.entry))
    }

    /// Adds an entry; an identical line is not added twice.
    @discardableResult
    func add(_ entry: KnownHostEntry) throws -> (record: KnownHostRecord, added: Bool) {
        try db.transaction {
            let line = entry.lineText
            if let existing = try db.query("SELECT id, created_at FROM vault_known_hosts WHERE line = ?", [line]).first {
                return (Self.record(Stored(id: try existing.text("id"), entry: entry, createdAt: try existing.text("created_at"))), false)
            }
            let id = RecordID.make("kh")
            try db.execute("INSERT INTO vault_known_hosts (id, line) VALUES (?, ?)", [id, line])
            try VaultJournal.changed(db, "knownhost", VaultJournal.knownHostID(line))
            let created = try db.scalar("SELECT created_at FROM vault_known_hosts WHERE id = ?", [id])
            guard case .text(let at) = created else { return (Self.record(Stored(id: id, entry: entry, createdAt: "")), true) }
            return (Self.record(Stored(id: id, entry: entry, createdAt: at)), true)
        }
    }

    func remove(_ id: String) throws -> String {
        try db.transaction {
            guard let line = try db.query("SELECT line FROM vault_known_hosts WHERE id = ?", [id]).first?.string("line") else {
                throw TermindError(.vaultKnownhostNotFound, "No known-host entry with id '\(id)'. Run 'termind vault knownhost list'.")
            }
            try db.execute("DELETE FROM vault_known_hosts WHERE id = ?", [id])
            try VaultJournal.changed(db, "knownhost", VaultJournal.knownHostID(line))
        }
        return id
    }

    /// Imports a known_hosts text: every readable line in one transaction; bad lines reported.
    func importText(_ text: String, source: String) throws -> KnownHostContracts.Import.Response {
        let parsed = KnownHosts.parse(text, source: source)
        var imported = 0, duplicates = 0
        try db.transaction {
            for entry in parsed.entries {
                if try add(entry).added { imported += 1 } else { duplicates += 1 }
            }
        }
        // A bounded reply: the first 100 problems, then how many more there were.
        var problems = parsed.problems.prefix(100).map(\.description)
        if parsed.problems.count > 100 { problems.append("… and \(parsed.problems.count - 100) more lines were skipped") }
        return .init(imported: imported, duplicates: duplicates, problems: problems)
    }

    func exportText() throws -> (text: String, count: Int) {
        let entries = try all().map(\.entry)
        return (KnownHosts.render(entries), entries.count)
    }

    static func record(_ stored: Stored) -> KnownHostRecord {
        let e = stored.entry
        let marker: String
        switch e.marker {
        case .none: marker = ""
        case .revoked: marker = "@revoked"
        case .certAuthority: marker = "@cert-authority"
        }
        let hashed: Bool
        if case .hashed = e.names { hashed = true } else { hashed = false }
        return KnownHostRecord(id: stored.id, marker: marker, names: e.namesText, hashed: hashed, keyType: e.key.algorithm,
                               fingerprint: e.key.fingerprintSHA256, comment: e.comment, createdAt: stored.createdAt)
    }
}

/// `vault.trust`: OpenSSH's trust decision on the Vault's known hosts.
struct VaultTrust: HostKeyTrust {
    let vault: VaultFeature

    // The store is read on Core's blocking executor, never on the cooperative pool.
    func verdict(host: String, port: Int, key: PublicHostKey) async throws -> TrustVerdict {
        try await BlockingExecutor.store.run { [vault] in try Self.verdict(vault, host: host, port: port, key: key) }
    }

    private static func verdict(_ vault: VaultFeature, host: String, port: Int, key: PublicHostKey) throws -> TrustVerdict {
        verdict(try vault.knownHosts().check(host: host, port: port, key: try HostKey(algorithm: key.algorithm, blob: key.blob)))
    }

    func knownKeyTypes(host: String, port: Int) async throws -> [String] {
        try await BlockingExecutor.store.run { [vault] in try vault.knownHosts().knownKeyTypes(host: host, port: port) }
    }

    func trust(host: String, port: Int, key: PublicHostKey) async throws {
        try await BlockingExecutor.store.run { [vault] in
            try vault.knownHosts().add(KnownHostEntry(host: host, port: port, key: try HostKey(algorithm: key.algorithm, blob: key.blob), hashed: false))
        }
    }

    func refusal(host: String, port: Int, key: PublicHostKey) async throws -> String? {
        try await BlockingExecutor.store.run { [vault] in try Self.refusal(vault, host: host, port: port, key: key) }
    }

    private static func refusal(_ vault: VaultFeature, host: String, port: Int, key: PublicHostKey) throws -> String? {
        let target = port == 22 ? host : "[\(host)]:\(port)"
        let presented = (try? HostKey(algorithm: key.algorithm, blob: key.blob))?.fingerprintSHA256 ?? "unparseable key"
        switch try verdict(vault, host: host, port: port, key: key) {
        case .changed(let known):
            let entries = try vault.knownHosts().list(host: host, port: port).filter { known.contains($0.fingerprint) }
            return """
                The host key of \(target) has CHANGED: it presents \(key.algorithm) \(presented), but termind trusts \(known.joined(separator: ", ")) for it. \
                This can mean someone is intercepting the connection; the connection was refused. If the server's key was \
                really replaced, verify the new fingerprint with its administrator, then remove the old entry \
                (termind vault knownhost remove \(entries.map(\.id).joined(separator: " "))) and connect again.
                """
        case .otherKeyTypes(let known):
            let fingerprints = Set(known.map(\.fingerprint))
            let entries = try vault.knownHosts().list(host: host, port: port).filter { fingerprints.contains($0.fingerprint) }
            let types = Array(Set(known.map(\.algorithm))).sorted()
            let trusted = known.map { "\($0.algorithm) \($0.fingerprint)" }.joined(separator: ", ")
            let (those, them) = types.count == 1 ? ("that type", "it") : ("those types", "them")
            let portOption = port == 22 ? "" : " --port \(port)"
            return "The host key of \(target) is not one termind trusts: it presents \(key.algorithm) \(presented), but termind trusts only "
                + "\(trusted) for it, and the server did not offer \(those) although termind asked for \(them) first. "
                + "OpenSSH refuses this too: the server's keys were replaced, or someone is intercepting the connection; the connection was refused. "
                + "If its administrator confirms the new fingerprint, trust it with termind vault knownhost add \(host) "
                + "'\(key.algorithm) \(key.blob.base64EncodedString())'\(portOption) "
                + "(and remove the old entry: termind vault knownhost remove \(entries.map(\.id).joined(separator: " ")))."
        case .revoked:
            return "The host key \(key.algorithm) \(presented) presented by \(target) is marked @revoked in termind's known hosts; the connection was refused."
        case .trusted, .trustedWithoutPort, .unknown:
            return nil
        }
    }

    func fingerprint(_ key: PublicHostKey) -> String {
        (try? HostKey(algorithm: key.algorithm, blob: key.blob))?.fingerprintSHA256 ?? "unparseable key"
    }

    static func verdict(_ decision: TrustDecision) -> TrustVerdict {
        switch decision {
        case .trusted: .trusted
        case .trustedWithoutPort: .trustedWithoutPort
        case .unknown: .unknown
        case .changed(let known): .changed(knownFingerprints: known.map(\.fingerprintSHA256))
        case .otherKeyTypes(let known): .otherKeyTypes(known: known.map { KnownKey(algorithm: $0.algorithm, fingerprint: $0.fingerprintSHA256) })
        case .revoked: .revoked
        }
    }
}
