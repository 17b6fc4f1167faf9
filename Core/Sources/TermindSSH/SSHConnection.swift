internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// Where to connect and as whom.
public struct SSHTarget: Sendable, Equatable, Hashable {
    public var host: String
    public var port: Int
    public var username: String
    public init(host: String, port: Int = 22, username: String) {
        self.host = host
        self.port = port
        self.username = username
    }
    /// `user@host`, with `:port` when it is not 22.
    public var display: String { port == 22 ? "\(username)@\(host)" : "\(username)@\(host):\(port)" }
}

/// Secrets for one connection attempt; used once, never cached, logged or stored.
public struct SSHCredentials: Sendable {
    public var password: Secret?
    /// An OpenSSH or PEM private key (unencrypted, or with `passphrase`).
    public var privateKey: Secret?
    public var passphrase: Secret?
    /// The ssh-agent socket to offer keys from; by default `SSH_AUTH_SOCK`. Empty: none.
    public var agentSocket: String?
    public init(password: Secret? = nil, privateKey: Secret? = nil, passphrase: Secret? = nil, agentSocket: String? = nil) {
        self.password = password
        self.privateKey = privateKey
        self.passphrase = passphrase
        self.agentSocket = agentSocket
    }
}

/// Deadlines (seconds) for each phase; an operation past its deadline fails with `ssh.timeout`.
/// Time spent waiting for a person (a keyboard-interactive prompt) does not count.
public struct SSHDeadlines: Sendable {
    public var resolve: Double = 10
    public var connect: Double = 10
    public var handshake: Double = 15
    public var authentication: Double = 30
    public var channel: Double = 30
    /// How long a channel open (or another session-wide request) its caller gave up on may
    /// still hold the session before the connection is declared broken: later opens would
    /// wait behind it forever. Longer than Linux's TCP connect timeout (about 127 s), since
    /// sshd answers a direct-tcpip open to an unreachable host only when its connect gives up.
    public var abandonedGrace: Double = 150
    public init() {}
}

/// Keepalive: a request every `interval` seconds while the connection is open (0: off);
/// after `countMax` unanswered intervals the connection counts as lost.
public struct SSHKeepalive: Sendable, Equatable {
    public var interval: Int
    public var countMax: Int
    public init(interval: Int = 15, countMax: Int = 3) {
        self.interval = interval
        self.countMax = countMax
    }
}

/// What the user is asked about a host key nobody has trusted yet (inside the handshake).
public struct HostKeyQuestion: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var algorithm: String
    public var fingerprint: String
    /// The key as a known_hosts line holds it ("TYPE BASE64"), e.g. for a remedy that adds it.
    public var key: String
    public init(host: String, port: Int, algorithm: String, fingerprint: String, key: String = "") {
        self.host = host
        self.port = port
        self.algorithm = algorithm
        self.fingerprint = fingerprint
        self.key = key
    }
}

public enum HostKeyAnswer: Sendable, Equatable {
    /// Continue this connection only; nothing is saved and no reconnect is authorized.
    case acceptOnce
    /// Save the key as trusted, then continue.
    case acceptAndSave
    case reject
    /// Nobody could be asked (no terminal, a client that went away): `reason` says why and
    /// what to do instead. The connection fails with `ssh.host_key_unknown`.
    case unanswered(reason: String)
}

/// One keyboard-interactive round, with the server's literal text.
public struct KeyboardInteractiveChallenge: Sendable, Equatable {
    public struct Prompt: Sendable, Equatable {
        public var text: String
        /// Whether the answer may be shown while typed.
        public var echo: Bool
        public init(text: String, echo: Bool) {
            self.text = text
            self.echo = echo
        }
    }
    /// Distinguishes rounds; an answer belongs to exactly one.
    public var requestID: UInt64
    public var host: String
    public var name: String
    public var instruction: String
    public var prompts: [Prompt]
    public init(requestID: UInt64, host: String, name: String, instruction: String, prompts: [Prompt]) {
        self.requestID = requestID
        self.host = host
        self.name = name
        self.instruction = instruction
        self.prompts = prompts
    }
}

/// Answers one round (one answer per prompt; empty answers are fine), or nil to give up.
/// Answers are used once and never cached, logged or stored.
public typealias KeyboardInteractiveResponder = @Sendable (KeyboardInteractiveChallenge) async -> [Secret]?

/// The result of a command run with `exec`.
public struct ExecResult: Sendable, Equatable {
    public var stdout: Data
    public var stderr: Data
    /// The remote exit status; nil when the command ended by a signal.
    public var exitStatus: Int32?
    public var exitSignal: String?
    /// Output beyond the limit was read and discarded.
    public var truncated: Bool
}

/// A terminal for a shell or command channel.
public struct PTYRequest: Sendable, Equatable {
    public var term: String
    public var columns: Int
    public var rows: Int
    public init(term: String = "xterm-256color", columns: Int = 80, rows: Int = 24) {
        self.term = term
        self.columns = columns
        self.rows = rows
    }
}

