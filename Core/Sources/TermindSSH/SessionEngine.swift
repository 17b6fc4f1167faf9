internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The one owner of a libssh2 session and its socket: a dedicated thread runs every libssh2
/// call for the session, in non-blocking mode, driven by socket readiness.
///
/// Two phases:
/// - Opening (handshake, authentication): `perform` runs a body on the thread; the body
///   repeats EAGAIN calls with identical arguments through `retry`, waiting with poll().
///   Keyboard-interactive callbacks wait here for their async responder.
/// - Multiplexing: operations (`run`) and channel pumps (`attach`) share the session. Each
///   pass steps every pump once (bounded work each: fair) and the head operation of every
///   lane (a lane keeps libssh2's one-request-in-flight rules: the session lane for channel
///   opens and global requests, one lane per channel for its requests). When a pass makes
///   no progress the thread sleeps in poll() on the socket, the pumps' descriptors and a
///   wake eventfd, bounded by the nearest deadline and the keepalive timer.
///
/// An operation whose caller gave up (cancelled, deadline) keeps running to completion on
/// the session — libssh2 holds session-wide state for it — and its late result is
/// discarded. Every engine has a generation; owners ignore events of retired generations.
///
/// `@unchecked Sendable`: `inbox`, `stopping`, `deathError`, `deathObservers`, `holds` and
/// `idleSinceValue` are touched only under `lock`; every other `var` (session, operations, pumps,
/// keepalive state) only on the engine thread, by its loop and the work `submit` queues there,
/// after init; `thread` is atomic, and `cancelWord` is set with the shim's atomic store.
final class SessionEngine: @unchecked Sendable {
    let endpoint: String
    let fd: Int32
    let generation: UInt64
    /// Touched only on the engine thread (and by deinit).
    private(set) var session: OpaquePointer?
    /// The outbound buffer libssh2's send callback fills (see shim.h); engine thread only.
    private var context: UnsafeMutablePointer<termind_ssh2_context>?
    /// Set while the opening in progress is cancelled; read by the C receive callback (it
    /// outlives the session: freed in deinit).
    private let cancelWord: UnsafeMutablePointer<Int32> = {
        let word = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        word.initialize(to: 0)
        return word
    }()
    /// Above this many unsent bytes, pumps hold back new channel data until the socket drains.
    static let sendBacklogLimit = 1 << 20

    private let wakeFD: Int32
    /// The engine thread (`pthread_self()`), set as its loop starts: what `EngineBound` checks.
    private let thread = Atomic<UInt>(0)
    private let lock = PlainLock()
    /// Work for the engine thread, and what tells its submitter the engine died first.
    private struct Item {
        let work: (SessionEngine) -> Void
        let orElse: (TermindError) -> Void
    }
    private var inbox: [Item] = []
    private var stopping = false
    private var deathError: TermindError?
    private var deathObservers: [(TermindError) -> Void] = []

    // Engine-thread state.
    private var operations: [EngineOperation] = []
    private var pumps: [EnginePump] = []
    /// OpenSSH's sshd takes one agent request per connection, and then gives every later
    /// session of the connection the agent: asked once, its answer stands for all. Once
    /// enabled, the agent channels the server opens are bridged to `socket`. Engine thread only.
    enum AgentForwarding { case none, asking, enabled(socket: String), refused }
    var agentForwarding = AgentForwarding.none
    private var keepaliveInterval = 0
    private var keepaliveCountMax = 3
    /// When bytes last came from the server (or the loop last chose not to read): local
    /// activity never moves it, so a frozen server is found however busy its callers are.
    private var lastInbound = DispatchTime.now()
    private var receivedCount: UInt64 = 0
    /// Set once authentication succeeded: only then may the engine open channels of its own
    /// (keepalive probes) — a CHANNEL_OPEN before that is a protocol error.
    private var authenticated = false
    /// How long a session-lane operation given up by its caller may hold the lane before
    /// the session is declared broken (later opens would wait behind it forever).
    private var abandonedGrace: Double = 150
    /// Keepalive probes and the connection's end go here (codes only; engine thread).
    private var logger: Logger?
    /// Cancellation of the body `perform` is running.
    private var performCancelled: ManagedAtomicFlag?
    /// Time spent waiting for a person inside the current `perform`: not network time.
    private(set) var interactionPause: UInt64 = 0
    /// The keyboard-interactive attempt in progress (its C callback finds it here).
    var keyboardInteractive: KeyboardInteractiveContext?

    private static let generations = GenerationCounter()

