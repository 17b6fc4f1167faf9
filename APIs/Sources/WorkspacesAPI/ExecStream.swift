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

            public init(target: String, command: String, user: String? = nil, identity: String? = nil, timeout: Double? = nil,
                        connectTimeout: Double? = nil, acceptHostKey: HostKeyPreset? = nil, workingDirectory: String? = nil) {
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
        public static let version = 1
        public static let summary = "Run a command over SSH on a saved host or a quick-connect target, streaming its output."
        public static let acceptsInput = true
        /// A client's stdin, stdout and stderr go straight to and from the channel.
        public static let acceptsDescriptors = true
        public static var events: [String: JSONSchema] { StreamEvents.output }
        public static var questions: [String: String] { WorkspacesStreams.connectionQuestions }
    }
}
