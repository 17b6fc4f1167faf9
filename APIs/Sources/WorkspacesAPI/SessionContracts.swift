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
        /// The workspace (its name) and pane (from 1) it was opened for, if any.
        public var workspace: String?
        public var pane: Int?

        public init(id: Int, host: String, command: String?, state: String, started: String, lastActivity: String, directory: String?,
                    title: String?, size: String, exitStatus: Int32? = nil, exitSignal: String? = nil, workspace: String? = nil, pane: Int? = nil) {
            self.workspace = workspace
            self.pane = pane
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
        public static let effect: Effect = .read
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
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "End a durable session: its remote shell is hung up (SIGHUP) and its client, if any, told so."
    }
}

extension WorkspacesContracts {
    /// A command a shell reported (shell integration, OSC 133), as history keeps it.
    public struct HistoryEntry: Codable, Sendable, Equatable {
        /// The command line (backslash continuations joined; may span lines).
        public var command: String
        /// Its exit status, as the shell reported it.
        public var exitStatus: Int32?
        /// How long it ran by the remote shell's clock, when the shell measured it.
        public var durationMilliseconds: Int?
        /// The folder it ran in, when the shell said (OSC 7).
        public var directory: String?
        /// When it finished (ISO 8601, UTC, this machine's clock when the report arrived).
        public var finished: String

        public init(command: String, exitStatus: Int32?, durationMilliseconds: Int?, directory: String?, finished: String) {
            self.command = command
            self.exitStatus = exitStatus
            self.durationMilliseconds = durationMilliseconds
            self.directory = directory
            self.finished = finished
        }
    }
}

extension WorkspacesStreams {
    /// `termind history HOST`: the commands a host's shells reported, oldest first (at most
    /// 1,000 per host, kept on this device only). Shown as a table with each command's first
    /// line; the result holds them whole.
    public enum History: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label), or `user@host[:port]` as `termind sessions` shows a quick-connect target.
            public var host: String
            /// Only commands matching this regular expression.
            public var grep: String?
            /// Only the newest N.
            public var limit: Int?
            public init(host: String, grep: String? = nil, limit: Int? = nil) {
                self.host = host
                self.grep = grep
                self.limit = limit
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var host: String
            public var entries: [WorkspacesContracts.HistoryEntry]
            public init(host: String, entries: [WorkspacesContracts.HistoryEntry]) {
                self.host = host
                self.entries = entries
            }
        }
        public static let name = "workspaces.history"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "The commands a host's shells reported (exit status, duration, folder), oldest first; --grep PATTERN, --limit N."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }
}

extension ErrorCode {
    /// Durable sessions live inside `termind serve`, and none answered.
    public static let workspacesNeedsServer: ErrorCode = "workspaces.needs_server"
    /// No durable session has that number.
    public static let workspacesNoSession: ErrorCode = "workspaces.no_session"
    /// The session has ended (its shell exited, it was closed).
    public static let workspacesSessionEnded: ErrorCode = "workspaces.session_ended"
    /// -L/-R/-D were asked for and the PortForwarding feature does not run.
    public static let workspacesForwardingUnavailable: ErrorCode = "workspaces.forwarding_unavailable"
    /// A serial line could not be opened or set up (the message names the device).
    public static let workspacesSerialFailed: ErrorCode = "workspaces.serial_failed"
}

extension WorkspacesStreams {
    /// `termind broadcast`: types the same text into several durable sessions (inside
    /// `termind serve`) — keys only, never mouse reports — and says, per session, whether it
    /// was delivered. Where the session's program asked for bracketed paste (`CSI ? 2004 h`)
    /// the text goes as one paste; otherwise each newline is typed as Enter. Enter follows
    /// the text unless `enter` is false. Without `text`, the client's standard input is the
    /// text (64 KiB at most).
    public enum Broadcast: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// Session numbers (`termind sessions`).
            public var sessions: [Int]?
            /// Every session that is running.
            public var all: Bool?
            /// Every running session of this workspace's panes (its name).
            public var workspace: String?
            public var text: String?
            /// Press Enter after the text (default true).
            public var enter: Bool?
            public init(sessions: [Int]? = nil, all: Bool? = nil, workspace: String? = nil, text: String? = nil, enter: Bool? = nil) {
                self.workspace = workspace
                self.sessions = sessions
                self.all = all
                self.text = text
                self.enter = enter
            }
        }

        public struct Delivery: Codable, Sendable, Equatable {
            public var session: Int
            public var host: String
            public var delivered: Bool
            /// Bytes typed (markers included).
            public var bytes: Int
            /// Sent as a bracketed paste.
            public var bracketedPaste: Bool
            public var error: String?
            public init(session: Int, host: String, delivered: Bool, bytes: Int, bracketedPaste: Bool, error: String? = nil) {
                self.session = session
                self.host = host
                self.delivered = delivered
                self.bytes = bytes
                self.bracketedPaste = bracketedPaste
                self.error = error
            }
        }

        public struct Result: Codable, Sendable, Equatable {
            public var deliveries: [Delivery]
            /// 0: delivered to every session; 3: to some; 1: to none.
            public var exitStatus: Int32
            public init(deliveries: [Delivery], exitStatus: Int32) {
                self.deliveries = deliveries
                self.exitStatus = exitStatus
            }
        }

        public static let name = "workspaces.broadcast"

        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Type the same text into several durable sessions (bracketed paste where asked for), with delivery per session."
        public static let acceptsInput = true
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }
}
