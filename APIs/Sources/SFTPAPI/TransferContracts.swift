import FoundationEssentials
import TermindCore
import VaultAPI

extension SFTPStreams {
    /// `termind get`, `put` and `cp`: files between this machine and hosts, or between two
    /// hosts through termind (no local staging), each file through the process scheduler.
    public enum Transfer: StreamContract {
        /// What happens when a destination file exists already.
        public enum Conflict: String, Codable, Sendable, SchemaEnum {
            /// Replace it atomically (posix-rename@openssh.com remotely, rename(2) here).
            case replace
            case skip
            /// Keep both: the new file gets `name (1).ext` (the first free number).
            case keepBoth = "keep-both"
            /// Ask for each (replace, skip, keep both, or the same for all); nobody to ask
            /// fails the file, naming --conflict.
            case ask
        }
        /// What must match before a file is committed (renamed into place).
        public enum Verify: String, Codable, Sendable, SchemaEnum {
            /// The byte count, with the source's size and modification time unchanged (always checked).
            case size
            /// That, and the SHA-256 of the source and of the written file, each computed where
            /// the file is: here by reading it, on a host by its `sha256sum` over an exec
            /// channel (SFTP servers cannot tell a file's hash), so no byte is read back over
            /// the network. A host without `sha256sum` fails the file, saying so.
            case sha256
        }
        public struct Request: Codable, Sendable, Equatable {
            /// What to copy: local paths, `HOST:PATH` (a saved host's label or `user@host`;
            /// `*`, `?`, `[…]` matched on the server) or `scp://[user@]host[:port]/PATH`.
            public var sources: [String]
            /// Where to: a directory (the sources go into it by their names) or, for one
            /// source, the new name; local, `HOST:PATH` or `scp://…`.
            public var destination: String
            /// Copy directories with everything inside (`-r`).
            public var recursive: Bool?
            /// Keep permissions and modification times (`-p`).
            public var preserve: Bool?
            /// Copy what symbolic links point at (`-L`); by default a link in a tree is skipped.
            public var follow: Bool?
            public var conflict: Conflict?
            /// `size` by default.
            public var verify: Verify?
            /// A jump route (`-J`, as ssh's) for every remote side that is not a saved host.
            public var jump: String?
            /// The operation its progress and errors name: get, put or cp.
            public var verb: String?
            public var user: String?
            public var identity: String?
            public var workingDirectory: String?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            public init(sources: [String], destination: String, recursive: Bool? = nil, preserve: Bool? = nil, follow: Bool? = nil, conflict: Conflict? = nil,
                        verify: Verify? = nil, jump: String? = nil, verb: String? = nil, user: String? = nil, identity: String? = nil, workingDirectory: String? = nil,
                        acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil) {
                self.sources = sources
                self.destination = destination
                self.recursive = recursive
                self.preserve = preserve
                self.follow = follow
                self.conflict = conflict
                self.verify = verify
                self.jump = jump
                self.verb = verb
                self.user = user
                self.identity = identity
                self.workingDirectory = workingDirectory
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
        }

        /// One file (or directory, link, …) and what became of it.
        public struct File: Codable, Sendable, Equatable {
            public enum Outcome: String, Codable, Sendable, SchemaEnum {
                case copied, skipped, failed, cancelled
            }
            public var from: String
            public var to: String
            public var outcome: Outcome
            public var bytes: UInt64
            /// The scheduler's row (`termind transfers`), for a regular file.
            public var transfer: String?
            public var error: String?
            public init(from: String, to: String, outcome: Outcome, bytes: UInt64 = 0, transfer: String? = nil, error: String? = nil) {
                self.from = from
                self.to = to
                self.outcome = outcome
                self.bytes = bytes
                self.transfer = transfer
                self.error = error
            }
        }

