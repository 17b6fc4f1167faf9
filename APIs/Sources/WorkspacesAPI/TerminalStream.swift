import TermindCore

extension WorkspacesStreams {
    /// An interactive session: a shell (or `command`) on a host through its route, with a
    /// remote terminal when the client has one (`terminal`). The client's terminal is
    /// bridged raw: its bytes are the input, the remote terminal's are `stdout` events, and
    /// `{"control": {"resize": {"columns", "rows"}}}` changes the remote terminal's size.
    /// Questions as for Exec. The result is the remote exit status.
    ///
    /// A client that hands over its terminal (stdin and stdout, `acceptsDescriptors`) has it
    /// moved by the SSH engine itself, as OpenSSH's client loop does: `started` then says
    /// `linked`, keys and output go straight between the terminal and the channel (no input
    /// lines, no `stdout` events), nothing moves until the client says its terminal is raw
    /// (`{"control": {"terminal": "ready"}}`; again after a suspend; `"pause"` holds it),
    /// and the escape sequences are read by the engine: `escape` events tell the client
    /// what was typed (`disconnect`, `suspend`, `detach`) so it acts as it would on its own
    /// (`~?` is answered on the terminal). Without a terminal, handed-over pipes are moved
    /// as Exec moves them.
    ///
    /// Inside `termind serve` a session with a terminal is durable: it belongs to the server,
    /// which keeps its screen (`started` says `session` and `detachable`). The client leaves
    /// it with `{"control": {"detach": true}}` (`~d`), or by going away; the result then says
    /// `detached` instead of an exit status, and `termind attach` (Attach) returns to it. A
    /// cancel with a signal (`~.`) ends it.
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
            /// Forwards for the session's lifetime, as ssh's -L, -R and -D (run by the
            /// PortForwarding feature: `[BIND:]PORT:HOST:HOSTPORT`, `[BIND:]PORT`).
            public var localForward: [String]?
            public var remoteForward: [String]?
            public var dynamicForward: [String]?
            /// A workspace pane's session (`termind workspace open` starts panes with these):
            /// inside `termind serve`, a live session of the same workspace, pane and host is
            /// attached instead of opening another (no second authentication).
            public var workspace: String?
            public var pane: Int?
            /// Forward the local agent (`-A`); nil: as the saved host says (off by default).
            public var forwardAgent: Bool?
            /// As ssh's `-p`, `-J` and `-i`: the target's port, hosts to jump through (`a,b`),
            /// a key file (relative to `workingDirectory`).
            public var port: Int?
            public var jump: String?
            public var identityFile: String?
            /// ssh's `-t`: a remote terminal for a command too. termind gives one whenever
            /// the client's standard input is a terminal, so this changes nothing; it is
            /// taken so that ssh's habit works.
            public var tty: Bool?
            /// ssh's `-N` (no shell, forwards only): refused, naming `termind forward run`.
            public var noCommand: Bool?

            public init(target: String, command: String? = nil, user: String? = nil, identity: String? = nil, connectTimeout: Double? = nil,
                        acceptHostKey: Exec.HostKeyPreset? = nil, workingDirectory: String? = nil, terminal: TerminalSize? = nil,
                        localForward: [String]? = nil, remoteForward: [String]? = nil, dynamicForward: [String]? = nil,
                        workspace: String? = nil, pane: Int? = nil, forwardAgent: Bool? = nil) {
                self.forwardAgent = forwardAgent
                self.workspace = workspace
                self.pane = pane
                self.localForward = localForward
                self.remoteForward = remoteForward
                self.dynamicForward = dynamicForward
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

        public typealias Result = SessionResult

        public static let name = "workspaces.terminal"
        public static func hosts(in request: Request) -> [String] { [request.target] }

        public static let effect: Effect = Effect(.destructive, network: true)
        public static let version = 1
        public static let summary = "Open an interactive SSH session (a shell, or a command) with a remote terminal bridged to the client's."
        public static let acceptsInput = true
        /// The client's terminal (or pipes) moved by the engine itself.
        public static let acceptsDescriptors = true
        /// `started` once the session runs (the client's terminal goes raw only then, after
        /// any question), then the remote terminal's output.
        public static var events: [String: JSONSchema] { WorkspacesStreams.sessionEvents }
        public static var questions: [String: String] { WorkspacesStreams.connectionQuestions }
    }

    /// Returns to a durable session inside `termind serve` (`termind attach ID`): the
    /// session's current screen is drawn on the client's terminal from the server's model of
    /// it (its scrollback first, `scrollback` lines at most), then the session goes on as
    /// for Terminal. A client attached already is detached (it is told so).
    public enum Attach: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// The session's number (`termind sessions`).
            public var session: Int
            /// Scrollback lines to draw before the screen (nil: all the session keeps; 0: none).
            public var scrollback: Int?
            /// The client's terminal (required: a session is attached to a terminal).
            public var terminal: Terminal.TerminalSize?

