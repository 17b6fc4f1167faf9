import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import WorkspacesAPI
import WorkspacesRules

/// Saved workspaces as the command line sees them: a layout expression with host labels
/// in, a Vault record with host ids stored, and back.
struct WorkspaceTemplates {
    let ports: WorkspacesFeature.Ports

    func save(_ request: WorkspacesContracts.SaveWorkspace.Request) async throws -> WorkspacesContracts.WorkspaceSummary {
        let tree: PaneTree
        switch (request.layout, request.hosts) {
        case (let text?, nil):
            do { tree = try PaneLayout.parse(text) } catch let error as PaneLayoutError {
                throw TermindError.badRequest("layout: \(error.description). Write it as h(web 60%, v(db, sftp:db)) (termind help workspace save).")
            }
        case (nil, let hosts?):
            guard !hosts.isEmpty else { throw TermindError.badRequest("--hosts names no host.") }
            tree = Self.tree(WorkspaceLayout.grid(hosts.map { WorkspacePane(kind: .ssh, host: $0) }))
        case (nil, nil):
            throw TermindError.badRequest("Give the layout (h(web, db)) or --hosts a,b,c.")
        case (_?, _?):
            throw TermindError.badRequest("Give the layout or --hosts, not both.")
        }
        // Hosts are saved hosts, stored by id: a rename keeps the pane.
        var ids: [String: String] = [:]
        for leaf in tree.leaves {
            guard let reference = leaf.host, ids[reference] == nil else { continue }
            guard let host = try await ports.hosts.host(named: reference) else {
                throw TermindError(.vaultHostNotFound, "layout: '\(reference)' is not a saved host (termind vault host list shows them; a workspace's panes are saved hosts).")
            }
            ids[reference] = host.id
        }
        let layout = Self.layout(tree) { ids[$0] ?? $0 }
        let record = try await call(VaultContracts.WorkspaceSave.self, .init(name: request.name, layout: layout, replace: request.replace))
        return try await summary(record)
    }

    func list() async throws -> [WorkspacesContracts.WorkspaceSummary] {
        let records = try await call(VaultContracts.WorkspaceList.self, Empty()).workspaces
        let labels = try await labels()
        return records.map { Self.summary($0, labels: labels) }
    }

    func get(_ reference: String) async throws -> WorkspaceRecord {
        try await call(VaultContracts.WorkspaceGet.self, .init(workspace: reference))
    }

    /// Deletes a saved workspace (by name or id); its record as it was.
    func delete(_ reference: String) async throws -> WorkspaceRecord {
        let record = try await get(reference)
        _ = try await call(VaultContracts.WorkspaceDelete.self, .init(workspace: record.id))
        return record
    }

    func summary(_ record: WorkspaceRecord) async throws -> WorkspacesContracts.WorkspaceSummary {
        Self.summary(record, labels: try await labels())
    }

    /// Host id → label, for every saved host.
    func labels() async throws -> [String: String] {
        Dictionary(try await ports.hosts.allHosts().map { ($0.id, $0.label) }, uniquingKeysWith: { first, _ in first })
    }

    static func summary(_ record: WorkspaceRecord, labels: [String: String]) -> WorkspacesContracts.WorkspaceSummary {
        let panes = record.layout.panes.enumerated().map { index, pane in
            WorkspacesContracts.PaneInfo(pane: index + 1, kind: pane.kind.rawValue, host: pane.host.map { labels[$0] ?? $0 },
                                         missing: pane.host.map { labels[$0] == nil ? true : nil } ?? nil)
        }
        return .init(id: record.id, name: record.name, layout: PaneLayout.render(tree(record.layout)) { labels[$0] ?? $0 },
                     panes: panes, updatedAt: record.updatedAt)
    }

    private func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
        let reply = try await ports.call(C.id, try JSONCoding.encode(request))
        return try JSONDecoder().decode(C.Response.self, from: reply)
    }

    // MARK: - The two trees

    static func tree(_ layout: WorkspaceLayout) -> PaneTree {
        switch layout {
        case .pane(let pane):
            .pane(kind: PaneTree.Kind(rawValue: pane.kind.rawValue) ?? .empty, host: pane.host)
        case .split(let direction, let children):
            .split(horizontal: direction == .horizontal, children: children.map { .init(fraction: $0.fraction, tree: tree($0.layout)) })
        }
    }

    static func layout(_ tree: PaneTree, host: (String) -> String) -> WorkspaceLayout {
        switch tree {
        case .pane(let kind, let reference):
            .pane(WorkspacePane(kind: WorkspacePane.Kind(rawValue: kind.rawValue) ?? .empty, host: reference.map(host)))
        case .split(let horizontal, let children):
            .split(horizontal ? .horizontal : .vertical, children.map { .init(fraction: $0.fraction, layout: layout($0.tree, host: host)) })
        }
    }
}
