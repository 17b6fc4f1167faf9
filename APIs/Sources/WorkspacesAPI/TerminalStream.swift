import TermindCore

extension WorkspacesStreams {
    /// An interactive session: a shell (or `command`) on a host through its route, with a
    /// remote terminal when the client has one (`terminal`). The client's terminal is
    /// bridged raw: its bytes are the input, the remote terminal's are `stdout` events, and
    /// `{"control": {"resize": {"columns", "rows"}}}` changes the remote terminal's size.
    /// Questions as for Exec. The result is the remote exit status.
    public enum Terminal: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label) or a quick-connect line.
            public var target: String
            /// A command to run instead of the login shell.
            public var command: String?
            public var user: String?
            public var identity: String?
            public var connectTimeout: Double?
            public var acceptHostKey: Exec.HostKeyPreset?
            public var workingDirectory: String?
            /// The client's terminal; absent: no remote terminal (stdin is not a terminal).
            public var terminal: TerminalSize?

            public init(target: String, command: String? = nil, user: String? = nil, identity: String? = nil, connectTimeout: Double? = nil,
                        acceptHostKey: Exec.HostKeyPreset? = nil, workingDirectory: String? = nil, terminal: TerminalSize? = nil) {
                self.target = target
                self.command = command
                self.user = user
                self.identity = identity
                self.connectTimeout = connectTimeout
                self.acceptHostKey = acceptHostKey
                self.workingDirectory = workingDirectory
                self.terminal = terminal
            }
        }

        /// The client's terminal as it starts: its TERM and size, and the locale to pass.
        public struct TerminalSize: Codable, Sendable, Equatable {
            public var term: String
            public var columns: Int
            public var rows: Int
            /// LANG and LC_* of the client, offered to the server (sshd's AcceptEnv decides).
            public var environment: [String: String]?
            public init(term: String, columns: Int, rows: Int, environment: [String: String]? = nil) {
                self.term = term
                self.columns = columns
                self.rows = rows
                self.environment = environment
            }
        }

        public typealias Result = Exec.Result

        public static let name = "workspaces.terminal"
        public static let version = 1
        public static let summary = "Open an interactive SSH session (a shell, or a command) with a remote terminal bridged to the client's."
        public static let acceptsInput = true
        /// `started` once the session runs (the client's terminal goes raw only then, after
        /// any question), then the remote terminal's output.
        public static var events: [String: JSONSchema] { StreamEvents.output.merging(["started": StreamEvents.fields([])]) { $1 } }
        public static var questions: [String: String] { WorkspacesStreams.connectionQuestions }
    }
}
