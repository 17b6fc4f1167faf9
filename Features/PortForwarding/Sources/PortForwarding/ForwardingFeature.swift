import ForwardingRules
import Foundation
import PortForwardingAPI
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
        registrar.handle(ForwardingContracts.Add.self) { [self] request, _ in
            let ports = try current()
            let spec = try Self.spec(local: request.localForward, remote: request.remoteForward, dynamic: request.dynamicForward, required: true)!
            let rule = ForwardRule(id: UUID().uuidString.lowercased(), name: try Self.checkName(request.name), kind: spec.kind,
                                   bindAddress: spec.bindAddress, bindPort: spec.bindPort, targetHost: spec.targetHost, targetPort: spec.targetPort,
                                   host: try await Self.hostReference(request.host, ports: ports), color: try Self.checkColor(request.color),
                                   tags: try Self.checkTags(request.tags ?? []))
            try await ports.store.insert(rule)
            return rule
        }
        registrar.handle(ForwardingContracts.Edit.self) { [self] request, _ in
            let ports = try current()
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
            guard rule != before else { return try await status(rule, ports: ports) }
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
            return try await status(rule, ports: ports)
        }
        registrar.handle(ForwardingContracts.Remove.self) { [self] request, _ in
            let ports = try current()
            let rule = try await Self.find(request.rule, ports: ports)
            await supervisor.stop(rule.id)
            try await ports.store.delete(rule.id)
            return rule
        }
        registrar.handle(ForwardingContracts.Stop.self) { [self] request, _ in
            let ports = try current()
            let rule = try await Self.find(request.rule, ports: ports)
            if let stopped = await supervisor.stop(rule.id) { return stopped }
            return try await status(rule, ports: ports)
        }
        registrar.handle(ForwardingContracts.List.self) { [self] request, _ in
            let ports = try current()
            return .init(rules: try await statuses(ports, tag: request.tag))
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

    func start(_ context: FeatureContext) async throws {
        let db = try context.ports.require(.store)
        do {
            let report = try db.migrate(ForwardingSchema.schema)
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
            throw TermindError(.forwardingNeedsServer, "Saved rules run inside termind serve, which keeps them alive: start it (termind serve), then "
                + "termind forward \(retry ? "retry" : "start") \(rule.name) again. For this command's lifetime only: termind forward run \(Self.shell(rule.host)) \(rule.optionDescription).")
        }
        if !retry, let status = await supervisor.status(rule.id), status.state == .running || status.state == .recovering {
            await session.emit("notice", ["text": .string("\(rule.name) is \(status.state.rawValue) already.")])
            return status
        }
        let label = try await Self.label(rule.host, ports: ports)
        return try await supervisor.start(rule, label: label, ask: { await session.ask($0) }, preset: request.acceptHostKey,
                                          connectTimeout: request.connectTimeout, opener: ports.opener, logger: ports.logger)
    }

    // MARK: - Unsaved forwards

    private func run(_ request: ForwardingStreams.Run.Request, session: StreamSession, ports: Ports) async throws -> ForwardingStreams.Run.Result {
        var specs: [ForwardSpec] = []
        for text in request.localForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .local)) }
        for text in request.remoteForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .remote)) }
        for text in request.dynamicForward ?? [] { specs.append(try ForwardSpec.parse(text, kind: .dynamic)) }
        guard !specs.isEmpty else { throw TermindError.badRequest("Name at least one forward: --local-forward SPEC, --remote-forward SPEC or --dynamic-forward SPEC (as ssh's -L, -R, -D).") }
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
        do {
            for rule in rules {
                let status = try await host.start(rule, ask: { await session.ask($0) }, preset: request.acceptHostKey, connectTimeout: request.connectTimeout)
                await session.emit("notice", ["text": .string(Self.describe(status))])
            }
            await session.emit("notice", ["text": .string("Forwarding through \(label) until interrupted (Ctrl-C).")])
            let deadline = request.seconds.map { Date().timeIntervalSince1970 + $0 }
            var last = await host.statuses().map(\.state)
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                if let deadline, Date().timeIntervalSince1970 >= deadline { break }
                let now = await host.statuses()
                for (status, before) in zip(now, last) where status.state != before {
                    await session.emit("notice", ["text": .string(Self.describe(status))])
                }
                last = now.map(\.state)
                if now.allSatisfy({ $0.state == .failed || $0.state == .needsAttention }) {
                    throw TermindError(.forwardingFailed, now.map { "\($0.rule.name): \($0.lastError ?? $0.state.rawValue)" }.joined(separator: "\n"))
                }
            }
        } catch {
            await host.stopAll()
            throw error
        }
        let final = await host.statuses()
        await host.stopAll()
        return .init(forwards: final)
    }

    static func describe(_ status: ForwardStatus) -> String {
        let rule = status.rule
        let target = rule.kind == .dynamic ? "SOCKS" : "\(rule.targetHost ?? "?"):\(rule.targetPort ?? 0)"
        switch status.state {
        case .running:
            return rule.kind == .remote
                ? "\(rule.name): \(status.hostLabel) listens on \(status.bound ?? "?") → \(target) from here"
                : "\(rule.name): \(status.bound ?? "?") → \(target) through \(status.hostLabel)"
        case .recovering:
            return "\(rule.name): the connection to \(status.hostLabel) was lost (\(status.lastError ?? "")); reconnecting"
        default:
            return "\(rule.name): \(status.state.rawValue)\(status.lastError.map { " (\($0))" } ?? "")"
        }
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

    private func showStatus(_ request: ForwardingStreams.Status.Request, session: StreamSession, ports: Ports) async throws -> ForwardingContracts.List.Response {
        if let count = request.count, count < 1 { throw TermindError.badRequest("--count must be at least 1, not \(count).") }
        var only: String?
        if let name = request.rule { only = try await Self.find(name, ports: ports).id }
        func current() async throws -> [ForwardStatus] {
            try await statuses(ports, tag: nil).filter { only == nil || $0.rule.id == only }
        }
        let json = request.output == "json"
        guard request.watch == true else {
            let list = try await current()
            if !json { await session.emit("view", Self.view(list, watching: false)) }
            return .init(rules: list)
        }
        var redraws = 0
        var list = try await current()
        while !Task.isCancelled {
            list = try await current()
            var view = Self.view(list, watching: true)
            if json { view["json"] = .object(["rules": try JSONCoding.parse(JSONCoding.encode(list), source: "status")]) }
            await session.emit("view", view)
            redraws += 1
            if let count = request.count, redraws >= count { break }
            try? await Task.sleep(for: .seconds(1))
        }
        return .init(rules: list)
    }

    static func view(_ list: [ForwardStatus], watching: Bool) -> [String: JSONValue] {
        let now = Date().timeIntervalSince1970
        let rows: [JSONValue] = list.map { status in
            let rule = status.rule
            var row: [String: JSONValue] = [
                "name": .string(rule.name), "state": .string(status.state.rawValue), "forward": .string(rule.flagDescription),
                "host": .string(status.hostLabel), "listening": .string(status.bound ?? "-"),
                "sent": .string(TerminalText.bytes(status.bytesSent)), "received": .string(TerminalText.bytes(status.bytesReceived)),
                "flows": .string("\(status.openFlows) open / \(status.flows)"),
            ]
            if let since = status.runningSince { row["uptime"] = .string(duration(now - since)) }
            if let next = status.nextRetryAt { row["retry"] = .string("in \(duration(max(0, next - now)))") }
            if let error = status.lastError { row["error"] = .string(error) }
            return .object(row)
        }
        var view: [String: JSONValue] = ["title": .string(list.isEmpty ? "No forwarding rules: termind forward add NAME HOST --local-forward 8080:db:5432" : "Forwarding rules"),
                                         "rows": .array(rows)]
        if watching { view["refresh"] = .double(1) } else { view["result"] = .bool(true) }
        return view
    }

    static func duration(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s < 60 { return "\(s) s" }
        if s < 3600 { return "\(s / 60) min \(s % 60) s" }
        return "\(s / 3600) h \(s % 3600 / 60) min"
    }

    // MARK: - Checks

    static func find(_ name: String, ports: Ports) async throws -> ForwardRule {
        if let rule = try await ports.store.find(name) { return rule }
        throw TermindError(.forwardingRuleNotFound, "No forwarding rule is named '\(name)'; termind forward list shows the rules.")
    }

    /// A saved host's id (stays right through renames), else the line as a quick-connect target.
    static func hostReference(_ text: String, ports: Ports) async throws -> String {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
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
        let trimmed = name.trimmingCharacters(in: .whitespaces)
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
        for tag in tags.map({ $0.trimmingCharacters(in: .whitespaces) }) where !tag.isEmpty {
            guard tag.count <= 32, !tag.contains(","), tag.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
                throw TermindError(.forwardingBadSpec, "A tag is 1 to 32 characters without spaces or commas (got '\(String(tag.prefix(40)))').")
            }
            if !result.contains(tag) { result.append(tag) }
        }
        return result
    }

    static func shell(_ word: String) -> String {
        word.allSatisfy({ $0.isLetter || $0.isNumber || "@.:-_/".contains($0) }) ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
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
        let run = HostRun(target: reference, label: label, purpose: "forwarding", opener: opener, logger: logger.child("host"))
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
