import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import SyncAPI
import SyncRules
import TermindCore
import TermindCrypto
import TermindStore

/// One sync, start to end, in the order that loses nothing:
///
/// 1. **Capture**: each zone's local changes since its cursor become records (per-field
///    clocks from this device's clock, no earlier than the change), merged into the agreed
///    states and sealed into numbered batches — states, batches and cursor committed in one
///    transaction. A zone's first sync after a set-up captures after the fetch instead, and
///    only what the folder does not have yet (the folder beats the baseline).
/// 2. **Fetch**: every other device's new log files are read, opened and merged; a file
///    that does not open, or a record that does not check, is quarantined (never applied,
///    never deleted on the server) and the rest goes on. Each file's merge and the log
///    position after it commit together.
/// 3. **Apply**: entities whose agreed value differs from the zone's are applied in one
///    transaction per zone; what waits for a reference stays unresolved and is tried again
///    after every fetch; what does not validate is quarantined.
/// 4. **Send**: the sealed batches go to this device's own log folder under new names
///    (create-exclusive); a name already taken by other bytes means another writer — stop.
///
/// Capture comes before apply so a local change not yet sent is never overwritten by a
/// remote one it should win against; sending comes after fetching (fetch-before-send).
struct SyncEngine: Sendable {
    let store: SyncStore
    let secrets: SecretStore
    let scheduler: any TransferScheduling
    let zones: [String: any SyncZone]
    let logger: Logger

    static let recordsPerFile = 1_000
    static let maximumFile = 64 << 20
    static let maximumEntries = 1_000_000

    struct Counts {
        var fetched = 0
        var applied = 0
        var sent = 0
    }

    /// What an entity merged from the folder waits for until this device's apply ran.
    static let notYetApplied = "fetched, not applied yet (the next sync applies it)"

    func run() async throws -> SyncContracts.Now.Response {
        guard let config = try await onStore({ try store.config() }) else {
            throw TermindError(.syncNotConfigured, "Sync is not set up on this device: run 'termind sync setup HOST:PATH' first.")
        }
        guard !config.paused else { throw TermindError(.syncPaused, "Sync is paused: run 'termind sync resume' first.") }
        let key = try await onStore { try syncKey(config) }
        let folder = try await scheduler.folder(host: config.host)
        var counts = Counts()
        do {
            try await checkFolder(folder, config, key)
            var clock = HybridClock(device: config.device, last: config.clock)
            let enabled = SyncConfig.zones.filter { config.zones[$0.consent] == true }.compactMap { entry in zones[entry.zone].map { (entry.zone, $0) } }
            // A zone's first sync after a set-up takes the folder in before it sends what this
            // device has: what the folder already holds wins over this device's copy (the
            // folder beats the baseline), so a stale copy never overwrites later changes.
            // The same after secrets were switched on, for the secret fields only: a secret
            // the devices already agreed on wins over this device's own.
            let sealer = config.secrets ? SecretSealer(key: key) : nil
            var fresh: [(String, any SyncZone, Mode)] = []
            for (name, zone) in enabled {
                let cursor = try await onStore { try store.cursor(name) }
                if cursor.inventoried {
                    // Until the rescan, this device's secrets wait for the folder's.
                    try await capture(name, zone, config, key, secrets: sealer != nil && !cursor.rescan, .journal, &clock)
                }
                if !cursor.inventoried || (cursor.rescan && sealer != nil) { fresh.append((name, zone, cursor.inventoried ? .rescan : .baseline)) }
            }
            var touched: [String: Set<SyncEntityRef>] = [:]
            let devices = try await folder.list(config.path, limit: 100_000)?.filter { SyncEnvelope.isDeviceID($0) && $0 != config.device } ?? []
            for device in devices {
                for (name, _) in enabled {
                    try await fetch(device, name, folder, config, key, &clock, &touched[name, default: []], &counts)
                }
            }
            for (name, zone, mode) in fresh {
                let known = try await capture(name, zone, config, key, secrets: sealer != nil, mode, &clock)
                touched[name, default: []].formUnion(known)
            }
            for (name, zone) in enabled { counts.applied += try await apply(name, zone, sealer, touched[name] ?? []) }
            let last = clock.last
            try await onStore { try store.saveClock(last) }
            counts.sent = try await send(folder, config)
            await folder.close()
            try await onStore { try store.finished(error: nil) }
        } catch {
            await folder.close()
            let failure = TermindError.from(error)
            try? await onStore { try store.finished(error: failure.message) }
            throw failure
        }
        let status = try await SyncStatusReader(store: store, zones: zones).status()
        return .init(fetched: counts.fetched, applied: counts.applied, sent: counts.sent, unresolved: status.unresolved.count,
                     quarantined: status.quarantined.count, status: status)
    }