        public struct Result: Codable, Sendable, Equatable {
            /// 0: every file copied or skipped as asked; 3: some failed (each in `files`), the
            /// others done.
            public var exitStatus: Int
            public var copied: Int
            public var skipped: Int
            public var failed: Int
            public var directories: Int
            public var bytes: UInt64
            public var seconds: Double
            /// Every file with its outcome (directories created are counted, not listed).
            public var files: [File]
            public init(exitStatus: Int, copied: Int, skipped: Int, failed: Int, directories: Int, bytes: UInt64, seconds: Double, files: [File]) {
                self.exitStatus = exitStatus
                self.copied = copied
                self.skipped = skipped
                self.failed = failed
                self.directories = directories
                self.bytes = bytes
                self.seconds = seconds
                self.files = files
            }
        }

        public static let name = "sftp.transfer"
        public static func hosts(in request: Request) -> [String] { (request.sources + [request.destination]).compactMap(TransferEndpoint.host(in:)) }

        public static let effect: Effect = Effect(.destructive, network: true)
        /// A transfer that never replaces an existing file (skip, keep both) writes; one
        /// that may (replace, ask, the default) is destructive.
        public static func effect(of request: Request) -> Effect {
            request.conflict == .skip || request.conflict == .keepBoth ? Effect(.write, network: true) : effect
        }
        public static let version = 1
        public static let summary = "Copy files and trees between this machine and hosts, or between hosts, through the process scheduler: get, put, cp."
        public static var events: [String: JSONSchema] { ["progress": StreamEvents.progress, "view": StreamEvents.view, "notice": StreamEvents.notice] }
        public static var questions: [String: String] { ConnectionOpener.questions.merging([conflictTopic: "choice"]) { a, _ in a } }
        /// The question asked about an existing destination.
        public static let conflictTopic = "sftp.conflict"
    }
}

/// `termind transfers`: the process scheduler's rows (queued, active, paused and the last
/// finished ones) and their controls. Inside `termind serve` they cover every client's
/// transfers; a plain `termind get` has its own process and rows.
public enum SFTPContracts {
    public struct TransferRow: Codable, Sendable, Equatable {
        public enum State: String, Codable, Sendable, SchemaEnum {
            case queued, active, paused, done, skipped, failed, cancelled
        }
        public var id: String
        public var state: State
        /// The run it belongs to (a CLI invocation).
        public var source: String
        public var from: String
        public var to: String
        public var size: UInt64?
        public var done: UInt64
        /// The hosts whose slots it takes.
        public var hosts: [String]
        /// When it first started moving data (seconds since the Unix epoch).
        public var started: Double?
        /// Why it paused or failed.
        public var error: String?
        public init(id: String, state: State, source: String, from: String, to: String, size: UInt64?, done: UInt64, hosts: [String],
                    started: Double? = nil, error: String? = nil) {
            self.id = id
            self.state = state
            self.source = source
            self.from = from
            self.to = to
            self.size = size
            self.done = done
            self.hosts = hosts
            self.started = started
            self.error = error
        }
    }

    public struct TransferRequest: Codable, Sendable, Equatable {
        /// A row's id as `termind transfers` shows it (t12).
        public var id: String
        public init(id: String) { self.id = id }
    }

    public struct TransferReply: Codable, Sendable, Equatable {
        public var transfer: TransferRow
        public init(transfer: TransferRow) { self.transfer = transfer }
    }

    public enum List: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public init() {}
        }
        public struct Response: Codable, Sendable, Equatable {
            public var transfers: [TransferRow]
            public init(transfers: [TransferRow]) { self.transfers = transfers }
        }
        public static let name = "sftp.transfers.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "The process scheduler's transfers: queued, active, paused and recently finished, with progress."
    }

    public enum Pause: Contract {
        public typealias Request = TransferRequest
        public typealias Response = TransferReply
        public static let name = "sftp.transfers.pause"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Pause a queued or active transfer: its partial destination is kept for a verified resume."
    }

    public enum Resume: Contract {
        public typealias Request = TransferRequest
        public typealias Response = TransferReply
        public static let name = "sftp.transfers.resume"
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Resume a paused transfer: it queues again and, before moving more, checks that neither its source nor its partial changed."
    }

    public enum Cancel: Contract {
        public typealias Request = TransferRequest
        public typealias Response = TransferReply
        public static let name = "sftp.transfers.cancel"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Cancel a queued, active or paused transfer: its partial destination is removed."
    }
}

