import CTermindSystem
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindSSH

extension ErrorCode {
    /// The plugin's own process ended while the call was in flight (a crash, a kill).
    public static let pluginCrashed: ErrorCode = "plugin.crashed"
    /// The plugin's process is waiting out its restart delay after a crash.
    public static let pluginRestarting: ErrorCode = "plugin.restarting"
    /// The plugin crashed too often and is off until `termind plugins enable ID`.
    public static let pluginDisabled: ErrorCode = "plugin.disabled"
    /// The plugin did not answer within its deadline (`limits.callSeconds`); its process was ended.
    public static let pluginTimeout: ErrorCode = "plugin.timeout"
}

/// A C plugin whose manifest says `"isolation": "process"`: its code runs in a child of
/// termind (`termind-plugin-host`), never in termind's process. Callers see the same
/// contracts, streams and functions with the same schemas and errors — the child loads the
/// plugin with the same code termind would use in process — and termind forwards each call
/// over a socketpair (`PluginWire`). When the child dies, the calls in flight fail with
/// `plugin.crashed` naming the signal; the next call starts a new child after a delay that
/// doubles from 0.5 s to 30 s (jittered); after 3 crashes in 5 minutes the plugin stays off.
final class ProcessPluginFeature: Feature, Sendable {
    let manifest: FeatureManifest
    private let hostVersion: String
    private let logLevel: LogLevel?
    private let protected: [String]
    private let state = Mutex(State())

    struct State {
        var child: PluginChild?
        var crashes: [Double] = []
        var notBefore: Double = 0
        var delay: Double = 0
        var disabled: String?
        var stopped = false
        var launching: Task<PluginChild, any Error>?
    }

    static let firstDelay = 0.5
    static let longestDelay = 30.0
    static let crashesAllowed = 3
    static let crashWindow = 300.0

    init(manifest: FeatureManifest, hostVersion: String, logLevel: LogLevel?, protected: [String]) {
        var m = manifest
        m.library = m.libraryPath  // the child has no base directory to resolve it against
        self.manifest = m
        self.hostVersion = hostVersion
        self.logLevel = logLevel
        self.protected = protected
    }

    func register(_ registrar: FeatureRegistrar) throws {
        let functions = manifest.functions.filter { if case .success = FunctionSignature.parse($0.signature) { true } else { false } }.map(\.name)
        let manifest = self.manifest
        // Read once, not per call.
        let responses = CPluginFeature.responseSchemas(manifest)
        let functionResponse = CPluginFeature.functionResponseSchema
        // What comes back from the plugin's process is checked here again, as it would be in
        // process: parsed within the reply bound, held to the declared schema.
        CPluginFeature.registerEndpoints(manifest, functions: functions, into: registrar, call: { [self] contract, request, origin in
            try Self.checkedReply(try await child().call(contract, request, origin), responses[contract] ?? .any, manifest.id, contract)
        }, serve: { [self] stream, request, session in
            try Self.checkedReply(try await child().serve(stream, request, session), responses[stream] ?? .any, manifest.id, stream)
        }, function: { [self] contract, _, body in
            try Self.checkedReply(try await child().call(contract.description, body, .inProcess), functionResponse, manifest.id, contract.description)
        })
    }

    static func checkedReply(_ body: Data, _ schema: JSONSchema, _ id: String, _ contract: String) throws -> Data {
        guard body.count <= PluginLimits.maximumReplyBytes else {
            throw TermindError(.pluginBadReply, "The reply of plugin '\(id)' to \(contract) is larger than \(PluginLimits.maximumReplyBytes) bytes (the reply bound).")
        }
        let value: JSONValue
        do {
            value = try JSONCoding.parse(body, source: "The reply of plugin '\(id)' to \(contract)")
        } catch {
            throw TermindError(.pluginBadReply, TermindError.from(error).message)
        }
        let problems = schema.problems(in: value)
        guard problems.isEmpty else {
            throw TermindError(.pluginBadReply, "The reply of plugin '\(id)' to \(contract) does not match the response schema in its manifest: \(problems.prefix(5).joined(separator: "; ")).")
        }
        // As it came, as a reply in process is returned: the strict parser took all of it
        // (JSON, UTF-8, no duplicate keys, bounded depth). Written anew it would have its
        // keys in a different order on every run.
        return body
    }

