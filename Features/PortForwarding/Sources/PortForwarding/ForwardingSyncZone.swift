import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import SyncAPI
import TermindCore
import TermindStore

/// `forwarding.sync`: the forwarding rules as a sync zone (consent: the Vault's switch).
/// Each rule is one entity whose fields are the rule's, never whether it runs here: a
/// rule that arrives is saved, not started, and a running rule keeps the shape it was
/// started with until it is restarted.
struct ForwardingSyncZone: SyncZone {
    let feature: ForwardingFeature
    var zone: String { "forwarding" }
    static let kind = "rule"

    func journaled() -> AsyncStream<Void> { RuleStore.journalSignal.subscribe() }

    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges {
        let store = try feature.current().store
        return try await store.db.read { db in
            let rows = try db.query("SELECT seq, id, at FROM forwarding_sync_outbox WHERE seq > ? ORDER BY seq LIMIT ?", [cursor, max(1, limit) + 1])
            var changed: [SyncEntityRef: Int64] = [:]
            var last = cursor
            for row in rows.prefix(max(1, limit)) {
                guard let seq = row.int("seq"), let id = row.string("id"), let at = row.int("at") else {
                    throw TermindError.internalFailure("forwarding_sync_outbox has a row without seq, id or at.")
                }
                last = Int64(seq)
                changed[SyncEntityRef(kind: Self.kind, id: id)] = Int64(at)
            }
            return SyncChanges(changed: changed, cursor: last, more: rows.count > max(1, limit))
        }
    }

    func acknowledge(through cursor: Int64) async throws {
        let store = try feature.current().store
        try await store.db.write { db in try db.execute("DELETE FROM forwarding_sync_outbox WHERE seq <= ?", [cursor]) }
    }

    func inventory() async throws -> [SyncEntityRef: Int64] {
        let store = try feature.current().store
        return try await store.db.read { db in
            var all: [SyncEntityRef: Int64] = [:]
            for row in try db.query("SELECT id, \(SyncChanges.millisecondsSQL("created_at")) AS at FROM forwarding_rules") {
                all[SyncEntityRef(kind: Self.kind, id: try row.text("id"))] = Int64(try row.integer("at"))
            }
            return all
        }
    }

    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]] {
        let store = try feature.current().store
        let ids = entities.filter { $0.kind == Self.kind }.map(\.id)
        let rules = try await store.db.read { db in
            try ids.compactMap { id in try db.query("SELECT * FROM forwarding_rules WHERE id = ?", [id]).first.map(RuleStore.rule) }
        }
        var values: [SyncEntityRef: [String: JSONValue]] = [:]
        for rule in rules { values[SyncEntityRef(kind: Self.kind, id: rule.id)] = try Self.fields(rule) }
        return values
    }

    static func fields(_ rule: ForwardRule) throws -> [String: JSONValue] {
        guard case .object(var fields) = try JSONCoding.parse(try JSONCoding.encode(rule), source: "rule \(rule.id)") else { return [:] }
        fields["id"] = nil
        return fields
    }

    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome] {
        let ports = try feature.current()
        var outcomes: [SyncEntityRef: SyncApplyOutcome] = [:]
        var accepted: [(String, ForwardRule?)] = []
        for (entity, fields) in changes {
            guard entity.kind == Self.kind else { outcomes[entity] = .invalid("forwarding has no kind '\(entity.kind)'"); continue }
            guard let fields else { accepted.append((entity.id, nil)); continue }
            do {
                var object = fields.filter { $0.value != .null }
                object["id"] = .string(entity.id)
                var rule = try JSONValueDecoder.decode(ForwardRule.self, from: JSONValue.object(object))
                rule.name = try ForwardingFeature.checkName(rule.name)
                rule.color = try ForwardingFeature.checkColor(rule.color)
                rule.tags = try ForwardingFeature.checkTags(rule.tags)
                guard (0...65_535).contains(rule.bindPort), rule.kind == .dynamic || (rule.targetHost?.isEmpty == false && (1...65_535).contains(rule.targetPort ?? 0)) else {
                    outcomes[entity] = .invalid("the rule's ports or target are not a forward termind runs")
                    continue
                }
                // A saved host's id that is not here yet: the rule waits for its host.
                if rule.host.hasPrefix("host_"), !rule.host.contains(" "), try await ports.hosts.host(named: rule.host) == nil {
                    outcomes[entity] = .unresolved("waits for host \(rule.host)")
                    continue
                }
                accepted.append((entity.id, rule))
            } catch {
                outcomes[entity] = .invalid(TermindError.from(error).message)
            }
        }
        for (id, outcome) in try await ports.store.apply(accepted) { outcomes[SyncEntityRef(kind: Self.kind, id: id)] = outcome }
        return outcomes
    }
}