    /// One read buffer for all of this session's pumps (they run one at a time, on this
    /// thread): per-channel memory stays in the channels' own bounded queues.
    static let scratchSize = 256 * 1024
    let scratch = UnsafeMutablePointer<CChar>.allocate(capacity: SessionEngine.scratchSize)
    /// `scratch` as bytes, for a pump's read that may find nothing (engine thread only).
    var scratchBytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: scratch, count: Self.scratchSize) }

    init(fd: Int32, endpoint: String) throws {
        SSHLibrary.initialize()
        self.fd = fd
        self.endpoint = endpoint
        generation = Self.generations.next()
        wakeFD = termind_ssh2_wake_fd()
        // (deinit closes wakeFD when init throws from here on.)
        guard wakeFD >= 0 else {
            close(fd)
            throw SSHError.make(.sshSessionFailed, "Could not create a wake descriptor for \(endpoint): \(String(cString: strerror(errno))).")
        }
        // The context lets C callbacks find this engine; the engine outlives its session
        // (the session is freed before the engine goes away).
        guard let context = termind_ssh2_context_new(nil) else {
            close(fd)
            throw SSHError.make(.sshSessionFailed, "Could not create an SSH session for \(endpoint).")
        }
        guard let session = termind_ssh2_session_init(context, fd) else {
            termind_ssh2_context_free(context)
            close(fd)
            throw SSHError.make(.sshSessionFailed, "Could not create an SSH session for \(endpoint).")
        }
        context.pointee.owner = Unmanaged.passUnretained(self).toOpaque()
        context.pointee.cancel = cancelWord
        libssh2_session_set_blocking(session, 0)
        self.context = context
        self.session = session
        let thread = SystemThread { [self] in
            BlockingCheck.dedicatedThread()
            self.runLoop()
        }
        thread.start()
    }

    deinit {
        close(wakeFD)
        scratch.deallocate()
        cancelWord.deallocate()
    }

    // MARK: - Submitting work (any thread)

    /// Runs `body` on the engine thread, for the opening phase (handshake, authentication).
    /// Swift task cancellation makes the body's waits throw `ssh.cancelled`.
    func perform<T: Sendable>(_ body: @escaping @Sendable (SessionEngine) throws -> T) async throws -> T {
        let cancelled = ManagedAtomicFlag()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
                submit({ engine in
                    engine.performCancelled = cancelled
                    termind_ssh2_set_flag(engine.cancelWord, cancelled.isSet ? 1 : 0)
                    engine.interactionPause = 0
                    defer {
                        engine.performCancelled = nil
                        termind_ssh2_set_flag(engine.cancelWord, 0)
                    }
                    continuation.resume(with: Result { try body(engine) })
                }, orElse: { error in continuation.resume(throwing: error) })
            }
        } onCancel: {
            cancelled.set()
            termind_ssh2_set_flag(self.cancelWord, 1)
            self.wake()
        }
    }

    /// Runs a non-blocking libssh2 call on the engine thread until it stops saying EAGAIN:
    /// `attempt` returns nil for EAGAIN and is called again with the same arguments. Calls
    /// on one `lane` run one at a time, in submission order. If the caller is cancelled or
    /// the deadline passes, the caller gets the error at once while the call still runs to
    /// completion on the session, and `discard` receives its late result.
    /// `dropIfAbandoned`: the call keeps no libssh2 state between attempts (accepting a
    /// forwarded connection), so a caller that gives up removes it at once.
    /// `answerMayBeSlow`: the server answers only after work of its own (a direct-tcpip open
    /// waits for sshd's connect), so its silence meanwhile is no sign of a dead connection.
    func run<T>(_ what: String, lane: AnyObject? = nil, deadline: DispatchTime? = nil, dropIfAbandoned: Bool = false,
                answerMayBeSlow: Bool = false, discard: ((T) -> Void)? = nil,
                _ attempt: @escaping (OpaquePointer) throws -> T?) async throws -> T {
        // Set and read on the engine thread only: the cancel below finds the operation there.
        let box = EngineBound<EngineOperation?>(nil, engine: self)
        let cancelled = ManagedAtomicFlag()
        let endpoint = self.endpoint
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HandOff<T>, Error>) in
                let operation = EngineOperation(what: what, lane: lane.map(ObjectIdentifier.init) ?? ObjectIdentifier(self), deadline: deadline,
                    dropIfAbandoned: dropIfAbandoned, answerMayBeSlow: answerMayBeSlow,
                    attempt: { session in try attempt(session).map { HandOff($0) } },
                    complete: { result in continuation.resume(with: result.map { $0 as! HandOff<T> }) },
                    discard: { value in discard?((value as! HandOff<T>).take()) })
                submit({ engine in
                    // Cancelled before it was queued: it never touched libssh2.
                    if cancelled.isSet {
                        operation.finish(.failure(SSHError.make(.sshCancelled, "\(what) on \(endpoint) was cancelled.")))
                        return
                    }
                    box.value = operation
                    engine.add(operation)
                }, orElse: { error in operation.finish(.failure(error)) })
            }.take()
        } onCancel: {
            cancelled.set()
            self.submit { engine in
                guard let operation = box.value else { return }
                engine.abandon(operation, SSHError.make(.sshCancelled, "\(what) on \(endpoint) was cancelled."))
            }
        }
    }

    /// Queues `body` on `lane` without waiting for it (closing a late channel, cancelling a
    /// late listener): it runs after the lane's earlier operations, repeated while it
    /// returns nil.
    func enqueue(_ what: String, lane: AnyObject? = nil, _ body: @escaping (OpaquePointer) -> Bool?) {
        let operation = EngineOperation(what: what, lane: lane.map(ObjectIdentifier.init) ?? ObjectIdentifier(self), deadline: nil,
                                        dropIfAbandoned: false, attempt: { session in body(session) },
                                        complete: { _ in }, discard: { _ in })
        submit({ engine in engine.add(operation) }, orElse: { error in operation.finish(.failure(error)) })
    }

    /// Whether operations on `lane` are still queued or running (a pump waits for them
    /// before it closes and frees its channel).
    func hasPendingOperations(lane: AnyObject) -> Bool {
        let id = ObjectIdentifier(lane)
        return operations.contains { $0.lane == id }
    }

    /// Whether channels may hand libssh2 more data now (the unsent backlog is small).
    var canSend: Bool { context.map { termind_ssh2_backlog($0) < Self.sendBacklogLimit } ?? false }

    /// After the handshake: how much unsent data the send callback lets wait before writing
    /// it at once (see the shim). Measured against OpenSSH's sshd on loopback (1 GiB
    /// uploads, paired with ssh, median of 7–8 runs each):
    /// - chacha20-poly1305, which sshd decrypts slowly (about 2.5 s of its CPU per GiB): sshd
    ///   is the bottleneck and idles while a big burst is being encrypted, so each full
    ///   packet goes out as it is made (32 KiB). That gained 6–15 % over writing once per pass.
    /// - AES-GCM and the other ciphers, which sshd decrypts fast (1.6 s/GiB): sending each
    ///   packet made sshd read in small pieces and spend about 15 % more CPU per GiB, and
    ///   the upload ran 10–40 % slower; 256 KiB was the best of 64 KiB to unbounded.
    /// Engine thread only.
    func tuneSending() {
        guard let session, let context, let cipher = libssh2_session_methods(session, LIBSSH2_METHOD_CRYPT_CS) else { return }
        termind_ssh2_set_eager_send(context, String(cString: cipher).hasPrefix("chacha20-poly1305") ? 32 << 10 : 256 << 10)
    }

    /// A session channel's process started (exec, shell, subsystem): OpenSSH's sshd has now
    /// turned Nagle off for the connection, so short reads need no acknowledgement of their
    /// own any more (see the shim's receive). Engine thread only.
    func sessionStarted() { if let context { termind_ssh2_set_peer_nodelay(context) } }

    /// Whether short reads are acknowledged at once (no session has started yet). Engine thread only.
    var acknowledgesShortReads: Bool { context.map { termind_ssh2_acks_short_reads($0) != 0 } ?? false }

    /// After an abandoned authentication: nothing more leaves this session.
    func discardOutput() { if let context { termind_ssh2_discard_output(context) } }

    private func abandon(_ operation: EngineOperation, _ error: TermindError) {
        operation.abandon(error)
        if operation.abandonedAt == nil { operation.abandonedAt = .now() }
        // An operation that never started, or keeps no libssh2 state, leaves at once.
        if !operation.started || operation.dropIfAbandoned {
            operations.removeAll { $0 === operation }
        }
        // One that waited behind the session lane's holder gave up on the holder's answer too:
        // the holder now counts as given up, so `abandonedGrace` bounds it (a keepalive probe,
        // sent to read a server's unsolicited bytes, has no deadline of its own: a server that
        // froze after it held every later open with no end when keepalive was off).
        let sessionLane = ObjectIdentifier(self)
        if !operation.started, operation.lane == sessionLane,
           let holder = operations.first(where: { $0.lane == sessionLane && $0.started }), holder.abandonedAt == nil {
            holder.abandonedAt = .now()
        }
    }

    /// Adds a pump (channel data, a bridge) to the fair passes.
    func attach(_ pump: EnginePump) {
        submit({ engine in engine.pumps.append(pump) }, orElse: { error in pump.fail(error) })
    }

    /// Called once authentication succeeded: from now on the engine may open channels of its
    /// own. Sends keepalives every `interval` seconds (0: off); the connection counts as lost
    /// after `countMax` intervals without a byte from the server.
    func configureKeepalive(interval: Int, countMax: Int, abandonedGrace: Double, logger: Logger?) {
        submit { engine in
            engine.logger = logger
            engine.abandonedGrace = abandonedGrace
            engine.keepaliveInterval = max(0, interval)
            engine.keepaliveCountMax = max(1, countMax)
            engine.authenticated = true
            engine.lastInbound = .now()
        }
    }

    /// `observer` learns why the session ended (immediately if it already has).
    func onDeath(_ observer: @escaping @Sendable (TermindError) -> Void) {
        let already: TermindError? = lock.withLock {
            if let deathError { return deathError }
            deathObservers.append(observer)
            return nil
        }
        if let already { observer(already) }
    }

    var isAlive: Bool { lock.withLock { deathError == nil && !stopping } }

    /// Since when nothing has used the session (no channel, no operation); nil while busy.
    var idleSince: DispatchTime? { lock.withLock { idleSinceValue } }
    private var idleSinceValue: DispatchTime? = .now()
    private var wasBusy = false

    /// Work that keeps the session in use between requests (an SFTP session, a remote
    /// listener) holds it: the session is not idle while held.
    func hold() {
        lock.withLock { holds += 1 }
        wake()  // the loop notes the change
    }
    func release() {
        lock.withLock { holds = max(0, holds - 1) }
        wake()
    }
    private var holds = 0

    /// Records busy/idle changes (engine thread, once per pass).
    private func noteActivity() {
        let busy = lock.withLock { holds > 0 } || !pumps.isEmpty || operations.contains { !$0.isKeepalive }
        guard busy != wasBusy else { return }
        wasBusy = busy
        lock.withLock { idleSinceValue = busy ? nil : .now() }
    }

    /// Whether the caller runs on this engine's thread.
    var isOnEngineThread: Bool { thread.load(ordering: .acquiring) == UInt(pthread_self()) }

    /// Stops a debug build where engine-confined state is touched from another thread.
    func assertOnEngineThread(file: StaticString = #fileID, line: UInt = #line) {
        assert(isOnEngineThread, "engine-confined state of \(endpoint) touched off its engine thread", file: file, line: line)
    }

    /// Wakes the thread from poll(): new work, a consumer drained a buffer, a cancellation.
    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Ends the session: everything pending fails with `ssh.closed`, a disconnect is sent
    /// (one non-blocking attempt), the session and socket are freed. Returns afterwards.
    func shutdown() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let accepted: Bool = lock.withLock {
                guard deathError == nil else { return false }
                inbox.append(Item(work: { engine in
                    engine.die(SSHError.make(.sshClosed, "The SSH connection to \(engine.endpoint) was closed."), disconnect: true)
                    continuation.resume()
                }, orElse: { _ in continuation.resume() }))
                return true
            }
            if accepted { wake() } else { continuation.resume() }
        }
    }

    /// Queues `work` for the engine thread. Once the engine died, `orElse` learns why instead:
    /// the work never runs, on any thread (it would touch a freed session).
    private func submit(_ work: @escaping (SessionEngine) -> Void, orElse: @escaping (TermindError) -> Void = { _ in }) {
        let rejected: TermindError? = lock.withLock {
            if let deathError { return deathError }
            inbox.append(Item(work: work, orElse: orElse))
            return nil
        }
        if let rejected {
            orElse(rejected)
            return
        }
        wake()
    }

    /// Why the engine died, read under the lock it is written with (nil while alive).
    private var death: TermindError? { lock.withLock { deathError } }

    // MARK: - Opening phase helpers (engine thread, inside `perform`)

    /// Writes buffered packets without blocking; false when the socket failed.
    @discardableResult
    func flush() -> Bool {
        guard let context else { return true }
        return termind_ssh2_flush(context, fd) >= 0
    }

    /// Repeats `call` while it returns EAGAIN, waiting for socket readiness in between.
    /// `abort` ends the wait early with its error (a person gave up a prompt).
    func retry(_ what: String, deadline: DispatchTime, abort: () -> TermindError? = { nil },
               _ call: (OpaquePointer) -> Int32) throws -> Int32 {
        guard let session else { throw SSHError.make(.sshClosed, "The SSH connection to \(endpoint) is closed.") }
        while true {
            let rc = call(session)
            if let error = abort() { throw error }
            guard rc == termind_ssh2_error_eagain() else { return rc }
            try waitForSocket(what, deadline: deadline)
        }
    }

    /// As `retry`, for calls that return a pointer and report EAGAIN through last_errno.
    func retryPointer<T>(_ what: String, deadline: DispatchTime, _ call: (OpaquePointer) -> T?) throws -> T? {
        guard let session else { throw SSHError.make(.sshClosed, "The SSH connection to \(endpoint) is closed.") }
        while true {
            if let value = call(session) { return value }
            guard libssh2_session_last_errno(session) == termind_ssh2_error_eagain() else { return nil }
            try waitForSocket(what, deadline: deadline)
        }
    }

    /// poll() on the directions libssh2 is blocked on and the wake descriptor. The deadline
    /// excludes time spent waiting for a person (`interactionPause`).
    func waitForSocket(_ what: String, deadline: DispatchTime) throws {
        guard let session else { return }
        while true {
            try checkCancelled(what)
            let now = DispatchTime.now()
            let effective = deadline.uptimeNanoseconds &+ interactionPause
            guard now.uptimeNanoseconds < effective else {
                throw SSHError.make(.sshTimeout, "\(what) on \(endpoint) timed out; the server did not answer in time.")
            }
            guard flush() else {
                throw SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was lost during \(what.lowercased()): \(String(cString: strerror(errno))).")
            }
            var events = Self.events(for: libssh2_session_block_directions(session))
            if let context, termind_ssh2_backlog(context) > 0 { events |= Int16(POLLOUT) }
            var fds = [pollfd(fd: fd, events: events, revents: 0),
                       pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            let remainingMs = Int32(min(1000, max(1, (effective - now.uptimeNanoseconds) / 1_000_000)))
            let ready = poll(&fds, 2, remainingMs)
            if ready < 0 && errno != EINTR {
                throw SSHError.make(.sshSocket, "Waiting on the connection to \(endpoint) failed: \(String(cString: strerror(errno))).")
            }
            if fds[1].revents != 0 { drainWake() }
            if fds[0].revents != 0 { return }
        }
    }

    func checkCancelled(_ what: String) throws {
        if performCancelled?.isSet == true { throw SSHError.make(.sshCancelled, "\(what) on \(endpoint) was cancelled.") }
    }

    /// Waits on the engine thread for a person's answer (a keyboard-interactive prompt): the
    /// wait is cancellable and does not count against network deadlines.
    func waitForInteraction<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async -> T?) throws -> T? {
        let started = DispatchTime.now().uptimeNanoseconds
        defer { interactionPause &+= DispatchTime.now().uptimeNanoseconds &- started }
        let result = SharedSlot<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = Task { result.value = await body(); done.signal() }
        while done.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
            if performCancelled?.isSet == true {
                task.cancel()
                throw SSHError.make(.sshCancelled, "\(what) on \(endpoint) was cancelled.")
            }
        }
        return result.value
    }

    /// libssh2's last error message for this session (never contains secrets).
    func lastError() -> String {
        guard let session else { return "the session is closed" }
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        libssh2_session_last_error(session, &message, &length, 0)
        return message.map { String(cString: $0) } ?? "unknown error"
    }

    var lastErrno: Int32 { session.map { libssh2_session_last_errno($0) } ?? LIBSSH2_ERROR_SOCKET_DISCONNECT }

    /// Errors after which the session as a whole is unusable.
    static func isFatal(_ rc: Int32) -> Bool {
        [LIBSSH2_ERROR_SOCKET_NONE, LIBSSH2_ERROR_BANNER_RECV, LIBSSH2_ERROR_BANNER_SEND, LIBSSH2_ERROR_INVALID_MAC,
         LIBSSH2_ERROR_KEX_FAILURE, LIBSSH2_ERROR_ALLOC, LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_KEY_EXCHANGE_FAILURE,
         LIBSSH2_ERROR_TIMEOUT, LIBSSH2_ERROR_DECRYPT, LIBSSH2_ERROR_SOCKET_DISCONNECT, LIBSSH2_ERROR_PROTO,
         LIBSSH2_ERROR_SOCKET_TIMEOUT, LIBSSH2_ERROR_SOCKET_RECV, LIBSSH2_ERROR_ENCRYPT, LIBSSH2_ERROR_BAD_SOCKET,
         LIBSSH2_ERROR_MAC_FAILURE].contains(rc)
    }

    /// An operation's attempt moved data without finishing: the loop runs another pass
    /// instead of sleeping (libssh2 may hold more already).
    func noteProgress() { operationProgressed = true }
    private var operationProgressed = false

    /// Marks the session lost after a fatal libssh2 error seen by a pump or an operation.
    func sessionFailed(_ context: String) {
        die(SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was lost \(context): \(lastError())."), disconnect: false)
    }

    // MARK: - The loop (engine thread)

    private func add(_ operation: EngineOperation) {
        if let error = death { operation.finish(.failure(error)); return }
        operations.append(operation)
    }

    private func runLoop() {
        // Pumps write to handed-over pipes: a reader that went away must be EPIPE for the
        // pump, not a SIGPIPE that ends the process. Blocked for this thread only (a
        // pending one is discarded with the thread).
        var pipe = sigset_t()
        sigemptyset(&pipe)
        sigaddset(&pipe, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipe, nil)
        // Named, and at the process's own priority as ssh(1) runs (not at that of the
        // Dispatch worker that started it; the echo bench measured no difference).
        termind_ssh2_engine_thread("termind.ssh")
        thread.store(UInt(pthread_self()), ordering: .releasing)
        var idlePasses = 0
        while true {
            let work: [Item] = lock.withLock {
                defer { inbox.removeAll() }
                return inbox
            }
            for item in work {
                // An item behind one that ended the session is told so, never run.
                if let death { item.orElse(death) } else { item.work(self) }
            }
            if session == nil { break }

            var progressed = !work.isEmpty
            progressed = stepOperations() || progressed
            if session == nil { break }
            let pumped = stepPumps()
            progressed = pumped == .progressed || progressed
            if session == nil { break }
            progressed = adoptAgentChannels() || progressed
            // Before the keepalive verdict: an answer just read counts. Bytes read in this
            // pass also count as progress: a pump reading one stream (stderr, another
            // channel's) may have made libssh2 take packets for a stream read before it,
            // which now wait in libssh2 with nothing left on the socket to wake poll() —
            // unless the only pump, with no operation waiting, read them all (`settled`).
            if noteReceived() && !(pumped == .settled && pumps.count == 1 && operations.isEmpty) { progressed = true }
            expireDeadlines()
            if session == nil { break }
            if !flush() {
                die(SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was lost: \(String(cString: strerror(errno)))."), disconnect: false)
                break
            }
            noteActivity()
            if progressed && idlePasses < 64 {
                idlePasses += 1
                continue
            }
            idlePasses = 0
            sleep()
            if session == nil { break }
        }
        // The loop ends only through die(), which has told the close observers.
    }

    /// Bytes libssh2 has read from the server so far (engine thread).
    var receivedBytes: UInt64 { context.map { UInt64(termind_ssh2_received($0)) } ?? 0 }

    /// Moves `lastInbound` when libssh2 read bytes from the server since the last pass;
    /// whether it did.
    private func noteReceived() -> Bool {
        guard let context else { return false }
        let received = UInt64(termind_ssh2_received(context))
        guard received != receivedCount else { return false }
        receivedCount = received
        lastInbound = .now()
        return true
    }

    private func stepOperations() -> Bool {
        guard let session, !operations.isEmpty else { return false }
        operationProgressed = false
        defer { operationProgressed = false }
        var progressed = false
        var busyLanes = Set<ObjectIdentifier>()
        var index = 0
        while index < operations.count {
            let operation = operations[index]
            guard !busyLanes.contains(operation.lane) else { index += 1; continue }
            busyLanes.insert(operation.lane)
            operation.started = true
            do {
                if let value = try operation.attempt(session) {
                    operation.finish(.success(value))
                    operations.remove(at: index)
                    progressed = true
                    continue
                }
            } catch let error as TermindError {
                operation.finish(.failure(error))
                operations.remove(at: index)
                progressed = true
                if Self.isFatal(lastErrno) { sessionFailed("during \(operation.what.lowercased())"); return true }
                continue
            } catch {
                operation.finish(.failure(SSHError.make(.sshFailed, "\(operation.what) on \(endpoint) failed.")))
                operations.remove(at: index)
                continue
            }
            if self.session == nil { return true }
            index += 1
        }
        return progressed || operationProgressed
    }

    /// Bridges each agent channel the server opened (queued by the C callback) to a new
    /// connection to the local agent, on a pump of its own; one that cannot reach the agent
    /// is closed at once. Agent messages are small: 64 KiB of unread output per channel.
    private func adoptAgentChannels() -> Bool {
        var adopted = false
        while let channel = termind_ssh2_take_agent_channel(context) {
            adopted = true
            let state = ChannelState(limit: 64 << 10)
            var local = LocalDescriptors()
            if case .enabled(let path) = agentForwarding, let address = UnixSocket.address(path), let fd = try? UnixSocket.connect(address) {
                local = (try? LocalDescriptors.adopt(ChannelDescriptors(input: fd, output: fd))) ?? LocalDescriptors()
                Glibc.close(fd)
            }
            if local.input == nil {
                logger?.debug("ssh.agent.unreachable")
                state.requestClose()
            } else {
                logger?.debug("ssh.agent.channel")
            }
            pumps.append(ChannelPump(channel: channel, state: state, endpoint: endpoint, local: local))
        }
        return adopted
    }

    /// `.progressed` when any pump did, `.settled` when every pump that progressed settled,
    /// else `.idle`.
    private func stepPumps() -> PumpStep {
        // What the last poll() found holds for this step only, with pumps or without.
        defer { pollSetIsFresh = false }
        guard let session, !pumps.isEmpty else { return .idle }
        // The socket poll() just found empty (in the pass straight after it) is not read again
        // by each channel; nor after a read met EAGAIN or came short in this step (the shim's
        // recv, which also holds back the acknowledgement of a short read until the step ends).
        if let context { termind_ssh2_quiet_hint(context, 1, pollFoundNoInput(on: fd) ? 1 : 0) }
        defer { if let context { termind_ssh2_quiet_hint(context, 0, 0) } }
        var progressed = false
        var settled = false
        var index = 0
        while index < pumps.count {
            let pump = pumps[index]
            switch pump.step(self, session) {
            case .progressed: progressed = true; index += 1
            case .settled: settled = true; index += 1
            case .idle: index += 1
            case .finished: pumps.remove(at: index); progressed = true
            case .sessionLost(let context):
                // die() fails every pump, this one included.
                sessionFailed(context)
                return .progressed
            }
            if self.session == nil { return .progressed }
        }
        return progressed ? .progressed : settled ? .settled : .idle
    }

    /// Whether the poll() this pump step directly follows asked `fd` for input and found none
    /// (a read would only meet EAGAIN). False in any later pass: then nobody knows.
    func pollFoundNoInput(on fd: Int32) -> Bool {
        pollSetIsFresh && pollSet.contains { $0.fd == fd && $0.events & Int16(POLLIN) != 0 && $0.revents == 0 }
    }
    /// The descriptors the loop sleeps on (the socket's, the wake's, the pumps'), kept from
    /// one sleep to the next so that no pass allocates them; as the last poll() left them.
    private var pollSet: [pollfd] = []
    /// Whether `pollSet` holds what the last poll() found, until the next pump step ends.
    private var pollSetIsFresh = false

    private func expireDeadlines() {
        let now = DispatchTime.now()
        let sessionLane = ObjectIdentifier(self)
        for operation in operations {
            if !operation.isAbandoned, let deadline = operation.deadline, now >= deadline {
                abandon(operation, SSHError.make(.sshTimeout, "\(operation.what) on \(endpoint) timed out; the server did not answer in time."))
            }
            // Given up, still unanswered, and every later channel open waits behind it.
            // (`abandonedAt` may be a moment after `now`: set by the timeout just above.)
            if operation.lane == sessionLane, let since = operation.abandonedAt, now > since,
               now.uptimeNanoseconds - since.uptimeNanoseconds > UInt64(abandonedGrace * 1e9) {
                die(SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was closed: the server did not answer \(operation.what.lowercased()) "
                                  + "within \(SSHConnection.seconds(abandonedGrace)) after it was given up, and later channels would wait behind it."), disconnect: true)
                return
            }
        }
        // A direct-tcpip open the server has not answered yet blocks the session lane, and with
        // it the probe; sshd answers only once its own connect ends, up to minutes later, so
        // silence then proves nothing (the open's deadline and grace bound it). Any other
        // open is answered at once by a live server: silence still counts.
        let awaitingSessionReply = operations.contains { $0.lane == sessionLane && $0.started && $0.answerMayBeSlow }
        if keepaliveInterval > 0, wantsInbound, !awaitingSessionReply {
            let silent = now.uptimeNanoseconds &- lastInbound.uptimeNanoseconds
            if silent > UInt64(keepaliveInterval * (keepaliveCountMax + 1)) * 1_000_000_000 {
                die(SSHError.make(.sshConnectionLost,
                                  "The connection to \(endpoint) was lost: the server did not answer keepalives for \(keepaliveInterval * (keepaliveCountMax + 1)) s."),
                    disconnect: false)
                return
            }
            if silent >= UInt64(keepaliveInterval) * 1_000_000_000 { probe() }
        }
    }

    /// A keepalive with an answer that cannot be confused with anything else: a session
    /// channel opened and closed at once. (libssh2's keepalive is a global request whose
    /// reply it queues unmatched; a later tcpip-forward would take that stale reply as its
    /// own.) Any answer — confirmation or refusal — shows the server is there.
    private func probe() {
        guard authenticated, !probing else { return }
        probing = true
        logger?.debug("ssh.keepalive.probe", ["silentFor": .seconds(Double(DispatchTime.now().uptimeNanoseconds &- lastInbound.uptimeNanoseconds) / 1e9)])
        let endpoint = self.endpoint
        let operation = EngineOperation(what: "Keepalive", lane: ObjectIdentifier(self), deadline: nil, dropIfAbandoned: false,
                                        isKeepalive: true, attempt: { [unowned self] session in
            if let channel = termind_ssh2_channel_open_session(session, 32 * 1024) {  // closed at once
                let state = ChannelState(limit: 0)
                state.requestClose()
                self.pumps.append(ChannelPump(channel: channel, state: state, endpoint: endpoint))
                self.probing = false
                return true
            }
            let code = libssh2_session_last_errno(session)
            if code == termind_ssh2_error_eagain() { return nil }
            self.probing = false
            if Self.isFatal(code) { throw SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was lost.") }
            return true  // refused, but answered
        }, complete: { _ in }, discard: { _ in })
        operations.append(operation)
    }
    private var probing = false

    /// Whether the loop wants bytes from the server now. With every pump held back by a
    /// full consumer buffer and nothing else pending it does not read at all: TCP flow
    /// control pushes back to the server, and keepalive silence is not counted.
    private var wantsInbound: Bool {
        // Before authentication the opening reads for itself; between its steps nothing may.
        guard authenticated else { return !operations.isEmpty }
        return !operations.isEmpty || pumps.isEmpty || pumps.contains { $0.wantsSessionInput }
    }

    private func sleep() {
        guard let session else { return }
        let inbound = wantsInbound
        if !inbound { lastInbound = .now() }
        var events = Self.events(for: libssh2_session_block_directions(session))
        if !inbound { events &= ~Int16(POLLIN) }
        if inbound { events |= Int16(POLLIN) }
        if let context, termind_ssh2_backlog(context) > 0 { events |= Int16(POLLOUT) }
        pollSet.removeAll(keepingCapacity: true)
        pollSet.append(pollfd(fd: fd, events: events, revents: 0))
        pollSet.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
        for pump in pumps { pump.addPollRequests(to: &pollSet) }
        var timeoutMs: Int64 = 1000
        let now = DispatchTime.now().uptimeNanoseconds
        for operation in operations where !operation.isAbandoned {
            if let deadline = operation.deadline?.uptimeNanoseconds {
                timeoutMs = min(timeoutMs, deadline > now ? Int64((deadline - now) / 1_000_000) + 1 : 0)
            }
        }
        if keepaliveInterval > 0 { timeoutMs = min(timeoutMs, 1000) }
        let ready = poll(&pollSet, nfds_t(pollSet.count), Int32(timeoutMs))
        pollSetIsFresh = ready >= 0
        guard ready > 0 else { return }
        if pollSet[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 && events & Int16(POLLIN) != 0 {
            // (Bytes count as a sign of life once libssh2 has read them: noteReceived.)
            // Bytes nobody will read (an idle session: the server's own keepalive, say) would
            // keep poll() returning at once: a probe reads them through libssh2.
            if operations.isEmpty && !pumps.contains(where: { $0.wantsSessionInput }) { probe() }
        }
        if pollSet[1].revents != 0 { drainWake() }
    }

    private func drainWake() {
        var value: UInt64 = 0
        _ = read(wakeFD, &value, 8)
    }

    private static func events(for directions: Int32) -> Int16 {
        var events: Int16 = 0
        if directions & LIBSSH2_SESSION_BLOCK_INBOUND != 0 { events |= Int16(POLLIN) }
        if directions & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0 { events |= Int16(POLLOUT) }
        return events == 0 ? Int16(POLLIN) : events
    }

    /// Fails everything pending with `error`, frees the session and the socket, and lets
    /// the loop end. Engine thread only.
    private func die(_ error: TermindError, disconnect: Bool) {
        guard let session else { return }
        // Observers learn first, so that by the time any caller sees its operation fail,
        // the connection already reports why it ended (and a pool has let go of it).
        let observers: [(TermindError) -> Void] = lock.withLock {
            if deathError == nil { deathError = error }
            stopping = true
            defer { deathObservers.removeAll() }
            return deathObservers
        }
        for observer in observers { observer(deathError ?? error) }
        logger?.log(error.is(.sshClosed) ? .debug : .warning, "ssh.connection.end", ["code": .identifier(error.code)])
        let pending = operations
        operations.removeAll()
        for operation in pending { operation.finish(.failure(error)) }
        let attached = pumps
        pumps.removeAll()
        for pump in attached { pump.fail(error) }
        if disconnect {
            _ = termind_ssh2_session_disconnect(session, "termind closing")
            flush()  // one non-blocking attempt: a full socket just skips the courtesy
        }
        // Freed until it completes, never dropped half-freed. What libssh2 still sends while
        // freeing (channel closes) must not wait on a full socket: shut down first, a send
        // fails at once (EPIPE; this thread blocks SIGPIPE) instead of saying EAGAIN.
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
        var attempts = 0
        while libssh2_session_free(session) == termind_ssh2_error_eagain() {
            attempts += 1
            if attempts % 1000 == 0 { logger?.warning("ssh.session.free_retry", ["attempts": .int(attempts)]) }
            var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&descriptor, 1, 10)
        }
        self.session = nil
        if let context {
            termind_ssh2_context_free(context)
            self.context = nil
        }
        close(fd)
        // Work that raced in after death is told so.
        let late: [Item] = lock.withLock {
            defer { inbox.removeAll() }
            return inbox
        }
        let reason = death ?? error
        for item in late { item.orElse(reason) }
    }
}

/// One libssh2 call repeated until it completes (see `SessionEngine.run`).
final class EngineOperation {
    let what: String
    let lane: ObjectIdentifier
    let deadline: DispatchTime?
    let dropIfAbandoned: Bool
    /// The engine's own probe: does not make the connection count as in use.
    let isKeepalive: Bool
    /// See `SessionEngine.run(answerMayBeSlow:)`.
    let answerMayBeSlow: Bool
    let attempt: (OpaquePointer) throws -> Any?
    /// Set on the engine thread once libssh2 has been called for it.
    var started = false
    /// Guards `complete` and `abandoned` (a Mutex cannot hand the non-Sendable completion
    /// out of its closure).
    private let lock = PlainLock()
    private var complete: ((Result<Any, Error>) -> Void)?
    private let discard: (Any) -> Void
    private var abandoned = false
    /// When its caller gave up (engine thread only): the engine bounds how long it may still run.
    var abandonedAt: DispatchTime?

    init(what: String, lane: ObjectIdentifier, deadline: DispatchTime?, dropIfAbandoned: Bool, answerMayBeSlow: Bool = false, isKeepalive: Bool = false,
         attempt: @escaping (OpaquePointer) throws -> Any?,
         complete: @escaping (Result<Any, Error>) -> Void, discard: @escaping (Any) -> Void) {
        self.what = what
        self.lane = lane
        self.deadline = deadline
        self.dropIfAbandoned = dropIfAbandoned
        self.isKeepalive = isKeepalive
        self.answerMayBeSlow = answerMayBeSlow
        self.attempt = attempt
        self.complete = complete
        self.discard = discard
    }

    var isAbandoned: Bool { lock.withLock { abandoned } }

    /// Hands out the completion exactly once (a cancel and the engine's end may race).
    private func takeCompletion(abandoning: Bool) -> ((Result<Any, Error>) -> Void)? {
        lock.withLock {
            let taken = complete
            complete = nil
            if abandoning && taken != nil { abandoned = true }
            return taken
        }
    }

    /// The caller stops waiting; the call itself goes on and its result is discarded.
    func abandon(_ error: TermindError) {
        takeCompletion(abandoning: true)?(.failure(error))
    }

    func finish(_ result: Result<Any, Error>) {
        if let complete = takeCompletion(abandoning: false) {
            complete(result)
        } else if case .success(let value) = result {
            discard(value)
        }
    }
}

enum PumpStep: Equatable {
    case progressed, idle, finished
    /// Progressed, and left nothing that only another pass would find: what it reads next
    /// makes poll() return (a person's keys sent, their echo written, libssh2 holding none of
    /// the channel's data). The loop then sleeps at once instead of passing again, which on a
    /// busy core would keep the peer it just woke (sshd, the terminal) waiting behind it.
    case settled
    case sessionLost(String)
}

/// Work the engine steps in every fair pass: a channel's data, a bridge between a channel
/// and a descriptor. Touched only on the engine thread (handles to it may travel).
///
/// `@unchecked Sendable`: it stores nothing; subclasses keep their state to the engine thread,
/// where the loop steps pumps and `die` fails them. Other threads only make a pump, hand it to
/// `attach` and hold the reference (a refused `attach` fails it on the caller's thread, for a
/// pump the engine never had).
class EnginePump: @unchecked Sendable {
    func step(_ engine: SessionEngine, _ session: OpaquePointer) -> PumpStep { .finished }
    func fail(_ error: TermindError) {}
    /// Adds the descriptors to wait on while the loop sleeps (the pump uses them in `step`).
    func addPollRequests(to requests: inout [pollfd]) {}
    /// Whether this pump would read from the session now (false while its consumer is full).
    var wantsSessionInput: Bool { true }
}


final class GenerationCounter: Sendable {
    private let value = Atomic<UInt64>(0)
    func next() -> UInt64 { value.wrappingAdd(1, ordering: .relaxed).newValue }
}

enum SSHError {
    /// Every transport error has a constant of its own (SSHErrorCodes.swift).
    static func make(_ code: ErrorCode, _ message: String) -> TermindError { TermindError(code, message) }
}