    /// Starts the child at boot, so a plugin that does not load or start is disabled with
    /// its reason, as one in process is.
    func start(_ context: FeatureContext) async throws {
        // The plugin's process runs as this user: it must not read termind's memory,
        // environment or open files through /proc (ssh-agent does the same for its keys).
        _ = termind_set_undumpable()
        _ = try await launch()
    }

    func stop() async {
        let child = state.withLock { state -> PluginChild? in
            state.stopped = true
            defer { state.child = nil }
            return state.child
        }
        await child?.stop()
    }

    /// Why crashes turned the plugin off (nil while it is on).
    var disabledReason: String? { state.withLock { $0.disabled } }

    /// Turns a plugin that crashes turned off on again: its next call starts a process.
    func enable() -> String {
        state.withLock { state in
            let was = state.disabled
            state.disabled = nil
            state.crashes = []
            state.delay = 0
            state.notBefore = 0
            return was == nil ? "plugin '\(manifest.id)' was on." : "plugin '\(manifest.id)' is on again; its next call starts its process."
        }
    }

    /// Its process and sandbox, for `termind features`.
    var description: String {
        let child = state.withLock { $0.child }
        guard let child else { return "own process (not running now)" }
        var text = "own process \(child.pid)"
        if !child.enforced.isEmpty { text += "; enforced: " + child.enforced.joined(separator: ", ") }
        if !child.notEnforced.isEmpty { text += "; not enforced on this kernel: " + child.notEnforced.joined(separator: ", ") }
        return text
    }

    /// The running child, or a new one once the restart delay has passed.
    private func child() async throws -> PluginChild {
        let now = Self.now()
        enum Next { case use(PluginChild), launch, wait(Double), off(String) }
        let next: Next = state.withLock { state in
            if let disabled = state.disabled { return .off(disabled) }
            if let child = state.child, child.isAlive { return .use(child) }
            if state.stopped { return .off("termind is stopping") }
            if now < state.notBefore { return .wait(state.notBefore - now) }
            return .launch
        }
        switch next {
        case .use(let child): return child
        case .off(let reason):
            throw TermindError(.pluginDisabled, "plugin '\(manifest.id)' is off: \(reason). Run 'termind plugins enable \(manifest.id)' to start it again.")
        case .wait(let seconds):
            throw TermindError(.pluginRestarting, "plugin '\(manifest.id)' crashed and is restarted in \(String(printf: "%.1f", seconds)) s; try again then.")
        case .launch:
            return try await launch()
        }
    }

    /// One launch at a time: calls that find the process gone while another call starts it
    /// wait for that one. A launch that fails counts as a crash.
    private func launch() async throws -> PluginChild {
        let task: Task<PluginChild, any Error> = state.withLock { state in
            if let running = state.launching { return running }
            let task = Task { [manifest, hostVersion, logLevel, protected] () async throws -> PluginChild in
                try await PluginChild.launch(manifest, hostVersion: hostVersion, logLevel: logLevel, protected: protected, onReady: { [weak self] child in
                    // Registered before its reads start: an end right after is counted.
                    self?.state.withLock { $0.child = child }
                }, onEnd: { [weak self] child, reason in
                    self?.ended(child, reason)
                })
            }
            state.launching = task
            return task
        }
        defer { state.withLock { $0.launching = nil } }
        do {
            return try await task.value
        } catch {
            countCrash(TermindError.from(error).message)
            throw error
        }
    }

    /// The child ended (`reason`: how, for messages): a crash counts toward the restart delay
    /// and the limit.
    private func ended(_ child: PluginChild, _ reason: String) {
        let counts = state.withLock { state -> Bool in
            guard state.child === child, !state.stopped else { return false }
            state.child = nil
            return true
        }
        if counts { countCrash(reason) }
    }

