import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import SyncAPI
import Synchronization
import TermindCore
import TermindSSH
import TermindStore
import VaultAPI

/// Port forwarding (docs/forwarding.md): rules saved as records of their own, run inside
/// `termind serve` by a supervisor per host (`HostRun`) that keeps them alive; unsaved
/// forwards for one command's lifetime with `termind forward run`.
final class ForwardingFeature: Feature {
    struct Ports: Sendable {
        let store: RuleStore
        let hosts: any HostDirectory
        let opener: ConnectionOpener
        let resident: Bool
        let logger: Logger
    }

    private let ports = Mutex<Ports?>(nil)
    private let supervisor = Supervisor()
    private let follower = Mutex<Task<Void, Never>?>(nil)

    func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("Port forwarding is not started.") }
        return ports
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.sessionForwarding, SessionForwarder(feature: self))
        registrar.provide(.forwardingSyncZone, ForwardingSyncZone(feature: self))
        registrar.handle(ForwardingContracts.Add.self) { [self] request, _ in try await add(request, ports: try current()) }
        registrar.handle(ForwardingContracts.Edit.self) { [self] request, _ in try await edit(request, ports: try current()).status }
        registrar.handle(ForwardingContracts.Remove.self) { [self] request, _ in try await remove(request, ports: try current()).rule }
        registrar.handle(ForwardingContracts.Stop.self) { [self] request, _ in try await stop(request, ports: try current()).status }
        registrar.handle(ForwardingContracts.List.self) { [self] request, _ in
            let ports = try current()
            return .init(rules: try await statuses(ports, tag: request.tag))
        }
        // The same, run by a person: each says what it did.
        registrar.stream(ForwardingStreams.AddRule.self) { [self] request, session in
            let ports = try current()
            let rule = try await add(request, ports: ports)
            let what = RuleText.what(rule, hostLabel: try await Self.label(rule.host, ports: ports))
            await Self.say("Saved \(what), not started: termind forward start \(Self.shell(rule.name)) runs it inside termind serve.", session)
            return rule
        }
        registrar.stream(ForwardingStreams.EditRule.self) { [self] request, session in
            let (status, changed) = try await edit(request, ports: try current())
            await Self.say((changed ? "Changed \(status.rule.name). " : "Nothing to change. ") + RuleText.sentence(status), session)
            return status
        }
        registrar.stream(ForwardingStreams.RemoveRule.self) { [self] request, session in
            let ports = try current()
            let (rule, stopped) = try await remove(request, ports: ports)
            let what = RuleText.what(rule, hostLabel: try await Self.label(rule.host, ports: ports))
            let wasRunning = stopped.map { $0.state == .running || $0.state == .recovering || $0.state == .starting } ?? false
            await Self.say("Deleted \(what)\(wasRunning ? "; it was stopped first" : "").", session)
            return rule
        }
        registrar.stream(ForwardingStreams.StopRule.self) { [self] request, session in
            let (status, before) = try await stop(request, ports: try current())
            let what = RuleText.what(status.rule, hostLabel: status.hostLabel)
            switch before {
            case .running?, .recovering?, .starting?:
                await Self.say("Stopped \(what): its listener is closed and its flows ended; other rules go on.", session)
            case let state?:
                await Self.say("Stopped \(what), which was \(state.rawValue).", session)
            case nil:
                await Self.say("\(what) was not running; nothing changed.", session)
            }
            return status
        }
        registrar.stream(ForwardingStreams.Start.self) { [self] request, session in
            try await start(request, session: session, retry: false)
        }
        registrar.stream(ForwardingStreams.Retry.self) { [self] request, session in
            try await start(request, session: session, retry: true)
        }
        registrar.stream(ForwardingStreams.Run.self) { [self] request, session in
            try await run(request, session: session, ports: try current())
        }
        registrar.stream(ForwardingStreams.Status.self) { [self] request, session in
            try await showStatus(request, session: session, ports: try current())
        }
    }

    /// A command's result for a person: one sentence (left out with --json, where the record is printed).
    static func say(_ sentence: String, _ session: StreamSession) async {
        await say(["title": .string(sentence), "rows": .array([])], session)
    }

    // MARK: - Rules

    private func add(_ request: ForwardingContracts.Add.Request, ports: Ports) async throws -> ForwardRule {
        let spec = try Self.spec(local: request.localForward, remote: request.remoteForward, dynamic: request.dynamicForward, required: true)!
        let rule = ForwardRule(id: UUID().uuidString.lowercased(), name: try Self.checkName(request.name), kind: spec.kind,
                               bindAddress: spec.bindAddress, bindPort: spec.bindPort, targetHost: spec.targetHost, targetPort: spec.targetPort,
                               host: try await Self.hostReference(request.host, ports: ports), color: try Self.checkColor(request.color),
                               tags: try Self.checkTags(request.tags ?? []))
        try await ports.store.insert(rule)
        return rule
    }

    /// The rule's status after the edit, and whether anything changed.
    private func edit(_ request: ForwardingContracts.Edit.Request, ports: Ports) async throws -> (status: ForwardStatus, changed: Bool) {
        var rule = try await Self.find(request.rule, ports: ports)
        let before = rule
        if let name = request.name { rule.name = try Self.checkName(name) }
        if let host = request.host { rule.host = try await Self.hostReference(host, ports: ports) }
        if let spec = try Self.spec(local: request.localForward, remote: request.remoteForward, dynamic: request.dynamicForward, required: false) {
            rule.kind = spec.kind
            rule.bindAddress = spec.bindAddress
            rule.bindPort = spec.bindPort
            rule.targetHost = spec.targetHost
            rule.targetPort = spec.targetPort
        }
        if let color = request.color { rule.color = color.isEmpty ? nil : try Self.checkColor(color) }
        if let tags = request.tags { rule.tags = try Self.checkTags(tags) }
        guard rule != before else { return (try await status(rule, ports: ports), false) }
        try await ports.store.update(rule)
        // Only this rule's run restarts (a name or color alone changes nothing that runs).
        let running = await supervisor.status(rule.id).map { $0.state != .stopped } ?? false
        if running {
            let shapeChanged = rule.host != before.host || rule.spec != before.spec
            if shapeChanged {
                _ = await supervisor.restart(rule, label: try await Self.label(rule.host, ports: ports), ports: ports.opener, logger: ports.logger)
            } else {
                await supervisor.update(rule)
            }
        }
        return (try await status(rule, ports: ports), true)
    }

    /// The deleted rule, and its run's last status when it had one.
    private func remove(_ request: ForwardingContracts.RuleRequest, ports: Ports) async throws -> (rule: ForwardRule, stopped: ForwardStatus?) {
        let rule = try await Self.find(request.rule, ports: ports)
        let before = await supervisor.status(rule.id)
        await supervisor.stop(rule.id)
        try await ports.store.delete(rule.id)
        return (rule, before)
    }

    /// The rule's status now, and the state of its run before (nil: it had none).
    private func stop(_ request: ForwardingContracts.RuleRequest, ports: Ports) async throws -> (status: ForwardStatus, before: ForwardState?) {
        let rule = try await Self.find(request.rule, ports: ports)
        let before = await supervisor.status(rule.id)?.state
        if let stopped = await supervisor.stop(rule.id) { return (stopped, before) }
        return (try await status(rule, ports: ports), nil)
    }

    func start(_ context: FeatureContext) async throws {
        let db = try context.ports.require(.store)
        do {
            let report = try await db.migrate(ForwardingSchema.schema)
            if !report.applied.isEmpty { context.logger.info("forwarding.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        let opener = ConnectionOpener(routes: try context.ports.require(.routes), trust: try context.ports.require(.hostKeyTrust),
                                      pool: try context.ports.require(.sshConnections), logger: context.logger)
        let value = Ports(store: RuleStore(db: db), hosts: try context.ports.require(.hostDirectory), opener: opener, resident: context.resident,
                          logger: context.logger)
        ports.withLock { $0 = value }
        // An edited or deleted host (or a jump host of its route) moves its running rules
        // to a connection made the new way.
        let changes = value.hosts.changes()
        let supervisor = self.supervisor
        follower.withLock { $0 = Task { for await change in changes { await supervisor.hostChanged(change) } } }
    }

    func stop() async {
        follower.withLock { $0?.cancel(); $0 = nil }
        await supervisor.stopAll()
        ports.withLock { $0 = nil }
    }

    // MARK: - Starting saved rules

    private func start(_ request: ForwardingStreams.Start.Request, session: StreamSession, retry: Bool) async throws -> ForwardStatus {
        let ports = try current()
        let rule = try await Self.find(request.rule, ports: ports)
        guard ports.resident else {
            // The host as the person knows it (its label), not the id the rule keeps.
            let host = try await Self.label(rule.host, ports: ports)
            throw TermindError(.forwardingNeedsServer, "Saved rules run inside termind serve, which keeps them alive: start it (termind serve), then "
                + "termind forward \(retry ? "retry" : "start") \(Self.shell(rule.name)) again. For this command's lifetime only: termind forward run \(Self.shell(host)) "
                + "\(rule.kind.flag) \(Self.shell(rule.spec.description)).")
        }
        if !retry, let status = await supervisor.status(rule.id), status.state == .running || status.state == .recovering {
            await Self.say(RuleText.sentence(status), session)
            return status
        }
        let label = try await Self.label(rule.host, ports: ports)
        let status = try await supervisor.start(rule, label: label, ask: { await session.ask($0) }, preset: request.acceptHostKey,
                                                connectTimeout: request.connectTimeout, opener: ports.opener, logger: ports.logger)
        await Self.say(RuleText.sentence(status), session)
        return status
    }

    // MARK: - Unsaved forwards

    private func run(_ request: ForwardingStreams.Run.Request, session: StreamSession, ports: Ports) async throws -> ForwardingStreams.Run.Result {
        var specs: [ForwardSpec] = []
        for text in request.localForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .local)) }
        for text in request.remoteForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .remote)) }
        for text in request.dynamicForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .dynamic)) }
        guard !specs.isEmpty else {
            throw TermindError(.forwardingBadSpec, "Name at least one forward: -L [BIND:]PORT:HOST:HOSTPORT, -R [BIND:]PORT:HOST:HOSTPORT or -D [BIND:]PORT, "
                + "as ssh takes them (or --local-forward, --remote-forward, --dynamic-forward).")
        }
        if let seconds = request.seconds, !(seconds > 0) { throw TermindError.badRequest("--seconds must be more than 0, not \(seconds).") }
        let reference = try await Self.hostReference(request.host, ports: ports)
        let label = try await Self.label(reference, ports: ports)
        let id = UUID().uuidString.lowercased()
        let host = HostRun(target: reference, label: label, purpose: "forwarding-run-\(id)", opener: ports.opener, logger: ports.logger.child("run"))
        // Edits of the saved host (in this process: inside termind serve, from any client) move
        // the run's forwards to a connection made the new way, as for saved rules.
        let changes = ports.hosts.changes()
        let follower = Task {
            for await change in changes where change.affected.contains(reference) {
                await host.hostChanged(deleted: change.deleted && change.host == reference)
            }
        }
        defer { follower.cancel() }
        let rules = specs.enumerated().map { index, spec in
            var rule = ForwardRule(id: "\(id)-\(index)", name: "", kind: spec.kind, bindAddress: spec.bindAddress, bindPort: spec.bindPort,
                                   targetHost: spec.targetHost, targetPort: spec.targetPort, host: reference)
            rule.name = rule.flagDescription
            return rule
        }
        let exitOnFailure = request.exitOnForwardFailure ?? false
        do {
            for rule in rules {
                do {
                    let status = try await host.start(rule, ask: { await session.ask($0) }, preset: request.acceptHostKey, connectTimeout: request.connectTimeout)
                    await session.emit("notice", ["text": .string(RuleText.sentence(status))])
                } catch {
                    // Without a connection no forward can run; with one, this forward's own
                    // failure (a port in use, a listen the server refused) is its own, as ssh's.
                    guard !exitOnFailure, await host.isConnected else { throw error }
                    let failure = TermindError.from(error)
                    await session.emit("notice", ["text": .string("warning: \(RuleText.what(rule, hostLabel: label)) did not start: \(RuleText.sentenceEnd(failure.message)); "
                        + "the other forwards go on (--exit-on-forward-failure true ends them all instead).")])
                }
            }
            let started = await host.statuses()
            let failed = started.filter { $0.state != .running }
            if failed.count == started.count {
                throw TermindError(.forwardingFailed, "No forward could start: " + failed.map { "\($0.rule.name): \(RuleText.sentenceEnd($0.lastError ?? $0.state.rawValue))" }.joined(separator: "; ") + ".")
            }
            let failures = failed.isEmpty ? "" : "; \(failed.map(\.rule.name).joined(separator: ", ")) did not start"
            await session.emit("notice", ["text": .string("Forwarding through \(label) until interrupted (Ctrl-C): \(started.count - failed.count) of \(started.count) running\(failures).")])
            let deadline = request.seconds.map { Date().timeIntervalSince1970 + $0 }
            var last = started.map(\.state)
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                if let deadline, Date().timeIntervalSince1970 >= deadline { break }
                let now = await host.statuses()
                for (status, before) in zip(now, last) where status.state != before {
                    await session.emit("notice", ["text": .string(RuleText.sentence(status))])
                }
                last = now.map(\.state)
                let stopped = now.filter { $0.state == .failed || $0.state == .needsAttention }
                if stopped.count == now.count || (exitOnFailure && !stopped.isEmpty) {
                    throw TermindError(.forwardingFailed, stopped.map { "\($0.rule.name): \(RuleText.sentenceEnd($0.lastError ?? $0.state.rawValue))" }.joined(separator: "; ") + ".")
                }
            }
        } catch {
            await host.stopAll()
            throw error
        }
        let final = await host.statuses()
        await host.stopAll()
        await Self.say(RuleText.view(final, title: "Forwards through \(label), now ended", empty: "No forwards"), session)
        // Some forwards never ran or stopped for good while the others went on: a partial failure.
        let partial = final.contains { $0.state == .failed || $0.state == .needsAttention }
        return .init(forwards: final, exitStatus: partial ? 3 : nil)
    }

    // MARK: - Status

    private func status(_ rule: ForwardRule, ports: Ports) async throws -> ForwardStatus {
        if let status = await supervisor.status(rule.id) { return status }
        return ForwardStatus(rule: rule, hostLabel: try await Self.label(rule.host, ports: ports), state: .stopped)
    }

    private func statuses(_ ports: Ports, tag: String?) async throws -> [ForwardStatus] {
        let saved = Dictionary(try await ports.hosts.allHosts().map { ($0.id, $0.label) }, uniquingKeysWith: { first, _ in first })
        var result: [ForwardStatus] = []
        for rule in try await ports.store.all() where tag.map({ rule.tags.contains($0) }) ?? true {
            var status = await supervisor.status(rule.id) ?? ForwardStatus(rule: rule, hostLabel: saved[rule.host] ?? rule.host, state: .stopped)
            status.rule = rule
            status.hostLabel = saved[rule.host] ?? rule.host
            result.append(status)
        }
        return result
    }

    /// `forward status` and `forward list`: a table of the rules (each error whole under it),
    /// once or redrawn each second; with `--json` the records (one line per redraw).
    private func showStatus(_ request: ForwardingStreams.Status.Request, session: StreamSession, ports: Ports) async throws -> ForwardingContracts.List.Response {
        if let count = request.count, count < 1 { throw TermindError.badRequest("--count must be at least 1, not \(count).") }
        var only: String?
        if let name = request.rule { only = try await Self.find(name, ports: ports).id }
        func current() async throws -> [ForwardStatus] {
            try await statuses(ports, tag: request.tag).filter { only == nil || $0.rule.id == only }
        }
        let json = request.output == "json"
        let empty = request.tag.map { "No forwarding rule is tagged \($0)." } ?? "No forwarding rules: termind forward add NAME HOST -L 8080:db:5432"
        func view(_ list: [ForwardStatus]) -> [String: JSONValue] { RuleText.view(list, title: "Forwarding rules", empty: empty) }
        guard request.watch == true else {
            let list = try await current()
            if !json { await Self.say(view(list), session) }
            return .init(rules: list)
        }
        var redraws = 0
        var list = try await current()
        while !Task.isCancelled {
            list = try await current()
            redraws += 1
            let last = request.count.map { redraws >= $0 } ?? false
            if json {
                var redraw = view(list)
                redraw["json"] = .object(["rules": try JSONCoding.parse(JSONCoding.encode(list), source: "status")])
                await session.emit("view", redraw)
            } else if last {
                // The last redraw stands for the result (not the records printed again).
                await Self.say(view(list), session)
            } else {
                await session.emit("view", view(list).merging(["refresh": .double(1)]) { $1 })
            }
            if last { break }
            try? await Task.sleep(for: .seconds(1))
        }
        return .init(rules: list)
    }

    /// A view that stands for the command's result (left out with --json).
    static func say(_ view: [String: JSONValue], _ session: StreamSession) async {
        await session.emit("view", view.merging(["result": .bool(true)]) { $1 })
    }

    // MARK: - Checks

    static func find(_ name: String, ports: Ports) async throws -> ForwardRule {
        if let rule = try await ports.store.find(name) { return rule }
        throw TermindError(.forwardingRuleNotFound, "No forwarding rule is named '\(name)'; termind forward list shows the rules.")
    }

    /// A saved host's id (stays right through renames), else the line as a quick-connect target.
    static func hostReference(_ text: String, ports: Ports) async throws -> String {
        let trimmed = text.trimmedWhitespace
        guard !trimmed.isEmpty, trimmed.utf8.count <= 1024 else { throw TermindError(.forwardingBadSpec, "A rule's host is 1 to 1024 bytes: a saved host or a quick-connect line.") }
        return try await ports.hosts.host(named: trimmed)?.id ?? trimmed
    }

    static func label(_ reference: String, ports: Ports) async throws -> String {
        try await ports.hosts.host(named: reference)?.label ?? reference
    }

    static func spec(local: String?, remote: String?, dynamic: String?, required: Bool) throws -> ForwardSpec? {
        let given = [(local, ForwardKind.local), (remote, .remote), (dynamic, .dynamic)].compactMap { text, kind in text.map { ($0, kind) } }
        guard given.count <= 1 else { throw TermindError(.forwardingBadSpec, "A rule is one forward: give one of --local-forward, --remote-forward or --dynamic-forward, not \(given.count).") }
        guard let (text, kind) = given.first else {
            if required { throw TermindError(.forwardingBadSpec, "Say what the rule forwards: --local-forward [BIND:]PORT:HOST:HOSTPORT (ssh -L), --remote-forward [BIND:]PORT:HOST:HOSTPORT (-R) or --dynamic-forward [BIND:]PORT (-D).") }
            return nil
        }
        return try ForwardSpec.parse(text, kind: kind)
    }

    static func checkName(_ name: String) throws -> String {
        let trimmed = name.trimmedWhitespace
        guard !trimmed.isEmpty, trimmed.count <= 64, !trimmed.hasPrefix("-"), trimmed.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
            throw TermindError(.forwardingBadSpec, "A rule's name is 1 to 64 printable characters, not starting with '-' (got '\(String(name.prefix(80)))').")
        }
        return trimmed
    }

    static func checkColor(_ color: String?) throws -> String? {
        guard let color, !color.isEmpty else { return nil }
        guard color.count <= 32, color.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "#" || $0 == "-" }) else {
            throw TermindError(.forwardingBadSpec, "A color is a name or #RRGGBB of at most 32 characters (got '\(String(color.prefix(40)))').")
        }
        return color
    }

    static func checkTags(_ tags: [String]) throws -> [String] {
        var result: [String] = []
        for tag in tags.map({ $0.trimmedWhitespace }) where !tag.isEmpty {
            guard tag.count <= 32, !tag.contains(","), tag.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
                throw TermindError(.forwardingBadSpec, "A tag is 1 to 32 characters without spaces or commas (got '\(String(tag.prefix(40)))').")
            }
            if !result.contains(tag) { result.append(tag) }
        }
        return result
    }

    static func shell(_ word: String) -> String {
        word.allSatisfy({ $0.isLetter || $0.isNumber || "@.:-_/".contains($0) }) ? word : ShellText.singleQuoted(word)
    }
}

