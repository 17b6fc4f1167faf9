import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import SyncAPI
import Synchronization
import TermindCore
import TermindStore

/// Settings: typed records other features register (SFTP limits, terminal preferences, …),
/// kept in the process database with a revision each and a journal for sync, validated on
/// every write and every read. A stored value that no longer validates is quarantined:
/// never applied, never deleted. Provides `settings.values`; has no per-feature code.
final class SettingsFeature: Feature {
    let registry = SettingsRegistry()
    private let store = Mutex<SettingsStore?>(nil)
    /// Each record as last read, with the database's change stamp taken before that read:
    /// used again while the stamp has not moved (no process changed the file since).
    let kept = Mutex<[String: (stamp: UInt64, value: SettingsValue)]>([:])

    func current() throws -> SettingsStore {
        guard let store = store.withLock({ $0 }) else { throw TermindError.internalFailure("Settings is not started.") }
        return store
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.settingsValues, SettingsPort(feature: self))
        registrar.provide(.settingsSync, SyncPort(feature: self))
        registrar.provide(.settingsSyncZone, SettingsSyncZone(feature: self))
        // A request from outside comes after boot: the set of records is final by then.
        registrar.handleBlocking(SettingsContracts.List.self) { [self] _, _ in
            try booted()
            let store = try current()
            return .init(records: try registry.all.map { try store.current($0) })
        }
        registrar.handleBlocking(SettingsContracts.Get.self) { [self] r, _ in
            try booted()
            let declaration = try registry.declaration(r.key)
            return .init(record: try current().current(declaration), defaults: declaration.defaults, schema: declaration.schema.json)
        }
        registrar.handleBlocking(SettingsContracts.Set.self) { [self] r, _ in
            try booted()
            let declaration = try registry.declaration(r.key)
            let value = try current().set(declaration, patch: r.value, replace: r.replace ?? false, expectedRevision: r.revision)
            registry.publish(value)
            return value
        }
        registrar.handleBlocking(SettingsContracts.Repair.self) { [self] r, _ in
            try booted()
            let value = try current().repair(try registry.declaration(r.key), action: r.action, expectedRevision: r.revision)
            registry.publish(value)
            return value
        }
        registrar.handleBlocking(SettingsContracts.Export.self) { [self] r, _ in
            try booted()
            let store = try current()
            var records: [String: JSONValue] = [:]
            for declaration in registry.all where declaration.scope == .synced || r.includeDeviceLocal == true {
                let value = try store.current(declaration)
                if value.state == .saved { records[declaration.key] = value.value }
            }
            return SettingsContracts.Document(records: records)
        }
        registrar.handleBlocking(SettingsContracts.Import.self) { [self] r, _ in
            try booted()
            let result = try current().importDocument(try Self.document(r)) { try registry.declaration($0) }
            for value in result.changed { registry.publish(value) }
            return result
        }
        registrar.handleBlocking(SettingsContracts.SetSecret.self) { [self] r, _ in
            try booted()
            let value = try current().setSecret(try registry.declaration(r.key), field: r.field, secret: r.secret, expectedRevision: r.revision)
            registry.publish(value)
            return value
        }
        registrar.handleBlocking(SettingsContracts.Reset.self) { [self] r, _ in
            try booted()
            let declaration = try registry.declaration(r.key)
            let value = try current().reset(declaration, expectedRevision: r.revision)
            registry.publish(value)
            return value
        }
    }

    /// The document an import names: given, or read (bounded) from its file.
    static func document(_ r: SettingsContracts.Import.Request) throws -> SettingsContracts.Document {
        switch (r.path, r.document) {
        case (nil, let document?): return document
        case (let path?, nil):
            let data = try BoundedFile.read(path, limit: 4 << 20, what: "settings document", code: .settingsImportUnreadable)
            do {
                _ = try JSONCoding.parse(data, source: path)
                return try JSONDecoder().decode(SettingsContracts.Document.self, from: data)
            } catch let error as TermindError {
                throw TermindError(.settingsImportUnreadable, "\(error.message) Nothing was imported.")
            } catch {
                throw TermindError(.settingsImportUnreadable, "\(path) is not a settings document (termind --json settings export writes one). Nothing was imported.")
            }
        default:
            throw TermindError(.settingsImportUnreadable, "Give the settings document to import as a file path or as the document, one of the two.")
        }
    }

    /// At the first request from outside: the records are all registered, so the registry
    /// freezes and the secrets no record references any more are swept, once.
    private func booted() throws {
        guard registry.freeze() else { return }
        let removed = try current().sweepSecrets(registry.all)
        if removed > 0 { logger.withLock { $0 }?.info("settings.secrets_swept", ["count": .int(removed)]) }
    }
    private let logger = Mutex<Logger?>(nil)

    func start(_ context: FeatureContext) async throws {
        logger.withLock { $0 = context.logger }
        let db = try context.ports.require(.store)
        let secrets = try context.ports.require(.secrets)
        do {
            let report = try await db.migrate(SettingsSchema.schema)
            if !report.applied.isEmpty { context.logger.info("settings.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        store.withLock { $0 = SettingsStore(db: db, secrets: secrets) }
    }

    func stop() async {
        store.withLock { $0 = nil }
        registry.finishObservers()
    }

    /// `settings.sync`, for the sync engine.
    struct SyncPort: SettingsSync {
        let feature: SettingsFeature

        func outbox(after sequence: Int, limit: Int) async throws -> [SettingsJournalEntry] {
            let store = try feature.current()
            return try await store.db.read { _ in try store.outbox(after: sequence, limit: limit) }
        }

        func applyRemote(_ change: SettingsRemoteChange) async throws -> SettingsValue {
            let declaration = try feature.registry.declaration(change.key)
            guard declaration.scope == .synced else {
                throw TermindError(.settingsInvalid, "\(change.key) is device-local: no other device's change applies to it.")
            }
            let store = try feature.current()
            let (value, applied) = try await store.db.write { _ in try store.applyRemote(declaration, change) }
            if applied { feature.registry.publish(value) }
            return value
        }
    }

    /// `settings.values` as other features see it.
    struct SettingsPort: SettingsValues {
        let feature: SettingsFeature

        func register(_ declaration: SettingsRecordDeclaration, owner: String) throws {
            try feature.registry.add(declaration, owner: owner)
        }

        func current(_ key: String) async throws -> SettingsValue {
            let declaration = try feature.registry.declaration(key)
            let store = try feature.current()
            // A record read on every call (the Assistant's policy for each tool call) costs no
            // trip to the store's executor while the file is unchanged. Any process's change
            // moves the stamp before its commit returns, so it applies at the next read, as
            // before. The stamp is taken before the read: a change during it is not missed.
            let stamp = store.db.changeStamp()
            if let stamp, let kept = feature.kept.withLock({ $0[key] }), kept.stamp == stamp { return kept.value }
            let value = try await store.db.read { _ in try store.current(declaration) }
            if let stamp { feature.kept.withLock { $0[key] = (stamp, value) } }
            return value
        }

        func changes(_ key: String) -> AsyncStream<SettingsValue> { feature.registry.observe(key) }

        func secret(_ reference: String, key: String, field: String) async throws -> Secret? {
            guard !reference.isEmpty else { return nil }
            let store = try feature.current()
            return try await BlockingExecutor.store.run {
                guard store.readable(reference, key: key, path: "\(key).\(field)"), let secret = try? store.secrets.secret(reference) else {
                    throw TermindError(.settingsSecretMissing, "A settings record references a secret that is missing, empty or unreadable on this device; "
                        + "set it again with termind settings secret KEY FIELD --secret -.")
                }
                return secret
            }
        }
    }
}

/// The registered records (frozen once the first outside request came) and the observers
/// of their changes in this process.
final class SettingsRegistry: Sendable {
    private struct State {
        var declarations: [String: (declaration: SettingsRecordDeclaration, owner: String)] = [:]
        var frozen = false
        var observers: [String: [UInt64: AsyncStream<SettingsValue>.Continuation]] = [:]
        /// The newest revision each key's observers were told of.
        var published: [String: Int] = [:]
        var nextObserver: UInt64 = 0
    }
    private let state = Mutex(State())

    func add(_ declaration: SettingsRecordDeclaration, owner: String) throws {
        let key = declaration.key
        guard RegistryValidator.isValidRecordKey(key) else {
            throw TermindError(.settingsRegistration, "'\(key)' (from \(owner)) is not a settings key: dotted words starting lowercase, e.g. sftp.limits.")
        }
        try state.withLock { state in
            guard !state.frozen else {
                throw TermindError(.settingsRegistration, "\(owner) registered settings record '\(key)' after boot; records are registered while features start.")
            }
            if let taken = state.declarations[key] {
                throw TermindError(.settingsRegistration, "Settings record '\(key)' is registered by \(taken.owner) already; \(owner) cannot register it too.")
            }
            state.declarations[key] = (declaration, owner)
        }
    }

    /// Freezes the registry; true the first time.
    func freeze() -> Bool { state.withLock { state in defer { state.frozen = true }; return !state.frozen } }

    var all: [SettingsRecordDeclaration] { state.withLock { $0.declarations.values.map(\.declaration).sorted { $0.key < $1.key } } }

    func declaration(_ key: String) throws -> SettingsRecordDeclaration {
        try state.withLock { state in
            guard let found = state.declarations[key] else {
                let known = state.declarations.keys.sorted()
                throw TermindError(.settingsUnknownKey, "No settings record '\(key)'\(known.isEmpty ? "." : "; the records are: \(known.joined(separator: ", ")).")")
            }
            return found.declaration
        }
    }

    func observe(_ key: String) -> AsyncStream<SettingsValue> {
        let (stream, continuation) = AsyncStream.makeStream(of: SettingsValue.self, bufferingPolicy: .bufferingNewest(8))
        let id: UInt64 = state.withLock { state in
            state.nextObserver += 1
            state.observers[key, default: [:]][state.nextObserver] = continuation
            return state.nextObserver
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.observers[key]?.removeValue(forKey: id) }
        }
        return stream
    }

    /// After a change committed: every observer of its key gets the new value — unless a
    /// newer revision was told already (writers commit in order but may report out of it),
    /// so an observer never ends on a stale value.
    func publish(_ value: SettingsValue) {
        // Told under the lock (a yield only queues), so two writers' values arrive in order.
        state.withLock { state in
            // (Equal passes: a remote change that won a tie at the same revision.)
            guard value.revision >= state.published[value.key, default: 0] else { return }
            state.published[value.key] = value.revision
            for observer in (state.observers[value.key] ?? [:]).values { observer.yield(value) }
        }
    }

    func finishObservers() {
        for observer in state.withLock({ state in defer { state.observers.removeAll() }; return state.observers.values.flatMap(\.values) }) {
            observer.finish()
        }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "settings", version: "0.1.0", signature: TermindLibrary.signature) { SettingsFeature() }
}