/// An authenticated SSH connection. The libssh2 session belongs to one engine thread;
/// any number of channels share it. Host-key trust is decided inside this very
/// connection's handshake, never on a separate discovery connection.
public final class SSHConnection: Sendable {
    public let target: SSHTarget
    public let hostKey: PublicHostKey
    /// "none", "publickey", "agent", "password" or "keyboard-interactive".
    public let authenticatedWith: String
    /// The connection this one tunnels through (a jump host), kept alive with it.
    public let via: SSHConnection?
    let engine: SessionEngine
    private let deadlines: SSHDeadlines
    private let logger: Logger?

    private init(target: SSHTarget, hostKey: PublicHostKey, authenticatedWith: String, via: SSHConnection?, engine: SessionEngine,
                 deadlines: SSHDeadlines, logger: Logger?) {
        self.logger = logger
        self.target = target
        self.hostKey = hostKey
        self.authenticatedWith = authenticatedWith
        self.via = via
        self.engine = engine
        self.deadlines = deadlines
    }

    deinit {
        let engine = self.engine
        Task { await engine.shutdown() }
    }

    /// Which session generation this is (a reconnect gets a new one).
    public var generation: UInt64 { engine.generation }
    /// False once the connection was closed or lost.
    public var isAlive: Bool { engine.isAlive }


    /// Seconds since the last channel or operation on this connection ended; nil while
    /// something uses it (a jump host carrying a route is in use).
    public var idleSeconds: Double? {
        engine.idleSince.map { Double(DispatchTime.now().uptimeNanoseconds &- $0.uptimeNanoseconds) / 1e9 }
    }

