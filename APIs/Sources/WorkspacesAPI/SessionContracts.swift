import TermindCore

/// Durable sessions inside `termind serve`: list them, end one.
public enum WorkspacesContracts {
    /// What `termind sessions` shows of a durable session.
    public struct SessionInfo: Codable, Sendable, Equatable {
        /// The session's number (`termind attach ID`).
        public var id: Int
        /// The saved host's label, or the quick-connect target.
        public var host: String
        /// The command it runs instead of a login shell, if any.
        public var command: String?
        /// "attached", "detached", or "ended" (kept a while so that an attach can say how).
        public var state: String
        /// When it started (ISO 8601, UTC).
        public var started: String
        /// When its terminal last printed or was typed into (ISO 8601, UTC).
        public var lastActivity: String
        /// The shell's current folder, when it says it (OSC 7).
        public var directory: String?
        /// The window title its program set (OSC 0/2).
        public var title: String?
        /// Its terminal's size, COLUMNSxROWS.
        public var size: String
        /// How it ended, once ended.
        public var exitStatus: Int32?
        public var exitSignal: String?

        public init(id: Int, host: String, command: String?, state: String, started: String, lastActivity: String, directory: String?,
                    title: String?, size: String, exitStatus: Int32? = nil, exitSignal: String? = nil) {
            self.id = id
            self.host = host
            self.command = command
            self.state = state
            self.started = started
            self.lastActivity = lastActivity
            self.directory = directory
            self.title = title
            self.size = size
            self.exitStatus = exitStatus
            self.exitSignal = exitSignal
        }
    }

    public enum ListSessions: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var sessions: [SessionInfo]
            public init(sessions: [SessionInfo]) { self.sessions = sessions }
        }
        public static let name = "workspaces.sessions.list"
        public static let version = 1
        public static let summary = "The durable sessions of termind serve: host, state (attached, detached, ended), started, last activity, folder."
    }

    public enum CloseSession: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var session: Int
            public init(session: Int) { self.session = session }
        }
        public typealias Response = SessionInfo
        public static let name = "workspaces.sessions.close"
        public static let version = 1
        public static let summary = "End a durable session: its remote shell is hung up (SIGHUP) and its client, if any, told so."
    }
}

extension ErrorCode {
    /// Durable sessions live inside `termind serve`, and none answered.
    public static let workspacesNeedsServer: ErrorCode = "workspaces.needs_server"
    /// No durable session has that number.
    public static let workspacesNoSession: ErrorCode = "workspaces.no_session"
    /// The session has ended (its shell exited, it was closed).
    public static let workspacesSessionEnded: ErrorCode = "workspaces.session_ended"
}
