import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import WorkspacesRules

/// One session's shell integration, decided once when it starts (the host's choice, else
/// `terminal.preferences`): with the bootstrap, once the shell shows its first prompt (output,
/// then 250 ms of quiet; at most 5 s after the start) `ShellBootstrap`'s line is sent as
/// input, and what the shell prints from then until its ready mark — the line's echo, its
/// continuation prompts — is hidden (4 s at most), as are the person's keys, which wait and
/// follow. Either way the marks in what is shown go to history.
///
/// Changing the setting later never reaches a running session: it has decided.
final class ShellIntegration: Sendable {
    static let firstPromptLimit: TimeInterval = 5
    static let hideLimit: TimeInterval = 4

    private enum Phase {
        case waiting
        case hiding(nonce: String)
        case open
    }

    private struct State {
        var phase: Phase
        var lastOutput: Date?
        var started = Date()
        var inputWaiters: [CheckedContinuation<Void, Never>] = []
        /// Told when keys may go again (the engine's own terminal bridge waits on `keysAllowed`).
        var keysOpened: (@Sendable () -> Void)?
        var driver: Task<Void, Never>?
    }
    private let state: Mutex<State>
    private let bootstrap: Bool
    private let history: HistoryRecorder?

    /// The bootstrap's clock starts with `start(send:)`, once the channel is open.
    init(bootstrap: Bool, history: HistoryRecorder?) {
        self.history = history
        self.bootstrap = bootstrap
        state = Mutex(State(phase: bootstrap ? .waiting : .open))
    }

    /// The shell's channel is open (`send` writes to its input): the wait for its first
    /// prompt starts now.
    func start(send: @escaping @Sendable (Data) async -> Void) {
        guard bootstrap else { return }
        state.withLock { s in
            guard s.driver == nil else { return }
            s.started = Date()
            s.driver = Task { [weak self] in _ = await self?.drive(send: send) }
        }
    }

    /// Output as it arrives, with its marks (`TerminalScanner.scanWithOffsets`): what of it to
    /// show. Everything, except while the bootstrap runs.
    func output(_ data: Data, marks: [(offset: Int, mark: TerminalMark)]) -> Data {
        var wake: (@Sendable () -> Void)?
        let (visible, shownMarks, opened): (Data, [TerminalMark], [CheckedContinuation<Void, Never>]) = state.withLock { s in
            s.lastOutput = Date()
            guard case .hiding(let nonce) = s.phase else { return (data, marks.map(\.mark), []) }
            guard let ready = marks.first(where: { $0.mark == .bootstrapReady(nonce: nonce) }) else { return (Data(), [], []) }
            s.phase = .open
            defer { s.inputWaiters.removeAll() }
            wake = s.keysOpened
            // The first prompt's line is erased: the next prompt goes where it was (the
            // terminal never saw the line's echo, so the cursor is still on it).
            let after = data.index(data.startIndex, offsetBy: ready.offset + 1)
            return (Data("\r\u{1B}[K".utf8) + data[after...], marks.filter { $0.offset > ready.offset }.map(\.mark), s.inputWaiters)
        }
        for waiter in opened { waiter.resume() }
        wake?()
        if !shownMarks.isEmpty { history?.take(shownMarks) }
        return visible
    }

    /// Whether the person's keys may go to the shell now (for a bridge that cannot wait:
    /// `whenKeysAllowed` tells it when they may).
    var keysAllowed: Bool { state.withLock { s in if case .open = s.phase { true } else { false } } }

    /// `wake` is called each time keys may go again.
    func whenKeysAllowed(_ wake: @escaping @Sendable () -> Void) { state.withLock { s in s.keysOpened = wake } }

    /// Returns once the person's keys may go to the shell (at once, unless the bootstrap runs).
    func inputAllowed() async {
        await withCheckedContinuation { continuation in
            let now: Bool = state.withLock { s in
                if case .open = s.phase { return true }
                s.inputWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// The session ended: what history took is written.
    func finish() async {
        cancel()
        await history?.flush()
    }

    /// The session ended: nothing waits any more.
    func cancel() {
        state.withLock { s in s.driver }?.cancel()
        open()
    }

    private func open() {
        let (waiters, wake): ([CheckedContinuation<Void, Never>], (@Sendable () -> Void)?) = state.withLock { s in
            s.phase = .open
            defer { s.inputWaiters.removeAll() }
            return (s.inputWaiters, s.keysOpened)
        }
        for waiter in waiters { waiter.resume() }
        wake?()
    }

    private func drive(send: @Sendable (Data) async -> Void) async {
        // The first prompt: output, then a pause.
        while !Task.isCancelled {
            let (last, elapsed) = state.withLock { s in (s.lastOutput, Date().timeIntervalSince(s.started)) }
            if elapsed >= Self.firstPromptLimit { break }
            if let last, Date().timeIntervalSince(last) >= 0.25 { break }
            try? await Task.sleep(for: .milliseconds(50))
        }
        guard !Task.isCancelled else { return open() }
        let nonce = String(UInt64.random(in: 1...UInt64.max), radix: 36)
        state.withLock { s in s.phase = .hiding(nonce: nonce) }
        await send(Data(ShellBootstrap.line(nonce: nonce).utf8))
        // A shell that never says it is ready (not bash or zsh, and no printf) is shown again.
        try? await Task.sleep(for: .seconds(Self.hideLimit))
        let stillHiding: Bool = state.withLock { s in if case .hiding = s.phase { return true } else { return false } }
        if stillHiding { open() }
    }
}