/// The host runs of the process's saved rules, one per host.
actor Supervisor {
    private var hosts: [String: HostRun] = [:]
    private var ruleHost: [String: String] = [:]

    private func host(_ reference: String, label: String, opener: ConnectionOpener, logger: Logger) async -> HostRun {
        if let run = hosts[reference] {
            await run.rename(label)
            return run
        }
        let run = HostRun(target: reference, label: label, purpose: "forwarding", saved: true, opener: opener, logger: logger.child("host"))
        hosts[reference] = run
        return run
    }

    func start(_ rule: ForwardRule, label: String, ask: @escaping ConnectionAsker, preset: HostKeyPreset?, connectTimeout: Double?,
               opener: ConnectionOpener, logger: Logger) async throws -> ForwardStatus {
        if let previous = ruleHost[rule.id], previous != rule.host { await stop(rule.id) }
        let run = await host(rule.host, label: label, opener: opener, logger: logger)
        ruleHost[rule.id] = rule.host
        return try await run.start(rule, ask: ask, preset: preset, connectTimeout: connectTimeout)
    }

    /// An edited rule's new run, with nobody to ask: on the same host it replaces the old
    /// run on the same connection; a new host's run starts on that host's.
    func restart(_ rule: ForwardRule, label: String, ports opener: ConnectionOpener, logger: Logger) async -> ForwardStatus {
        if let previous = ruleHost[rule.id], previous != rule.host { await stop(rule.id) }
        let run = await host(rule.host, label: label, opener: opener, logger: logger)
        ruleHost[rule.id] = rule.host
        return await run.restart(rule)
    }

    /// A change that does not touch what runs (name, color, tags): shown at once.
    func update(_ rule: ForwardRule) async {
        guard let reference = ruleHost[rule.id], let run = hosts[reference] else { return }
        await run.relabel(rule)
    }

    @discardableResult
    func stop(_ id: String) async -> ForwardStatus? {
        guard let reference = ruleHost.removeValue(forKey: id), let run = hosts[reference] else { return nil }
        let status = await run.stop(id)
        if await run.isEmpty { hosts[reference] = nil }
        return status
    }

    func hostChanged(_ change: HostChange) async {
        for id in change.affected {
            await hosts[id]?.hostChanged(deleted: change.deleted && id == change.host)
        }
    }

    func status(_ id: String) async -> ForwardStatus? {
        guard let reference = ruleHost[id], let run = hosts[reference] else { return nil }
        return await run.status(for: id)
    }

    func stopAll() async {
        for run in hosts.values { await run.stopAll() }
        hosts = [:]
        ruleHost = [:]
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "forwarding", version: "0.1.0", signature: TermindLibrary.signature) { ForwardingFeature() }
}
