import Dispatch
import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import PortForwardingAPI
import TermindCore
import TermindSSH
import VaultAPI

/// The running rules of one host, on one shared connection, and the supervisor that keeps
/// them alive (seed, "Port Forwarding"):
///
/// - A rule starts only when asked (`start`), with the asking client's answers; a first start
///   that fails stays failed until an explicit retry.
/// - Once a rule has run, a lost connection is recovered silently after 1, 2, 5, 10, 30, 30 … s
///   (each outage anew; `RetrySchedule`), with the Vault's durable trust read again and
///   nobody to ask: a host key trusted once, keyboard-interactive answers or an unknown key
///   never authorize the reconnect, and such a failure (or authentication's) ends recovery
///   for the host at once in `needs-attention`. Only a key's passphrase, given at the start,
///   is kept in memory for the run (released with the last rule).
/// - Local and SOCKS listeners stay bound while the connection is down (a client arriving
///   then is closed at once: old streams are never replayed); remote listeners are asked for
///   again on the new connection, and a refusal fails only that rule.
/// - Stopping a rule ends its listener and its flows, never its peers'; the last stop closes
///   the connection, cancels recovery and forgets the passphrase.
actor HostRun {
    let target: String
    private let purpose: String
    /// Its rules are saved ones, which a person starts again with `termind forward retry NAME`
    /// (an unsaved run's or a session's are started again with their command).
    private let saved: Bool
    private let opener: ConnectionOpener
    private let logger: Logger
    private var label: String

    private var lease: SSHConnectionLease?
    private var connectedAt: Double?
    /// Bumped per connection: a late death notice of an older one changes nothing.
    private var connectionGeneration = 0
    private var runs: [String: RuleRun] = [:]
    private var order: [String] = []
    private var schedule = RetrySchedule()
    private var recovery: Task<Void, Never>?
    private var nextRetryAt: Double?
    private var connectTimeout: Double?
    /// Passphrases given at the start (question text → answer), for reconnects only.
    private var passphrases: [String: JSONValue] = [:]

    init(target: String, label: String, purpose: String, saved: Bool = false, opener: ConnectionOpener, logger: Logger) {
        self.target = target
        self.label = label
        self.purpose = purpose
        self.saved = saved
        self.opener = opener
        self.logger = logger
    }

    var isEmpty: Bool { runs.isEmpty }

    /// Whether the host's connection is up now.
    var isConnected: Bool { lease?.connection.isAlive ?? false }

    func rename(_ label: String) { self.label = label }

    // MARK: - Control

    /// Starts `rule` (restarting it when it failed or needs attention), connecting with
    /// `ask` when there is no live connection. Throws the failure that left it failed.
    func start(_ rule: ForwardRule, ask: @escaping ConnectionAsker, preset: HostKeyPreset?, connectTimeout: Double?) async throws -> ForwardStatus {
        if let run = runs[rule.id], run.state == .running || run.state == .recovering || run.state == .starting, run.rule == rule {
            return status(run)
        }
        // A rule started again (a retry, an edit) replaces its run; the connection stays.
        if let old = runs.removeValue(forKey: rule.id) {
            order.removeAll { $0 == rule.id }
            old.close()
        }
        let run = RuleRun(rule: rule)
        runs[rule.id] = run
        order.append(rule.id)
        run.state = .starting
        self.connectTimeout = connectTimeout ?? self.connectTimeout
        do {
            // The connecting is a task of the run's own: a stop meanwhile cancels it, and with
            // it a question waiting for an answer.
            let remembering = remembering(ask)
            let attempt = Task { try await self.connect(ask: remembering, preset: preset) }
            run.starting = attempt
            let connection = try await withTaskCancellationHandler { try await attempt.value } onCancel: { attempt.cancel() }
            run.starting = nil
            guard runs[rule.id] === run else {
                await closeIfUnused()
                throw Self.stoppedMeanwhile(rule)
            }
            try await open(run, on: connection)
            return status(run)
        } catch {
            guard runs[rule.id] === run else { throw Self.stoppedMeanwhile(rule) }
            var failure = TermindError.from(error)
            if ConnectionOpener.needsAttention(failure) {
                failure = retryHint(failure, rule)
                run.fail(failure, needsAttention: true)
            } else {
                run.fail(failure, needsAttention: false)
            }
            throw failure
        }
    }

    /// Starts `rule` with nobody to ask (an edited rule restarting): a live connection is
    /// used; opening one must need no answers.
    func restart(_ rule: ForwardRule) async -> ForwardStatus {
        (try? await start(rule, ask: { _ in nil }, preset: nil, connectTimeout: nil)) ?? status(for: rule.id) ?? ForwardStatus(rule: rule, hostLabel: label, state: .failed)
    }

    /// Stops `id`'s run; the last one closes the connection and ends recovery.
    @discardableResult
    func stop(_ id: String) async -> ForwardStatus? {
        guard let run = runs[id] else { return nil }
        await stopRun(id)
        var status = status(run)
        status.state = .stopped
        status.nextRetryAt = nil
        return status
    }

    /// A change that does not touch what runs (name, color, tags).
    func relabel(_ rule: ForwardRule) {
        runs[rule.id]?.rule = rule
    }

    func stopAll() async {
        for id in order { await stopRun(id) }
    }

    private func stopRun(_ id: String) async {
        guard let run = runs.removeValue(forKey: id) else { return }
        order.removeAll { $0 == id }
        run.close()
        await closeIfUnused()
    }

    /// With no rule left: recovery ends, the passphrase is forgotten, the connection closes.
    private func closeIfUnused() async {
        guard runs.isEmpty else { return }
        endRecovery()
        passphrases = [:]
        schedule = RetrySchedule()
        connectionGeneration += 1
        if let lease {
            self.lease = nil
            connectedAt = nil
            lease.release()
            await lease.connection.close()
        }
    }

    // MARK: - Status

    func status(for id: String) -> ForwardStatus? { runs[id].map(status) }

    func statuses() -> [ForwardStatus] { order.compactMap { runs[$0] }.map(status) }

    private func status(_ run: RuleRun) -> ForwardStatus {
        var status = ForwardStatus(rule: run.rule, hostLabel: label, state: run.state, bound: run.bound, bytesSent: run.counters.sent,
                                   bytesReceived: run.counters.received, openFlows: run.counters.open, flows: run.counters.total,
                                   runningSince: run.state == .running ? run.runningSince : nil, lastError: run.lastError)
        if run.state == .recovering { status.nextRetryAt = nextRetryAt }
        return status
    }

    // MARK: - Connecting

    /// Keeps the passphrase answers of a person's start for reconnects (nothing else).
    private func remembering(_ ask: @escaping ConnectionAsker) -> ConnectionAsker {
        { [weak self] question in
            let answer = await ask(question)
            if question["topic"]?.stringValue == "ssh.passphrase", let answer, !StreamQuestion.unanswered(answer) {
                await self?.keepPassphrase(question, answer)
            }
            return answer
        }
    }

    private func keepPassphrase(_ question: JSONValue, _ answer: JSONValue) { passphrases[Self.key(question)] = answer }

    private static func key(_ question: JSONValue) -> String {
        (try? String(decoding: JSONCoding.encode(question["prompts"] ?? .null), as: UTF8.self)) ?? ""
    }

    /// A reconnect's asker: a passphrase given at the start, nothing else (no person is asked).
    private func recoveryAnswer(_ question: JSONValue) -> JSONValue? {
        question["topic"]?.stringValue == "ssh.passphrase" ? passphrases[Self.key(question)] : nil
    }

    /// How this host's connection is opened (a person's start adds its --accept-host-key).
    private var connectionTarget: ConnectionTarget {
        ConnectionTarget(target: target, connectTimeout: connectTimeout, purpose: purpose, keepalive: Self.keepalive)
    }

    private func endRecovery() {
        recovery?.cancel()
        recovery = nil
        nextRetryAt = nil
    }

    /// The live connection, or a new one opened with `ask`.
    private func connect(ask: @escaping ConnectionAsker, preset: HostKeyPreset?) async throws -> SSHConnection {
        if let lease, lease.connection.isAlive { return lease.connection }
        endRecovery()
        var request = connectionTarget
        request.acceptHostKey = preset
        let lease = try await opener.lease(request, ask: ask)
        adopt(lease)
        return lease.connection
    }

    private func adopt(_ lease: SSHConnectionLease) {
        if let old = self.lease, old !== lease { old.release() }
        self.lease = lease
        connectedAt = Self.now()
        connectionGeneration += 1
        let generation = connectionGeneration
        lease.connection.onClose { [weak self] error in
            Task { await self?.lost(generation, error) }
        }
    }

    /// The connection ended: rules that ran recover; remote listeners died with it.
    private func lost(_ generation: Int, _ error: TermindError) {
        guard generation == connectionGeneration, let lease else { return }
        logger.info("forwarding.connection_lost", ["code": .identifier(error.code)])
        drop(lease, reason: error.message)
    }

    /// The saved host (or a jump host of its route) was edited or deleted: its rules move to
    /// a new connection made the new way (a deleted host's rules then need attention).
    func hostChanged(deleted: Bool) async {
        logger.info("forwarding.host_changed", ["deleted": .bool(deleted)])
        if deleted {
            // Its id names nothing now (and would read as a host name): nothing to reconnect to.
            endRecovery()
            for run in runs.values where run.state == .running || run.state == .recovering {
                let name = ForwardingFeature.shell(run.rule.name)
                let gone = saved ? "\(label) was deleted from the Vault: give the rule another host (termind forward edit \(name) --host HOST), then termind forward retry \(name)."
                    : "\(label) was deleted from the Vault: nothing is left to connect to."
                run.fail(TermindError(.vaultHostNotFound, gone), needsAttention: true)
            }
        }
        guard let lease else { return }
        drop(lease, reason: "\(label)'s saved connection settings changed; reconnecting")
        await lease.connection.close()
    }

    private func drop(_ lease: SSHConnectionLease, reason: String) {
        self.lease = nil
        connectionGeneration += 1
        lease.release()
        if let connectedAt { schedule.connectionEnded(after: Self.now() - connectedAt) }
        connectedAt = nil
        var recovering = false
        for run in runs.values where run.state == .running {
            run.connectionLost(reason)
            recovering = true
        }
        if recovering, recovery == nil { recovery = Task { await self.recover() } }
    }

    private func recover() async {
        while !Task.isCancelled {
            let delay = schedule.next()
            nextRetryAt = Date().timeIntervalSince1970 + delay
            logger.debug("forwarding.retrying", ["delay": .seconds(delay)])
            try? await Task.sleep(for: .seconds(delay))
            guard !Task.isCancelled else { return }
            nextRetryAt = nil
            let waiting = runs.values.filter { $0.state == .recovering }
            guard !waiting.isEmpty else { recovery = nil; return }
            do {
                let lease = try await opener.lease(connectionTarget, ask: { [weak self] question in await self?.recoveryAnswer(question) })
                guard !Task.isCancelled else { lease.release(); return }
                adopt(lease)
                recovery = nil
                for run in waiting where runs[run.rule.id] === run {
                    do {
                        try await open(run, on: lease.connection)
                    } catch {
                        run.fail(TermindError.from(error), needsAttention: false)
                    }
                }
                logger.info("forwarding.recovered", ["rules": .int(waiting.count)])
                return
            } catch {
                guard !Task.isCancelled else { return }
                let failure = TermindError.from(error)
                if ConnectionOpener.needsAttention(failure) {
                    // Nothing silent may mend this: a person retries.
                    for run in waiting { run.fail(retryHint(failure, run.rule), needsAttention: true) }
                    recovery = nil
                    logger.info("forwarding.needs_attention", ["code": .identifier(failure.code)])
                    return
                }
                for run in waiting { run.lastError = failure.message }
            }
        }
    }

    // MARK: - Listening

    private func open(_ run: RuleRun, on connection: SSHConnection) async throws {
        let rule = run.rule
        switch rule.kind {
        case .local, .dynamic:
            if run.listener == nil {
                let listener = try await ForwardingIO.run { try LocalListener.bind(rule.bindAddress, port: rule.bindPort, rule: rule.name) }
                run.listener = listener
                run.bound = listener.bound
                listener.start { [weak self] fd in
                    guard let self else { close(fd); return }
                    Task { await self.accepted(fd, run: run) }
                }
            }
        case .remote:
            let listener = try await connection.listen(host: rule.bindAddress, port: rule.bindPort)
            let shown = rule.bindAddress.contains(":") ? "[\(rule.bindAddress)]" : rule.bindAddress
            run.bound = "\(shown):\(listener.boundPort)"
            if let host = rule.targetHost, let port = rule.targetPort {
                let (flows, counters) = (run.flows, run.counters)
                run.remote = Task { await Self.serveRemote(listener, to: host, port: port, flows: flows, counters: counters, run: run) }
            }
        }
        run.running()
    }

    /// A local client of a local or dynamic rule: through the live connection, or closed
    /// at once while there is none.
    private func accepted(_ fd: Int32, run: RuleRun) async {
        let (flows, counters) = (run.flows, run.counters)
        guard runs[run.rule.id] === run, run.state == .running, let connection = lease?.connection, connection.isAlive else {
            close(fd)
            return
        }
        let rule = run.rule
        guard let flow = flows.add(fd) else { close(fd); return }
        let end: @Sendable (TermindError?) -> Void = { _ in flows.remove(flow) }
        if rule.kind == .local, let host = rule.targetHost, let port = rule.targetPort {
            do {
                try await connection.forward(fd, to: host, port: port, counters: counters, onEnd: end)
            } catch {
                flows.remove(flow)
                run.noteFlowError(TermindError.from(error).message)
            }
            return
        }
        // Dynamic: the SOCKS request names the target.
        let request = try? await ForwardingIO.run { ForwardingIO.socksRequest(fd) }
        guard let request = request ?? nil else {
            flows.remove(flow)
            close(fd)
            return
        }
        do {
            try await connection.forward(fd, to: request.host, port: request.port, greeting: Data(request.handshake.success),
                                         early: Data(request.handshake.leftover), counters: counters, closeOnFailure: false, onEnd: end)
        } catch {
            let failure = TermindError.from(error)
            ForwardingIO.sendAll(fd, request.handshake.failure(refused: failure.is(.sshTunnelRefused)))
            flows.remove(flow)
            close(fd)
            run.noteFlowError(failure.message)
        }
    }

    /// A remote rule's accept loop: each connection the server hands over is connected to
    /// the target from here, then bridged.
    private static func serveRemote(_ listener: SSHForwardListener, to host: String, port: Int, flows: FlowSet, counters: FlowCounters,
                                    run: RuleRun) async {
        await withTaskCancellationHandler {
            while !Task.isCancelled {
                guard let accepted = try? await listener.acceptConnection() else { break }
                Task {
                    do {
                        let fd = try await ForwardingIO.run { try ForwardingIO.connect(host: host, port: port) }
                        guard let flow = flows.add(fd) else { close(fd); accepted.reject(); return }
                        accepted.bridge(to: fd, counters: counters) { _ in flows.remove(flow) }
                    } catch {
                        accepted.reject()
                        run.noteFlowError(TermindError.from(error).message)
                    }
                }
            }
        } onCancel: {
            Task { try? await listener.cancel() }
        }
        try? await listener.cancel()
    }

    // MARK: - Rules

    /// A failure only a person can mend, saying how a saved rule is tried again once it is mended.
    private func retryHint(_ failure: TermindError, _ rule: ForwardRule) -> TermindError {
        guard saved else { return failure }
        return TermindError(code: failure.code, message: "\(failure.message) To try again: termind forward retry \(ForwardingFeature.shell(rule.name)).")
    }

    static func stoppedMeanwhile(_ rule: ForwardRule) -> TermindError {
        TermindError(.forwardingFailed, "Rule '\(rule.name)' was stopped while it was starting.")
    }

    /// A keepalive every 5 s, the link counted lost after 3 unanswered: a dead network is
    /// noticed within about 15 s (the process default, 45 s, is long for a forward whose
    /// users wait on it), for one small packet per idle interval.
    static let keepalive = SSHKeepalive(interval: 5, countMax: 3)

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}

