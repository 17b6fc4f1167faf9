internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// What a forward's flows moved and how many are open, updated on the engine thread as
/// bytes go (one set per forwarding rule; read at any time).
public final class FlowCounters: Sendable {
    private let sentBytes = Atomic<UInt64>(0)
    private let receivedBytes = Atomic<UInt64>(0)
    private let openFlows = Atomic<Int>(0)
    private let flows = Atomic<UInt64>(0)

    public init() {}

    /// Bytes from the local side to the server, and from the server to the local side.
    public var sent: UInt64 { sentBytes.load(ordering: .relaxed) }
    public var received: UInt64 { receivedBytes.load(ordering: .relaxed) }
    /// Flows being bridged now, and since these counters were made.
    public var open: Int { openFlows.load(ordering: .relaxed) }
    public var total: UInt64 { flows.load(ordering: .relaxed) }

    func add(sent: Int) { sentBytes.add(UInt64(sent), ordering: .relaxed) }
    func add(received: Int) { receivedBytes.add(UInt64(received), ordering: .relaxed) }
    func opened() {
        openFlows.add(1, ordering: .relaxed)
        flows.add(1, ordering: .relaxed)
    }
    func closed() { openFlows.subtract(1, ordering: .relaxed) }
}

/// Copies bytes both ways between a channel (direct-tcpip or forwarded-tcpip) and a local
/// stream descriptor — the socket pair a jump route's next session runs on, or an accepted
/// TCP connection of a forward. Each direction has one bounded buffer whose bytes are
/// offered again after EAGAIN; a full buffer stops reading its source (backpressure both
/// ways). Half-close drains: EOF from the descriptor becomes the channel's EOF once the
/// buffer is written, and the channel's EOF shuts the descriptor's write side.
///
/// `@unchecked Sendable`: its `var`s are touched only on the engine thread (`step`, and `fail`
/// from `die`) once `attach` handed it over; before that only its maker touches it (a refused
/// `attach` runs `fail` there, for a pump the engine never had).
final class BridgePump: EnginePump, @unchecked Sendable {
    private var channel: OpaquePointer?
    private let fd: Int32
    private let endpoint: String
    private let onEnd: @Sendable (TermindError?) -> Void
    /// Each direction's bytes read and not yet written (`ByteQueue`: bounded, never grown).
    private let toChannel: ByteQueue
    private let toLocal: ByteQueue
    private var localEOF = false
    /// The server's EOF was read: the channel is read no more.
    private var remoteEOF = false
    /// Each direction ends on its own; the channel closes once both have (the pure machine
    /// decides, this pump performs).
    private(set) var lifecycle = ChannelLifecycle(.bridge)
    private static let capacity = 256 * 1024
    /// At most this much is read at once, and at most `rounds` reads each direction in one
    /// step (512 KiB), so one busy flow moves a useful amount per pass without starving the
    /// session's other channels.
    private static let readSize = 64 * 1024
    private static let rounds = 8
    private let counters: FlowCounters?
    private var ended = false

    /// Takes ownership of `fd` (closed when the bridge ends). `greeting` goes to `fd` before
    /// anything from the channel (a SOCKS reply, which its client waits for); `early` to the
    /// channel before anything read from `fd` (what the client sent with its SOCKS request).
    init(channel: OpaquePointer, fd: Int32, endpoint: String, greeting: Data = Data(), early: Data = Data(), counters: FlowCounters? = nil,
         onEnd: @escaping @Sendable (TermindError?) -> Void) {
        self.channel = channel
        self.fd = fd
        self.endpoint = endpoint
        self.counters = counters
        self.onEnd = onEnd
        toLocal = ByteQueue(capacity: Self.capacity, initial: greeting)
        toChannel = ByteQueue(capacity: Self.capacity, initial: early)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        counters?.opened()
    }

    /// The flow is over: its descriptor closes and its owner hears why, once.
    private func over(_ error: TermindError?) {
        guard !ended else { return }
        ended = true
        toChannel.discard()
        toLocal.discard()
        close(fd)
        counters?.closed()
        onEnd(error)
    }

    override var wantsSessionInput: Bool { !remoteEOF && toLocal.room > 0 }

    override func addPollRequests(to requests: inout [pollfd]) {
        // Closing: the descriptor is neither read nor written any more (a failed one would
        // report ready at once and keep the engine from sleeping).
        guard lifecycle.isOpen else { return }
        var events: Int16 = 0
        if !localEOF && toChannel.room > 0 { events |= Int16(POLLIN) }
        if !toLocal.isEmpty { events |= Int16(POLLOUT) }
        if events != 0 { requests.append(pollfd(fd: fd, events: events, revents: 0)) }
    }

