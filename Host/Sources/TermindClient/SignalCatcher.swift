import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Catches SIGINT, SIGTERM and the like for a command that must clean up before it exits
/// (close a remote command's channel with the signal): while it lives the signals no longer
/// kill the process outright; the first one caught is kept and handed to `onSignal`. While a
/// person answers a terminal prompt (TerminalPrompt), or before any handler is set, a signal
/// restores the terminal and ends the process at once with 128 + its number — unless
/// `keepUntilHandled`, when it waits for the handler (`termind serve`, which must stop
/// cleanly even on a signal that comes the moment it is ready).
final class SignalCatcher: SignalCatching, Sendable {
    /// Kept alive while the catcher lives (a Mutex: dispatch sources are not Sendable).
    private let sources: Mutex<[any DispatchSourceSignal]>
    private let keepUntilHandled: Bool
    private let first = FirstSignal()

    init(_ signals: [Int32], keepUntilHandled: Bool = false) {
        self.keepUntilHandled = keepUntilHandled
        // Armed before this returns: libdispatch installs its handler when the source is
        // registered, on its manager thread, and until then the signal is ignored (SIG_IGN
        // below) — a SIGTERM the moment `serve` said it was ready was lost that way.
        let registered = DispatchGroup()
        let sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            registered.enter()
            source.setRegistrationHandler { registered.leave() }
            return source
        }
        self.sources = Mutex(sources)
        self.sources.withLock { sources in
            for (number, source) in zip(signals, sources) {
                source.setEventHandler { [weak self] in self?.caught(number) }
                source.resume()
            }
        }
        _ = registered.wait(timeout: .now() + 2)
    }

    var caught: Int32? { first.caught }
    func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) { first.onSignal(handler) }
    func divert(_ body: @escaping @Sendable (Int32) -> Bool) { first.divert(body) }

    /// The first signal: waits for it, or returns the one caught already.
    func waitForSignal() async -> Int32 {
        await withCheckedContinuation { continuation in onSignal { continuation.resume(returning: $0) } }
    }

    private func caught(_ number: Int32) {
        // A prompt blocks in read(): nothing would notice the signal until Enter.
        if TerminalPrompt.restore() { LocalTerminal.restoreActive(); StreamView.restoreTerminal(); _exit(128 + number) }
        guard first.record(number) == .unhandled, !keepUntilHandled else { return }  // else kept for the handler to come
        LocalTerminal.restoreActive(); StreamView.restoreTerminal(); _exit(128 + number)  // nothing else to clean up yet
    }

    /// The SSH name of a signal ("INT" for SIGINT), as a channel's signal request takes it.
    static func name(_ number: Int32) -> String {
        switch number {
        case SIGINT: "INT"
        case SIGTERM: "TERM"
        case SIGHUP: "HUP"
        case SIGQUIT: "QUIT"
        default: "TERM"
        }
    }
}

/// The first of the signals a command handles itself, and its handler: `record` keeps the
/// first one and hands it to the handler once there is one (SignalCatcher for this
/// process's signals, RemoteSignalCatcher for a launcher's).
final class FirstSignal: Sendable {
    enum Recorded { case repeated, unhandled, handled }
    private struct State {
        var first: Int32?
        var handler: (@Sendable (Int32) -> Void)?
        var diverter: (@Sendable (Int32) -> Bool)?
    }
    private let state = Mutex(State())

    /// Offers every signal to `body` first: one it takes (returns true) is neither recorded
    /// nor handed to the handler (a chat's Ctrl-C that interrupts only its turn).
    func divert(_ body: @escaping @Sendable (Int32) -> Bool) {
        state.withLock { $0.diverter = body }
    }

    /// The first signal caught, if any.
    var caught: Int32? { state.withLock { $0.first } }

    /// Calls `handler` on the first signal (at once when one was caught already).
    func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) {
        let pending: Int32? = state.withLock { state in
            state.handler = handler
            return state.first
        }
        if let pending { handler(pending) }
    }

    /// A signal arrived: a second one is `repeated` (the first is being handled); the first
    /// goes to the handler (`handled`), or is kept for one to come (`unhandled`: the caller
    /// decides whether to wait for it or end the run at once).
    func record(_ number: Int32) -> Recorded {
        if let diverter = state.withLock({ $0.first == nil ? $0.diverter : nil }), diverter(number) { return .handled }
        let handler: (@Sendable (Int32) -> Void)?? = state.withLock { state in
            guard state.first == nil else { return .none }
            state.first = number
            return .some(state.handler)
        }
        switch handler {
        case .none: return .repeated
        case .some(nil): return .unhandled
        case .some(let handler?):
            handler(number)
            return .handled
        }
    }
}