            public init(session: Int, scrollback: Int? = nil, terminal: Terminal.TerminalSize? = nil) {
                self.session = session
                self.scrollback = scrollback
                self.terminal = terminal
            }
        }

        public typealias Result = SessionResult

        public static let name = "workspaces.attach"

        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Return to a durable session inside termind serve: its screen is redrawn, then it goes on."
        public static let acceptsInput = true
        /// The client's terminal moved by the engine itself, as for Terminal.
        public static let acceptsDescriptors = true
        public static var events: [String: JSONSchema] { WorkspacesStreams.sessionEvents }
    }

    /// What an interactive session emits: its terminal's output, `started` once the client's
    /// terminal may go raw (with the durable session's number), a closing `view` and notices.
    public static var sessionEvents: [String: JSONSchema] {
        StreamEvents.output.merging([
            "started": StreamEvents.fields([("session", .integer, false), ("detachable", .boolean, false), ("linked", .boolean, false)]),
            "escape": StreamEvents.fields([("action", .string(), true)]),
            "view": StreamEvents.view,
            "notice": StreamEvents.notice,
        ]) { $1 }
    }

    /// How an interactive session left its client: the remote exit status, or detached
    /// (the session goes on inside the server).
    public struct SessionResult: Codable, Sendable, Equatable {
        /// The remote exit status; nil when a signal ended it, or when detached.
        public var exitStatus: Int32?
        public var exitSignal: String?
        /// The durable session's number, when there is one.
        public var session: Int?
        /// The client left a session that goes on (`~d`, another client attached, the window closed).
        public var detached: Bool?
        /// Why, when detached: "detached" (asked), "attached-elsewhere", "closed" (the client went away).
        public var reason: String?

        public init(exitStatus: Int32?, exitSignal: String?, session: Int? = nil, detached: Bool? = nil, reason: String? = nil) {
            self.exitStatus = exitStatus
            self.exitSignal = exitSignal
            self.session = session
            self.detached = detached
            self.reason = reason
        }

        enum CodingKeys: String, CodingKey { case exitStatus, exitSignal, session, detached, reason }

        /// A session that ended carries `exitStatus` (null when none was reported), so a
        /// client reads it as a command's result; a detached one does not.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            if detached == true { try c.encode(true, forKey: .detached) } else { try c.encode(exitStatus, forKey: .exitStatus) }
            try c.encodeIfPresent(exitSignal, forKey: .exitSignal)
            try c.encodeIfPresent(session, forKey: .session)
            try c.encodeIfPresent(reason, forKey: .reason)
        }
    }
}

extension WorkspacesStreams {
    /// `termind serial DEVICE`: a temporary session on a local serial line (a console cable,
    /// a board's UART) with the client's terminal bridged as for Terminal; never saved, never
    /// a host anything else reaches. The line is set raw with the speed, parity, stop bits,
    /// data bits and flow control asked for, and put back as it was when the session ends.
    public enum Serial: StreamContract {
        public enum Parity: String, Codable, Sendable, SchemaEnum { case none, even, odd }
        public enum Flow: String, Codable, Sendable, SchemaEnum { case none, rtscts, xonxoff }
        public struct Request: Codable, Sendable, Equatable {
            /// The device (`/dev/ttyUSB0`), absolute.
            public var device: String
            /// Bits per second (default 115200).
            public var baud: Int?
            public var parity: Parity?
            /// 1 or 2 (default 1).
            public var stop: Int?
            /// 5 to 8 (default 8).
            public var data: Int?
            public var flow: Flow?
            public var terminal: Terminal.TerminalSize?
            public init(device: String, baud: Int? = nil, parity: Parity? = nil, stop: Int? = nil, data: Int? = nil, flow: Flow? = nil,
                        terminal: Terminal.TerminalSize? = nil) {
                self.device = device
                self.baud = baud
                self.parity = parity
                self.stop = stop
                self.data = data
                self.flow = flow
                self.terminal = terminal
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// Bytes read from and written to the line.
            public var received: Int
            public var sent: Int
            public init(received: Int, sent: Int) {
                self.received = received
                self.sent = sent
            }
        }
        public static let name = "workspaces.serial"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "A temporary session on a local serial line, the client's terminal bridged (speed, parity, stop and data bits, flow control)."
        public static let acceptsInput = true
        public static var events: [String: JSONSchema] { StreamEvents.output.merging(["started": StreamEvents.fields([])]) { $1 } }
    }
}