    private func countCrash(_ reason: String) {
        let now = Self.now()
        state.withLock { state in
            guard !state.stopped else { return }
            // A process that ran for the whole window starts the backoff afresh.
            if let last = state.crashes.last, now - last >= Self.crashWindow { state.delay = 0 }
            state.crashes = state.crashes.filter { now - $0 < Self.crashWindow } + [now]
            if state.crashes.count >= Self.crashesAllowed {
                state.disabled = "it crashed \(state.crashes.count) times in \(Int(Self.crashWindow / 60)) minutes (last: \(reason))"
                return
            }
            state.delay = state.delay == 0 ? Self.firstDelay : min(state.delay * 2, Self.longestDelay)
            state.notBefore = now + state.delay * Double.random(in: 0.8...1.2)
        }
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}

/// One running `termind-plugin-host` and the calls in flight to it. The child is hostile
/// by assumption: everything it sends is bounded and checked, a child that stops reading
/// or floods is ended, and its socket is shut down (never closed and reused) once it died.
final class PluginChild: Sendable {
    let pid: pid_t
    private let fd: Int32
    private let id: String
    private let writing = Mutex<Void>(())
    private let calls = Mutex<Calls>(Calls())
    private let alive = Atomic<Bool>(true)
    private let watchdog = Mutex<Task<Void, Never>?>(nil)
    /// What its sandbox enforces, and what this kernel could not (its first frame, sent
    /// before the plugin's code ran).
    private let sandbox = Mutex<(enforced: [String], notEnforced: [String])>(([], []))
    var enforced: [String] { sandbox.withLock { $0.enforced } }
    var notEnforced: [String] { sandbox.withLock { $0.notEnforced } }

    struct Calls {
        var next: Int64 = 0
        var replies: [Int64: CheckedContinuation<PluginWire.Frame, any Error>] = [:]
        var streams: [Int64: AsyncStream<[String: JSONValue]>.Continuation] = [:]
        /// Event bytes of each stream received but not yet passed on, and its questions
        /// waiting for answers: bounded, a child past them is ended.
        var pending: [Int64: Int] = [:]
        var asking: [Int64: Int] = [:]
        var ended: TermindError?
        /// Calls past their deadline, for which the process was ended: what they say.
        var overdue: [Int64: TermindError] = [:]
        /// When each contract call in flight is due (one deadline for all, so the oldest call
        /// is always the next due), and what it says if it is not answered by then.
        var due: [Int64: (at: ContinuousClock.Instant, contract: String)] = [:]
    }

    /// A call's deadline; a stream's grace after its cancel; the load's.
    private let deadline: Duration
    static let cancelGrace = Duration.seconds(5)
    static let loadDeadline = Duration.seconds(10)
    /// A write the child does not take within this is a hung child.
    static let writeTimeout = 5
    /// Event bytes a stream may have in flight here (the child's window is 1 MiB).
    static let maximumPending = 8 << 20
    static let maximumAsks = 4

    /// A descriptor for the process itself (pidfd_open): a signal through it reaches that
    /// process or none, never another that was given its number after it was reaped.
    private let pidfd: Int32

    private init(pid: pid_t, fd: Int32, id: String, deadline: Duration) {
        self.pid = pid
        self.fd = fd
        self.id = id
        self.deadline = deadline
        pidfd = termind_pidfd_open(pid)
    }

    deinit {
        close(fd)
        if pidfd >= 0 { close(pidfd) }
    }

    /// SIGKILL to this process only (through its pidfd where the kernel has them).
    private func killProcess() {
        if pidfd >= 0 {
            _ = termind_pidfd_kill(pidfd, SIGKILL)
        } else {
            kill(pid, SIGKILL)
        }
    }

    var isAlive: Bool { alive.load(ordering: .acquiring) }

    /// Where the host executable is: `TERMIND_PLUGIN_HOST`, else beside the running
    /// executable (termind's, or a test runner's in the build folder).
    static func hostExecutable() -> String? {
        var candidates: [String] = []
        if let given = ProcessInfo.processInfo.environment["TERMIND_PLUGIN_HOST"], !given.isEmpty { candidates.append(given) }
        candidates.append(ExecutablePaths.executableDirectory() + "/termind-plugin-host")
        return candidates.first { access($0, X_OK) == 0 }
    }

