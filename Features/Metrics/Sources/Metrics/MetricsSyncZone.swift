import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import SettingsAPI
import SyncAPI
import TermindCore
import VaultAPI

/// `metrics.sync`: which hosts are monitored and the interfaces chosen for each, as a sync
/// zone (one entity per monitored host, by its Vault id). The sampling interval, pauses and
/// the order stay on each device (`metrics.preferences` is device-local): a host another
/// device monitors is appended here, unpaused. The record has no journal of its own, so the
/// zone answers with the whole list whenever its revision moved (a snapshot: a host missing
/// from it was removed).
struct MetricsSyncZone: SyncZone {
    let settings: any SettingsValues
    let hosts: any HostDirectory
    let preferences: PreferenceStore
    let call: @Sendable (ContractID, Data) async throws -> Data
    var zone: String { "metrics" }
    static let kind = "monitor"

    func journaled() -> AsyncStream<Void> {
        let updates = settings.changes(MetricsSettings.Preferences.key)
        return AsyncStream { continuation in
            let task = Task {
                for await _ in updates { continuation.yield() }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    private func current() async throws -> (MetricsSettings.Preferences, revision: Int) {
        let stored = try await settings.current(MetricsSettings.Preferences.key)
        return (try await preferences.read(settings), stored.revision)
    }

    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges {
        let (prefs, revision) = try await current()
        guard Int64(revision) > cursor else { return SyncChanges(changed: [:], cursor: cursor, more: false) }
        let now = SyncChanges.now()
        return SyncChanges(changed: Dictionary(uniqueKeysWithValues: prefs.order.map { (SyncEntityRef(kind: Self.kind, id: $0), now) }),
                           cursor: Int64(revision), more: false, snapshot: true)
    }

    func acknowledge(through cursor: Int64) async throws {}

    func inventory() async throws -> [SyncEntityRef: Int64] {
        let now = SyncChanges.now()
        return Dictionary(uniqueKeysWithValues: try await current().0.order.map { (SyncEntityRef(kind: Self.kind, id: $0), now) })
    }

    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]] {
        let prefs = try await current().0
        var values: [SyncEntityRef: [String: JSONValue]] = [:]
        for entity in entities where entity.kind == Self.kind && prefs.order.contains(entity.id) {
            values[entity] = ["interfaces": prefs.interfaces[entity.id].map { .array($0.map(JSONValue.string)) } ?? .null]
        }
        return values
    }

    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome] {
        var outcomes: [SyncEntityRef: SyncApplyOutcome] = [:]
        var puts: [String: [String]?] = [:]
        var removals: Set<String> = []
        for (entity, fields) in changes {
            guard entity.kind == Self.kind else { outcomes[entity] = .invalid("metrics has no kind '\(entity.kind)'"); continue }
            guard let fields else { removals.insert(entity.id); outcomes[entity] = .applied; continue }
            // A monitor waits, hidden, for its host to arrive in the Vault.
            guard try await hosts.host(named: entity.id)?.id == entity.id else {
                outcomes[entity] = .unresolved("waits for host \(entity.id)")
                continue
            }
            switch fields["interfaces"] {
            case nil, .null?: puts[entity.id] = .some(nil)
            case .array(let items)?:
                let names = items.compactMap { item -> String? in if case .string(let name) = item { return name } else { return nil } }
                guard names.count == items.count else { outcomes[entity] = .invalid("interfaces: not a list of names"); continue }
                puts[entity.id] = .some(names)
            default:
                outcomes[entity] = .invalid("interfaces: not a list of names")
                continue
            }
            outcomes[entity] = .applied
        }
        guard !puts.isEmpty || !removals.isEmpty else { return outcomes }
        let (additions, deletions) = (puts, removals)
        try await preferences.update(settings, call: call) { p in
            for id in deletions {
                p.order.removeAll { $0 == id }
                p.paused.removeAll { $0 == id }
                p.interfaces[id] = nil
            }
            for (id, interfaces) in additions.sorted(by: { $0.key < $1.key }) {
                if !p.order.contains(id) { p.order.append(id) }
                p.interfaces[id] = interfaces
            }
        }
        return outcomes
    }
}
