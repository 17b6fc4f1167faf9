import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import MetricsRules
import SettingsAPI
import SyncAPI
import Synchronization
import TermindCore
import TermindSSH
import VaultAPI

/// Metrics: agentless monitors of saved hosts (docs/metrics.md). One `Monitor` per host in
/// the process, shared by every client; which hosts, in what order, which are paused, the
/// interval and the chosen interfaces are `metrics.preferences` (device-local). In `termind
/// serve` the monitors of every listed, unpaused host run from boot; in a one-shot command
/// only those the command needs, for as long as it runs.
final class MetricsFeature: Feature {
    private struct Ports: Sendable {
        let opener: MonitorOpener
        let settings: (any SettingsValues)?
        let call: @Sendable (ContractID, Data) async throws -> Data
        let logger: Logger
        let resident: Bool
        var hosts: any HostDirectory { opener.hostDirectory }
    }

    private let ports = Mutex<Ports?>(nil)
    private let monitors = MonitorTable()
    private let preferences = PreferenceStore()
    private let follower = Mutex<Task<Void, Never>?>(nil)
    /// `metrics.sync`, once started with Settings there (without it nothing is kept to sync).
    private let zone = Mutex<MetricsSyncZone?>(nil)

    func syncZone() -> MetricsSyncZone? { zone.withLock { $0 } }