    /// Starts the child, hands it the manifest and waits (at most `loadDeadline`) until the
    /// plugin is loaded and started, or says why not. `onReady` runs before the child's
    /// frames are read, `onEnd` once it ended.
    static func launch(_ manifest: FeatureManifest, hostVersion: String, logLevel: LogLevel?, protected: [String],
                       onReady: @escaping @Sendable (PluginChild) -> Void,
                       onEnd: @escaping @Sendable (PluginChild, String) -> Void) async throws -> PluginChild {
        guard let host = hostExecutable() else {
            throw TermindError(.featureStartFailed, "plugin '\(manifest.id)' asks to run in a process of its own, but termind-plugin-host is not installed beside termind.")
        }
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw TermindError(.featureStartFailed, "plugin '\(manifest.id)': no socketpair for its process (\(String(cString: strerror(errno)))).")
        }
        var timeout = timeval(tv_sec: writeTimeout, tv_usec: 0)
        _ = setsockopt(pair[0], SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let pid: pid_t
        do {
            // A session of its own (no terminal, not termind's process group); standard
            // error only with debug logging.
            pid = try ChildProcess.spawn([host, manifest.id],
                                         environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                                                       // Few malloc arenas: each reserves 64 MiB of address space, which
                                                       // counts against the process's memory limit.
                                                       "MALLOC_ARENA_MAX": "2",
                                                       // A crash report here would need ptrace, which its filter refuses.
                                                       "SWIFT_BACKTRACE": "enable=no"],
                                         stdin: pair[1], stdout: nil, stderr: logLevel == nil ? nil : 2, newSession: true)
        } catch {
            close(pair[0]); close(pair[1])
            throw error
        }
        close(pair[1])
        let child = PluginChild(pid: pid, fd: pair[0], id: manifest.id,
                                deadline: .seconds(manifest.limits?.callSeconds ?? FeatureManifest.Limits.defaultCallSeconds))
        var load: [String: JSONValue] = ["op": .string("load"), "manifest": try JSONCoding.parse(try JSONCoding.encode(manifest), source: "the manifest"),
                                         "hostVersion": .string(hostVersion), "protected": .array(protected.map(JSONValue.string))]
        if let logLevel { load["logLevel"] = .string(logLevel.name) }
        let loadFrame = load
        let loaded = ManagedAtomicFlag()
        let watchdog = Task {
            try? await Task.sleep(for: loadDeadline)
            if !loaded.isSet { child.end() }
        }
        defer { watchdog.cancel() }
        let ready: Result<Void, TermindError> = await withCheckedContinuation { continuation in
            let thread = SystemThread.named("termind.plugin.\(manifest.id)") {
                func failed(_ error: TermindError) {
                    child.end()
                    _ = child.reap()
                    continuation.resume(returning: .failure(error))
                }
                var frames = PluginWire.Reader(fd: child.fd)  // JSON frames while loading
                guard child.write(loadFrame), let first = try? frames.next(), first["op"] == .string("sandboxed") else {
                    return failed(TermindError(.featureStartFailed, "plugin '\(manifest.id)': its process ended or did not answer while loading."))
                }
                func strings(_ value: JSONValue?) -> [String] { PluginWire.strings(value).prefix(32).map { PluginWire.clean($0, limit: 300) } }
                child.sandbox.withLock { $0 = (strings(first["enforced"]), strings(first["notEnforced"])) }
                guard let second = try? frames.next() else {
                    return failed(TermindError(.featureStartFailed, "plugin '\(manifest.id)': its process ended while loading (\(child.reap()))."))
                }
                guard second["op"] == .string("ready") else {
                    let error = PluginWire.decode(second["error"], plugin: manifest.id)
                    return failed(TermindError(code: error.code, message: error.message))
                }
                loaded.set()
                onReady(child)
                continuation.resume(returning: .success(()))
                child.watchDeadlines()
                child.readLoop(frames, onEnd: onEnd)
            }
            thread.start()
        }
        try ready.get()
        return child
    }