    func syncKey(_ config: SyncConfig) throws -> SymmetricKey {
        let secret = try secrets.secret(config.keyHandle)
        guard let bytes = secret.withPlaintext({ Data(base64Encoded: $0) }), bytes.count == AEAD.keyLength else {
            throw TermindError(.syncNotConfigured, "This device's sync key is missing or damaged in the secret store: run 'termind sync setup \(config.host):\(config.path)' again.")
        }
        return SymmetricKey(bytes: bytes)
    }

    private func checkFolder(_ folder: any RemoteFolder, _ config: SyncConfig, _ key: SymmetricKey) async throws {
        let shown = "\(config.host):\(config.path)/\(SyncEnvelope.folderFile)"
        guard let data = try await folder.read(config.path + "/" + SyncEnvelope.folderFile, limit: 64 << 10) else {
            throw TermindError(.syncFolderInvalid, "\(shown) is gone: the folder is not a sync folder any more (set up again with 'termind sync setup').")
        }
        let description = try SyncEnvelope.Folder.parse(data, shown: shown)
        guard description.accepts(key) else {
            throw TermindError(.syncWrongPassphrase, "\(shown) was made with another passphrase than this device's sync key: nothing was read or sent. "
                + "Set up again with the folder's passphrase ('termind sync setup \(config.host):\(config.path)').")
        }
    }

    // MARK: Capture

    /// What a capture takes in.
    enum Mode {
        /// The journal's changes since the zone's cursor.
        case journal
        /// The zone's first sync, after the fetch: every entity, except those the folder has.
        case baseline
        /// The first sync after secrets were switched on, after the fetch: every entity's
        /// fields the devices have not agreed on yet (its secrets), nothing else.
        case rescan
    }

