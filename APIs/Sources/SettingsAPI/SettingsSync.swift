import FoundationEssentials
import TermindCore

/// `settings.sync`: what a sync engine (its own issue) uses. It reads the journal of
/// local changes to send, and applies records received from other devices without
/// journaling them again (no echo). Provided by Settings; required only by sync.
public protocol SettingsSync: Sendable {
    /// Journal rows of synced records after `sequence`, oldest first, at most `limit`.
    func outbox(after sequence: Int, limit: Int) async throws -> [SettingsJournalEntry]
    /// A record another device wrote: stored when its revision is newer than this
    /// device's, with no journal row; a value that does not validate here is stored
    /// quarantined (never applied, never dropped). `value` nil is a tombstone.
    func applyRemote(_ change: SettingsRemoteChange) async throws -> SettingsValue
}

extension PortKey where P == any SettingsSync {
    public static var settingsSync: Self { PortKey("settings.sync") }
}

/// One local change for sync to send.
public struct SettingsJournalEntry: Codable, Sendable, Equatable {
    public var sequence: Int
    public var key: String
    public var revision: Int
    public var tombstone: Bool
    /// SHA-256 of the stored JSON (nil for a tombstone).
    public var digest: String?
    public var device: String
    public var at: String

    public init(sequence: Int, key: String, revision: Int, tombstone: Bool, digest: String?, device: String, at: String) {
        self.sequence = sequence
        self.key = key
        self.revision = revision
        self.tombstone = tombstone
        self.digest = digest
        self.device = device
        self.at = at
    }
}

/// A record as another device committed it.
public struct SettingsRemoteChange: Codable, Sendable, Equatable {
    public var key: String
    public var revision: Int
    public var value: JSONValue?
    public var device: String

    public init(key: String, revision: Int, value: JSONValue?, device: String) {
        self.key = key
        self.revision = revision
        self.value = value
        self.device = device
    }
}
