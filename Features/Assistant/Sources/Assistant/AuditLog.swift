import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto
import TermindStore

/// The audit log (docs/assistant.md, "What is audited"): every decision on an agent's action
/// and every execution, append-only in `assistant_audit` (its triggers refuse changes and
/// deletions). It never holds arguments, commands, outputs or bodies: what ran is in the
/// conversation (which may be deleted), that it ran and who allowed it is here.
///
/// Nothing in termind changes or deletes a row, and each row carries `chain`: SHA-256 of the
/// previous row's chain and its own fields, so a row changed, removed or inserted outside
/// termind (sqlite3 on the file) breaks the chain from there on, and `termind assistant
/// audit` says where. (SQLite triggers could refuse such changes only to a writer that does
/// not drop them first, and the store does not let a feature create triggers.)
struct AuditLog: Sendable {
    let db: Database

    typealias Entry = AssistantContracts.AuditEntry

    func decision(_ assessment: Assessment, conversation: String?, call: String?, allowed: Bool, decider: PolicyRules.Decider, reason: String?,
                  now: Double = Date().timeIntervalSince1970) async throws {
        try await insert(Entry(seq: 0, at: now, conversation: conversation, call: call, tool: assessment.tool, host: assessment.host?.id,
                               hostLabel: assessment.host?.label, effect: assessment.action.rawValue, classifier: assessment.classifier?.kind.rawValue,
                               event: "decision", decision: allowed ? "allowed" : "refused", decider: decider.rawValue, reason: reason))
    }

    func execution(_ assessment: Assessment, conversation: String?, call: String?, outcome: String, exitStatus: Int32?, exitSignal: String?,
                   stdoutBytes: Int?, stderrBytes: Int?, now: Double = Date().timeIntervalSince1970) async throws {
        try await insert(Entry(seq: 0, at: now, conversation: conversation, call: call, tool: assessment.tool, host: assessment.host?.id,
                               hostLabel: assessment.host?.label, effect: assessment.action.rawValue, classifier: assessment.classifier?.kind.rawValue,
                               event: "execution", outcome: outcome, exitStatus: exitStatus, exitSignal: exitSignal,
                               stdoutBytes: stdoutBytes, stderrBytes: stderrBytes))
    }