    /// Waits (at most `timeout` seconds) until no channel or operation uses the connection:
    /// e.g. until a channel being closed has finished its close handshake.
    public func waitUntilIdle(timeout: Double) async {
        let deadline = DispatchTime.now() + timeout
        while isAlive, idleSeconds == nil, DispatchTime.now() < deadline {
            // A cancelled caller (its work just closed a channel) still waits: Task.sleep
            // would return at once.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(10)) { done.resume() }
            }
        }
    }

    /// Calls `observer` once when the connection ends, with the reason.
    public func onClose(_ observer: @escaping @Sendable (TermindError) -> Void) { engine.onDeath(observer) }

    /// Connects (through `via` when given: a direct-tcpip channel of that connection),
    /// verifies the host key with `trust` (asking `askUnknownHostKey` about an unknown one;
    /// a changed or revoked key fails closed), then authenticates: none first, then the
    /// advertised methods the credentials allow — public key, ssh-agent keys, password,
    /// keyboard-interactive through `keyboardInteractive`.
    public static func open(_ target: SSHTarget, credentials: SSHCredentials, trust: any HostKeyTrust,
                            deadlines: SSHDeadlines = SSHDeadlines(), keepalive: SSHKeepalive = SSHKeepalive(),
                            logger: Logger? = nil, via: SSHConnection? = nil,
                            keyboardInteractive: KeyboardInteractiveResponder? = nil,
                            askUnknownHostKey: @escaping @Sendable (HostKeyQuestion) async -> HostKeyAnswer) async throws -> SSHConnection {
        let endpoint = target.port == 22 ? target.host : "\(target.host):\(target.port)"
        let started = DispatchTime.now()
        func elapsed() -> LogValue { .seconds(Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9) }
        logger?.debug("ssh.connect.start", ["port": .int(target.port), "tunnelled": .bool(via != nil)])
        let fd: Int32
        if let via {
            fd = try await via.tunnel(to: target.host, port: target.port)
        } else {
            fd = try await SocketConnector.connect(host: target.host, port: target.port,
                                                   resolveDeadline: deadlines.resolve, connectDeadline: deadlines.connect)
        }
        let engine = try SessionEngine(fd: fd, endpoint: via.map { "\(endpoint) (via \($0.engine.endpoint))" } ?? endpoint)
        do {
            // As OpenSSH: ask for the key types already trusted for this host first.
            let algorithms = HostKeyAlgorithms.preference(knownKeyTypes: try await trust.knownKeyTypes(host: target.host, port: target.port))
            let hostKey = try await engine.perform { engine -> PublicHostKey in
                let deadline = DispatchTime.now() + deadlines.handshake
                if let session = engine.session, libssh2_session_method_pref(session, LIBSSH2_METHOD_HOSTKEY, algorithms.joined(separator: ",")) != 0 {
                    throw SSHError.make(.sshHandshakeFailed, "libssh2 refused the host-key algorithms \(algorithms.joined(separator: ",")): \(engine.lastError()).")
                }
                let rc = try engine.retry("The SSH handshake", deadline: deadline) { libssh2_session_handshake($0, engine.fd) }
                guard rc == 0 else { throw SSHError.make(.sshHandshakeFailed, "The SSH handshake with \(engine.endpoint) failed: \(engine.lastError()).") }
                engine.tuneSending()
                var length = 0
                var type: Int32 = 0
                guard let session = engine.session, let raw = libssh2_session_hostkey(session, &length, &type), length > 4 else {
                    throw SSHError.make(.sshHandshakeFailed, "\(engine.endpoint) presented no host key.")
                }
                let blob = Data(bytes: raw, count: length)
                return PublicHostKey(algorithm: Self.algorithm(of: blob), blob: blob)
            }
            logger?.debug("ssh.handshake.done", ["hostKeyAlgorithm": .identifier(hostKey.algorithm), "offered": .int(algorithms.count), "elapsed": elapsed()])
            // Trust, on this connection, before any credential is sent.
            let verdict = try await trust.verdict(host: target.host, port: target.port, key: hostKey)
            logger?.debug("ssh.trust.verdict", ["verdict": .identifier(verdict.name)])
            switch verdict {
            case .trusted, .trustedWithoutPort:
                break
            case .unknown:
                let question = HostKeyQuestion(host: target.host, port: target.port, algorithm: hostKey.algorithm, fingerprint: trust.fingerprint(hostKey),
                                               key: "\(hostKey.algorithm) \(hostKey.blob.base64EncodedString())")
                switch await askUnknownHostKey(question) {
                case .acceptOnce: break
                case .acceptAndSave: try await trust.trust(host: target.host, port: target.port, key: hostKey)
                case .reject:
                    throw SSHError.make(.sshHostKeyRejected, "The host key of \(endpoint) (\(question.fingerprint)) was not accepted; nothing was sent to the server.")
                case .unanswered(let reason):
                    throw SSHError.make(.sshHostKeyUnknown, "The host key of \(endpoint) (\(question.algorithm) \(question.fingerprint)) is not trusted yet, and \(reason) Nothing was sent to the server.")
                }
            case .changed, .otherKeyTypes, .revoked:
                let message = try await trust.refusal(host: target.host, port: target.port, key: hostKey)
                    ?? "The host key of \(endpoint) is not trusted; the connection was refused."
                if case .otherKeyTypes = verdict { throw SSHError.make(.sshHostKeyTypeChanged, message) }
                throw SSHError.make(.sshHostKeyChanged, message)
            }
            try Task.checkCancellation()
            let method = try await engine.perform { engine in
                try Authenticator(engine: engine, target: target, credentials: credentials, responder: keyboardInteractive,
                                  deadline: .now() + deadlines.authentication, logger: logger).run()
            }
            logger?.debug("ssh.auth.done", ["method": .identifier(method), "elapsed": elapsed()])
            engine.configureKeepalive(interval: keepalive.interval, countMax: keepalive.countMax, abandonedGrace: deadlines.abandonedGrace, logger: logger)
            return SSHConnection(target: target, hostKey: hostKey, authenticatedWith: method, via: via, engine: engine, deadlines: deadlines, logger: logger)
        } catch is CancellationError {
            logger?.debug("ssh.connect.failed", ["code": .identifier(ErrorCode.sshCancelled.rawValue), "elapsed": elapsed()])
            await engine.shutdown()
            throw SSHError.make(.sshCancelled, "Connecting to \(endpoint) was cancelled.")
        } catch {
            logger?.debug("ssh.connect.failed", ["code": .identifier((error as? TermindError)?.code ?? ErrorCode.internalFailure.rawValue), "elapsed": elapsed()])
            await engine.shutdown()
            throw error
        }
    }

    // MARK: - Channels

    /// How much of each stream `exec` keeps by default (16 MiB).
    public static let defaultOutputLimit = 16 << 20

    public enum ChannelKind: Sendable, Equatable {
        case exec(String)
        case shell
        case subsystem(String)
    }

    /// The receive window a session channel offers the server: how much it may send before
    /// termind reads. A channel moves at most one window per round trip, so libssh2's default
    /// of 2 MiB held one channel near 100 MiB/s at 20 ms; 8 MiB allows about 400 MiB/s
    /// there, and on loopback 2, 8 and 16 MiB run alike (a plain libssh2 client, 1 GiB from
    /// OpenSSH 9.2's sshd: 394-477 MiB/s for all three on an idle machine). Memory per
    /// channel stays bounded by this window (packets libssh2 holds unread) plus the
    /// channel's `bufferLimit` (1 MiB by default): the window is only refilled as termind's
    /// reader takes data.
    public static let channelWindow: UInt32 = 8 << 20

    /// Whether the engine acknowledges short reads at once: until the connection's first
    /// session started (see the shim's receive). For tests.
    func acknowledgesShortReads() async throws -> Bool {
        let engine = self.engine
        return try await engine.run("Reading the acknowledgement rule") { _ in engine.acknowledgesShortReads }
    }

    /// Opens a session channel and starts `kind` on it, with a terminal when `pty` is given.
    /// `bufferLimit` bounds unread output and unsent input for this channel.
    ///
    /// `descriptors`: local descriptors (borrowed) the channel reads its input from and writes
    /// its output to itself, on the engine thread; those streams never pass through `next()`
    /// or `write`. The channel works on copies of its own, closed when it ends.
    ///
    /// `forwardAgent`: the local agent's socket (SSH_AUTH_SOCK) to forward to the remote
    /// side (auth-agent-req@openssh.com, as `ssh -A`): the agent channels the server then
    /// opens on this connection are bridged to it. A server that refuses is not an error
    /// (`agentForwarded` says). The agent can sign with its keys for whoever controls the
    /// remote side while the session lasts — that is what the user chose.
    ///
    /// `terminal`: the engine bridges a person's terminal itself (`SSHChannel.link`): all
    /// output goes through the tap, from the first byte, and `next()` only tells the end.
    /// `linking`: that terminal, linked before the first byte is read (else output that
    /// comes before a later `link` only goes through the tap).
    public func openChannel(_ kind: ChannelKind, pty: PTYRequest? = nil, environment: [String: String] = [:],
                            bufferLimit: Int = 1 << 20, descriptors: ChannelDescriptors? = nil,
                            forwardAgent: String? = nil, terminal: TerminalTap? = nil, linking: TerminalLink? = nil) async throws -> SSHChannel {
        let endpoint = engine.endpoint
        let engine = self.engine
        let local = try LocalDescriptors.adopt(descriptors)
        let channel: OpaquePointer
        do {
            channel = try await openRawChannel("Opening a channel") { session in
                termind_ssh2_channel_open_session(session, SSHConnection.channelWindow)
            }
        } catch let error as TermindError where error.is(.sshChannelFailed) {
            local.close()
            throw SSHError.make(.sshChannelRefused, "\(endpoint) refused another session channel on this connection (\(error.message)); "
                + "OpenSSH allows MaxSessions (10 by default) at once.")
        } catch {
            local.close()
            throw error
        }
        let state = ChannelState(limit: bufferLimit)
        let hangup: String?
        switch kind {
        case .exec: hangup = "TERM"
        case .shell: hangup = "HUP"
        case .subsystem: hangup = nil
        }
        let pump = ChannelPump(channel: channel, state: state, endpoint: endpoint, hangup: hangup, local: local, tap: terminal)
        // Before the engine has the pump: no other thread touches it yet.
        if let linking, terminal != nil { pump.install(linking) { engine.wake() } }
        let handle = EngineBound(channel, engine: engine)
        let deadline = DispatchTime.now() + deadlines.channel
        var agentForwarded = false
        do {
            for (name, value) in environment.sorted(by: { $0.key < $1.key }) {
                // Servers commonly refuse variables outside AcceptEnv: not an error.
                _ = try await engine.run("Setting \(name)", lane: pump, deadline: deadline) { _ -> Int32? in
                    let rc = libssh2_channel_setenv_ex(handle.value, name, UInt32(name.utf8.count), value, UInt32(value.utf8.count))
                    return rc == termind_ssh2_error_eagain() ? nil : rc
                }
            }
            if let pty {
                guard pty.columns > 0, pty.rows > 0 else {
                    throw SSHError.make(.sshBadSize, "A terminal size must be at least 1×1, not \(pty.columns)×\(pty.rows).")
                }
                _ = try await engine.run("Requesting a terminal", lane: pump, deadline: deadline) { _ -> Int32? in
                    let rc = libssh2_channel_request_pty_ex(handle.value, pty.term, UInt32(pty.term.utf8.count), nil, 0,
                                                            Int32(pty.columns), Int32(pty.rows), 0, 0)
                    if rc == termind_ssh2_error_eagain() { return nil }
                    guard rc == 0 else { throw SSHError.make(.sshPTYFailed, "\(endpoint) refused a terminal for the channel.") }
                    return rc
                }
            }
            if let socket = forwardAgent {
                // Asked on the first channel that wants it; another one waits for that answer
                // (sshd refuses a second request, and forwards to every session after the first).
                let asker = EngineBound(false, engine: engine)
                agentForwarded = try await engine.run("Requesting agent forwarding", lane: pump, deadline: deadline) { session -> Bool? in
                    switch engine.agentForwarding {
                    case .enabled: return true
                    case .refused: return false
                    case .asking where !asker.value: return nil
                    case .none, .asking:
                        engine.agentForwarding = .asking
                        asker.value = true
                        let rc = termind_ssh2_request_agent(handle.value)
                        if rc == termind_ssh2_error_eagain() { return nil }
                        guard rc == 0 else {
                            engine.agentForwarding = .refused
                            return false
                        }
                        engine.agentForwarding = .enabled(socket: socket)
                        termind_ssh2_accept_agent_channels(session)
                        return true
                    }
                }
            }
            _ = try await engine.run("Starting the channel", lane: pump, deadline: deadline) { _ -> Int32? in
                let rc: Int32
                switch kind {
                case .exec(let command):
                    rc = command.withCString { termind_ssh2_channel_exec(handle.value, $0, UInt32(command.utf8.count)) }
                case .shell:
                    rc = termind_ssh2_channel_shell(handle.value)
                case .subsystem(let name):
                    rc = name.withCString { termind_ssh2_channel_subsystem(handle.value, $0, UInt32(name.utf8.count)) }
                }
                if rc == termind_ssh2_error_eagain() { return nil }
                guard rc == 0 else {
                    switch kind {
                    case .exec: throw SSHError.make(.sshExecFailed, "\(endpoint) did not start the command.")
                    case .shell: throw SSHError.make(.sshShellFailed, "\(endpoint) did not start a shell.")
                    case .subsystem(let name): throw SSHError.make(.sshSubsystemFailed, "\(endpoint) did not start the \(name) subsystem.")
                    }
                }
                engine.sessionStarted()
                return rc
            }
        } catch {
            // The channel is half set up: the pump closes and frees it once the requests
            // still queued on its lane (one may be in flight) are done.
            state.requestClose()
            engine.attach(pump)
            throw error
        }
        engine.attach(pump)
        logger?.debug("ssh.channel.open", ["kind": .identifier(Self.name(of: kind)), "pty": .bool(pty != nil)])
        return SSHChannel(engine: engine, pump: pump, isPTY: pty != nil, owner: self, agentForwarded: agentForwarded)
    }

    static func name(of kind: ChannelKind) -> String {
        switch kind {
        case .exec: "exec"
        case .shell: "shell"
        case .subsystem(let name): "subsystem-" + name
        }
    }

    /// Runs `command`, feeding `stdin`, and returns stdout and stderr separately (each at
    /// most `outputLimit` bytes, the rest read and discarded) with the exit status. With
    /// `output`, chunks are handed over as they arrive instead of being collected (the next
    /// is read once it returns, so a slow consumer holds the server back). Other
    /// channels of the connection keep running meanwhile.
    public func exec(_ command: String, stdin: Data? = nil, outputLimit: Int = SSHConnection.defaultOutputLimit, timeout: Double? = nil,
                     output: (@Sendable (ExecStream, Data) async -> Void)? = nil,
                     cancelSignal: (@Sendable () -> String?)? = nil) async throws -> ExecResult {
        let (input, feed) = AsyncStream.makeStream(of: Data.self)
        if let stdin, !stdin.isEmpty { feed.yield(stdin) }
        feed.finish()
        return try await exec(command, input: input, outputLimit: outputLimit, timeout: timeout, output: output, cancelSignal: cancelSignal)
    }

    /// As `exec(_:stdin:…)`, with standard input arriving while the command runs (EOF when
    /// `input` ends). The next chunk is asked for only once the previous one is queued on the
    /// channel, so a producer that awaits in `next()` is held back by the server's window.
    /// Input still unsent when the command ends is dropped. When the call is cancelled, the
    /// command is sent `cancelSignal()` (e.g. "INT" after a Ctrl-C) as its channel closes,
    /// TERM when that is nil.
    ///
    /// `descriptors` (borrowed): streams the channel moves itself between the server and these
    /// local descriptors (see `openChannel`); `input` is not read when one is given for
    /// standard input, and what goes to a descriptor is neither collected nor passed to
    /// `output`. When the reader of a handed-over output goes away (EPIPE) the command's
    /// channel is closed (the command gets TERM: sshd takes no PIPE) and the result reports
    /// SIGPIPE, as a local pipeline's writer would end; another failed write throws
    /// `ssh.local_output_failed`.
    public func exec<Input: AsyncSequence & Sendable>(_ command: String, input: Input, outputLimit: Int = SSHConnection.defaultOutputLimit,
                                                     timeout: Double? = nil, output: (@Sendable (ExecStream, Data) async -> Void)? = nil,
                                                     cancelSignal: (@Sendable () -> String?)? = nil,
                                                     descriptors: ChannelDescriptors? = nil) async throws -> ExecResult
        where Input.Element == Data {
        let channel = try await openChannel(.exec(command), descriptors: descriptors)
        let feedsInput = descriptors?.input == nil
        let logger = self.logger
        let cancel: @Sendable () -> Void = {
            if let signal = cancelSignal?() { channel.close(signal: signal) } else { channel.close() }
        }
        let endpoint = engine.endpoint
        let work: @Sendable () async throws -> ExecResult = {
            let feeder = Task {
                guard feedsInput else { return }
                for try await chunk in input { try await channel.write(chunk) }
                channel.closeInput()
            }
            defer { feeder.cancel() }
            let collected = try await channel.collect(limit: outputLimit, output: output)
            if Task.isCancelled { throw SSHError.make(.sshCancelled, "The command on \(endpoint) was cancelled; its channel was closed.") }
            let exit = try channel.outcome(of: "the command on \(endpoint)")
            logger?.debug("ssh.channel.exit", ["status": .int(Int(exit?.status ?? -1)), "signalled": .bool(exit?.signal != nil),
                                               "truncated": .bool(collected.truncated)])
            return ExecResult(stdout: collected.stdout, stderr: collected.stderr, exitStatus: exit?.status,
                              exitSignal: exit?.signal, truncated: collected.truncated)
        }
        do {
            guard let timeout else { return try await withTaskCancellationHandler { try await work() } onCancel: { cancel() } }
            return try await withThrowingTaskGroup(of: ExecResult?.self) { group in
                group.addTask { try await work() }
                group.addTask {
                    try await Task.sleep(nanoseconds: UInt64(timeout * 1_000_000_000))
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let result = first else {
                    channel.close()
                    throw SSHError.make(.sshTimeout, "The command on \(endpoint) did not finish within \(Self.seconds(timeout)).")
                }
                return result
            }
        } catch is CancellationError {
            cancel()
            throw SSHError.make(.sshCancelled, "The command on \(endpoint) was cancelled; its channel was closed.")
        } catch {
            if Task.isCancelled { cancel() } else { channel.close() }
            throw error
        }
    }

    /// Opens a direct-tcpip channel to `host`:`port` as the server sees it; its bytes arrive
    /// as stdout and `write` sends to it.
    public func openDirectTCPIP(host: String, port: Int, bufferLimit: Int = 1 << 20) async throws -> SSHChannel {
        let channel = try await openDirect(host: host, port: port)
        let pump = ChannelPump(channel: channel, state: ChannelState(limit: bufferLimit), endpoint: engine.endpoint)
        engine.attach(pump)
        return SSHChannel(engine: engine, pump: pump, isPTY: false, owner: self)
    }

    /// Connects `fd` (a local stream socket, owned from now on) to `host`:`port` through
    /// the server: bytes are copied both ways until either side ends.
    ///
    /// - Parameters:
    ///   - greeting: bytes `fd` gets before any from the server (a SOCKS reply: its client
    ///     speaks only after it); `early`: bytes the target gets before any read from `fd`
    ///     (what a client sent along with its SOCKS request).
    ///   - counters: bytes each way and open flows, updated as they move.
    ///   - closeOnFailure: false leaves `fd` open, and the caller's, when the channel cannot
    ///     be opened (so it can still answer, as a SOCKS server must).
    public func forward(_ fd: Int32, to host: String, port: Int, greeting: Data = Data(), early: Data = Data(), counters: FlowCounters? = nil,
                        closeOnFailure: Bool = true, onEnd: @escaping @Sendable (TermindError?) -> Void = { _ in }) async throws {
        try await forward(fd, to: host, port: port, window: nil, greeting: greeting, early: early, counters: counters, closeOnFailure: closeOnFailure, onEnd: onEnd)
    }

    private func forward(_ fd: Int32, to host: String, port: Int, window: UInt32?, greeting: Data = Data(), early: Data = Data(), counters: FlowCounters? = nil,
                         closeOnFailure: Bool = true, onEnd: @escaping @Sendable (TermindError?) -> Void = { _ in }) async throws {
        let channel: OpaquePointer
        do {
            channel = try await openDirect(host: host, port: port, window: window)
        } catch {
            if closeOnFailure { Glibc.close(fd) }
            throw error
        }
        engine.attach(BridgePump(channel: channel, fd: fd, endpoint: engine.endpoint, greeting: greeting, early: early, counters: counters, onEnd: onEnd))
    }

    /// A socket whose other end is a direct-tcpip channel to `host`:`port` (a jump route's
    /// next hop runs its own SSH session over it).
    func tunnel(to host: String, port: Int) async throws -> Int32 {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw SSHError.make(.sshSocket, "Could not create a socket pair: \(String(cString: strerror(errno))).")
        }
        do {
            try await forward(pair[0], to: host, port: port, window: Self.tunnelWindow)
        } catch {
            Glibc.close(pair[1])  // forward closed pair[0]
            throw error
        }
        _ = fcntl(pair[1], F_SETFL, fcntl(pair[1], F_GETFL) | O_NONBLOCK)
        return pair[1]
    }

    /// The receive window of a jump route's tunnel: the next hop's whole session (its 8 MiB
    /// channels included) rides this one channel, so it gets a session channel's window; a
    /// forwarded flow keeps libssh2's 2 MiB, which bounds what many flows can hold.
    static let tunnelWindow: UInt32 = SSHConnection.channelWindow

    private func openDirect(host: String, port: Int, window: UInt32? = nil) async throws -> OpaquePointer {
        guard (1...65_535).contains(port) else { throw SSHError.make(.sshBadPort, "Port \(port) is not between 1 and 65535.") }
        // A DNS name is at most 253 bytes; the open message has room for 1024.
        guard !host.isEmpty, host.utf8.count <= 1024 else {
            throw SSHError.make(.sshRouteBadHost, "A tunnel's host must be 1 to 1024 bytes, not \(host.utf8.count).")
        }
        let endpoint = engine.endpoint
        do {
            return try await openRawChannel("Opening a tunnel to \(host):\(port)", answerMayBeSlow: true) { session in
                host.withCString { name in
                    window.map { termind_ssh2_direct_tcpip_window(session, name, Int32(port), $0) } ?? termind_ssh2_direct_tcpip(session, name, Int32(port))
                }
            }
        } catch let error as TermindError where error.is(.sshChannelFailed) {
            throw SSHError.make(.sshTunnelRefused, "\(endpoint) could not open a connection to \(host):\(port) (\(error.message)).")
        }
    }

    /// One channel open at a time per session (libssh2 keeps one open state): the session
    /// lane orders them. A channel whose caller gave up is closed when it arrives.
    private func openRawChannel(_ what: String, answerMayBeSlow: Bool = false, _ open: @escaping (OpaquePointer) -> OpaquePointer?) async throws -> OpaquePointer {
        let engine = self.engine
        let endpoint = engine.endpoint
        return try await engine.run(what, deadline: .now() + deadlines.channel, answerMayBeSlow: answerMayBeSlow, discard: { (late: OpaquePointer) in
            let state = ChannelState(limit: 0)
            state.requestClose()
            engine.attach(ChannelPump(channel: late, state: state, endpoint: endpoint))
        }) { session -> OpaquePointer? in
            if let channel = open(session) { return channel }
            let errno = libssh2_session_last_errno(session)
            if errno == termind_ssh2_error_eagain() { return nil }
            throw SSHError.make(.sshChannelFailed, "\(what) on \(endpoint) failed: \(engine.lastError())")
        }
    }

    // MARK: - Remote forwarding

    /// Asks the server to listen on `host`:`port` (0: the server picks) and hand each
    /// connection to this client (tcpip-forward).
    public func listen(host: String = "127.0.0.1", port: Int, queue: Int = 16) async throws -> SSHForwardListener {
        guard (0...65_535).contains(port) else { throw SSHError.make(.sshBadPort, "Port \(port) is not between 0 and 65535.") }
        let endpoint = engine.endpoint
        let engine = self.engine
        let (listener, bound) = try await engine.run("Listening on \(host):\(port)", deadline: .now() + deadlines.channel, discard: { (late: (OpaquePointer, Int32)) in
            engine.enqueue("Stopping a late remote listener") { _ in
                libssh2_channel_forward_cancel(late.0) == termind_ssh2_error_eagain() ? nil : true
            }
        }) { session -> (OpaquePointer, Int32)? in
            var bound: Int32 = 0
            if let listener = host.withCString({ libssh2_channel_forward_listen_ex(session, $0, Int32(port), &bound, Int32(queue)) }) {
                return (listener, bound)
            }
            if libssh2_session_last_errno(session) == termind_ssh2_error_eagain() { return nil }
            throw SSHError.make(.sshListenRefused, "\(endpoint) refused to listen on \(host):\(port): \(engine.lastError()).")
        }
        return SSHForwardListener(connection: self, listener: listener, boundPort: Int(bound == 0 ? Int32(port) : bound))
    }

    // MARK: - Closing

    /// Disconnects and frees the session; channels still open end with `ssh.closed`.
    public func close() async {
        await engine.shutdown()
    }

    // MARK: - Internals

    /// The algorithm name at the start of an SSH wire-format key blob.
    static func algorithm(of blob: Data) -> String {
        var reader = SSHWireReader(blob, context: "host key")
        return (try? reader.text()).flatMap { $0.isEmpty ? nil : $0 } ?? "unknown"
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(printf: "%.1f s", value)
    }
}

