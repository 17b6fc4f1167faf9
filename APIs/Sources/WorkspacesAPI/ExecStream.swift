import TermindCore
import VaultAPI

/// Workspaces: SSH sessions on saved hosts and quick-connect targets: one command
/// (`termind exec`, Exec) or an interactive session (`termind ssh`, Terminal).
public enum WorkspacesStreams {
    /// What connecting may ask: an unknown host key, a key's passphrase, keyboard-interactive prompts.
    public static let connectionQuestions = ConnectionOpener.questions

    /// Runs a command on a host through its route and streams its output back.
    ///
    /// Events: `stdout` and `stderr` (their bytes, as they arrive). Questions: an
    /// unknown host key (`choice`: save, once, or reject), keyboard-interactive prompts and
    /// a `-i` key's passphrase (`prompts`). Input: the client's standard input, to the
    /// command's. A cancel with `signal` ends the remote command with that signal.
    public enum Exec: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label) or a quick-connect line.
            public var target: String
            /// The remote command line (the remote shell splits it).
            public var command: String
            public var user: String?
            public var identity: String?
            /// Seconds the command may run.
            public var timeout: Double?
            /// Seconds for name resolution, TCP connect and the handshake, per hop.
            public var connectTimeout: Double?
            /// Answers an unknown host key without asking.
            public var acceptHostKey: HostKeyPreset?
            /// The client's working folder (for a relative `-i` key file).
            public var workingDirectory: String?
            /// As ssh's `-p`, `-J` and `-i`: the target's port, hosts to jump through (`a,b`),
            /// a key file (relative to `workingDirectory`).
            public var port: Int?
            public var jump: String?
            public var identityFile: String?

            public init(target: String, command: String, user: String? = nil, identity: String? = nil, timeout: Double? = nil,
                        connectTimeout: Double? = nil, acceptHostKey: HostKeyPreset? = nil, workingDirectory: String? = nil,
                        port: Int? = nil, jump: String? = nil) {
                self.port = port
                self.jump = jump
                self.target = target
                self.command = command
                self.user = user
                self.identity = identity
                self.timeout = timeout
                self.connectTimeout = connectTimeout
                self.acceptHostKey = acceptHostKey
                self.workingDirectory = workingDirectory
            }
        }

        /// Answers an unknown host key without asking (the Vault's, shared by every SSH feature).
        public typealias HostKeyPreset = VaultAPI.HostKeyPreset

        public struct Result: Codable, Sendable, Equatable {
            /// The remote exit status; nil when a signal ended the command.
            public var exitStatus: Int32?
            public var exitSignal: String?
            public init(exitStatus: Int32?, exitSignal: String?) {
                self.exitStatus = exitStatus
                self.exitSignal = exitSignal
            }
            enum CodingKeys: String, CodingKey { case exitStatus, exitSignal }
            /// `exitStatus` is always present (null when none was reported): a client tells a
            /// command's result by it.
            public func encode(to encoder: any Encoder) throws {
                var c = encoder.container(keyedBy: CodingKeys.self)
                try c.encode(exitStatus, forKey: .exitStatus)
                try c.encodeIfPresent(exitSignal, forKey: .exitSignal)
            }
        }

        public static let name = "workspaces.exec"
        public static func hosts(in request: Request) -> [String] { [request.target] }

        public static let effect: Effect = Effect(.destructive, network: true)
        public static let version = 1
        public static let summary = "Run a command over SSH on a saved host or a quick-connect target, streaming its output."
        public static let acceptsInput = true
        /// A client's stdin, stdout and stderr go straight to and from the channel.
        public static let acceptsDescriptors = true
        public static var events: [String: JSONSchema] { StreamEvents.output }
        public static var questions: [String: String] { WorkspacesStreams.connectionQuestions }
    }
}

