import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import TermindCrypto
import TermindStore

/// Hosts in the process database. Every write is one transaction; labels are unique
/// (case-insensitively) so `host(named:)` is never ambiguous.
struct HostRepository: Sendable {
    let db: Database

    func list(tag: String?) throws -> [HostRecord] {
        try db.query("SELECT * FROM vault_hosts ORDER BY label COLLATE NOCASE").map(Self.record)
            .filter { tag == nil || $0.tags.contains(tag!) }
    }

    /// By id, else by label (case-insensitive).
    func find(_ ref: String) throws -> HostRecord? {
        // Two indexed lookups: an OR across both columns would scan the table.
        if let byID = try db.query("SELECT * FROM vault_hosts WHERE id = ?", [ref]).first { return try Self.record(byID) }
        return try db.query("SELECT * FROM vault_hosts WHERE label = ? COLLATE NOCASE", [ref]).first.map(Self.record)
    }

    func get(_ ref: String) throws -> HostRecord {
        guard let host = try find(ref) else {
            throw TermindError(.vaultHostNotFound, "No saved host with id or label '\(ref)'. Run 'termind vault host list'.")
        }
        return host
    }

    func add(_ r: VaultContracts.HostAdd.Request, identities: IdentityRepository) throws -> HostRecord {
        try db.transaction {
            let address = try VaultValidation.address(r.address)
            let port = try VaultValidation.port(r.port ?? 22)
            let id = RecordID.make("host")
            let label = try resolvedLabel(r.label, address: address, port: port, excluding: nil)
            let user = try r.user.flatMap { $0.isEmpty ? nil : try VaultValidation.user($0) }
            let identity = try r.identity.flatMap { $0.isEmpty ? nil : try identities.get($0).id }
            let jump = try route(r.jump ?? [], for: id)
            try db.execute("""
                INSERT INTO vault_hosts (id, label, address, port, user, identity_id, jump, tags, shell_integration, forward_agent)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [id, label, address, port, user, identity, try Self.json(jump), try Self.json(VaultValidation.tags(r.tags ?? [])),
                      (r.shellIntegration ?? .default).rawValue, r.forwardAgent == true ? 1 : 0])
            try VaultJournal.changed(db, "host", id)
            return try get(id)
        }
    }

    func update(_ r: VaultContracts.HostUpdate.Request, identities: IdentityRepository) throws -> HostRecord {
        try db.transaction {
            var host = try get(r.host)
            if let address = r.address { host.address = try VaultValidation.address(address) }
            if let port = r.port { host.port = try VaultValidation.port(port) }
            if let label = r.label { host.label = try resolvedLabel(label, address: host.address, port: host.port, excluding: host.id) }
            if let user = r.user { host.user = user.isEmpty ? nil : try VaultValidation.user(user) }
            if let identity = r.identity { host.identity = identity.isEmpty ? nil : try identities.get(identity).id }
            if let jump = r.jump { host.jump = try route(jump, for: host.id) }
            if let tags = r.tags { host.tags = try VaultValidation.tags(tags) }
            if let shell = r.shellIntegration { host.shellIntegration = shell }
            if let forward = r.forwardAgent { host.forwardAgent = forward }
            try db.execute("""
                UPDATE vault_hosts SET label = ?, address = ?, port = ?, user = ?, identity_id = ?, jump = ?, tags = ?,
                    shell_integration = ?, forward_agent = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?
                """, [host.label, host.address, host.port, host.user, host.identity, try Self.json(host.jump), try Self.json(host.tags),
                      host.shellIntegration.rawValue, host.forwardAgent == true ? 1 : 0, host.id])
            try VaultJournal.changed(db, "host", host.id)
            return try get(host.id)
        }
    }

    func delete(_ ref: String) throws -> String {
        try db.transaction {
            let host = try get(ref)
            let routedThrough = try list(tag: nil).filter { $0.jump.contains(host.id) }.map(\.label)
            guard routedThrough.isEmpty else {
                throw TermindError(.vaultHostInUse, "Host '\(host.label)' is a jump host for \(routedThrough.map { "'\($0)'" }.joined(separator: ", ")); change their routes first.")
            }
            try db.execute("DELETE FROM vault_hosts WHERE id = ?", [host.id])
            try VaultJournal.changed(db, "host", host.id)
            return host.id
        }
    }

    /// Labels of hosts that use an identity (to refuse deleting it).
    func labels(usingIdentity id: String) throws -> [String] {
        try db.query("SELECT label FROM vault_hosts WHERE identity_id = ? ORDER BY label COLLATE NOCASE", [id]).compactMap { $0.string("label") }
    }

    // MARK: - Rules

    /// The seed's optional-name default: blank saves the address (with the port when it is
    /// not 22 and the plain address is taken); a non-empty label is kept as typed.
    private func resolvedLabel(_ requested: String?, address: String, port: Int, excluding id: String?) throws -> String {
        let typed = try VaultValidation.label(requested ?? "")
        let candidates = typed.isEmpty ? [address] + (port == 22 ? [] : ["\(address):\(port)"]) : [typed]
        for candidate in candidates {
            let owner = try db.query("SELECT id FROM vault_hosts WHERE label = ? COLLATE NOCASE", [candidate]).first?.string("id")
            if owner == nil || owner == id { return candidate }
        }
        throw TermindError(.vaultLabelTaken, "label: '\(candidates.last!)' is already used by another host; choose a label.")
    }

    /// Resolves jump refs to ids; at most seven jumps (eight hosts), no host twice, not the target.
    private func route(_ refs: [String], for target: String) throws -> [String] {
        guard refs.count < VaultValidation.maximumRoute else {
            throw TermindError.badRequest("jump: a route has at most \(VaultValidation.maximumRoute) hosts including the target; \(refs.count + 1) given.")
        }
        var ids: [String] = []
        for ref in refs {
            let hop = try get(ref)
            guard hop.id != target else { throw TermindError.badRequest("jump: the route goes through the host itself ('\(hop.label)'), a cycle.") }
            guard !ids.contains(hop.id) else { throw TermindError.badRequest("jump: '\(hop.label)' appears twice in the route, a cycle.") }
            ids.append(hop.id)
        }
        return ids
    }

    /// A stored list of strings (tags, a route), as JSONEncoder wrote it before: the same text.
    static func json(_ values: [String]) throws -> String {
        String(decoding: try JSONCoding.encode(JSONValue.array(values.map(JSONValue.string))), as: UTF8.self)
    }

    /// A stored list of strings; none when the text is not a JSON array of strings. (Read
    /// for every host listed: the parser, not a JSONDecoder made per row.)
    static func strings(_ text: String?) -> [String] {
        guard let text, case .array(let items)? = try? JSONCoding.parse(Data(text.utf8), source: "a stored list") else { return [] }
        var strings: [String] = []
        strings.reserveCapacity(items.count)
        for item in items {
            guard case .string(let value) = item else { return [] }
            strings.append(value)
        }
        return strings
    }

    static func record(_ row: Row) throws -> HostRecord {
        let shell = try row.text("shell_integration")
        guard let integration = ShellIntegration(rawValue: shell) else {
            throw TermindError(.storeCorrupt, "A stored host has shell integration '\(shell)', which is not default, enabled or disabled; the database was changed outside termind.")
        }
        return HostRecord(id: try row.text("id"), label: try row.text("label"), address: try row.text("address"),
                   port: try row.integer("port"), user: row.string("user"), identity: row.string("identity_id"),
                   jump: strings(row.string("jump")), tags: strings(row.string("tags")),
                   shellIntegration: integration,
                   forwardAgent: row.int("forward_agent") == 1 ? true : nil,
                   createdAt: try row.text("created_at"), updatedAt: try row.text("updated_at"))
    }
}
