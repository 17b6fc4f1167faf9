/// One channel's life from open to freed, as its pump drives it: when this side's EOF goes
/// out, when the server's EOF counts as received, when and why closing starts, and the order
/// of the close handshake (let handed-over descriptors go, wait for the lane's queued
/// requests, hang up, CLOSE, wait for the server's CLOSE, free). Pure: the pump
/// (`ChannelPump`, `BridgePump`) reports what happened and what each libssh2 call came back
/// with, and performs the actions it is given; the unit tests drive every transition without
/// a socket.
///
/// The data itself (how many bytes move per pass, the consumer's room, the terminal link's
/// buffer) stays in the pump; it tells the machine the facts the rules need ("everything
/// read was delivered", "nothing moved this pass").
struct ChannelLifecycle: Equatable, Sendable {
    /// How a kind of channel closes.
    struct Rules: Equatable, Sendable {
        /// Sent to the remote process group when this side closes first (a session channel
        /// whose command should not outlive it); nil for none.
        var hangup: String?
        /// The server's EOF (everything it sent delivered) closes the channel: a command that
        /// ended its output is done, and its exit status comes with the close. When false
        /// (a forwarded stream), each direction ends on its own and the channel closes once
        /// both have.
        var closesWhenOutputEnds: Bool
        /// The close handshake waits for the server's CLOSE before freeing (to read the exit
        /// status and signal).
        var waitsForServerClose: Bool

        /// A session channel: exec, shell, subsystem.
        static func session(hangup: String?) -> Rules {
            Rules(hangup: hangup, closesWhenOutputEnds: true, waitsForServerClose: true)
        }

        /// A direct-tcpip or forwarded-tcpip channel bridged to a local stream.
        static let bridge = Rules(hangup: nil, closesWhenOutputEnds: false, waitsForServerClose: false)
    }

    enum Phase: Equatable, Sendable {
        /// Data moves.
        case open
        /// Nothing moves any more; the close handshake has not sent CLOSE yet.
        case closing
        /// CLOSE sent; waiting for the server's.
        case closeSent
        /// Both CLOSEs seen (or not waited for): the channel is to be freed.
        case closed
        /// Freed: the pump is done.
        case freed
        /// The session died under the channel: nothing more is done to it (the session's
        /// free releases it).
        case lost
    }

    /// Why the channel is closing.
    enum Reason: Equatable, Sendable {
        /// Its user closed it (`close`, cancellation, the consumer went away).
        case requested
        /// The server's EOF, everything before it delivered.
        case outputEnded
        /// Both directions ended (a bridge).
        case bothEnded
        /// A read or write was refused: the channel is gone on the server's side.
        case refused
        /// What it read could not be delivered (a handed-over descriptor's reader went away,
        /// a bridged socket's peer is gone).
        case localOutputFailed
    }

    /// What the pump is to do next while closing.
    enum Action: Equatable, Sendable {
        /// Close handed-over descriptors and let a linked terminal go (once).
        case releaseLocal
        /// Requests queued on the channel's lane still use it: try again next pass.
        case waitForLane
        /// Send this signal (once, repeated after EAGAIN).
        case sendSignal(String)
        case sendClose
        /// Wait for the server's CLOSE, reading what still arrives.
        case awaitServerClose
        /// Read the exit status and free the channel.
        case free
        /// Nothing: open, freed or lost.
        case none
    }

    /// What a libssh2 call on the channel came back with.
    enum Outcome: Equatable, Sendable {
        case done
        /// EAGAIN: the same call again later.
        case again
        /// An error that ends this channel, not the session.
        case refused
        /// An error that ends the session.
        case sessionLost

        /// The outcome of a call returning `rc` (0, EAGAIN or an error).
        static func of(_ rc: Int32, eagain: Int32, isFatal: (Int32) -> Bool) -> Outcome {
            if rc >= 0 { return .done }
            if rc == eagain { return .again }
            return isFatal(rc) ? .sessionLost : .refused
        }
    }

