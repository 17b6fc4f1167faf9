import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import MetricsRules
import Synchronization
import TermindCore
import TermindSSH
import VaultAPI

/// One saved host's sampler, shared by every client of the process. It keeps one exec
/// channel open on the host's pooled connection running `RemoteScript`, asks it for a
/// snapshot every interval, and keeps the latest sample and five minutes of history, in
/// memory only. A broken connection is retried after 1, 2, 5, 10, 30, 30 … s (back to 1 s
/// after 60 stable seconds); a failure a person must act on (an unknown or changed host key,
/// authentication, prompts nobody answered) stops it in `needs-attention` until resumed.
///
/// Questions go to the client that started or resumed it while that client is there; a
/// host key trusted once is remembered for this monitor's reconnects and forgotten when it
/// is paused, removed, or the host's address, port or user changes.
actor Monitor {
    enum Update: Sendable {
        case sample(MetricsSample)
        case state(MetricsContracts.Monitor)
    }

    private(set) var host: HostSummary
    private let opener: MonitorOpener
    private let logger: Logger
    private var interval: Double
    private var interfaces: Set<String>

    private var state = MetricsContracts.MonitorState.idle
    private var lastError: String?
    private var nextRetryAt: Double?
    private(set) var latest: MetricsSample?
    private(set) var history: History
    private var taken = 0
    private var detailViewers = 0
    private var task: Task<Void, Never>?
    /// Pauses, stops and idles under way: they wait for the loop and the connection to end,
    /// and the actor is re-entered meanwhile.
    private var stopping = 0
    private var generation = 0
    private var subscribers: [Int: AsyncStream<Update>.Continuation] = [:]
    private var nextSubscriber = 0
    /// The clients that may be asked, newest last.
    private var askers: [(id: Int, ask: ConnectionAsker, preset: HostKeyPreset?, connectTimeout: Double?)] = []
    private var nextAsker = 0
    private let onceTrusted = OnceTrust()
    /// The newest client's --accept-host-key, read when a key is in question (not when a
    /// connection starts), so a client that arrives mid-connection is the one that answers.
    private let currentPreset = CurrentPreset()
    private var trustedFor: HostSummary?
    /// The sleep under way (the clock's timer and what it resumes), if any.
    private var sleeper: (slot: SleepSlot, token: UInt64)?
    private var connection: SSHConnection?
    private var channel: SSHChannel?
    /// The current channel's framing, and events it completed that were not taken yet.
    private var reader = SnapshotReader()
    private var watchdog: Watchdog?
    private var queued: [SnapshotReader.Event] = []

    static let retryDelays: [Double] = [1, 2, 5, 10, 30]
    /// Nanoseconds between a first detail snapshot and the one that rates processes' CPU.
    static let detailFollowUp: UInt64 = 1_000_000_000
    static let stableSeconds: Double = 60

    init(host: HostSummary, opener: MonitorOpener, interval: Double, interfaces: Set<String>, logger: Logger) {
        self.host = host
        self.opener = opener
        self.interval = interval
        self.interfaces = interfaces
        self.logger = logger
        history = History(interval: interval)
    }

    var status: MetricsContracts.Monitor {
        MetricsContracts.Monitor(host: host.id, label: host.label, state: state, lastSampleAt: latest?.takenAt, nextRetryAt: nextRetryAt,
                                 lastError: lastError, samples: history.count, taken: taken, problems: state == .sampling ? latest?.problems ?? [] : [])
    }

    var isRunning: Bool { task != nil }

    // MARK: - Control

    /// Starts sampling unless it runs; clears a needs-attention or paused state.
    func start() {
        // Not while a stop is under way: a pause that is waiting for the loop to end wins.
        guard task == nil, stopping == 0 else { return }
        generation += 1
        let generation = generation
        lastError = nil
        nextRetryAt = nil
        set(.connecting)
        task = Task { await self.run(generation) }
    }

    /// Stops sampling and forgets once-only trust (and the connection it authorized); the history stays.
    func pause() async {
        stopping += 1
        defer { stopping -= 1 }
        await stopTask()
        await forgetTrust()
        nextRetryAt = nil
        set(.paused)
    }

    /// For removal or shutdown: stops, forgets everything, ends every subscription.
    func stop() async {
        stopping += 1
        defer { stopping -= 1 }
        await stopTask()
        await forgetTrust()
        history.removeAll()
        latest = nil
        for continuation in subscribers.values { continuation.finish() }
        subscribers = [:]
    }

    /// Not sampling in this process any more (a one-shot command's monitor at its end).
    func idle() async {
        stopping += 1
        defer { stopping -= 1 }
        await stopTask()
        set(.idle)
    }

    /// Once-only trust ends here: the keys, and the pooled connection (this monitor's alone,
    /// by its purpose) that such a key let in, so nothing reconnects on it later.
    private func forgetTrust() async {
        onceTrusted.clear()
        if let connection {
            self.connection = nil
            await connection.close()
        }
    }

    /// Ends the sampling loop and waits until it has: nothing of it runs afterwards (a
    /// process may exit right after, and its crypto with it).
    private func stopTask() async {
        let running = task
        task?.cancel()
        task = nil
        generation += 1
        wakeUp()
        channel?.close()
        await running?.value
    }

    func configure(interval: Double, interfaces: Set<String>) {
        if interval != self.interval {
            self.interval = interval
            history.resize(interval: interval)
            wakeUp()
        }
        self.interfaces = interfaces
    }

    /// A client that may answer this monitor's questions until `release(_:)`.
    func attach(ask: @escaping ConnectionAsker, preset: HostKeyPreset?, connectTimeout: Double?) -> Int {
        nextAsker += 1
        askers.append((nextAsker, ask, preset, connectTimeout))
        currentPreset.value.withLock { $0 = preset }
        return nextAsker
    }

    func release(_ id: Int) {
        askers.removeAll { $0.id == id }
        let newest = askers.last?.preset
        currentPreset.value.withLock { $0 = newest }
    }

    /// Someone views processes and filesystems (sampled only while someone does).
    func viewDetail(_ delta: Int) {
        detailViewers = max(0, detailViewers + delta)
        if delta > 0 { wakeUp() }
    }

    func subscribe() -> AsyncStream<Update> {
        let (stream, continuation) = AsyncStream<Update>.makeStream(bufferingPolicy: .bufferingNewest(64))
        nextSubscriber += 1
        let id = nextSubscriber
        subscribers[id] = continuation
        continuation.onTermination = { _ in Task { await self.unsubscribe(id) } }
        continuation.yield(.state(status))
        return stream
    }

    private func unsubscribe(_ id: Int) { subscribers[id] = nil }

    private func set(_ new: MetricsContracts.MonitorState) {
        state = new
        let status = status
        for continuation in subscribers.values { continuation.yield(.state(status)) }
    }

    // MARK: - Sampling

    private func run(_ generation: Int) async {
        var attempt = 0
        while !Task.isCancelled, generation == self.generation {
            var connectedAt: Double?
            do {
                try await session(generation) { connectedAt = Self.now() }
                // The remote loop ended by itself (its shell exited): retried like a broken connection.
                throw TermindError(.metricsUnavailable, "The monitor's remote shell on \(host.label) exited.")
            } catch {
                guard !Task.isCancelled, generation == self.generation else { return }
                if let since = connectedAt, Self.now() - since >= Self.stableSeconds { attempt = 0 }
                let error = TermindError.from(error)
                lastError = error.message
                if ConnectionOpener.needsAttention(error) {
                    logger.info("metrics.monitor.needs_attention", ["code": .identifier(error.code)])
                    task = nil
                    nextRetryAt = nil
                    set(.needsAttention)
                    return
                }
                let delay = Self.retryDelays[min(attempt, Self.retryDelays.count - 1)]
                attempt += 1
                nextRetryAt = Date().timeIntervalSince1970 + delay
                logger.debug("metrics.monitor.retrying", ["code": .identifier(error.code), "delay": .seconds(delay)])
                set(.retrying)
                await sleep(until: MonitorClock.now() + UInt64(delay * 1e9))
                nextRetryAt = nil
                guard !Task.isCancelled, generation == self.generation else { return }
                set(.connecting)
            }
        }
    }

    /// One connection's worth of sampling; returns when the remote loop ends, throws on failure.
    private func session(_ generation: Int, connected: () -> Void) async throws {
        let current = try await opener.hostDirectory.host(named: host.id)
        guard let current else {
            throw TermindError(.vaultHostNotFound, "\(host.label) is no longer a saved host; remove it with termind metrics rm \(host.id).")
        }
        if let trusted = trustedFor, (trusted.address, trusted.port, trusted.user) != (current.address, current.port, current.user) {
            onceTrusted.clear()
        }
        trustedFor = current
        host = current
        let asker = askers.last
        let ask: ConnectionAsker = { [weak self] question in
            guard let self else { return nil }
            return await self.ask(question)
        }
        let once = onceTrusted
        let preset = currentPreset
        let connection = try await opener.opener.connection(
            ConnectionTarget(target: current.id, connectTimeout: asker?.connectTimeout, purpose: "metrics"),
            ask: ask, hostKey: { question in
                if once.contains(question) { return .acceptOnce }
                switch preset.value.withLock({ $0 }) {
                case .once?: return .acceptOnce
                case .save?: return .acceptAndSave
                case nil: return nil
                }
            }, answered: { question, answer in
                if answer == .acceptOnce { once.insert(question) }
            })
        self.connection = connection
        let channel = try await connection.openChannel(.exec(RemoteScript.command), bufferLimit: 4 << 20)
        self.channel = channel
        // One watchdog per channel (not a timer per read): it closes a channel silent for too long.
        let watchdog = Watchdog(channel: channel)
        self.watchdog = watchdog
        defer {
            watchdog.cancel()
            channel.close()
            if self.channel === channel {
                self.channel = nil
                self.watchdog = nil
            }
        }
        reader = SnapshotReader()
        queued = []
        func nextEvent(timeout: Double) async throws -> SnapshotReader.Event? {
            try await self.nextEvent(channel, label: current.label, timeout: timeout)
        }

        // The header: page size, clock rate, nvidia-smi.
        guard let first = try await nextEvent(timeout: 30) else { return }
        guard case .header(let header) = first else {
            throw TermindError(.metricsUnavailable, "\(current.label)'s monitor broke the protocol: \(Self.describe(first)).")
        }
        var builder = SampleBuilder(header: header)
        connected()
        set(.sampling)
        while !Task.isCancelled, generation == self.generation {
            let started = MonitorClock.now()
            try await channel.write(Data(RemoteScript.request(detail: detailViewers > 0, gpu: header.hasNvidiaSMI).utf8))
            let timeout = max(30, interval * 3)
            var raw: RawSnapshot?
            while raw == nil {
                guard let event = try await nextEvent(timeout: timeout) else { return }
                switch event {
                case .snapshot(let snapshot): raw = snapshot
                case .header, .violation:
                    throw TermindError(.metricsUnavailable, "\(current.label)'s monitor broke the protocol: \(Self.describe(event)).")
                }
            }
            guard let raw else { return }
            let sample = builder.sample(raw, host: current.id, label: current.label, takenAt: Date().timeIntervalSince1970, interfaces: interfaces)
            record(sample)
            // The next sample at the clock's instant for this interval, shared by every monitor
            // on it: one wake-up for all of them.
            var next = SamplingGrid.next(after: started, period: UInt64(interval * 1e9))
            // A first detail snapshot has nothing to rate processes' CPU against: a viewer gets
            // the second one a second later, not a whole interval (up to a minute) later.
            if detailViewers > 0, let processes = sample.processes, processes.intervalSeconds == nil {
                next = min(next, started + Self.detailFollowUp)
            }
            await sleep(until: next)
        }
    }

    /// The next event from the channel, within `timeout` seconds of silence; nil when the channel ended.
    private func nextEvent(_ channel: SSHChannel, label: String, timeout: Double) async throws -> SnapshotReader.Event? {
        if !queued.isEmpty { return queued.removeFirst() }
        watchdog?.arm(timeout)
        while let (stream, data) = try await channel.next() {
            watchdog?.touch()
            guard stream == .stdout else { continue }  // stderr (a start-up file's noise) is dropped
            queued += reader.feed(data)
            if !queued.isEmpty { return queued.removeFirst() }
        }
        if watchdog?.expired == true {
            throw TermindError(.metricsUnavailable, "\(label) sent no snapshot within \(Int(timeout)) s.")
        }
        return nil
    }

    private func record(_ sample: MetricsSample) {
        latest = sample
        taken += 1
        history.append(sample)
        lastError = nil
        for continuation in subscribers.values { continuation.yield(.sample(sample)) }
    }

    private func ask(_ question: JSONValue) async -> JSONValue? {
        guard let asker = askers.last else { return nil }
        return await asker.ask(question)
    }

    static func describe(_ event: SnapshotReader.Event) -> String {
        switch event {
        case .header: "a second header"
        case .snapshot: "a snapshot before the header"
        case .violation(let reason): reason
        }
    }


    // MARK: - Sleeping

    /// Sleeps until `deadline` (MonitorClock's nanoseconds), or until woken (a new interval,
    /// a detail viewer, a stop).
    private func sleep(until deadline: UInt64) async {
        guard deadline > MonitorClock.now(), !Task.isCancelled else { return }
        let slot = SleepSlot()
        await withCheckedContinuation { continuation in
            slot.hold(continuation)
            sleeper = (slot, MonitorClock.shared.schedule(at: deadline) { slot.resume() })
        }
        if sleeper?.slot === slot { sleeper = nil }
    }

    private func wakeUp() {
        guard let sleeper else { return }
        self.sleeper = nil
        MonitorClock.shared.cancel(sleeper.token)
        sleeper.slot.resume()
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}

/// Host keys a person trusted once for this monitor: its reconnects need not ask again.
final class OnceTrust: Sendable {
    private let keys = Mutex<Set<String>>([])

    private static func id(_ q: HostKeyQuestion) -> String { "\(q.host.lowercased()):\(q.port) \(q.algorithm) \(q.key)" }

    func contains(_ question: HostKeyQuestion) -> Bool { !question.key.isEmpty && keys.withLock { $0.contains(Self.id(question)) } }
    func insert(_ question: HostKeyQuestion) {
        guard !question.key.isEmpty else { return }
        _ = keys.withLock { $0.insert(Self.id(question)) }
    }
    func clear() { keys.withLock { $0.removeAll() } }
}

/// Closes a channel that stayed silent longer than the time armed for the current wait,
/// checked on the monitors' shared clock every two seconds (not a timer per read, nor a
/// task per channel).
final class Watchdog: Sendable {
    private struct State {
        var last = Monitor.now()
        var limit: Double = 30
        var expired = false
    }
    private let state = Mutex(State())
    private let channel: SSHChannel

    init(channel: SSHChannel) {
        self.channel = channel
        MonitorClock.shared.watch(self)
    }

    func arm(_ limit: Double) { state.withLock { $0.limit = limit; $0.last = Monitor.now() } }
    func touch() { state.withLock { $0.last = Monitor.now() } }
    var expired: Bool { state.withLock { $0.expired } }
    func cancel() { MonitorClock.shared.unwatch(self) }

    /// The clock's check: a channel silent past its limit is closed (once).
    func check() {
        let expired = state.withLock { state in
            guard !state.expired, Monitor.now() - state.last > state.limit else { return false }
            state.expired = true
            return true
        }
        if expired { channel.close() }
    }
}

/// A monitor's sleep: resumed once, by the clock or by a wake-up, whichever comes first.
final class SleepSlot: Sendable {
    private let continuation = Mutex<CheckedContinuation<Void, Never>?>(nil)

    func hold(_ waiting: CheckedContinuation<Void, Never>) { continuation.withLock { $0 = waiting } }

    func resume() {
        let waiting: CheckedContinuation<Void, Never>? = continuation.withLock { held in
            defer { held = nil }
            return held
        }
        waiting?.resume()
    }
}

/// The --accept-host-key of the client that would answer now.
final class CurrentPreset: Sendable {
    let value = Mutex<HostKeyPreset?>(nil)
}

/// What monitors need to reach hosts.
struct MonitorOpener: Sendable {
    let opener: ConnectionOpener
    let hostDirectory: any HostDirectory
}
