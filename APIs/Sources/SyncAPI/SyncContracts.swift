import FoundationEssentials
import TermindCore

/// `termind sync …`: this device's records sealed into its own log in a folder on a saved
/// host, and the other devices' logs merged in.
public enum SyncContracts {
    public enum Setup: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// `HOST:PATH`: a saved host (id or label) and the folder (created 0700 when missing).
            public var target: String
            /// The sync passphrase (standard input with `--passphrase -`).
            public var passphrase: Secret?
            /// A file holding the passphrase (its first line).
            public var passphraseFile: String?
            public init(target: String, passphrase: Secret? = nil, passphraseFile: String? = nil) {
                self.target = target
                self.passphrase = passphrase
                self.passphraseFile = passphraseFile
            }
        }
        public typealias Response = SyncStatus
        public static let name = "sync.setup"
        public static let version = 1
        public static let effect = Effect(.write, network: true, secrets: true)
        public static let summary = "Sync this device through a folder on a saved host: HOST:PATH, with a passphrase."
        public static func hosts(in request: Request) -> [String] {
            request.target.split(separator: ":", maxSplits: 1).first.map { [String($0)] } ?? []
        }
    }

    public enum Status: Contract {
        public typealias Request = Empty
        public typealias Response = SyncStatus
        public static let name = "sync.status"
        public static let version = 1
        public static let effect: Effect = .read
        public static let summary = "Where sync goes, its zones, the devices seen, what waits and what is quarantined."
    }

    public enum Now: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var fetched: Int
            public var applied: Int
            public var sent: Int
            public var unresolved: Int
            public var quarantined: Int
            public var status: SyncStatus
            public init(fetched: Int, applied: Int, sent: Int, unresolved: Int, quarantined: Int, status: SyncStatus) {
                self.fetched = fetched
                self.applied = applied
                self.sent = sent
                self.unresolved = unresolved
                self.quarantined = quarantined
                self.status = status
            }
        }
        public static let name = "sync.now"
        public static let version = 1
        public static let effect = Effect(.write, network: true)
        public static let summary = "Fetch the other devices' records, merge them, then send this device's changes."
    }

    public enum Pause: Contract {
        public typealias Request = Empty
        public typealias Response = SyncStatus
        public static let name = "sync.pause"
        public static let version = 1
        public static let effect: Effect = .write
        public static let summary = "Stop syncing until resumed (nothing is lost: changes wait in the journal)."
    }

    public enum Resume: Contract {
        public typealias Request = Empty
        public typealias Response = SyncStatus
        public static let name = "sync.resume"
        public static let version = 1
        public static let effect: Effect = .write
        public static let summary = "Sync again after a pause."
    }

    public enum Zones: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// on|off per zone; none given: show them.
            public var vault: SyncSwitch?
            public var settings: SyncSwitch?
            public var metrics: SyncSwitch?
            /// Passwords, passphrases and private keys, sealed by the sync key (off by default).
            public var secrets: SyncSwitch?
            public init(vault: SyncSwitch? = nil, settings: SyncSwitch? = nil, metrics: SyncSwitch? = nil, secrets: SyncSwitch? = nil) {
                self.vault = vault
                self.settings = settings
                self.metrics = metrics
                self.secrets = secrets
            }
        }
        public typealias Response = SyncStatus
        public static let name = "sync.zones"
        public static let version = 1
        public static let effect: Effect = .write
        public static let summary = "Show or choose what syncs: --vault on|off, --settings on|off, --metrics on|off, --secrets on|off."
    }
}

public enum SyncSwitch: String, Codable, Sendable, SchemaEnum {
    case on, off
}

public struct SyncStatus: Codable, Sendable, Equatable {
    public struct Zone: Codable, Sendable, Equatable {
        public var name: String
        public var enabled: Bool
        /// Loaded here (its feature provides the zone).
        public var available: Bool
        public init(name: String, enabled: Bool, available: Bool) {
            self.name = name
            self.enabled = enabled
            self.available = available
        }
    }
    public struct Device: Codable, Sendable, Equatable {
        public var id: String
        public var zone: String
        /// The last file of its log taken in.
        public var index: Int
        public init(id: String, zone: String, index: Int) {
            self.id = id
            self.zone = zone
            self.index = index
        }
    }
    public struct Problem: Codable, Sendable, Equatable {
        /// `DEVICE/ZONE/FILE` for a file, `ZONE KIND ID` for an entity.
        public var what: String
        public var reason: String
        public init(what: String, reason: String) {
            self.what = what
            self.reason = reason
        }
    }

    public var configured: Bool
    public var target: String?
    public var device: String?
    public var paused: Bool
    public var secrets: Bool
    public var zones: [Zone]
    /// This device's own log: the last index written, per zone.
    public var sent: [Device]
    public var devices: [Device]
    public var unresolved: [Problem]
    public var quarantined: [Problem]
    public var lastSync: String?
    public var lastError: String?

    public init(configured: Bool, target: String?, device: String?, paused: Bool, secrets: Bool, zones: [Zone], sent: [Device], devices: [Device],
                unresolved: [Problem], quarantined: [Problem], lastSync: String?, lastError: String?) {
        self.configured = configured
        self.target = target
        self.device = device
        self.paused = paused
        self.secrets = secrets
        self.zones = zones
        self.sent = sent
        self.devices = devices
        self.unresolved = unresolved
        self.quarantined = quarantined
        self.lastSync = lastSync
        self.lastError = lastError
    }
}

extension ErrorCode {
    /// Sync is not set up here (`termind sync setup HOST:PATH`).
    public static let syncNotConfigured: ErrorCode = "sync.not_configured"
    /// The passphrase does not open the folder's sync key.
    public static let syncWrongPassphrase: ErrorCode = "sync.wrong_passphrase"
    /// The folder on the server is not a termind sync folder this version reads.
    public static let syncFolderInvalid: ErrorCode = "sync.folder_invalid"
    /// Another writer took a file name of this device's log: sync stopped, nothing half-applied.
    public static let syncConflict: ErrorCode = "sync.conflict"
    /// A request to sync was wrong (a target without a path, no passphrase).
    public static let syncInvalid: ErrorCode = "sync.invalid"
    /// Sync is paused (`termind sync resume`).
    public static let syncPaused: ErrorCode = "sync.paused"
}