/// One rule's run: its listener, its flows and counters, its state. Changed only by its
/// `HostRun` (an actor), read by status; the flow callbacks touch only the thread-safe parts.
@dynamicMemberLookup
final class RuleRun: Sendable {
    let counters = FlowCounters()
    let flows = FlowSet()
    private let shown = Mutex<(state: ForwardState, error: String?)>((.stopped, nil))
    /// What only its `HostRun` changes (in the actor, so never contended), reached as
    /// `run.listener`, `run.bound`… through `subscript(dynamicMember:)`.
    private let fields: Mutex<Fields>
    struct Fields {
        var rule: ForwardRule
        var listener: LocalListener?
        var remote: Task<Void, Never>?
        /// The connecting of a start under way (cancelled by a stop).
        var starting: Task<SSHConnection, Error>?
        var bound: String?
        var runningSince: Double?
    }

    init(rule: ForwardRule) { fields = Mutex(Fields(rule: rule)) }

    subscript<Value: Sendable>(dynamicMember field: WritableKeyPath<Fields, Value>) -> Value {
        get { fields.withLock { $0[keyPath: field] } }
        set { fields.withLock { $0[keyPath: field] = newValue } }
    }

    var state: ForwardState {
        get { shown.withLock { $0.state } }
        set { shown.withLock { $0.state = newValue } }
    }

    var lastError: String? {
        get { shown.withLock { $0.error } }
        set { shown.withLock { $0.error = newValue } }
    }

    func running() {
        state = .running
        lastError = nil
        self.runningSince = Date().timeIntervalSince1970
    }

    /// A flow that could not be opened: the rule keeps running; the error shows in status.
    func noteFlowError(_ message: String) { lastError = message }

    /// The connection is gone: flows end with it, remote listeners too; local ones stay bound.
    func connectionLost(_ message: String) {
        state = .recovering
        lastError = message
        self.runningSince = nil
        self.remote?.cancel()
        self.remote = nil
        if self.rule.kind == .remote { self.bound = nil }
    }

    /// Stopped trying: the listener closes, its flows end.
    func fail(_ error: TermindError, needsAttention: Bool) {
        state = needsAttention ? .needsAttention : .failed
        lastError = error.message
        self.runningSince = nil
        release()
    }

    func close() {
        state = .stopped
        release()
    }

    private func release() {
        self.starting?.cancel()
        self.starting = nil
        self.listener?.stop()
        self.listener = nil
        self.remote?.cancel()
        self.remote = nil
        flows.closeAll()
        self.bound = nil
    }
}
