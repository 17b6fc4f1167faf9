import FoundationEssentials
import Synchronization
import TermindCore

/// `settings.values`: the one place features keep their settings. A feature registers its
/// records while it starts (the registry freezes at the first request from outside, after
/// boot), reads them typed (the defaults when nothing valid is stored) and follows their
/// changes. Readers never see a half-written record: each change commits in one transaction.
public protocol SettingsValues: Sendable {
    /// Adds a record owned by feature `owner`; refused for a key already taken, a key that
    /// is not dotted lowercase, or once the registry froze.
    func register(_ declaration: SettingsRecordDeclaration, owner: String) throws
    /// The record as it applies now.
    func current(_ key: String) async throws -> SettingsValue
    /// The record each time it changes in this process (the value it changed to), until the
    /// consumer stops iterating.
    func changes(_ key: String) -> AsyncStream<SettingsValue>
    /// The secret the reference field `field` of record `key` (`providers.openai.secretRef`)
    /// names: nil for an empty reference (anonymous); `settings.secret_missing` when no
    /// readable, non-empty secret is kept for that very field on this device (a handle of
    /// another record's or field's secret is refused, so a synced value cannot send one
    /// record's key where another's goes). Used once; never kept, logged or sent elsewhere.
    func secret(_ reference: String, key: String, field: String) async throws -> Secret?
}

extension PortKey where P == any SettingsValues {
    public static var settingsValues: Self { PortKey("settings.values") }
}

extension SettingsValues {
    /// Registers `R` for feature `owner`.
    public func register<R: SettingsRecord>(_ type: R.Type, owner: String) throws { try register(R.declaration, owner: owner) }

    /// `R` as it applies now: the saved value, or the defaults when none is saved or the
    /// saved one is quarantined.
    public func read<R: SettingsRecord>(_ type: R.Type) async throws -> R {
        let value = try await current(R.key)
        // As the store holds it now (a change made by another process applies at once: Settings
        // reads again whenever any process changed the file); only the decoding of the very
        // same value is not done again.
        if let known = SettingsDecoded.cache.withLock({ $0[R.key] }), known.value == value.value, let record = known.record as? R { return record }
        let record = try JSONValueDecoder.decode(R.self, from: value.value)
        SettingsDecoded.cache.withLock { $0[R.key] = (value.value, record) }
        return record
    }

    /// `R` each time it changes.
    public func updates<R: SettingsRecord>(_ type: R.Type) -> AsyncStream<R> {
        let changes = changes(R.key)
        return AsyncStream { continuation in
            let task = Task {
                for await change in changes {
                    if let record = try? JSONValueDecoder.decode(R.self, from: change.value) { continuation.yield(record) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

/// The last value of each record `read` decoded, with what it decoded to: a policy or a
/// limit read on every call is decoded once per change, not once per read.
enum SettingsDecoded {
    static let cache = Mutex<[String: (value: JSONValue, record: any Sendable)]>([:])
}