    /// Seals what changed here since the zone's cursor; with `secrets`, secret fields go
    /// sealed under the sync key, without them they stay out. A baseline returns the
    /// entities the folder already has, for the apply to bring this device's copy in line; a
    /// rescan marks every entity for the apply (the secrets the devices agreed on come in).
    ///
    /// Every capture notes, per entity, the MACs of this device's secrets as it read them
    /// (never the secrets). Without secrets, a local change whose secrets differ from those
    /// last noted (a password changed, a key deleted while secrets were off) is remembered
    /// with its time, and the rescan after secrets are switched on sends it as the change
    /// it was, so it is not lost to the folder's older value; a secret this device merely
    /// never had is not such a change.
    @discardableResult
    private func capture(_ name: String, _ zone: any SyncZone, _ config: SyncConfig, _ key: SymmetricKey, secrets: Bool, _ mode: Mode,
                         _ clock: inout HybridClock) async throws -> [SyncEntityRef] {
        let (start, _, _) = try await onStore { try store.cursor(name) }
        // Each entity with the time of its latest change here: the journal's, or the row's
        // own for what the first sync finds already there.
        var changed: [SyncEntityRef: Int64] = [:]
        if mode != .journal { changed = try await zone.inventory() }
        var cursor = start
        while mode != .rescan {
            let changes = try await zone.changes(after: cursor, limit: 5_000)
            changed.merge(changes.changed) { max($0, $1) }
            if changes.snapshot {
                // What the devices agreed on and the snapshot lacks was deleted here.
                let now = SyncChanges.now()
                for entity in try await onStore({ try store.entities(name) }) where changed[entity] == nil { changed[entity] = now }
            }
            cursor = changes.cursor
            guard changes.more, changed.count <= Self.maximumEntries else { break }
        }
        // Keys and other all-secret kinds only with secrets on; changed without them, they
        // wait for the rescan.
        var secretKindChanges: [SyncEntityRef: Int64] = [:]
        if !secrets && !zone.secretKinds.isEmpty {
            secretKindChanges = changed.filter { zone.secretKinds.contains($0.key.kind) }
            changed = changed.filter { !zone.secretKinds.contains($0.key.kind) }
        }
        let waiting = mode == .rescan ? try await onStore { try store.secretChanges(name) } : [:]
        changed.merge(waiting) { max($0, $1) }
        if changed.isEmpty && secretKindChanges.isEmpty && mode == .journal && cursor == start { return [] }
        // Stamped in the order they were made, each no earlier than its change: a later
        // edit on another device outranks this one, an earlier one does not.
        let found = changed.sorted { ($0.value, $0.key) < ($1.value, $1.key) }.map(\.key)
        let stamps = Dictionary(uniqueKeysWithValues: found.map { ($0, clock.tick(now: changed[$0] ?? 0)) })
        // With secrets off, still read for their MACs (see above); never kept.
        let plain = try await zone.values(of: found + secretKindChanges.keys, secrets: true)
        let sealer = SecretSealer(key: key)
        let last = clock.last
        let ending = cursor
        let device = config.device
        let times = changed
        let offKinds = secretKindChanges
        let known: [SyncEntityRef] = try await onStore {
            try store.db.transaction {
                let states = try store.states(name, found)
                let values = try Self.sealing(plain, states, zone: name, secrets ? sealer : nil)
                // What this device's secrets were as this capture read them, by entity.
                var digests: [SyncEntityRef: String] = [:]
                for entity in found + offKinds.keys where zone.secretKinds.contains(entity.kind) || Self.hasSecrets(plain[entity]) {
                    if let digest = try Self.secretDigest(plain[entity], zone: name, entity, sealer) { digests[entity] = digest }
                }
                if !secrets {
                    let noted = try store.localSecrets(name, Array(digests.keys))
                    var differing: [SyncEntityRef: Int64] = [:]
                    for (entity, digest) in digests where noted[entity].map({ $0 != digest }) ?? false {
                        differing[entity] = times[entity] ?? offKinds[entity] ?? SyncChanges.now()
                    }
                    try store.noteSecretChanges(name, differing)
                }
                let known = mode == .baseline ? found.filter { states[$0] != nil } : []
                let skipped = Set(known)
                var records: [SyncRecord] = []
                var changed: [SyncEntityRef: EntityState] = [:]
                for entity in found where !skipped.contains(entity) {
                    var state = states[entity] ?? EntityState()
                    guard let stamp = stamps[entity] else { continue }
                    var proposal = values[entity]
                    let asChanged = waiting[entity] != nil
                    if asChanged, !zone.secretKinds.contains(entity.kind), let agreed = state.value, let local = proposal {
                        // Its secrets as they are here, the rest as the devices agreed.
                        proposal = agreed.merging(local.filter { SecretSealer.isSealed($0.value) }) { _, mine in mine }
                    }
                    guard let record = state.change(to: proposal, zone: name, kind: entity.kind, id: entity.id, clock: stamp,
                                                    onlyNewFields: mode == .rescan && !asChanged) else { continue }
                    state.merge(record)
                    changed[entity] = state
                    records.append(record)
                }
                try store.save(name, changed)
                try store.setLocalSecrets(name, digests)
                for entity in known { try store.setPending(name, entity, SyncEngine.notYetApplied) }
                if mode == .rescan {
                    for entity in try store.entities(name) { try store.setPending(name, entity, SyncEngine.notYetApplied) }
                    try store.rescanned(name)
                }
                var index = try store.lastOutgoing(name, device: device)
                for start in stride(from: 0, to: records.count, by: Self.recordsPerFile) {
                    index += 1
                    let batch = SyncBatch(device: device, zone: name, index: index, records: Array(records[start ..< min(records.count, start + Self.recordsPerFile)]))
                    try store.addOutgoing(name, index, try SyncEnvelope.seal(batch, key: key))
                }
                try store.setCursor(name, ending)
                try store.saveClock(last)
                return known
            }
        }
        try await zone.acknowledge(through: ending)
        return known
    }