extension WorkspacesStreams {
    /// `termind snippet run`: one command (a saved snippet's body, or the words given) on many
    /// hosts at once — at most `parallel` at a time, one exec channel each on the process's
    /// shared connections. Progress while it runs (hosts done of all, which run); each host's
    /// output grouped under its name once it finished (`stdout` events); then a table of the
    /// hosts with their exit status. The result holds every host's outcome, its output
    /// (bounded, base64 when not UTF-8) and `exitStatus` 0 when every host succeeded, 3 when
    /// some failed, 1 when none did.
    public enum RunSnippet: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved snippet (id or label); or give `command`.
            public var snippet: String?
            /// The command line (the words after `--`, joined as ssh joins them).
            public var command: String?
            /// Saved hosts (id or label) or quick-connect targets (`user@host:port`).
            public var hosts: [String]?
            /// Every saved host with this tag.
            public var tag: String?
            /// Hosts at once (1-64; default 8).
            public var parallel: Int?
            /// Seconds each host's command may run.
            public var timeout: Double?
            public var connectTimeout: Double?
            public var acceptHostKey: Exec.HostKeyPreset?
            public var workingDirectory: String?

            public init(snippet: String? = nil, command: String? = nil, hosts: [String]? = nil, tag: String? = nil, parallel: Int? = nil,
                        timeout: Double? = nil, connectTimeout: Double? = nil, acceptHostKey: Exec.HostKeyPreset? = nil, workingDirectory: String? = nil) {
                self.snippet = snippet
                self.command = command
                self.hosts = hosts
                self.tag = tag
                self.parallel = parallel
                self.timeout = timeout
                self.connectTimeout = connectTimeout
                self.acceptHostKey = acceptHostKey
                self.workingDirectory = workingDirectory
            }
        }

        /// One host's outcome.
        public struct HostOutcome: Codable, Sendable, Equatable {
            public var host: String
            /// "succeeded" (exit 0), "failed" (another status or a signal), "error" (no command ran: connecting, authentication, …).
            public var state: String
            public var exitStatus: Int32?
            public var exitSignal: String?
            /// Why it could not run, for "error".
            public var error: String?
            public var errorCode: String?
            public var stdout: String
            public var stderr: String
            /// "utf-8", or "base64" when the bytes are not UTF-8.
            public var stdoutEncoding: String
            public var stderrEncoding: String
            /// More than 1 MiB of output on a stream: the rest was read and dropped.
            public var truncated: Bool
            public var durationMilliseconds: Int

            public init(host: String, state: String, exitStatus: Int32?, exitSignal: String?, error: String?, errorCode: String?, stdout: String, stderr: String,
                        stdoutEncoding: String, stderrEncoding: String, truncated: Bool, durationMilliseconds: Int) {
                self.host = host
                self.state = state
                self.exitStatus = exitStatus
                self.exitSignal = exitSignal
                self.error = error
                self.errorCode = errorCode
                self.stdout = stdout
                self.stderr = stderr
                self.stdoutEncoding = stdoutEncoding
                self.stderrEncoding = stderrEncoding
                self.truncated = truncated
                self.durationMilliseconds = durationMilliseconds
            }
        }

        public struct Result: Codable, Sendable, Equatable {
            public var command: String
            public var hosts: [HostOutcome]
            public var succeeded: Int
            public var failed: Int
            /// 0: every host succeeded; 3: some failed; 1: none succeeded.
            public var exitStatus: Int32

            public init(command: String, hosts: [HostOutcome], succeeded: Int, failed: Int, exitStatus: Int32) {
                self.command = command
                self.hosts = hosts
                self.succeeded = succeeded
                self.failed = failed
                self.exitStatus = exitStatus
            }
        }

        public static let name = "workspaces.snippet.run"
        public static func hosts(in request: Request) -> [String] { (request.hosts ?? []) + (request.tag.map { ["tag:\($0)"] } ?? []) }

        public static let effect: Effect = Effect(.destructive, network: true)
        public static let version = 1
        public static let summary = "Run a saved snippet or a command on many hosts in parallel: live progress, output grouped per host, a table of exit statuses."
        public static var events: [String: JSONSchema] {
            StreamEvents.output.merging(["progress": StreamEvents.progress, "view": StreamEvents.view, "notice": StreamEvents.notice]) { $1 }
        }
        public static var questions: [String: String] { WorkspacesStreams.connectionQuestions }
    }
}