    override func step(_ engine: SessionEngine, _ session: OpaquePointer) -> PumpStep {
        guard let channel else { return .finished }
        let eagain = Int(termind_ssh2_error_eagain())
        var progressed = false
        guard lifecycle.isOpen else { return closeChannel(session) }

        // Local → channel: up to `rounds` reads a step, while the channel takes what was read.
        for _ in 0..<Self.rounds {
            var readSome = false
            if !localEOF && toChannel.room > 0 {
                let n = toChannel.fill(atMost: Self.readSize, scratch: engine.scratchBytes) { read(fd, $0, $1) }
                if n > 0 {
                    progressed = true
                    readSome = true
                } else if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    localEOF = true
                    progressed = true
                }
            }
            while !toChannel.isEmpty && engine.canSend {
                let n = toChannel.drain { Int(termind_ssh2_channel_write(channel, $0.assumingMemoryBound(to: CChar.self), $1)) }
                if n > 0 { counters?.add(sent: n); progressed = true; continue }
                if n == eagain { break }
                if SessionEngine.isFatal(Int32(n)) { return end(.sessionLost("while forwarding a stream"), session) }
                lifecycle.refused()
                return closeChannel(session)
            }
            // Nothing more to read now, or the channel's window or the session's backlog is full.
            if !readSome || !toChannel.isEmpty { break }
        }
        if lifecycle.wantsToSendEOF(inputDone: localEOF && toChannel.isEmpty) {
            let outcome = ChannelLifecycle.Outcome.of(libssh2_channel_send_eof(channel), eagain: Int32(eagain), isFatal: { _ in false })
            lifecycle.eofSending(outcome)
            if outcome == .done { progressed = true }
        }

        // Channel → local: likewise, while the local side takes what was read.
        for _ in 0..<Self.rounds {
            var readSome = false
            if !remoteEOF && toLocal.room > 0 {
                let n = toLocal.fill(atMost: Self.readSize, scratch: engine.scratchBytes) { termind_ssh2_channel_read(channel, 0, $0.assumingMemoryBound(to: CChar.self), $1) }
                if n > 0 {
                    counters?.add(received: n)
                    progressed = true
                    readSome = true
                } else if n == 0 || libssh2_channel_eof(channel) == 1 {
                    if libssh2_channel_eof(channel) == 1 { remoteEOF = true; progressed = true }
                } else if n != eagain {
                    if SessionEngine.isFatal(Int32(n)) { return end(.sessionLost("while forwarding a stream"), session) }
                    remoteEOF = true
                }
            }
            while !toLocal.isEmpty {
                // send() with MSG_NOSIGNAL: a peer that went away is an error here, never a SIGPIPE.
                let n = toLocal.drain { send(fd, $0, $1, Int32(MSG_NOSIGNAL)) }
                if n > 0 { progressed = true; continue }
                if n < 0 && (errno == EAGAIN || errno == EINTR) { break }
                // The local side is gone: nothing more can be delivered.
                lifecycle.localOutputFailed()
                return closeChannel(session)
            }
            if !readSome || !toLocal.isEmpty { break }
        }
        // The server's EOF, everything before it written: the local side's writing ends.
        if remoteEOF && toLocal.isEmpty && lifecycle.outputEnded() {
            shutdown(fd, Int32(SHUT_WR))
            progressed = true
        }
        // Both directions ended: the channel closes.
        if lifecycle.isClosing { return closeChannel(session) }
        if progressed { return .progressed }
        // Idle: an empty direction lets its buffer go (a quiet flow holds none).
        toChannel.release()
        toLocal.release()
        return .idle
    }

    /// The close handshake the lifecycle gives (each call repeated after EAGAIN), then the
    /// channel is freed and the descriptor closed.
    private func closeChannel(_ session: OpaquePointer) -> PumpStep {
        guard let channel else { return .finished }
        let eagain = termind_ssh2_error_eagain()
        while true {
            let action = lifecycle.nextAction(lanePending: false, serverEOF: remoteEOF)
            switch action {
            case .releaseLocal, .sendSignal:
                // The descriptor is closed with the flow's end; a bridge sends no signal.
                lifecycle.completed(action, .done)
            case .waitForLane, .awaitServerClose, .none:
                if lifecycle.phase == .lost { return end(.sessionLost("while closing a forwarded stream"), session) }
                return .idle
            case .sendClose:
                let outcome = ChannelLifecycle.Outcome.of(libssh2_channel_close(channel), eagain: eagain, isFatal: SessionEngine.isFatal)
                lifecycle.completed(action, outcome)
                if outcome == .again { return .idle }
            case .free:
                let freed = libssh2_channel_free(channel)
                lifecycle.completed(action, freed == eagain ? .again : .done)
                if freed == eagain { return .idle }
                self.channel = nil
                over(nil)
                return .finished
            }
        }
    }

    private func end(_ step: PumpStep, _ session: OpaquePointer) -> PumpStep {
        channel = nil
        if case .sessionLost(let context) = step {
            over(SSHError.make(.sshConnectionLost, "The connection to \(endpoint) was lost \(context)."))
        } else {
            over(nil)
        }
        return step
    }

    override func fail(_ error: TermindError) {
        guard channel != nil else { return }
        lifecycle.sessionLost()
        channel = nil
        over(error)
    }
}