/// A tcpip-forward listener on the server; `accept` hands over each connection as a channel.
public final class SSHForwardListener: Sendable {
    public let connection: SSHConnection
    /// The port the server listens on (the one it picked when 0 was asked).
    public let boundPort: Int
    /// Touched only in operations on the engine thread.
    private let listener: EngineBound<OpaquePointer?>

    /// Set once the listener stops: the hold is given back and pending accepts end.
    private let held = ManagedAtomicFlag()

    /// A listening server port holds its connection (a pool's idle sweep leaves it alone).
    init(connection: SSHConnection, listener: OpaquePointer, boundPort: Int) {
        self.connection = connection
        self.listener = EngineBound(listener, engine: connection.engine)
        self.boundPort = boundPort
        connection.engine.hold()
    }

    /// A listener nobody holds any more stops listening on the server.
    deinit { Self.stop(listener, held: held, on: connection.engine) }

    /// Queues the cancel on the listener's lane, after its accepts (not cancellable), and
    /// gives the connection's hold back.
    private static func stop(_ listener: EngineBound<OpaquePointer?>, held: ManagedAtomicFlag, on engine: SessionEngine) {
        if held.setFirst() { engine.release() }  // also ends a pending accept (it checks the flag)
        engine.enqueue("Stopping a remote listener", lane: listener) { _ in
            guard let handle = listener.value else { return true }
            if libssh2_channel_forward_cancel(handle) == termind_ssh2_error_eagain() { return nil }
            listener.value = nil
            return true
        }
    }