extension ErrorCode {
    /// A transfer control named no row, or a row in the wrong state.
    public static let sftpTransferState: ErrorCode = "sftp.transfer_state"
}

/// The process scheduler as a port (`sftp.scheduler`), for the features that move file data
/// besides the CLI (the Assistant's and MCP's tools, later): each `transfer` is one source of
/// the same fair queue, with the same limits, rules and rows as `termind cp`.
public protocol TransferScheduling: Sendable {
    /// Runs one transfer, asking and reporting on `session` as `termind cp` does.
    func transfer(_ request: SFTPStreams.Transfer.Request, session: StreamSession) async throws -> SFTPStreams.Transfer.Result
    func transfers() async -> [SFTPContracts.TransferRow]
    func pause(_ id: String) async throws -> SFTPContracts.TransferRow
    func resume(_ id: String) async throws -> SFTPContracts.TransferRow
    func cancel(_ id: String) async throws -> SFTPContracts.TransferRow
    /// One remote regular file of a saved host read in order from `offset`, as a row of
    /// `source` in the same fair queue (waits for admission): a byte channel's download.
    /// Connecting asks nothing (the saved host's own route, key and durable trust).
    func download(host: String, path: String, offset: UInt64, source: String) async throws -> any RemoteFileReader
    /// A new remote file of a saved host written in order into a temporary name beside
    /// `path`, renamed into place by `commit` (never over an existing file unless `replace`):
    /// a byte channel's upload, a row of `source`.
    func upload(host: String, path: String, size: UInt64, replace: Bool, source: String) async throws -> any RemoteFileWriter
    /// Small-file operations on one folder tree of a saved host over one SFTP session, for
    /// a feature that keeps its own files there (sync's record logs). They move no bulk
    /// data, so they take no transfer slot. Connecting asks nothing, as `download`.
    func folder(host: String) async throws -> any RemoteFolder
}

/// A saved host's files as `TransferScheduling.folder` reaches them. Paths are the server's
/// (relative ones start at the login folder).
public protocol RemoteFolder: Sendable {
    /// The names in a directory (`.` and `..` left out), sorted; nil when it does not exist.
    func list(_ path: String, limit: Int) async throws -> [String]?
    /// Creates a directory with `mode`; false when something already has that name.
    func makeDirectory(_ path: String, mode: UInt32) async throws -> Bool
    /// The whole file (at most `limit` bytes, else it throws); nil when it does not exist.
    func read(_ path: String, limit: Int) async throws -> Data?
    /// Writes `data` to a new temporary name beside `path` (mode 0600), then renames it to
    /// `path` without replacing anything: false when `path` was taken (the temporary file
    /// is removed), so two writers can never both believe they wrote it.
    func create(_ path: String, data: Data) async throws -> Bool
    /// The file's permission bits, nil when nothing is there.
    func mode(_ path: String) async throws -> UInt32?
    func close() async
}

/// A remote file being read for a stream (`TransferScheduling.download`).
public protocol RemoteFileReader: Sendable {
    /// The file's size and modification time when it was opened (FSTAT).
    var size: UInt64 { get }
    var modified: UInt32? { get }
    /// The next bytes in order, at most `limit`; nil at the end, after the file was checked to
    /// still have the size and modification time it had (else it throws: the copy is not it).
    func next(limit: Int) async throws -> Data?
    /// Ends the read and its row (`complete`: everything was delivered).
    func close(complete: Bool) async
}

/// A remote file being written for a stream (`TransferScheduling.upload`).
public protocol RemoteFileWriter: Sendable {
    /// The bytes the server has acknowledged, in order from 0.
    var written: UInt64 { get async }
    func write(_ data: Data) async throws
    /// Closes the file (checking every byte was written) and renames it into place.
    func commit() async throws
    /// Drops the temporary file; the path's file is untouched.
    func abandon() async
}

extension PortKey where P == any TransferScheduling {
    public static var sftpScheduler: Self { PortKey("sftp.scheduler") }
}