    private func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("Metrics is not started.") }
        return ports
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.metricsSyncZone, MetricsZonePort(feature: self))
        registrar.handle(MetricsContracts.List.self) { [self] _, _ in
            let ports = try current()
            let prefs = try await preferences.read(ports.settings)
            let saved = try await Self.saved(ports)
            var list: [MetricsContracts.Monitor] = []
            for id in prefs.order {
                list.append(await status(id, prefs: prefs, saved: saved))
            }
            return .init(monitors: list)
        }
        registrar.handle(MetricsContracts.Remove.self) { [self] request, _ in
            let ports = try current()
            let prefs = try await preferences.read(ports.settings)
            let id = try await monitoredID(request.host, prefs: prefs, ports: ports)
            let status = await status(id, prefs: prefs, saved: try await Self.saved(ports))
            try await preferences.update(ports.settings, call: ports.call) { p in
                p.order.removeAll { $0 == id }
                p.paused.removeAll { $0 == id }
                p.interfaces[id] = nil
            }
            await monitors.remove(id)?.stop()
            return status
        }
        registrar.handle(MetricsContracts.Pause.self) { [self] request, _ in
            let ports = try current()
            let prefs = try await preferences.read(ports.settings)
            let id = try await monitoredID(request.host, prefs: prefs, ports: ports)
            try await preferences.update(ports.settings, call: ports.call) { p in
                if !p.paused.contains(id) { p.paused.append(id) }
            }
            if let monitor = await monitors.get(id) {
                await monitor.pause()
                return await monitor.status
            }
            var status = await status(id, prefs: prefs, saved: try await Self.saved(ports))
            status.state = .paused
            return status
        }
        registrar.handle(MetricsContracts.Get.self) { [self] request, _ in
            let ports = try current()
            let prefs = try await preferences.read(ports.settings)
            var ids: [String] = []
            for name in request.hosts ?? prefs.order {
                ids.append(try await monitoredID(name, prefs: prefs, ports: ports))
            }
            var result: [MetricsContracts.Get.HostMetrics] = []
            let now = Date().timeIntervalSince1970
            let saved = try await Self.saved(ports)
            for id in ids {
                let status = await status(id, prefs: prefs, saved: saved)
                let sample = await monitors.get(id)?.latest
                let age = sample.map { max(0, now - $0.takenAt) }
                result.append(.init(host: id, label: status.label, state: status.state, sample: sample, ageSeconds: age,
                                    stale: age.map { $0 > 3 * prefs.intervalSeconds } ?? true))
            }
            return .init(hosts: result)
        }
        registrar.stream(MetricsStreams.Add.self) { [self] request, session in
            let ports = try current()
            guard let host = try await ports.hosts.host(named: request.host) else { throw Self.notSaved(request.host) }
            return try await startAndWait(host, request: request, session: session, ports: ports) { p in
                if !p.order.contains(host.id) { p.order.append(host.id) }
                p.paused.removeAll { $0 == host.id }
            }
        }
        registrar.stream(MetricsStreams.Resume.self) { [self] request, session in
            let ports = try current()
            let prefs = try await preferences.read(ports.settings)
            let id = try await monitoredID(request.host, prefs: prefs, ports: ports)
            guard let host = try await ports.hosts.host(named: id) else { throw Self.notSaved(request.host) }
            return try await startAndWait(host, request: request, session: session, ports: ports) { p in p.paused.removeAll { $0 == id } }
        }
        registrar.stream(MetricsStreams.Show.self) { [self] request, session in
            try await show(request, session: session, ports: try current())
        }
        registrar.stream(MetricsStreams.Watch.self) { [self] request, session in
            try await watch(request, session: session, ports: try current())
        }
    }

    func start(_ context: FeatureContext) async throws {
        let settings = context.ports.optional(.settingsValues)
        try settings?.register(MetricsSettings.Preferences.self, owner: context.featureID)
        let hosts = try context.ports.require(.hostDirectory)
        let opener = ConnectionOpener(routes: try context.ports.require(.routes), trust: try context.ports.require(.hostKeyTrust),
                                      pool: try context.ports.require(.sshConnections), logger: context.logger)
        let value = Ports(opener: MonitorOpener(opener: opener, hostDirectory: hosts), settings: settings, call: context.call,
                          logger: context.logger, resident: context.resident)
        ports.withLock { $0 = value }
        if let settings { zone.withLock { $0 = MetricsSyncZone(settings: settings, hosts: hosts, preferences: preferences, call: context.call) } }
        guard context.resident else { return }
        // A server samples every listed, unpaused host from boot, and follows changes to the
        // list (from any client, or `termind settings set metrics.preferences`).
        let task = Task { [self] in
            if let prefs = try? await preferences.read(value.settings) { await reconcile(prefs, ports: value) }
            guard let settings else { return }
            for await prefs in settings.updates(MetricsSettings.Preferences.self) {
                await preferences.remember(prefs)
                await reconcile(prefs, ports: value)
            }
        }
        follower.withLock { $0 = task }
    }

    func stop() async {
        follower.withLock { $0?.cancel(); $0 = nil }
        for monitor in await monitors.removeAll() { await monitor.stop() }
        ports.withLock { $0 = nil }
    }

    // MARK: - Monitors

    /// The monitor for `host`, made (not started) when there is none, with the preferences' interval and interfaces.
    private func monitor(_ host: HostSummary, prefs: MetricsSettings.Preferences, ports: Ports) async -> Monitor {
        let interfaces = Set(prefs.interfaces[host.id] ?? [])
        return await monitors.get(host.id, orMake: {
            Monitor(host: host, opener: ports.opener, interval: prefs.intervalSeconds, interfaces: interfaces, logger: ports.logger.child("monitor"))
        })
    }

    /// Resident: every listed, unpaused host samples; others stop.
    private func reconcile(_ prefs: MetricsSettings.Preferences, ports: Ports) async {
        let wanted = Set(prefs.order)
        for (id, monitor) in await monitors.all() where !wanted.contains(id) {
            await monitors.remove(id)
            await monitor.stop()
        }
        guard let saved = try? await Self.saved(ports) else { return }
        for id in prefs.order {
            guard let host = saved[id] else { continue }
            let monitor = await monitor(host, prefs: prefs, ports: ports)
            await monitor.configure(interval: prefs.intervalSeconds, interfaces: Set(prefs.interfaces[id] ?? []))
            if prefs.paused.contains(id) {
                if await monitor.status.state != .paused { await monitor.pause() }
            } else if await monitor.status.state != .needsAttention {
                await monitor.start()
            }
        }
    }

    /// Saved hosts by id, read once per request (not once per monitored host).
    private static func saved(_ ports: Ports) async throws -> [String: HostSummary] {
        Dictionary(try await ports.hosts.allHosts().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    private func status(_ id: String, prefs: MetricsSettings.Preferences, saved: [String: HostSummary]) async -> MetricsContracts.Monitor {
        if let monitor = await monitors.get(id) { return await monitor.status }
        guard let host = saved[id] else {
            return .init(host: id, label: id, state: .needsAttention, lastError: "\(id) is no longer a saved host; remove it with termind metrics rm \(id).")
        }
        return .init(host: id, label: host.label, state: prefs.paused.contains(id) ? .paused : .idle)
    }

    /// The id of a monitored host named by id or label; an error naming it otherwise.
    private func monitoredID(_ name: String, prefs: MetricsSettings.Preferences, ports: Ports) async throws -> String {
        if prefs.order.contains(name) { return name }
        if let host = try await ports.hosts.host(named: name), prefs.order.contains(host.id) { return host.id }
        throw TermindError(.metricsNotMonitored, "'\(name)' is not a monitored host; add it with termind metrics add \(name)"
            + (prefs.order.isEmpty ? " (no host is monitored yet)." : " (termind metrics list shows those that are)."))
    }

    static func notSaved(_ name: String) -> TermindError {
        TermindError(.vaultHostNotFound, "'\(name)' is not a saved host (monitors watch saved hosts): save it with termind vault host add ADDRESS --label \(name).")
    }

    /// Starts `host`'s monitor with the stream's client as the one to ask, and waits for its
    /// first sample (or the failure that stopped it). `save` changes the preferences once the
    /// client is attached: a server following them starts the monitor only then, so its first
    /// connection always has someone to ask.
    private func startAndWait(_ host: HostSummary, request: MetricsStreams.Add.Request, session: StreamSession, ports: Ports,
                              save: @Sendable (inout MetricsSettings.Preferences) -> Void) async throws -> MetricsContracts.Monitor {
        let prefs = try await preferences.read(ports.settings)
        let monitor = await monitor(host, prefs: prefs, ports: ports)
        let asker = await monitor.attach(ask: { await session.ask($0) }, preset: request.acceptHostKey, connectTimeout: request.connectTimeout)
        defer { Task { await monitor.release(asker) } }
        try await preferences.update(ports.settings, call: ports.call, save)
        // Asked to try again: a monitor that needed attention starts afresh.
        if await monitor.status.state == .needsAttention { await monitor.idle() }
        // Started first: the subscription's first state is the new run's, not a pause or failure before it.
        await monitor.start()
        let updates = await monitor.subscribe()
        _ = try await waitForSample(monitor, updates: updates, timeout: 60 + 2 * prefs.intervalSeconds) { _ in true }
        if !ports.resident {
            await session.emit("notice", ["text": .string("\(host.label) is monitored while termind serve runs, and during termind metrics watch.")])
        }
        return await monitor.status
    }

    /// The first sample `accept` takes; throws the monitor's error when it stops trying.
    private func waitForSample(_ monitor: Monitor, updates: AsyncStream<Monitor.Update>, timeout: Double,
                               accept: @escaping @Sendable (MetricsSample) -> Bool) async throws -> MetricsSample {
        let label = await monitor.host.label
        return try await withThrowingTaskGroup(of: MetricsSample.self) { group in
            group.addTask {
                for await update in updates {
                    switch update {
                    case .sample(let sample) where accept(sample):
                        return sample
                    case .state(let status) where status.state == .needsAttention || status.state == .paused:
                        throw TermindError(.metricsUnavailable, "\(label): \(status.lastError ?? "the monitor stopped")")
                    case .state(let status) where status.state == .retrying:
                        // Retrying is for a server's monitors; a client waiting now is told at once.
                        throw TermindError(.metricsUnavailable, "\(label): \(status.lastError ?? "the connection failed") (the monitor retries)")
                    default:
                        continue
                    }
                }
                throw CancellationError()
            }
            group.addTask {
                try await Task.sleep(for: .seconds(timeout))
                throw TermindError(.metricsUnavailable, "\(label) gave no sample within \(Int(timeout)) s.")
            }
            defer { group.cancelAll() }
            guard let first = try await group.next() else { throw CancellationError() }
            return first
        }
    }

    // MARK: - Show and watch

    private func show(_ request: MetricsStreams.Show.Request, session: StreamSession, ports: Ports) async throws -> MetricsSample {
        let prefs = try await preferences.read(ports.settings)
        let id = try await monitoredID(request.host, prefs: prefs, ports: ports)
        guard let host = try await ports.hosts.host(named: id) else { throw Self.notSaved(request.host) }
        let monitor = await monitor(host, prefs: prefs, ports: ports)
        let detail = request.detail == true
        // Rates need two snapshots, and processes' CPU two detail snapshots: a server's monitor
        // samples without detail until someone views it, so its first detail sample has none.
        let qualifies: @Sendable (MetricsSample) -> Bool = { $0.intervalSeconds != nil && (!detail || $0.processes?.intervalSeconds != nil) }
        let sample: MetricsSample
        if let latest = await monitor.latest, qualifies(latest), Date().timeIntervalSince1970 - latest.takenAt < 3 * prefs.intervalSeconds {
            sample = latest
        } else {
            let asker = await monitor.attach(ask: { await session.ask($0) }, preset: request.acceptHostKey, connectTimeout: request.connectTimeout)
            if detail { await monitor.viewDetail(1) }
            defer {
                Task {
                    await monitor.release(asker)
                    if detail { await monitor.viewDetail(-1) }
                }
            }
            if prefs.paused.contains(id), await !monitor.isRunning {
                throw TermindError(.metricsUnavailable, "\(host.label)'s monitor is paused: termind metrics resume \(host.label) first.")
            }
            await monitor.start()
            let updates = await monitor.subscribe()
            // Rates need two snapshots: up to two intervals after connecting (the second detail
            // snapshot follows the first within a second: Monitor).
            sample = try await waitForSample(monitor, updates: updates, timeout: 60 + 4 * prefs.intervalSeconds, accept: qualifies)
        }
        var view = Self.detailView(sample, state: await monitor.status.state, history: await monitor.history.recent(MetricsViews.sparkWidth))
        view["result"] = .bool(true)
        await session.emit("view", view)
        return sample
    }

    private func watch(_ request: MetricsStreams.Watch.Request, session: StreamSession, ports: Ports) async throws -> MetricsStreams.Watch.Result {
        let prefs = try await preferences.read(ports.settings)
        var ids: [String] = []
        for name in request.hosts {
            let id = try await monitoredID(name, prefs: prefs, ports: ports)
            if !ids.contains(id) { ids.append(id) }
        }
        if request.hosts.isEmpty { ids = prefs.order.filter { !prefs.paused.contains($0) } }
        guard !ids.isEmpty else {
            throw TermindError(.metricsNotMonitored, prefs.order.isEmpty ? "No host is monitored: add one with termind metrics add HOST." : "Every monitored host is paused: termind metrics resume HOST.")
        }
        let detail = request.detail == true
        if detail, ids.count != 1 {
            throw TermindError.badRequest("--detail shows one host; name exactly one (got \(ids.count)).")
        }
        if let count = request.count, count < 1 { throw TermindError.badRequest("--count must be at least 1, not \(count).") }
        let json = request.output == "json"

        var watched: [(id: String, monitor: Monitor, asker: Int)] = []
        var running = 0
        let merged = AsyncStream<WatchEvent>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        var pumps: [Task<Void, Never>] = []
        defer {
            for pump in pumps { pump.cancel() }
            let list = watched
            Task {
                for entry in list {
                    await entry.monitor.release(entry.asker)
                    if detail { await entry.monitor.viewDetail(-1) }
                    if !ports.resident { await entry.monitor.idle() }
                }
            }
        }
        for (index, id) in ids.enumerated() {
            guard let host = try await ports.hosts.host(named: id) else { throw Self.notSaved(id) }
            let monitor = await monitor(host, prefs: prefs, ports: ports)
            let asker = await monitor.attach(ask: { await session.ask($0) }, preset: request.acceptHostKey, connectTimeout: request.connectTimeout)
            watched.append((id, monitor, asker))
            if detail { await monitor.viewDetail(1) }
            let updates = await monitor.subscribe()
            pumps.append(Task {
                for await update in updates { merged.continuation.yield(.update(index, update)) }
                // The monitor was removed (termind metrics rm) or the server is stopping.
                if !Task.isCancelled { merged.continuation.yield(.ended(index)) }
            })
            if prefs.paused.contains(id), await !monitor.isRunning {
                await session.emit("notice", ["text": .string("\(host.label) is paused: termind metrics resume \(host.label) samples it again.")])
            } else {
                // Watching is asking again: a monitor that needed attention tries once more, with someone to ask.
                if await monitor.status.state == .needsAttention { await monitor.idle() }
                await monitor.start()
                running += 1
            }
        }
        guard running > 0 else {
            throw TermindError(.metricsUnavailable, "Every host named is paused: termind metrics resume HOST samples it again.")
        }
        // A person's view is redrawn at most four times a second, however many hosts report.
        if !json {
            pumps.append(Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    merged.continuation.yield(.tick)
                }
            })
        }

        var redraws = 0
        var dirty = false
        var ended: Set<Int> = []
        // Hosts a person must act on; when that is all of them, nothing more can come.
        var stuck: [Int: String] = [:]
        // The monitors still watched: a host removed meanwhile (termind metrics rm) leaves the view.
        var live: [Monitor] { watched.indices.filter { !ended.contains($0) }.map { watched[$0].monitor } }
        for await event in merged.stream {
            if case .ended(let index) = event {
                ended.insert(index)
                stuck[index] = nil
                // Nothing more can come once every watched monitor is gone.
                guard ended.count == ids.count else {
                    dirty = true
                    continue
                }
                var labels: [String] = []
                for entry in watched { labels.append(await entry.monitor.host.label) }
                throw TermindError(.metricsNotMonitored, "\(labels.joined(separator: ", ")) \(labels.count == 1 ? "is" : "are") no longer monitored (removed meanwhile).")
            }
            if case .update(let index, .state(let status)) = event {
                if status.state == .needsAttention {
                    stuck[index] = "\(status.label): \(status.lastError ?? status.state.rawValue)"
                } else {
                    stuck[index] = nil
                }
                if stuck.count == ids.count - ended.count {
                    if !json { await draw(live, detail: detail, session: session) }
                    throw TermindError(.metricsUnavailable, stuck.sorted { $0.key < $1.key }.map(\.value).joined(separator: "\n")
                        + "\nWhen that is settled: termind metrics resume HOST.")
                }
            }
            switch (event, json) {
            case (.update(_, .sample(let sample)), true):
                // One object per sample.
                await session.emit("view", ["title": .string(sample.label), "rows": .array([]), "json": .object(try Self.object(sample))])
                redraws += 1
            case (.update, false):
                dirty = true
                continue
            case (.tick, false) where dirty:
                dirty = false
                await draw(live, detail: detail, session: session)
                redraws += 1
            default:
                continue
            }
            if let count = request.count, redraws >= count { break }
        }
        try Task.checkCancellation()
        return .init(redraws: redraws)
    }

    private enum WatchEvent: Sendable {
        /// The index of the watched host, and its update.
        case update(Int, Monitor.Update)
        /// That host's monitor is gone.
        case ended(Int)
        case tick
    }

    private func draw(_ monitors: [Monitor], detail: Bool, session: StreamSession) async {
        if detail, let monitor = monitors.first {
            let status = await monitor.status
            guard let sample = await monitor.latest else {
                await session.emit("view", ["title": .string("\(status.label): \(status.state.rawValue)"), "rows": .array([]), "refresh": .double(0.25)])
                return
            }
            var view = Self.detailView(sample, state: status.state, history: await monitor.history.recent(MetricsViews.sparkWidth))
            view["refresh"] = .double(0.25)
            await session.emit("view", view)
            return
        }
        var rows: [JSONValue] = []
        for monitor in monitors {
            let status = await monitor.status
            rows.append(.object(MetricsViews.overviewRow(host: status.host, label: status.label, state: status.state, sample: await monitor.latest,
                                                         history: await monitor.history.recent(MetricsViews.sparkWidth), error: status.lastError)))
        }
        await session.emit("view", ["title": .string("termind metrics at \(Self.clock(Date().timeIntervalSince1970))"), "rows": .array(rows), "refresh": .double(0.25),
                                    "columns": MetricsViews.overviewColumns])
    }

    /// One host's detail as a `view` event's fields (show's result, watch --detail's redraws).
    static func detailView(_ sample: MetricsSample, state: MetricsContracts.MonitorState, history: [History.Point]) -> [String: JSONValue] {
        let view = MetricsViews.detail(sample, state: state, history: history)
        return ["title": .string("\(sample.label) at \(clock(sample.takenAt))"), "rows": .array(view.rows.map { .object($0) }),
                "sections": MetricsViews.sectionsJSON(view.sections), "columns": MetricsViews.overviewColumns]
    }

    static func object(_ sample: MetricsSample) throws -> [String: JSONValue] {
        guard case .object(let fields) = try JSONCoding.parse(JSONCoding.encode(sample), source: "sample") else { return [:] }
        return fields
    }

    static func clock(_ time: Double) -> String {
        var t = time_t(time)
        var parts = tm()
        localtime_r(&t, &parts)
        return String(printf: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}

/// The process's monitors by host id.
actor MonitorTable {
    private var monitors: [String: Monitor] = [:]

    func get(_ id: String) -> Monitor? { monitors[id] }

    func get(_ id: String, orMake make: () -> Monitor) -> Monitor {
        if let monitor = monitors[id] { return monitor }
        let monitor = make()
        monitors[id] = monitor
        return monitor
    }

    @discardableResult
    func remove(_ id: String) -> Monitor? { monitors.removeValue(forKey: id) }

    func all() -> [(String, Monitor)] { monitors.map { ($0.key, $0.value) } }

    func removeAll() -> [Monitor] {
        defer { monitors = [:] }
        return Array(monitors.values)
    }
}

/// `metrics.preferences`, read through Settings and changed with `settings.set@1` (based on
/// the revision read, retried when another writer got there first). Without the Settings
/// feature they live in memory for the process's lifetime.
actor PreferenceStore {
    private var cached: MetricsSettings.Preferences?

    func remember(_ prefs: MetricsSettings.Preferences) { cached = prefs }

    func read(_ settings: (any SettingsValues)?) async throws -> MetricsSettings.Preferences {
        guard let settings else { return cached ?? .defaults }
        let prefs = try await settings.read(MetricsSettings.Preferences.self)
        cached = prefs
        return prefs
    }

    func update(_ settings: (any SettingsValues)?, call: @Sendable (ContractID, Data) async throws -> Data,
                _ change: @Sendable (inout MetricsSettings.Preferences) -> Void) async throws {
        guard let settings else {
            var prefs = cached ?? .defaults
            change(&prefs)
            cached = prefs
            return
        }
        for attempt in 1...5 {
            let stored = try await settings.current(MetricsSettings.Preferences.key)
            var prefs = try JSONValueDecoder.decode(MetricsSettings.Preferences.self, from: stored.value)
            let before = prefs
            change(&prefs)
            if prefs == before { return }
            guard case .object(let fields) = try JSONCoding.parse(JSONCoding.encode(prefs), source: MetricsSettings.Preferences.key) else { return }
            let request = SettingsContracts.Set.Request(key: MetricsSettings.Preferences.key, value: fields, replace: true, revision: stored.revision)
            do {
                _ = try await call(SettingsContracts.Set.id, try JSONCoding.encode(request))
                cached = prefs
                return
            } catch let error as TermindError where error.code == ErrorCode.settingsStaleRevision.rawValue && attempt < 5 {
                continue
            }
        }
    }
}

/// The Metrics zone as a port: each call goes to the zone made at start (a port is
/// registered before the feature starts).
struct MetricsZonePort: SyncZone {
    let feature: MetricsFeature
    var zone: String { "metrics" }
    private func started() throws -> MetricsSyncZone {
        guard let zone = feature.syncZone() else { throw TermindError.internalFailure("Metrics is not started, or runs without Settings (nothing is kept to sync).") }
        return zone
    }
    func changes(after cursor: Int64, limit: Int) async throws -> SyncChanges { try await started().changes(after: cursor, limit: limit) }
    func acknowledge(through cursor: Int64) async throws {}
    func inventory() async throws -> [SyncEntityRef: Int64] { try await started().inventory() }
    func values(of entities: [SyncEntityRef]) async throws -> [SyncEntityRef: [String: JSONValue]] { try await started().values(of: entities) }
    func apply(_ changes: [(SyncEntityRef, [String: JSONValue]?)]) async throws -> [SyncEntityRef: SyncApplyOutcome] { try await started().apply(changes) }
    func journaled() -> AsyncStream<Void> { (try? started())?.journaled() ?? AsyncStream { $0.finish() } }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "metrics", version: "0.1.0", signature: TermindLibrary.signature) { MetricsFeature() }
}