    /// Waits for the next connection to the remote port (no deadline; cancel the task to stop
    /// waiting).
    public func accept(bufferLimit: Int = 1 << 20) async throws -> SSHChannel {
        let engine = connection.engine
        let listener = self.listener
        let stopped = self.held
        let channel = try await engine.run("Accepting a forwarded connection", lane: listener, dropIfAbandoned: true, discard: { (late: OpaquePointer) in
            let state = ChannelState(limit: 0)
            state.requestClose()
            engine.attach(ChannelPump(channel: late, state: state, endpoint: engine.endpoint))
        }) { session -> OpaquePointer? in
            // Stopping ends a wait here at once (the stop is queued behind this accept).
            guard let handle = listener.value, !stopped.isSet else { throw SSHError.make(.sshClosed, "The listener is closed.") }
            if let channel = libssh2_channel_forward_accept(handle) { return channel }
            if libssh2_session_last_errno(session) == termind_ssh2_error_eagain() { return nil }
            throw SSHError.make(.sshAcceptFailed, "Accepting a forwarded connection failed: \(engine.lastError()).")
        }
        let pump = ChannelPump(channel: channel, state: ChannelState(limit: bufferLimit), endpoint: engine.endpoint)
        engine.attach(pump)
        return SSHChannel(engine: engine, pump: pump, isPTY: false, owner: connection)
    }