    /// Reads the child's frames until it goes away, then fails what was in flight.
    private func readLoop(_ frames: consuming PluginWire.Reader, onEnd: @escaping @Sendable (PluginChild, String) -> Void) {
        // A frame for a call termind never made is no late reply but a process writing
        // on the socket by itself: it is ended (its own calls are all it could reach).
        var violation: String?
        func issued(_ call: Int64) -> Bool {
            if calls.withLock({ call > 0 && call <= $0.next }) { return true }
            violation = violation ?? "sent a frame for call \(call), which termind never made, and was ended"
            end()
            return false
        }
        while let next = try? frames.nextFrame() {
            let frame: [String: JSONValue]
            switch next {
            case .reply(let call, _):
                if issued(call) { resume(call, next) }
                continue
            case .call: continue  // a child sends none
            case .object(let object): frame = object
            }
            guard case .integer(let call)? = frame["id"], issued(call) else { continue }
            switch frame["op"]?.stringValue {
            case "reply":
                resume(call, next)
            case "event":
                // Bounded: a child that sends past its window, or asks without waiting for
                // answers, is ended.
                let size = 256 + (frame["data"]?.stringValue?.utf8.count ?? 0)
                let isAsk = frame["fields"]?["event"]?.stringValue == "ask"
                let (stream, overrun) = calls.withLock { calls -> (AsyncStream<[String: JSONValue]>.Continuation?, Bool) in
                    guard let stream = calls.streams[call] else { return (nil, false) }
                    calls.pending[call, default: 0] += size
                    if isAsk { calls.asking[call, default: 0] += 1 }
                    return (stream, calls.pending[call]! > Self.maximumPending || calls.asking[call, default: 0] > Self.maximumAsks)
                }
                if overrun { end(); continue }
                stream?.yield(frame)
            default:
                continue
            }
        }
        alive.store(false, ordering: .releasing)
        watchdog.withLock { $0 }?.cancel()
        let ended = reap()
        let reason = violation ?? ended
        let failure = TermindError(.pluginCrashed, "plugin '\(id)' \(reason) before it answered; its process is restarted for the next call.")
        let (replies, streams, overdue) = calls.withLock { calls in
            calls.ended = failure
            defer { calls.replies.removeAll(); calls.streams.removeAll() }
            return (calls.replies, Array(calls.streams.values), calls.overdue)
        }
        // Counted before any caller hears of it: a caller's next call then finds the
        // restart delay in place, never this process looking merely gone.
        onEnd(self, overdue.isEmpty ? reason : "it did not answer within its deadline")
        for (call, reply) in replies { reply.resume(throwing: overdue[call] ?? failure) }
        for stream in streams { stream.finish() }
    }

    /// Hands a reply to its caller (none: a call that already ended).
    private func resume(_ call: Int64, _ reply: PluginWire.Frame) {
        let waiting = calls.withLock { calls in
            calls.due[call] = nil
            return calls.replies.removeValue(forKey: call)
        }
        waiting?.resume(returning: reply)
    }

