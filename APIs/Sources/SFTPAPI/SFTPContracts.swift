import FoundationEssentials
import TermindCore
import VaultAPI

/// `termind sftp HOST ACTION PATH…`: remote file operations that move no file data (listing,
/// metadata, creating and removing, renaming, links, permissions, free space). They take no
/// transfer slot; the transfers (`get`, `put`, `cp`) come with the scheduler.
public enum SFTPStreams {
    public enum Run: StreamContract {
        public enum Action: String, Codable, Sendable, SchemaEnum {
            case ls, stat, mkdir, rm, rmdir, mv, ln, chmod, df
            /// Up to `length` bytes (64 KiB by default, at most 1 MiB) of one file from `offset`.
            case read
        }
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label) or a quick-connect line.
            public var target: String
            /// None: an interactive prompt on the host's files (`termind sftp HOST`), whose
            /// lines are asked as questions (topic `sftp.browse`) on the client's terminal.
            public var action: Action?
            /// The action's paths (chmod: MODE first; mv: SRC DST; ln: TARGET LINK). Relative
            /// paths start at the remote home; `*`, `?` and `[…]` are matched on the server.
            public var paths: [String]
            /// Follow symbolic links (ls, stat); by default a link is shown as itself.
            public var follow: Bool?
            /// mkdir: octal permissions (default 755).
            public var mode: String?
            /// mkdir: create missing parents too.
            public var parents: Bool?
            /// mv: replace an existing destination (atomically, with posix-rename@openssh.com).
            public var replace: Bool?
            /// rm: directories too, with everything inside (links are removed, never followed).
            public var recursive: Bool?
            public var user: String?
            public var identity: String?
            public var workingDirectory: String?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            /// read: where to start, and how many bytes.
            public var offset: UInt64?
            public var length: Int?
            public init(target: String, action: Action?, paths: [String], follow: Bool? = nil, mode: String? = nil, parents: Bool? = nil, replace: Bool? = nil,
                        recursive: Bool? = nil, user: String? = nil, identity: String? = nil, workingDirectory: String? = nil, acceptHostKey: HostKeyPreset? = nil,
                        connectTimeout: Double? = nil, offset: UInt64? = nil, length: Int? = nil) {
                self.offset = offset
                self.length = length
                self.target = target
                self.action = action
                self.paths = paths
                self.follow = follow
                self.mode = mode
                self.parents = parents
                self.replace = replace
                self.recursive = recursive
                self.user = user
                self.identity = identity
                self.workingDirectory = workingDirectory
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
            /// As synthesized, but `paths` may be left out (none: `termind sftp HOST` alone, or
            /// `ls` and `df` of the home folder).
            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                try self.init(target: c.decode(String.self, forKey: .target), action: c.decodeIfPresent(Action.self, forKey: .action),
                              paths: c.decodeIfPresent([String].self, forKey: .paths) ?? [], follow: c.decodeIfPresent(Bool.self, forKey: .follow),
                              mode: c.decodeIfPresent(String.self, forKey: .mode), parents: c.decodeIfPresent(Bool.self, forKey: .parents),
                              replace: c.decodeIfPresent(Bool.self, forKey: .replace), recursive: c.decodeIfPresent(Bool.self, forKey: .recursive),
                              user: c.decodeIfPresent(String.self, forKey: .user), identity: c.decodeIfPresent(String.self, forKey: .identity),
                              workingDirectory: c.decodeIfPresent(String.self, forKey: .workingDirectory),
                              acceptHostKey: c.decodeIfPresent(HostKeyPreset.self, forKey: .acceptHostKey),
                              connectTimeout: c.decodeIfPresent(Double.self, forKey: .connectTimeout),
                              offset: c.decodeIfPresent(UInt64.self, forKey: .offset), length: c.decodeIfPresent(Int.self, forKey: .length))
            }
        }

        /// A remote file as listed.
        public struct Entry: Codable, Sendable, Equatable {
            /// The name (or path for stat) as text; bytes that are not UTF-8 are replaced here
            /// and given exactly in `nameBase64`.
            public var name: String
            public var nameBase64: String?
            public var kind: String?
            public var size: UInt64?
            /// Octal, e.g. "0644".
            public var permissions: String?
            public var uid: UInt32?
            public var gid: UInt32?
            /// Seconds since the Unix epoch.
            public var modified: UInt32?
            public var accessed: UInt32?
            /// A symbolic link's target (stat of a link).
            public var target: String?
            public init(name: String, nameBase64: String? = nil, kind: String? = nil, size: UInt64? = nil, permissions: String? = nil, uid: UInt32? = nil,
                        gid: UInt32? = nil, modified: UInt32? = nil, accessed: UInt32? = nil, target: String? = nil) {
                self.name = name
                self.nameBase64 = nameBase64
                self.kind = kind
                self.size = size
                self.permissions = permissions
                self.uid = uid
                self.gid = gid
                self.modified = modified
                self.accessed = accessed
                self.target = target
            }
        }

        public struct Listing: Codable, Sendable, Equatable {
            public var path: String
            public var entries: [Entry]
            public init(path: String, entries: [Entry]) {
                self.path = path
                self.entries = entries
            }
        }

        public struct Failure: Codable, Sendable, Equatable {
            public var path: String
            public var error: String
            public init(path: String, error: String) {
                self.path = path
                self.error = error
            }
        }

        public struct Space: Codable, Sendable, Equatable {
            public var path: String
            public var totalBytes: UInt64
            public var freeBytes: UInt64
            public var availableBytes: UInt64
            public init(path: String, totalBytes: UInt64, freeBytes: UInt64, availableBytes: UInt64) {
                self.path = path
                self.totalBytes = totalBytes
                self.freeBytes = freeBytes
                self.availableBytes = availableBytes
            }
        }

        /// What `read` read: `bytes` bytes of the file's `size` from `offset`, as `text` when
        /// they are UTF-8, else `base64`.
        public struct Content: Codable, Sendable, Equatable {
            public var path: String
            public var size: UInt64
            public var offset: UInt64
            public var bytes: Int
            public var text: String?
            public var base64: String?
            public init(path: String, size: UInt64, offset: UInt64, bytes: Int, text: String?, base64: String?) {
                self.path = path
                self.size = size
                self.offset = offset
                self.bytes = bytes
                self.text = text
                self.base64 = base64
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// 0: every path done; 3: some failed (in `failures`), the others done.
            public var exitStatus: Int
            public var content: Content?
            public var listings: [Listing]?
            public var entries: [Entry]?
            public var space: [Space]?
            /// Paths done (mkdir, rm, rmdir, mv, ln, chmod).
            public var done: [String]?
            public var failures: [Failure]
            public init(exitStatus: Int, listings: [Listing]? = nil, entries: [Entry]? = nil, space: [Space]? = nil, done: [String]? = nil, failures: [Failure] = []) {
                self.exitStatus = exitStatus
                self.listings = listings
                self.entries = entries
                self.space = space
                self.done = done
                self.failures = failures
            }
        }

        public static let name = "sftp.run"
        public static func hosts(in request: Request) -> [String] { [request.target] }

        public static let effect: Effect = Effect(.destructive, network: true)
        /// A listing reads, making a folder or a link writes, removing (or a rename that
        /// replaces) is destructive; the prompt (no action) may do anything.
        public static func effect(of request: Request) -> Effect {
            switch request.action {
            case .ls?, .stat?, .df?, .read?: Effect(.read, network: true)
            case .mkdir?, .ln?, .chmod?: Effect(.write, network: true)
            case .mv?: request.replace == true ? effect : Effect(.write, network: true)
            case .rm?, .rmdir?, nil: effect
            }
        }
        public static let version = 1
        public static let summary = "Remote file operations over SFTP that move no file data: ls, stat, mkdir, rm, rmdir, mv, ln, chmod, df; without one, an interactive prompt (whose get and put transfer)."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view, "notice": StreamEvents.notice, "progress": StreamEvents.progress] }
        /// The prompt's lines (`browseTopic`), and a prompt's transfers' questions.
        public static var questions: [String: String] { Transfer.questions.merging([browseTopic: "prompts"]) { a, _ in a } }
        /// The interactive prompt's question: one line, echoed.
        public static let browseTopic = "sftp.browse"
    }
}

extension ErrorCode {
    /// A remote path could not be used (missing, permission denied, …); the message names it.
    public static let sftpFailed: ErrorCode = "sftp.failed"
    /// The server broke the SFTP protocol or the subsystem would not start.
    public static let sftpProtocol: ErrorCode = "sftp.protocol"
}