    /// Waits for the next connection to the remote port and hands it over unbridged: the
    /// caller connects the local side first (`ForwardedConnection.bridge`), or drops it
    /// (the server's side is closed). Accepting goes on meanwhile.
    public func acceptConnection() async throws -> ForwardedConnection {
        let engine = connection.engine
        let listener = self.listener
        let stopped = self.held
        let channel = try await engine.run("Accepting a forwarded connection", lane: listener, dropIfAbandoned: true, discard: { (late: OpaquePointer) in
            ForwardedConnection.discard(late, on: engine)
        }) { session -> OpaquePointer? in
            guard let handle = listener.value, !stopped.isSet else { throw SSHError.make(.sshClosed, "The listener is closed.") }
            if let channel = libssh2_channel_forward_accept(handle) { return channel }
            if libssh2_session_last_errno(session) == termind_ssh2_error_eagain() { return nil }
            throw SSHError.make(.sshAcceptFailed, "Accepting a forwarded connection failed: \(engine.lastError()).")
        }
        return ForwardedConnection(channel: channel, connection: connection)
    }

    /// Asks the server to stop listening. Queued on the engine even when the calling task is
    /// cancelled (a dropped cancel would leave the server listening); later accepts fail.
    public func cancel() async throws {
        Self.stop(listener, held: held, on: connection.engine)
    }
}