    private func insert(_ e: Entry) async throws {
        try await db.write { db in
            let previous = try db.query("SELECT chain FROM assistant_audit ORDER BY seq DESC LIMIT 1").first?.string("chain") ?? ""
            try db.execute("""
                INSERT INTO assistant_audit (at, conversation, call_id, tool, host, host_label, effect, classifier, event, decision, decider, reason,
                    exit_status, exit_signal, outcome, stdout_bytes, stderr_bytes, chain) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [e.at, e.conversation, e.call, e.tool, e.host, e.hostLabel, e.effect, e.classifier, e.event, e.decision, e.decider, e.reason,
                      e.exitStatus.map(Int.init), e.exitSignal, e.outcome, e.stdoutBytes, e.stderrBytes, Self.link(previous, e)])
        }
    }

    /// The chain value of `e` after `previous`: SHA-256 over the previous value and every
    /// field but `seq`, each length-prefixed (no two rows' fields read the same).
    static func link(_ previous: String, _ e: Entry) -> String {
        var bytes = Data()
        func add(_ text: String?) {
            guard let text else { bytes.append(0xFF); return }
            var length = UInt32(text.utf8.count).bigEndian
            bytes.append(Data(bytes: &length, count: 4))
            bytes.append(Data(text.utf8))
        }
        add(previous)
        for field in [String(e.at.bitPattern), e.conversation, e.call, e.tool, e.host, e.hostLabel, e.effect, e.classifier, e.event, e.decision, e.decider, e.reason,
                      e.exitStatus.map { String($0) }, e.exitSignal, e.outcome, e.stdoutBytes.map { String($0) }, e.stderrBytes.map { String($0) }] {
            add(field)
        }
        return Digest.sha256(bytes).hexEncoded
    }

    /// The first entry whose chain does not follow from the rows before it (nil: intact).
    func firstBroken() async throws -> Int? {
        let rows = try await db.read { db in try db.query("SELECT * FROM assistant_audit ORDER BY seq").map { (try Self.entry($0), try $0.text("chain")) } }
        var previous = ""
        for (entry, chain) in rows {
            guard Self.link(previous, entry) == chain else { return entry.seq }
            previous = chain
        }
        return nil
    }

    private static func entry(_ row: Row) throws -> Entry {
        guard let at = row.double("at") else { throw TermindError(.storeCorrupt, "An audit row has no time; the audit log was changed outside termind.") }
        return Entry(seq: try row.integer("seq"), at: at, conversation: row.string("conversation"), call: row.string("call_id"),
              tool: try row.text("tool"), host: row.string("host"), hostLabel: row.string("host_label"), effect: try row.text("effect"),
              classifier: row.string("classifier"), event: try row.text("event"), decision: row.string("decision"), decider: row.string("decider"),
              reason: row.string("reason"), outcome: row.string("outcome"), exitStatus: row.int("exit_status").map { Int32(truncatingIfNeeded: $0) },
              exitSignal: row.string("exit_signal"), stdoutBytes: row.int("stdout_bytes"), stderrBytes: row.int("stderr_bytes"))
    }

    /// Entries in order, those of host id `host` (nil: all) from `since` on, at most `limit` (the latest).
    func entries(host: String?, since: Double?, limit: Int) async throws -> [Entry] {
        try await db.read { db in
            var conditions: [String] = []
            var bindings: [any SQLBindable] = []
            if let host { conditions.append("host = ?"); bindings.append(host) }
            if let since { conditions.append("at >= ?"); bindings.append(since) }
            let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
            bindings.append(limit)
            return try db.query("SELECT * FROM (SELECT * FROM assistant_audit \(filter) ORDER BY seq DESC LIMIT ?) ORDER BY seq", bindings).map(Self.entry)
        }
    }
}

extension AssistantFeature {
    /// `termind assistant tier`, `tiers` and `audit`.
    func registerPolicy(_ registrar: FeatureRegistrar) {
        registrar.handle(AssistantContracts.SetTier.self) { [self] request, _ in
            let ports = try current()
            var host = request.host
            var tier = request.tier
            switch request.words ?? [] {
            case []: break
            case let words where words.count == 1 && request.tag != nil: tier = words[0]
            case let words where words.count == 2 && request.tag == nil: (host, tier) = (words[0], words[1])
            case let words:
                throw TermindError(.assistantInvalid, "termind assistant tier takes HOST TIER, or --tag TAG TIER; got \(words.count) word\(words.count == 1 ? "" : "s").")
            }
            if request.tag != nil && tier == nil { (host, tier) = (nil, host) }
            guard let word = tier else {
                throw TermindError(.assistantInvalid, "Which tier? termind assistant tier HOST read-only|ask|auto, or --tag TAG read-only|ask|auto (default removes it).")
            }
            let chosen: AssistantSettings.Policy.Tier?
            if word == "default" { chosen = nil } else {
                guard let parsed = AssistantSettings.Policy.Tier(rawValue: word) else {
                    throw TermindError(.assistantInvalid, "\(word) is not a tier: read-only, ask, auto, or default to remove the record.")
                }
                chosen = parsed
            }
            let stored = try await ports.settings.current(AssistantSettings.Policy.key)
            var policy = (try? JSONValueDecoder.decode(AssistantSettings.Policy.self, from: stored.value)) ?? .defaults
            switch (host, request.tag) {
            case (let name?, nil):
                guard let found = try await ports.hosts.host(named: name) else {
                    throw TermindError(.assistantUnknown, "There is no saved host \(name) (termind vault host list shows them).")
                }
                policy.hosts[found.id] = chosen
            case (nil, let tag?):
                guard !tag.isEmpty else { throw TermindError(.assistantInvalid, "--tag is empty.") }
                policy.tags[tag] = chosen
            default:
                throw TermindError(.assistantInvalid, "Name a saved host or a tag (--tag TAG), not both.")
            }
            try await Self.write(policy, revision: stored.revision, ports: ports)
            return try await tiers(ports)
        }
        registrar.handle(AssistantContracts.ListTiers.self) { [self] _, _ in
            try await tiers(try current())
        }
        registrar.stream(AssistantStreams.Audit.self) { [self] request, session in
            try await audit(request, session: session, ports: try current())
        }
    }

    private func tiers(_ ports: Ports) async throws -> AssistantContracts.ListTiers.Response {
        let policy = try await ports.settings.read(AssistantSettings.Policy.self)
        var rows: [AssistantContracts.ListTiers.Row] = []
        for (id, tier) in policy.hosts.sorted(by: { $0.key < $1.key }) {
            let label = (try? await ports.hosts.host(named: id))?.label
            rows.append(.init(kind: "host", name: label ?? id, id: id, tier: tier))
        }
        for (tag, tier) in policy.tags.sorted(by: { $0.key < $1.key }) { rows.append(.init(kind: "tag", name: tag, id: nil, tier: tier)) }
        return .init(tiers: rows, tools: policy.tools, mode: policy.mode)
    }

    /// `since` as seconds since 1970: an age (30m, 12h, 7d), an ISO 8601 time, or a date.
    static func since(_ text: String, now: Double) -> Double? {
        if let unit = text.last, let amount = Double(text.dropLast()), amount >= 0 {
            let seconds: Double? = switch unit {
            case "s": 1
            case "m": 60
            case "h": 3600
            case "d": 86400
            default: nil
            }
            if let seconds { return now - amount * seconds }
        }
        if let date = try? Date.ISO8601FormatStyle().parse(text) { return date.timeIntervalSince1970 }
        return (try? Date.ISO8601FormatStyle().year().month().day().parse(text))?.timeIntervalSince1970
    }

    private func audit(_ request: AssistantStreams.Audit.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.Audit.Result {
        var host: String?
        if let name = request.host {
            host = (try await ports.hosts.host(named: name))?.id ?? name
        }
        var since: Double?
        if let text = request.since {
            guard let parsed = Self.since(text, now: Date().timeIntervalSince1970) else {
                throw TermindError(.assistantInvalid, "--since \(text): expected an age (30m, 12h, 7d), an ISO 8601 time (2026-12-06T10:00:00Z) or a date (2026-12-06).")
            }
            since = parsed
        }
        let limit = request.limit ?? 1000
        guard (1...100_000).contains(limit) else { throw TermindError(.assistantInvalid, "--limit must be from 1 to 100000, not \(limit).") }
        let entries = try await ports.audit.entries(host: host, since: since, limit: limit)
        if request.output == "json" {
            for entry in entries {
                await session.emit("record", ["record": try JSONCoding.parse(JSONCoding.encode(entry), source: "audit")])
            }
        } else {
            let formatter = Date.ISO8601FormatStyle()
            let rows: [JSONValue] = entries.map { e in
                let what = e.event == "decision" ? "\(e.decision ?? "") by \(e.decider ?? "")" : "ran: \(e.outcome ?? "")"
                    + (e.exitStatus.map { " (exit \($0))" } ?? "") + (e.exitSignal.map { " (SIG\($0))" } ?? "")
                return .object(["time": .string(formatter.format(Date(timeIntervalSince1970: e.at))), "conversation": .string(e.conversation ?? ""),
                                "call": .string(e.call ?? ""), "tool": .string(e.tool), "host": .string(e.hostLabel ?? e.host ?? ""),
                                "effect": .string(e.effect), "what": .string(what), "reason": .string(e.reason ?? ""),
                                "bytes": .string(e.stdoutBytes.map { "\($0)/\(e.stderrBytes ?? 0)" } ?? "")])
            }
            await session.emit("view", ["rows": .array(rows), "columns": .array(["time", "conversation", "call", "tool", "host", "effect", "what", "bytes", "reason"].map { .string($0) }),
                                        "result": .bool(true)])
        }
        if let broken = try await ports.audit.firstBroken() {
            throw TermindError(.assistantAuditBroken, "The audit log was changed outside termind: entry \(broken) does not follow from the entries before it (changed, removed or inserted by hand). What termind wrote cannot be vouched for from there on.")
        }
        return .init(entries: entries.count)
    }
}
