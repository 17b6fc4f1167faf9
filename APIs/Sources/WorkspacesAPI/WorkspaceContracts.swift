import TermindCore

/// Saved workspaces (templates of panes, kept as Vault records) and opening them in tmux.
extension WorkspacesContracts {
    /// A workspace as `termind workspace show` prints it: its layout written as an
    /// expression with today's host labels, and its panes.
    public struct WorkspaceSummary: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        /// `h(web 60%, v(db, sftp:db))`: see `termind help workspace save`.
        public var layout: String
        public var panes: [PaneInfo]
        public var updatedAt: String
        public init(id: String, name: String, layout: String, panes: [PaneInfo], updatedAt: String) {
            self.id = id
            self.name = name
            self.layout = layout
            self.panes = panes
            self.updatedAt = updatedAt
        }
    }

    public struct PaneInfo: Codable, Sendable, Equatable {
        /// From 1, depth first (as tmux numbers the panes it makes for them).
        public var pane: Int
        /// ssh, sftp or empty.
        public var kind: String
        /// The saved host's label; its id when the host no longer exists.
        public var host: String?
        /// The host was deleted: the pane opens empty.
        public var missing: Bool?
        public init(pane: Int, kind: String, host: String?, missing: Bool? = nil) {
            self.pane = pane
            self.kind = kind
            self.host = host
            self.missing = missing
        }
    }

    public enum SaveWorkspace: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            /// The layout expression; or `hosts` for a grid of SSH panes.
            public var layout: String?
            public var hosts: [String]?
            public var replace: Bool?
            public init(name: String, layout: String? = nil, hosts: [String]? = nil, replace: Bool? = nil) {
                self.name = name
                self.layout = layout
                self.hosts = hosts
                self.replace = replace
            }
        }
        public typealias Response = WorkspaceSummary
        public static let name = "workspaces.workspace.save"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a workspace from a layout expression or a list of hosts (a grid), as a Vault record."
    }

    public enum ListWorkspaces: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var workspaces: [WorkspaceSummary]
            public init(workspaces: [WorkspaceSummary]) { self.workspaces = workspaces }
        }
        public static let name = "workspaces.workspace.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "The saved workspaces, their layouts and panes."
    }

    public enum ShowWorkspace: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var workspace: String
            public init(workspace: String) { self.workspace = workspace }
        }
        public typealias Response = WorkspaceSummary
        public static let name = "workspaces.workspace.show"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "One saved workspace: its layout with today's host labels, and its panes."
    }
}

extension WorkspacesContracts {
    public enum DeleteWorkspace: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var workspace: String
            public init(workspace: String) { self.workspace = workspace }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public var name: String
            public init(deleted: String, name: String) {
                self.deleted = deleted
                self.name = name
            }
        }
        public static let name = "workspaces.workspace.delete"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Delete a saved workspace; its open sessions go on."
    }
}

extension WorkspacesStreams {
    /// Builds a workspace in tmux (`termind workspace open`): a new window of the client's
    /// tmux (when it runs in one: `tmux` holds its $TMUX) or a new tmux session, its panes
    /// split as the layout says, each running a termind client of this server on the pane's
    /// durable session — attached to the live one when that pane has one already.
    public enum OpenWorkspace: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved workspace (name or id); or `hosts` for one SSH pane per host.
            public var workspace: String?
            public var hosts: [String]?
            /// The client's $TMUX and $TMUX_PANE (filled by the CLI).
            public var tmux: String?
            public var tmuxPane: String?
            /// A new tmux session even inside tmux (its name: the workspace's).
            public var newSession: Bool?
            /// Open it even when its panes' sessions are attached in another window (whose
            /// panes then close); without it that is refused (`workspaces.already_open`).
            public var takeOver: Bool?
            public init(workspace: String? = nil, hosts: [String]? = nil, tmux: String? = nil, tmuxPane: String? = nil, newSession: Bool? = nil,
                        takeOver: Bool? = nil) {
                self.takeOver = takeOver
                self.workspace = workspace
                self.hosts = hosts
                self.tmux = tmux
                self.tmuxPane = tmuxPane
                self.newSession = newSession
            }
        }

        public struct Result: Codable, Sendable, Equatable {
            public var workspace: String
            /// The tmux session and window it was built in (`tmux attach -t SESSION`).
            public var tmuxSession: String
            public var tmuxWindow: String
            /// A new tmux session was made (not attached: `tmux attach -t` shows it).
            public var newSession: Bool
            public var panes: [PaneOpened]
            public init(workspace: String, tmuxSession: String, tmuxWindow: String, newSession: Bool, panes: [PaneOpened]) {
                self.workspace = workspace
                self.tmuxSession = tmuxSession
                self.tmuxWindow = tmuxWindow
                self.newSession = newSession
                self.panes = panes
            }
        }

        public struct PaneOpened: Codable, Sendable, Equatable {
            public var pane: Int
            public var kind: String
            public var host: String?
            /// tmux's pane id (`%12`).
            public var tmuxPane: String
            /// The durable session it attaches to, when one was open already.
            public var session: Int?
            /// What the pane shows instead (a deleted host).
            public var note: String?
            public init(pane: Int, kind: String, host: String?, tmuxPane: String, session: Int? = nil, note: String? = nil) {
                self.pane = pane
                self.kind = kind
                self.host = host
                self.tmuxPane = tmuxPane
                self.session = session
                self.note = note
            }
        }

        public static let name = "workspaces.workspace.open"

        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Open a saved workspace (or one pane per host) in tmux, each pane a durable session of termind serve."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "view": StreamEvents.view] }
    }
}

extension ErrorCode {
    public static let workspacesTmuxFailed: ErrorCode = "workspaces.tmux_failed"
    /// The workspace's panes are attached in another window already (`--take-over true` moves them).
    public static let workspacesAlreadyOpen: ErrorCode = "workspaces.already_open"
}
