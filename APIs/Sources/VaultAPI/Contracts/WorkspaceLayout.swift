import FoundationEssentials
import TermindCore

/// A saved workspace: a named template of panes, each an SSH session on a saved host, an
/// SFTP prompt on one, or an empty pane (a local shell), arranged as a split tree.
public struct WorkspaceRecord: Sendable, Equatable, Codable {
    public var id: String
    public var name: String
    public var layout: WorkspaceLayout
    public var createdAt: String
    public var updatedAt: String

    public init(id: String, name: String, layout: WorkspaceLayout, createdAt: String, updatedAt: String) {
        self.id = id
        self.name = name
        self.layout = layout
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// One pane of a template. Hosts are saved hosts by id, so a renamed host stays in its
/// pane; a deleted one leaves the pane empty when the workspace opens.
public struct WorkspacePane: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, Codable, CaseIterable {
        case ssh, sftp, empty
    }

    public var kind: Kind
    public var host: String?

    public init(kind: Kind, host: String? = nil) {
        self.kind = kind
        self.host = host
    }
}

/// A split tree: a pane, or panes side by side (`horizontal`, left to right) or stacked
/// (`vertical`, top to bottom), each child taking its fraction of the parent.
/// JSON: `{"pane": {"kind": "ssh", "host": "host_…"}}` or
/// `{"split": "horizontal", "children": [{"fraction": 0.6, "layout": …}, …]}`.
public indirect enum WorkspaceLayout: Sendable, Equatable, Codable {
    case pane(WorkspacePane)
    case split(Direction, [Child])

    public enum Direction: String, Sendable, Codable {
        case horizontal, vertical
    }

    public struct Child: Sendable, Equatable, Codable {
        public var fraction: Double
        public var layout: WorkspaceLayout
        public init(fraction: Double, layout: WorkspaceLayout) {
            self.fraction = fraction
            self.layout = layout
        }
    }

    /// At most this many panes (a tmux window of 32 panes is already hard to read).
    public static let paneLimit = 32
    /// At most this many splits from the root to a pane.
    public static let depthLimit = 8

    private enum Keys: String, CodingKey { case pane, split, children }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        if let pane = try container.decodeIfPresent(WorkspacePane.self, forKey: .pane) {
            self = .pane(pane)
        } else {
            self = .split(try container.decode(Direction.self, forKey: .split), try container.decode([Child].self, forKey: .children))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        switch self {
        case .pane(let pane):
            try container.encode(pane, forKey: .pane)
        case .split(let direction, let children):
            try container.encode(direction, forKey: .split)
            try container.encode(children, forKey: .children)
        }
    }

    /// The panes in order: depth first, left to right and top to bottom. A pane's index
    /// in this list is its place in the workspace (`termind sessions` shows it).
    public var panes: [WorkspacePane] {
        switch self {
        case .pane(let pane): [pane]
        case .split(_, let children): children.flatMap(\.layout.panes)
        }
    }

    public var depth: Int {
        switch self {
        case .pane: 0
        case .split(_, let children): 1 + (children.map(\.layout.depth).max() ?? 0)
        }
    }

    /// The same tree with every split's fractions summing to exactly 1, after checking
    /// what a stored template may hold: at most `paneLimit` panes and `depthLimit` levels,
    /// two or more children per split, finite positive fractions that add up to 1 (within
    /// 1 %), a host on SSH and SFTP panes and none on empty ones. The error names the part.
    public func validated() throws -> WorkspaceLayout {
        let count = panes.count
        guard count <= Self.paneLimit else {
            throw TermindError.badRequest("layout: \(count) panes; a workspace holds at most \(Self.paneLimit).")
        }
        guard depth <= Self.depthLimit else {
            throw TermindError.badRequest("layout: splits nested \(depth) deep; at most \(Self.depthLimit).")
        }
        return try normalized(path: "layout")
    }

    private func normalized(path: String) throws -> WorkspaceLayout {
        switch self {
        case .pane(let pane):
            switch pane.kind {
            case .ssh, .sftp:
                guard let host = pane.host, !host.isEmpty, host.utf8.count <= 256 else {
                    throw TermindError.badRequest("\(path): an \(pane.kind.rawValue) pane needs a saved host.")
                }
            case .empty:
                guard pane.host == nil else { throw TermindError.badRequest("\(path): an empty pane has no host.") }
            }
            return self
        case .split(let direction, let children):
            guard children.count >= 2 else {
                throw TermindError.badRequest("\(path): a split needs two panes or more, not \(children.count).")
            }
            let total = children.reduce(0.0) { $0 + $1.fraction }
            for (index, child) in children.enumerated() where !(child.fraction.isFinite && child.fraction > 0) {
                throw TermindError.badRequest("\(path).children[\(index)]: the fraction must be above 0, not \(child.fraction).")
            }
            guard abs(total - 1) <= 0.01 else {
                throw TermindError.badRequest("\(path): the fractions add up to \(Self.percent(total)), not 100 %.")
            }
            return .split(direction, try children.enumerated().map { index, child in
                Child(fraction: child.fraction / total, layout: try child.layout.normalized(path: "\(path).children[\(index)]"))
            })
        }
    }

    static func percent(_ fraction: Double) -> String {
        fraction.isFinite ? "\((fraction * 1000).rounded() / 10) %" : "\(fraction)"
    }

    /// One pane per host, in a grid that fills rows first (as tmux's tiled layout):
    /// columns = ⌈√n⌉, rows as many as needed, the last row's panes sharing its width.
    public static func grid(_ panes: [WorkspacePane]) -> WorkspaceLayout {
        guard panes.count > 1 else { return .pane(panes.first ?? WorkspacePane(kind: .empty)) }
        let columns = Int(Double(panes.count).squareRoot().rounded(.up))
        let rows = stride(from: 0, to: panes.count, by: columns).map { Array(panes[$0..<min($0 + columns, panes.count)]) }
        func row(_ items: [WorkspacePane]) -> WorkspaceLayout {
            items.count == 1 ? .pane(items[0]) : .split(.horizontal, items.map { Child(fraction: 1 / Double(items.count), layout: .pane($0)) })
        }
        return rows.count == 1 ? row(rows[0]) : .split(.vertical, rows.map { Child(fraction: 1 / Double(rows.count), layout: row($0)) })
    }
}