    /// Whether an entity's value has secret fields (plain, sealed, or unreadable here).
    static func hasSecrets(_ fields: [String: JSONValue]?) -> Bool {
        fields?.values.contains { SyncSecret.isSecret($0) || SecretSealer.isSealed($0) || $0 == SyncSecret.keep } ?? false
    }

    /// The MACs of an entity's secrets (plain `$secret` fields as a zone gives them, or
    /// sealed ones as the devices agreed on them), one line: equal exactly when the secrets
    /// are. A cleared secret counts as none; nil when the zone could not read one.
    static func secretDigest(_ fields: [String: JSONValue]?, zone: String, _ entity: SyncEntityRef, _ sealer: SecretSealer) throws -> String? {
        guard let fields else { return "-" }
        var parts: [String] = []
        for (field, value) in fields.sorted(by: { $0.key < $1.key }) {
            if value == SyncSecret.keep { return nil }
            let mac: String
            if let plaintext = SyncSecret.plaintext(value) {
                mac = try sealer.mac(plaintext, zone: zone, kind: entity.kind, id: entity.id, field: field)
            } else if let sealed = SecretSealer.mac(of: value) {
                mac = sealed
            } else {
                continue
            }
            if mac != (try sealer.mac(.null, zone: zone, kind: entity.kind, id: entity.id, field: field)) { parts.append("\(field)=\(mac)") }
        }
        return parts.joined(separator: ",")
    }

    // MARK: Fetch

    private func fetch(_ device: String, _ name: String, _ folder: any RemoteFolder, _ config: SyncConfig, _ key: SymmetricKey,
                       _ clock: inout HybridClock, _ touched: inout Set<SyncEntityRef>, _ counts: inout Counts) async throws {
        let directory = "\(config.path)/\(device)/\(name)"
        let last = try await onStore { try store.logIndex(device: device, zone: name) }
        guard let names = try await folder.list(directory, limit: 10_000_000) else { return }
        let files = names.compactMap { file in SyncEnvelope.index(ofFile: file).map { ($0, file) } }.filter { $0.0 > last }.sorted { $0.0 < $1.0 }
        for (index, file) in files {
            let what = "\(device)/\(name)/\(file)"
            guard let data = try await folder.read("\(directory)/\(file)", limit: Self.maximumFile) else { continue }
            counts.fetched += 1
            let batch: SyncBatch
            do {
                batch = try SyncEnvelope.open(data, key: key, device: device, zone: name, index: index)
            } catch {
                logger.warning("sync.file.quarantined", ["file": .identifier(what)])
                try await onStore {
                    try store.db.transaction {
                        try store.quarantine(what, error.reason)
                        try store.setLogIndex(device: device, zone: name, index)
                    }
                }
                continue
            }
            var good: [SyncRecord] = []
            var bad: [(String, String)] = []
            for (position, record) in batch.records.enumerated() {
                if let problem = record.problem(zone: name, device: device) { bad.append(("\(what)#\(position)", problem)) } else { good.append(record) }
            }
            for record in good { clock.observe(record.clock, now: SyncChanges.now()) }
            let (accepted, refused) = (good, bad)
            let entities = Array(Set(good.map { SyncEntityRef(kind: $0.kind, id: $0.id) }))
            let changed: [SyncEntityRef] = try await onStore {
                try store.db.transaction {
                    var states = try store.states(name, entities)
                    var changed = Set<SyncEntityRef>()
                    for record in accepted {
                        let entity = SyncEntityRef(kind: record.kind, id: record.id)
                        var state = states[entity] ?? EntityState()
                        if state.merge(record) { changed.insert(entity) }
                        states[entity] = state
                    }
                    try store.save(name, states.filter { changed.contains($0.key) })
                    // Marked until applied, in the same commit: a sync cut before its apply
                    // applies them next time, though their file will not be fetched again.
                    for entity in changed { try store.setPending(name, entity, SyncEngine.notYetApplied) }
                    for (place, problem) in refused { try store.quarantine(place, problem) }
                    try store.setLogIndex(device: device, zone: name, index)
                    return Array(changed)
                }
            }
            touched.formUnion(changed)
        }
    }

