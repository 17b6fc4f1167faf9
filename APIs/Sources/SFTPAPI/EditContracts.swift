import FoundationEssentials
import TermindCore
import VaultAPI

extension SFTPStreams {
    /// `termind edit HOST:PATH`: a managed local copy (0600, in the user's state folder),
    /// opened in the person's editor; changes found by streamed SHA-256 are uploaded when
    /// confirmed (or `--upload true`; `--watch true`: at each save), after checking that the
    /// remote file did not change meanwhile.
    public enum Edit: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// `HOST:PATH` (a saved host's label or `USER@HOST`) or `scp://…`.
            public var target: String
            /// Upload each save while the editor is open (without asking; a changed remote
            /// file is still asked about).
            public var watch: Bool?
            /// Upload the changes when the editor closes without asking.
            public var upload: Bool?
            public var jump: String?
            public var user: String?
            public var identity: String?
            public var workingDirectory: String?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            public init(target: String, watch: Bool? = nil, upload: Bool? = nil, jump: String? = nil, user: String? = nil, identity: String? = nil,
                        workingDirectory: String? = nil, acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil) {
                self.target = target
                self.watch = watch
                self.upload = upload
                self.jump = jump
                self.user = user
                self.identity = identity
                self.workingDirectory = workingDirectory
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
        }

        public struct Result: Codable, Sendable, Equatable {
            public enum State: String, Codable, Sendable, SchemaEnum {
                /// Nothing changed locally.
                case unchanged
                /// The last version was uploaded.
                case uploaded
                /// Changes stay in the local copy only (not confirmed, or the remote changed).
                case kept
            }
            public var state: State
            public var localPath: String
            /// SHA-256 (hex) of what the remote file holds as far as termind knows (the last
            /// download or upload).
            public var acknowledged: String
            public var uploads: Int
            /// termind's exit status: 0 when the edit ended as chosen (uploaded, unchanged, or
            /// kept because the upload was declined at its question); 1 when an upload was
            /// asked for (`upload`, `watch`, or yes at the question) and did not happen — the
            /// remote file changed and replacing it was not confirmed, its owner could not be
            /// kept, … (an upload that fails outright is an error, also 1).
            public var exitStatus: Int
            public init(state: State, localPath: String, acknowledged: String, uploads: Int, exitStatus: Int = 0) {
                self.state = state
                self.localPath = localPath
                self.acknowledged = acknowledged
                self.uploads = uploads
                self.exitStatus = exitStatus
            }
        }

        public static let name = "sftp.edit"
        public static func hosts(in request: Request) -> [String] { TransferEndpoint.host(in: request.target).map { [$0] } ?? [] }

        public static let effect: Effect = Effect(.destructive, network: true)
        public static let version = 1
        public static let summary = "Edit a remote file in your editor through a managed local copy; upload changes when confirmed, never over a changed remote file silently."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "view": StreamEvents.view] }
        public static var questions: [String: String] {
            ConnectionOpener.questions.merging([editTopic: "edit", uploadTopic: "confirm", changedTopic: "confirm", dirtyTopic: "choice", ownerTopic: "confirm"]) { a, _ in a }
        }
        public static let editTopic = "sftp.edit"
        public static let uploadTopic = "sftp.edit.upload"
        public static let changedTopic = "sftp.edit.remoteChanged"
        public static let dirtyTopic = "sftp.edit.localChanges"
        /// The server would not let the new version keep the file's owner and group.
        public static let ownerTopic = "sftp.edit.owner"
    }
}

extension SFTPContracts {
    /// A managed copy of `termind edit`.
    public struct EditCopy: Codable, Sendable, Equatable {
        public enum State: String, Codable, Sendable, SchemaEnum {
            /// The same as the last download or upload.
            case clean
            /// Changed since (not uploaded).
            case dirty
            /// The local file is gone.
            case missing
        }
        public var host: String
        public var path: String
        public var localPath: String
        public var state: State
        public init(host: String, path: String, localPath: String, state: State) {
            self.host = host
            self.path = path
            self.localPath = localPath
            self.state = state
        }
    }

    public enum EditList: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public init() {}
        }
        public struct Response: Codable, Sendable, Equatable {
            public var copies: [EditCopy]
            public init(copies: [EditCopy]) { self.copies = copies }
        }
        public static let name = "sftp.edit.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "The managed copies of termind edit: host, path, local copy, clean or dirty."
    }

    public enum EditDiscard: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// `HOST:PATH` as given to termind edit.
            public var target: String
            public init(target: String) { self.target = target }
        }
        public typealias Response = EditCopy
        public static let name = "sftp.edit.discard"
        public static func hosts(in request: Request) -> [String] { TransferEndpoint.host(in: request.target).map { [$0] } ?? [] }
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Stop tracking a managed copy (the local file stays where it is; the next edit downloads anew)."
    }
}