    /// Ends the child: killed, its socket shut down both ways (a descendant holding it
    /// cannot keep it open for us); the descriptor itself is closed only with this object.
    func end() {
        alive.store(false, ordering: .releasing)
        killProcess()
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Reaps the child once its socket closed (killing it first: an exit handler that never
    /// returns must not hold termind): how it ended, in words.
    private func reap() -> String {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
        var status: Int32 = 0
        var reaped = waitpid(pid, &status, WNOHANG)
        if reaped == 0 {
            // Still running with its socket closed: give it a moment, then end it.
            for _ in 0..<20 where reaped == 0 {
                usleep(10_000)
                reaped = waitpid(pid, &status, WNOHANG)
            }
            if reaped == 0 {
                killProcess()
                reaped = waitpid(pid, &status, 0)
            }
        }
        guard reaped == pid else { return "ended" }
        if (status & 0x7f) != 0 {
            let signal = status & 0x7f
            return "crashed (signal \(signal), \(String(cString: strsignal(signal))))"
        }
        return "exited with status \((status >> 8) & 0xff)"
    }

    /// Writes a frame; a child that does not take it within `writeTimeout` is ended.
    @discardableResult
    private func write(_ object: [String: JSONValue]) -> Bool {
        send { PluginWire.write($0, object) }
    }

    private func send(_ frame: (Int32) -> Bool) -> Bool {
        guard isAlive else { return false }
        let written = writing.withLock { _ in frame(fd) }
        if !written { end() }
        return written
    }

    /// Ends the process when `call` is still unanswered after `after`: its caller (and every
    /// other call in flight) then fails, the overdue one with `error`.
    private func watch(_ call: Int64, after: Duration, _ error: TermindError) -> Task<Void, Never> {
        Task { [self] in
            try? await Task.sleep(for: after)
            guard !Task.isCancelled else { return }
            let pending = calls.withLock { calls -> Bool in
                guard calls.replies[call] != nil else { return false }
                calls.overdue[call] = error
                return true
            }
            if pending { end() }
        }
    }

    /// Ends the process once a contract call is past its deadline: one task for the child,
    /// asleep until the oldest call is due (or for one deadline when none is in flight: a
    /// call started meanwhile is due later than that), instead of a timer per call.
    private func watchDeadlines() {
        let task = Task { [weak self, deadline] in
            while !Task.isCancelled {
                guard let next = self?.calls.withLock({ $0.due.values.map(\.at).min() ?? ContinuousClock.now + deadline }) else { return }
                try? await Task.sleep(until: next, clock: .continuous)
                guard !Task.isCancelled, let self, isAlive else { return }
                let overdue = calls.withLock { calls -> Bool in
                    let late = calls.due.filter { $0.value.at <= ContinuousClock.now }
                    for (call, entry) in late where calls.replies[call] != nil {
                        calls.overdue[call] = TermindError(.pluginTimeout, "plugin '\(id)' did not answer \(entry.contract) within \(deadline.components.seconds) s (its limits.callSeconds); its process was ended and starts again for the next call.")
                    }
                    for call in late.keys { calls.due[call] = nil }
                    return !calls.overdue.isEmpty
                }
                if overdue { end(); return }
            }
        }
        watchdog.withLock { $0 = task }
    }

    private func begin(_ stream: Bool) throws -> (Int64, AsyncStream<[String: JSONValue]>?) {
        try calls.withLock { calls in
            if let ended = calls.ended { throw ended }
            calls.next += 1
            guard stream else { return (calls.next, nil) }
            let (events, continuation) = AsyncStream<[String: JSONValue]>.makeStream()
            calls.streams[calls.next] = continuation
            return (calls.next, events)
        }
    }

    private func reply(_ call: Int64, sending frame: [String: JSONValue], afterSending: @Sendable () -> Void = {}) async throws -> Data {
        try await reply(call, send: { [self] in write(frame) }, afterSending: afterSending)
    }

    private func reply(_ call: Int64, send: () -> Bool, afterSending: @Sendable () -> Void = {}) async throws -> Data {
        let answer = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PluginWire.Frame, any Error>) in
            let failed: TermindError? = calls.withLock { calls in
                if let ended = calls.ended { return ended }
                calls.replies[call] = continuation
                return nil
            }
            if let failed { return continuation.resume(throwing: failed) }
            // A child that stops reading is ended by the write's timeout, and so the call ends.
            if send() {
                afterSending()
            } else if let waiting = calls.withLock({ $0.replies.removeValue(forKey: call) }) {
                waiting.resume(throwing: TermindError(.pluginCrashed, "plugin '\(id)' went away before the call was sent."))
            }
        }
        switch answer {
        case .reply(_, let body): return body
        case .object(let answer):
            if let error = answer["error"] { throw PluginWire.decode(error, plugin: id) }
            return Data((answer["body"]?.stringValue ?? "").utf8)
        case .call: throw PluginWire.decode(nil, plugin: id)
        }
    }

    func call(_ contract: String, _ request: Data, _ origin: CallOrigin) async throws -> Data {
        let (call, _) = try begin(false)
        // A C call cannot be interrupted: past its deadline the process is ended.
        calls.withLock { $0.due[call] = (ContinuousClock.now + deadline, contract) }
        defer { calls.withLock { $0.due[call] = nil } }
        return try await reply(call, send: { [self] in send { PluginWire.writeCall($0, id: call, contract: contract, origin: origin, body: request) } })
    }

