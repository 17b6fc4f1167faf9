import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindStore
import VaultAPI

/// Saved workspaces: a name and a split tree of panes (JSON), in `vault_workspaces`.
struct WorkspaceRepository: Sendable {
    let db: Database

    /// Letters, digits, `-` and `_`: a name is also a tmux session's and window's name.
    static func name(_ raw: String) throws -> String {
        let name = raw.trimmedWhitespace
        guard !name.isEmpty, name.utf8.count <= 64,
              name.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }) else {
            throw TermindError.badRequest("name: '\(raw)' is not a workspace name (1 to 64 letters, digits, - and _).")
        }
        return name
    }

    func list() throws -> [WorkspaceRecord] {
        try db.query("SELECT * FROM vault_workspaces ORDER BY name COLLATE NOCASE").map(Self.record)
    }

    func get(_ ref: String) throws -> WorkspaceRecord {
        guard let row = try db.query("SELECT * FROM vault_workspaces WHERE id = ?", [ref]).first
                ?? db.query("SELECT * FROM vault_workspaces WHERE name = ? COLLATE NOCASE", [ref]).first else {
            let names = try list().map(\.name)
            throw TermindError(.vaultWorkspaceNotFound, "No workspace is named '\(ref)'"
                + (names.isEmpty ? "; termind workspace save NAME LAYOUT saves one." : " (saved: \(names.joined(separator: ", ")))."))
        }
        return try Self.record(row)
    }

    func save(_ request: VaultContracts.WorkspaceSave.Request) throws -> WorkspaceRecord {
        let name = try Self.name(request.name)
        let layout = try request.layout.validated()
        let json = String(decoding: try JSONCoding.encode(layout), as: UTF8.self)
        return try db.transaction {
            for (index, pane) in layout.panes.enumerated() {
                guard let host = pane.host else { continue }
                guard try !db.query("SELECT id FROM vault_hosts WHERE id = ?", [host]).isEmpty else {
                    throw TermindError(.vaultHostNotFound, "layout: pane \(index + 1) names host '\(host)', which is not a saved host's id.")
                }
            }
            if let row = try db.query("SELECT id, name FROM vault_workspaces WHERE name = ? COLLATE NOCASE", [name]).first, let existing = row.string("id") {
                guard request.replace == true else {
                    // Names match whatever their case: say the one it has.
                    let taken = row.string("name") ?? name
                    throw TermindError(.vaultLabelTaken, "name: a workspace is named '\(taken)' already\(taken == name ? "" : " (names match whatever their case)"); "
                        + "--replace true replaces it.")
                }
                try db.execute("""
                    UPDATE vault_workspaces SET name = ?, layout = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?
                    """, [name, json, existing])
                try VaultJournal.changed(db, "workspace", existing)
                return try get(existing)
            }
            let id = RecordID.make("ws")
            try db.execute("INSERT INTO vault_workspaces (id, name, layout) VALUES (?, ?, ?)", [id, name, json])
            try VaultJournal.changed(db, "workspace", id)
            return try get(id)
        }
    }

    func delete(_ ref: String) throws -> String {
        let record = try get(ref)
        try db.transaction {
            try db.execute("DELETE FROM vault_workspaces WHERE id = ?", [record.id])
            try VaultJournal.changed(db, "workspace", record.id)
        }
        return record.id
    }

    static func record(_ row: Row) throws -> WorkspaceRecord {
        let id = try row.text("id")
        let layout: WorkspaceLayout
        do {
            layout = try JSONDecoder().decode(WorkspaceLayout.self, from: Data(try row.text("layout").utf8))
        } catch {
            throw TermindError.internalFailure("The stored layout of workspace \(id) does not read: \(error)")
        }
        return WorkspaceRecord(id: id, name: try row.text("name"), layout: layout,
                               createdAt: try row.text("created_at"), updatedAt: try row.text("updated_at"))
    }
}