    // MARK: Apply

    /// With secrets off (`sealer` nil), sealed fields are carried in the agreed state but
    /// neither compared nor applied, and all-secret kinds are left alone: this device keeps
    /// its own. With secrets on, the agreed sealed values are compared sealed and opened
    /// only to hand them to the zone.
    private func apply(_ name: String, _ zone: any SyncZone, _ sealer: SecretSealer?, _ touched: Set<SyncEntityRef>) async throws -> Int {
        let pending = try await onStore { try store.pending(name) + store.quarantinedEntities(name) }
        let entities = Array(touched.union(pending)).sorted()
        guard !entities.isEmpty else { return 0 }
        let states = try await onStore { try store.states(name, entities) }
        let current = try Self.sealing(try await zone.values(of: entities, secrets: sealer != nil), states, zone: name, sealer)
        var changes: [(SyncEntityRef, [String: JSONValue]?)] = []
        var settled: [SyncEntityRef] = []
        var unopened: [SyncEntityRef: SyncApplyOutcome] = [:]
        for entity in entities {
            if sealer == nil && zone.secretKinds.contains(entity.kind) { settled.append(entity); continue }
            var desired = states[entity]?.value
            if sealer == nil { desired = desired?.filter { !SecretSealer.isSealed($0.value) } }
            if Self.same(desired, current[entity]) { settled.append(entity); continue }
            guard let sealer, let sealed = desired else { changes.append((entity, desired)); continue }
            do {
                var opened = sealed
                for (field, value) in sealed where SecretSealer.isSealed(value) {
                    opened[field] = SyncSecret.wrap(try sealer.open(value, zone: name, kind: entity.kind, id: entity.id, field: field))
                }
                changes.append((entity, opened))
            } catch {
                unopened[entity] = .invalid(TermindError.from(error).message)
            }
        }
        let outcomes = (changes.isEmpty ? [:] : try await zone.apply(changes)).merging(unopened) { a, _ in a }
        let (settledNow, changed) = (settled, changes.map(\.0) + unopened.keys)
        // With secrets on, what an apply wrote is this device's secrets now.
        var applied: [SyncEntityRef: String] = [:]
        if let sealer {
            for (entity, _) in changes where outcomes[entity] == .applied && (zone.secretKinds.contains(entity.kind) || Self.hasSecrets(states[entity]?.value)) {
                if let digest = try Self.secretDigest(states[entity]?.value, zone: name, entity, sealer) { applied[entity] = digest }
            }
        }
        let digests = applied
        return try await onStore {
            var applied = 0
            try store.db.transaction {
                try store.setLocalSecrets(name, digests)
                for entity in settledNow {
                    try store.setPending(name, entity, nil)
                    try store.release("\(name) \(entity.kind) \(entity.id)")
                }
                for entity in changed {
                    let what = "\(name) \(entity.kind) \(entity.id)"
                    switch outcomes[entity] ?? .unresolved("the zone did not answer for it") {
                    case .applied:
                        applied += 1
                        try store.setPending(name, entity, nil)
                        try store.release(what)
                    case .unresolved(let reason):
                        try store.setPending(name, entity, reason)
                    case .invalid(let reason):
                        try store.setPending(name, entity, nil)
                        try store.quarantine(what, reason)
                    }
                }
            }
            return applied
        }
    }