/// A connection the server accepted on a remote forward, not bridged yet. Bridging hands its
/// channel to the engine; one never bridged is closed when the object goes away.
public final class ForwardedConnection: Sendable {
    /// Taken once — by `bridge`, `reject` or deinit, whichever sets `taken` first.
    private let channel: HandOff<OpaquePointer>
    private let taken = ManagedAtomicFlag()
    /// The connection stays open while the accepted channel waits.
    public let connection: SSHConnection

    init(channel: OpaquePointer, connection: SSHConnection) {
        self.channel = HandOff(channel)
        self.connection = connection
    }

    deinit {
        if taken.setFirst() { Self.discard(channel.take(), on: connection.engine) }
    }

    static func discard(_ handle: OpaquePointer, on engine: SessionEngine) {
        let state = ChannelState(limit: 0)
        state.requestClose()
        engine.attach(ChannelPump(channel: handle, state: state, endpoint: engine.endpoint))
    }

    /// Copies bytes both ways between the channel and `fd` (a local stream socket, owned
    /// from now on) until either side ends; see `SSHConnection.forward`.
    public func bridge(to fd: Int32, counters: FlowCounters? = nil, onEnd: @escaping @Sendable (TermindError?) -> Void = { _ in }) {
        guard taken.setFirst() else {
            Glibc.close(fd)
            return
        }
        let handle = channel.take()
        let engine = connection.engine
        engine.attach(BridgePump(channel: handle, fd: fd, endpoint: engine.endpoint, counters: counters, onEnd: onEnd))
    }

    /// Closes the server's side (the local target could not be reached).
    public func reject() {
        if taken.setFirst() { Self.discard(channel.take(), on: connection.engine) }
    }
}