    let rules: Rules
    private(set) var phase: Phase = .open
    private(set) var reason: Reason?
    /// This side's EOF went out (or its sending was refused: there is nothing to send it on).
    private(set) var eofSent = false
    /// The server's EOF was seen with everything before it delivered.
    private(set) var eofReceived = false
    /// The signal the user asked for with `close(signal:)` (the first one wins).
    private(set) var requestedSignal: String?
    private(set) var hangupSent = false
    private(set) var localReleased = false

    init(_ rules: Rules) { self.rules = rules }

    /// Data may still move.
    var isOpen: Bool { phase == .open }
    /// Closing or gone: nothing moves.
    var isClosing: Bool { phase != .open }

    // MARK: Events while open

    /// Its user closed the channel; `signal` goes to the remote process first, when given
    /// and the command has not ended.
    mutating func closeRequested(signal: String? = nil) {
        if requestedSignal == nil, !hangupSent { requestedSignal = signal }
        startClosing(.requested)
    }

    /// A read or write on the channel failed without ending the session.
    mutating func refused() { startClosing(.refused) }

    /// What was read could not be delivered locally.
    mutating func localOutputFailed() { startClosing(.localOutputFailed) }

    /// The session died: nothing more is done to this channel.
    mutating func sessionLost() {
        guard phase != .freed else { return }
        phase = .lost
    }

    /// Whether to send this side's EOF now, given that all of the input has been sent and
    /// no more will come (`inputDone`).
    func wantsToSendEOF(inputDone: Bool) -> Bool {
        phase == .open && !eofSent && inputDone
    }

    /// What sending EOF came back with. A refusal counts as sent: there is nothing to send
    /// it on any more.
    mutating func eofSending(_ outcome: Outcome) {
        switch outcome {
        case .again: return
        case .sessionLost: sessionLost()
        case .done, .refused:
            eofSent = true
            if !rules.closesWhenOutputEnds && eofReceived { startClosing(.bothEnded) }
        }
    }

    /// The server's EOF, with everything it sent before it delivered. True the first time
    /// (for a bridge: shut the local side's writing now).
    @discardableResult
    mutating func outputEnded() -> Bool {
        guard phase == .open, !eofReceived else { return false }
        eofReceived = true
        if rules.closesWhenOutputEnds {
            startClosing(.outputEnded)
        } else if eofSent {
            startClosing(.bothEnded)
        }
        return true
    }

    /// The end of a pass of a session channel: the server's EOF counts as received only when
    /// the channel is at EOF (`serverEOF`), nothing moved in this pass (libssh2 holds none of
    /// its data) and everything read was delivered with room left (`delivered`).
    mutating func passEnded(serverEOF: Bool, progressed: Bool, delivered: Bool) {
        if serverEOF && !progressed && delivered { outputEnded() }
    }

    // MARK: The close handshake

    /// The next step while closing, given whether requests queued on the channel's lane
    /// still use it and whether the server has sent its EOF (a command that ended needs no
    /// hang-up).
    mutating func nextAction(lanePending: Bool, serverEOF: Bool) -> Action {
        switch phase {
        case .open, .freed, .lost:
            return .none
        case .closing:
            if !localReleased {
                localReleased = true
                return .releaseLocal
            }
            if lanePending { return .waitForLane }
            if !hangupSent, !eofReceived, !serverEOF, let signal = requestedSignal ?? rules.hangup {
                return .sendSignal(signal)
            }
            return .sendClose
        case .closeSent:
            return .awaitServerClose
        case .closed:
            return .free
        }
    }

    /// What performing `action` came back with.
    mutating func completed(_ action: Action, _ outcome: Outcome) {
        guard outcome != .again else { return }
        switch action {
        case .sendSignal:
            // Sent or refused (sshd refuses signals it does not know): close next either way;
            // a dead session shows at the close.
            hangupSent = true
        case .sendClose:
            if outcome == .sessionLost { return sessionLost() }
            phase = rules.waitsForServerClose ? .closeSent : .closed
        case .awaitServerClose:
            if outcome == .sessionLost { return sessionLost() }
            phase = .closed
        case .free:
            phase = .freed
        case .releaseLocal, .waitForLane, .none:
            break
        }
    }

    private mutating func startClosing(_ why: Reason) {
        guard phase == .open else { return }
        phase = .closing
        reason = why
    }
}