    /// The zone's values as sync keeps them: each secret sealed for its field (the agreed
    /// sealed value kept where it seals the same plaintext, or where the zone cannot read
    /// its own), an agreed secret the entity no longer has sealed as cleared; without a
    /// sealer, no secret at all.
    static func sealing(_ values: [SyncEntityRef: [String: JSONValue]], _ states: [SyncEntityRef: EntityState], zone: String,
                        _ sealer: SecretSealer?) throws -> [SyncEntityRef: [String: JSONValue]] {
        var result: [SyncEntityRef: [String: JSONValue]] = [:]
        for (entity, fields) in values {
            var kept: [String: JSONValue] = [:]
            let agreed = states[entity]?.value ?? [:]
            for (field, value) in fields {
                if value == SyncSecret.keep {
                    if sealer != nil, let previous = agreed[field], SecretSealer.isSealed(previous) { kept[field] = previous }
                    continue
                }
                guard let plaintext = SyncSecret.plaintext(value) else { kept[field] = value; continue }
                guard let sealer else { continue }
                kept[field] = try sealer.seal(plaintext, zone: zone, kind: entity.kind, id: entity.id, field: field, previous: agreed[field])
            }
            if let sealer {
                for (field, previous) in agreed where fields[field] == nil && SecretSealer.isSealed(previous) {
                    kept[field] = try sealer.seal(.null, zone: zone, kind: entity.kind, id: entity.id, field: field, previous: previous)
                }
            }
            result[entity] = kept
        }
        return result
    }

    /// Values agree when every field does, a missing field counting as null (a cleared one).
    static func same(_ a: [String: JSONValue]?, _ b: [String: JSONValue]?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        for name in Set(a.keys).union(b.keys) where (a[name] ?? .null) != (b[name] ?? .null) { return false }
        return true
    }

    // MARK: Send

    private func send(_ folder: any RemoteFolder, _ config: SyncConfig) async throws -> Int {
        let outgoing = try await onStore { try store.outgoing() }
        guard !outgoing.isEmpty else { return 0 }
        let mine = "\(config.path)/\(config.device)"
        _ = try await folder.makeDirectory(mine, mode: 0o700)
        var made = Set<String>()
        var sent = 0
        for (zone, index, sealed) in outgoing {
            let directory = "\(mine)/\(zone)"
            if made.insert(zone).inserted { _ = try await folder.makeDirectory(directory, mode: 0o700) }
            let path = "\(directory)/\(SyncEnvelope.fileName(index))"
            if try await !folder.create(path, data: sealed) {
                // Ours already when an earlier sync was cut after the rename; else another writer.
                guard try await folder.read(path, limit: Self.maximumFile) == sealed else {
                    throw TermindError(.syncConflict, "\(config.host):\(path) was written by another writer using this device's id: sync stopped, nothing was overwritten. "
                        + "Set this device up again ('termind sync setup') to give it a new id.")
                }
            }
            try await onStore { try store.sent(zone, index, device: config.device) }
            sent += 1
        }
        return sent
    }

    private func onStore<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await BlockingExecutor.store.run(body)
    }
}

/// `sync status`, from the tables alone (no network).
struct SyncStatusReader {
    let store: SyncStore
    let zones: [String: any SyncZone]

    func status() async throws -> SyncStatus {
        let store = store
        let available = Set(zones.keys)
        return try await BlockingExecutor.store.run {
            guard let config = try store.config() else {
                return SyncStatus(configured: false, target: nil, device: nil, paused: false, secrets: false,
                                  zones: SyncConfig.zoneNames.map { .init(name: $0, enabled: SyncConfig.defaultZones[$0] ?? false, available: available.contains($0)) },
                                  sent: [], devices: [], unresolved: [], quarantined: [], lastSync: nil, lastError: nil)
            }
            let logs = try store.logs()
            return SyncStatus(configured: true, target: "\(config.host):\(config.path)", device: config.device, paused: config.paused, secrets: config.secrets,
                              zones: SyncConfig.zoneNames.map { .init(name: $0, enabled: config.zones[$0] ?? false, available: available.contains($0)) },
                              sent: logs.filter { $0.id == config.device }, devices: logs.filter { $0.id != config.device },
                              unresolved: try store.unresolved(), quarantined: try store.quarantined(),
                              lastSync: config.lastSync, lastError: config.lastError)
        }
    }
}