    /// Runs a stream in the child: its events and questions reach `session`'s client, its
    /// input goes to the child as the child grants room, and a cancel goes along.
    func serve(_ stream: String, _ request: Data, _ session: StreamSession) async throws -> Data {
        try Task.checkCancellation()
        let (call, events) = try begin(true)
        let grants = AsyncStream<Int>.makeStream()
        let relay = Task { [self] in
            for await frame in events! {
                let size = 256 + (frame["data"]?.stringValue?.utf8.count ?? 0)
                defer { calls.withLock { $0.pending[call, default: 0] -= size } }
                guard case .object(var fields)? = frame["fields"] else { continue }
                if case .integer(let granted)? = fields["grant"] {
                    if granted > 0 { grants.continuation.yield(Int(min(granted, Int64(StreamSession.windowRange.upperBound)))) }
                    continue
                }
                let kind = fields["event"]?.stringValue ?? ""
                if kind == "ask" {
                    guard case .integer(let askID)? = fields["askID"], let question = fields["ask"] else { continue }
                    Task {
                        let answer = await session.ask(question)
                        var reply: [String: JSONValue] = ["askID": .integer(askID)]
                        if case .object(let given)? = answer { reply.merge(given) { _, new in new } } else { reply["unanswered"] = .bool(true) }
                        reply["askID"] = .integer(askID)
                        calls.withLock { $0.asking[call, default: 0] -= 1 }
                        write(["op": .string("to-stream"), "id": .integer(call), "message": .object(["answer": .object(reply)])])
                    }
                    continue
                }
                fields["id"] = nil
                fields["event"] = nil
                let data = frame["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }
                fields["data"] = nil
                await session.emit(kind, fields, data: data)
                if case .integer(let credit)? = frame["size"], credit > 0 {
                    write(["op": .string("to-stream"), "id": .integer(call), "message": .object(["credit": .integer(min(credit, Int64(StreamSession.windowRange.upperBound)))])])
                }
            }
            grants.continuation.finish()
        }
        let input = Task { [self] in
            var allowance = 0
            var granted = grants.stream.makeAsyncIterator()
            var chunks = session.input.makeAsyncIterator()
            func more() async -> Bool {
                guard let grant = await granted.next() else { return false }
                allowance = min(allowance + grant, StreamSession.windowRange.upperBound)
                return true
            }
            while true {
                while allowance <= 0 { guard await more() else { return } }
                guard let chunk = await chunks.next() else {
                    write(["op": .string("to-stream"), "id": .integer(call), "message": .object(["inputEnd": .bool(true)])])
                    return
                }
                var offset = 0
                while offset < chunk.count {
                    while allowance <= 0 { guard await more() else { return } }
                    let count = min(allowance, chunk.count - offset)
                    let piece = chunk.subdata(in: chunk.startIndex + offset ..< chunk.startIndex + offset + count)
                    write(["op": .string("to-stream"), "id": .integer(call), "message": .object(["input": .string(piece.base64EncodedString())])])
                    allowance -= count
                    offset += count
                }
            }
        }
        defer {
            input.cancel()
            calls.withLock { calls -> AsyncStream<[String: JSONValue]>.Continuation? in
                calls.pending[call] = nil
                calls.asking[call] = nil
                return calls.streams.removeValue(forKey: call)
            }?.finish()
        }
        let cancelled = ManagedAtomicFlag()
        let sent = ManagedAtomicFlag()
        @Sendable func sendCancel() {
            var message: [String: JSONValue] = ["cancel": .bool(true)]
            if let signal = session.cancelSignal { message["signal"] = .string(signal) }
            write(["op": .string("to-stream"), "id": .integer(call), "message": .object(message)])
            // A plugin that does not end the stream once cancelled is ended.
            _ = watch(call, after: Self.cancelGrace, TermindError(.streamCancelled, "The operation was cancelled (plugin '\(id)' did not stop; its process was ended)."))
        }
        return try await withTaskCancellationHandler {
            let result = try await reply(call, sending: ["op": .string("stream"), "id": .integer(call), "contract": .string(stream),
                                                         "body": .string(String(decoding: request, as: UTF8.self)), "origin": PluginWire.chain(session.origin)],
                                         afterSending: {
                sent.set()
                // A cancel that came before the stream was sent goes after it.
                if cancelled.isSet { sendCancel() }
            })
            calls.withLock { $0.streams.removeValue(forKey: call) }?.finish()
            await relay.value
            return result
        } onCancel: {
            cancelled.set()
            if sent.isSet { sendCancel() }
        }
    }

    /// Asks the child to stop its plugin and end; one that does not within 5 s is ended.
    func stop() async {
        guard isAlive else { return }
        write(["op": .string("stop")])
        for _ in 0..<50 where isAlive { try? await Task.sleep(for: .milliseconds(100)) }
        if isAlive { end() }
    }

}

