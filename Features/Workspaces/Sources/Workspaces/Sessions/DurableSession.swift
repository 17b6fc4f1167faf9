import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import PortForwardingAPI
import TermindSSH
import WorkspacesAPI
import WorkspacesRules

/// A terminal session that belongs to `termind serve`, not to a terminal window: its shell
/// runs on, its output is drawn into a screen model (`ScreenModel`) whether or not a client
/// is attached, and a client that attaches gets that screen redrawn, then the live output.
///
/// The channel's output goes through `tap` on the SSH engine's thread as it arrives: the
/// screen model, the marks and the attached client's share are taken there under one lock,
/// and the screen's operations queue in that order, so a redraw holds exactly the output
/// before it and the client exactly what follows. A client that handed over its terminal
/// is linked to the channel (`TerminalLink`): the engine writes its output and reads its
/// keys itself, and it becomes the attached client on the engine's thread, between two
/// chunks. Another client gets `stdout` events from a bounded outbox and sends keys as
/// input. Either way a slow client holds the remote side back, as a plain session does;
/// with nobody attached the output only feeds the screen.
///
/// What changes (the bound channel, scanner, attachment, activity, size, ending, pump…) is in
/// one Mutex, `live`; the rest are `let`s (`model` is a ScreenModel, which locks its own state).
final class DurableSession: Sendable {
    let id: Int
    /// The saved host's label, or the quick-connect target.
    let host: String
    let command: String?
    /// The workspace pane it was opened for.
    let pane: PaneTag?
    let started: Date
    private let model: ScreenModel
    private let logger: Logger

    private let live: Mutex<Live>
    private struct Live {
        var boundChannel: SSHChannel?
        var scanner = TerminalScanner()
        var attachment: Attachment?
        var lastActivity: Date
        var directory: String?
        var title: String?
        var size: (columns: Int, rows: Int)
        var ending: Ending?
        var closing = false
        var closedBecause: String?
        var pump: Task<Void, Never>?
        /// No client has attached yet: output waits for the first (it is theirs to see, live).
        var awaitingFirst = true
    }
    /// Told once the session has ended.
    let ended = Promise<Void>()
    /// The shell bootstrap's gate on output and keys, and the history it feeds.
    private let integration: ShellIntegration
    /// The session's -L/-R/-D (stopped when it ends, not when a client detaches).
    private let forwards: (any SessionForwards)?

    enum Ending: Sendable {
        /// The remote side ended it (its shell exited) or termind closed it.
        case exited(ChannelExit?, closed: Bool)
        /// The connection was lost.
        case lost(TermindError)
        var date: Date { Date() }
    }

    /// One client's time on the session: linked (the engine moves its terminal) or fed
    /// through `outbox`.
    final class Attachment: Sendable {
        let client: StreamSession
        let link: TerminalLink?
        let outbox = Outbox()
        let outcome = Promise<Outcome>()
        /// A linked client's terminal is raw (its first `ready`), or its time is over.
        let ready = Promise<Void>()
        /// live: the redraw is queued on the link, from then on `ready` and `pause` act on it.
        /// paused: the client said `pause` (its job stopped) and not `ready` since.
        private let phase = Mutex((live: false, paused: false))
        init(client: StreamSession, link: TerminalLink?) {
            self.client = client
            self.link = link
        }
        /// The client says its terminal is raw: resume the link now (true), or let the redraw
        /// go first (false).
        func clientReady() -> Bool { phase.withLock { $0.paused = false; return $0.live } }
        func clientPaused() { phase.withLock { $0.paused = true } }
        /// The redraw is queued: resume unless the client paused meanwhile.
        func goLive() -> Bool { phase.withLock { $0.live = true; return !$0.paused } }
    }

    enum Outcome: Sendable {
        /// The client leaves, the session goes on ("detached", "attached-elsewhere", "closed").
        case detached(reason: String)
        /// The session ended while attached.
        case ended
    }

    /// `bind` gives it its channel, opened with `tap`.
    init(id: Int, host: String, command: String?, columns: Int, rows: Int, scrollbackLines: Int, logger: Logger,
         integration: ShellIntegration, forwards: (any SessionForwards)? = nil, pane: PaneTag? = nil) {
        self.forwards = forwards
        self.pane = pane
        self.id = id
        self.host = host
        self.command = command
        self.logger = logger
        self.integration = integration
        started = Date()
        live = Mutex(Live(lastActivity: started, size: (columns, rows)))
        model = ScreenModel(rows: rows, columns: columns, scrollbackLines: scrollbackLines)
    }

    // MARK: - The channel

    /// The session's channel, opened with `tap`; set once, before the first attach. From
    /// now on the session ends when the channel does.
    func bind(_ channel: SSHChannel) {
        live.withLock { $0.boundChannel = channel }
        startPump()
    }

    private var channel: SSHChannel {
        guard let channel = live.withLock({ $0.boundChannel }) else { preconditionFailure("a durable session is bound to its channel before use") }
        return channel
    }

    /// What the engine does with the channel's output (see the type's comment).
    var tap: TerminalTap {
        TerminalTap(output: { [weak self] data in self?.take(data) ?? Data() },
                    hasRoom: { [weak self] in self?.hasRoom ?? true },
                    keysAllowed: { [integration] in integration.keysAllowed },
                    wrote: { [model] in model.kick() })
    }

    /// One chunk of output (engine thread): drawn, its marks read, and the attached client's
    /// share — returned for a linked one, queued for another.
    private func take(_ data: Data) -> Data {
        live.withLock { l in
            let before = l.scanner.modes
            let found = l.scanner.scanWithOffsets(data)
            // What the bootstrap's run printed is neither shown nor drawn.
            let visible = integration.output(data, marks: found)
            // Drawn once the engine wrote the client's share (`wrote`): the screen first.
            if !visible.isEmpty { model.feed(visible, modesBefore: before) }
            l.lastActivity = Date()
            for (_, mark) in found {
                switch mark {
                case .workingDirectory(let path): l.directory = path
                case .title(let text): l.title = text
                default: break
                }
            }
            guard let attachment = l.attachment, !visible.isEmpty else { return Data() }
            if attachment.link != nil { return visible }
            attachment.outbox.push(visible)
            return Data()
        }
    }

    /// Whether the engine may read more output: the first client is there (what comes
    /// before it is its to see, live), and an unlinked client's outbox has room.
    private var hasRoom: Bool { live.withLock { l in !l.awaitingFirst && (l.attachment.map { $0.link != nil || $0.outbox.hasRoom } ?? true) } }

    /// Waits for the channel's end: its output all goes through `tap` (read once the first
    /// client is there).
    private func startPump() {
        let channel = self.channel
        let task = Task.detached { [self] in
            do {
                while try await channel.next() != nil {}
                await integration.finish()
                finish(.exited(channel.exit, closed: live.withLock { $0.closing }))
            } catch {
                finish(.lost(TermindError.from(error)))
            }
        }
        live.withLock { $0.pump = task }
    }

    private func finish(_ ending: Ending) {
        let attached: Attachment? = live.withLock { l in
            l.ending = ending
            return l.attachment
        }
        switch ending {
        case .exited(let exit, let closed):
            logger.info("workspaces.session.ended", ["session": .int(id), "closed": .bool(closed), "status": .int(Int(exit?.status ?? -1))])
        case .lost(let error):
            logger.info("workspaces.session.lost", ["session": .int(id), "code": .identifier(error.code)])
        }
        integration.cancel()
        model.stop()
        if let forwards { Task { await forwards.stop() } }
        attached?.outbox.finish()
        attached?.outcome.fulfill(.ended)
        ended.fulfill(())
    }

    // MARK: - Attaching

    /// Runs one client's time on the session: `started`, the screen redrawn (not for the
    /// client that opened it: nothing was drawn yet), then the live output, its keys and
    /// window sizes, until it detaches, another client attaches, or the session ends.
    func attach(_ client: StreamSession, terminal: WorkspacesStreams.Terminal.TerminalSize?, scrollback: Int?, first: Bool) async throws -> WorkspacesStreams.SessionResult {
        try requireRunning()
        let channel = self.channel
        // A client that handed over its terminal has it moved by the engine.
        let link = terminal == nil ? nil : terminalLink(of: client, detachable: true)
        let attachment = Attachment(client: client, link: link)
        attachment.outbox.whenDrained { channel.wake() }
        // Becoming the attached client, and the redraw's place in the output: under the lock
        // that `take` holds, so nothing falls between them; for a link, on the engine's
        // thread at the moment it takes over.
        let swapped = Handoff<Swap?>(nil)
        let swap: @Sendable () -> Void = { [self] in
            swapped.set(live.withLock { l in
                guard l.ending == nil else { return nil }
                let previous = l.attachment
                l.attachment = attachment
                l.awaitingFirst = false
                // A linked client replaced keeps no keys or screen of the session meanwhile.
                previous?.link?.pause()
                var resized: (columns: Int, rows: Int)?
                if let terminal, terminal.columns > 0, terminal.rows > 0, (terminal.columns, terminal.rows) != l.size {
                    l.size = (terminal.columns, terminal.rows)
                    model.resize(rows: terminal.rows, columns: terminal.columns)
                    resized = l.size
                }
                // Queued after every output fed so far, before any that follows.
                return Swap(previous: previous, redraw: first ? nil : model.redraw(scrollbackLines: scrollback), resized: resized)
            })
        }
        if let link {
            try await channel.link(link, onLinked: swap)
        } else {
            swap()
            channel.wake()
        }
        guard let swap = swapped.get() else {
            if let link { await channel.unlink(link, within: 0) }
            try requireRunning()
            throw TermindError(.workspacesSessionEnded, "Session \(id) on \(host) ended.")
        }
        swap.previous?.outcome.fulfill(.detached(reason: "attached-elsewhere"))
        if let resized = swap.resized { Task { try? await channel.resize(columns: resized.columns, rows: resized.rows) } }
        logger.debug("workspaces.session.attached", ["session": .int(id), "linked": .bool(link != nil)])

        // The client is gone (its input ended, its window closed, its connection dropped):
        // it leaves and the session goes on — unless it cancelled naming a signal (`~.`),
        // which ends the session. `cancel` finishes the input before the handler's task is
        // cancelled, so each way out asks, not only the cancellation handler.
        let leave: @Sendable () -> Void = { [self] in
            if let signal = client.cancelSignal { close(signal: signal) }
            attachment.outcome.fulfill(.detached(reason: "closed"))
        }
        await client.emit("started", ["session": .integer(Int64(id)), "detachable": .bool(true), "linked": .bool(link != nil)])
        let redraw = swap.redraw
        let writer: Task<Void, Never>
        var escapes: Task<Void, Never>?
        if let link {
            // Output waits in the link until the client's terminal is raw; the redraw first.
            writer = Task { [self] in
                await attachment.ready.value
                guard !attachment.outcome.isFulfilled else { return }
                if let bytes = await redrawn(redraw, for: client) { link.prepend(bytes) }
                if attachment.goLive() { link.resume() }
            }
            escapes = Task {
                for await event in link.events {
                    if event == .hungUp {
                        if link.outputFailure != nil {
                            // A piped stdout's reader went away (`termind ssh HOST -- CMD | head`)
                            // or its file cannot be written: no window shows this session, and it
                            // ends as it would in-process (the command gets TERM; 141, or the error).
                            close(signal: "TERM")
                        } else {
                            // The client's terminal is gone (its window closed): it leaves.
                            leave()
                        }
                    } else {
                        await client.emit("escape", ["action": .string(TerminalRunner.name(event))])
                        // `~.` ends the session here, where the engine read it: the client's
                        // own cancel may never arrive (it exits at once, or is killed), and
                        // its leaving must not be taken for a detach.
                        if event == .disconnect { close(signal: "HUP") }
                    }
                }
            }
        } else {
            writer = Task { [self] in
                if let bytes = await redrawn(redraw, for: client) { await client.emit("stdout", data: bytes) }
                while let chunk = await attachment.outbox.next() { await client.emit("stdout", data: chunk) }
            }
        }
        let input = Task { [self] in
            for await chunk in client.input {
                // Keys of a client that another replaced go nowhere (its input may still arrive).
                guard live.withLock({ $0.attachment === attachment }) else { break }
                live.withLock { $0.lastActivity = Date() }
                await integration.inputAllowed()
                try? await channel.write(chunk)
            }
            // The client is gone (its input ended): it leaves, the session stays.
            leave()
        }
        let controls = Task { [self] in
            for await control in client.controls {
                if control["detach"] == .bool(true) {
                    attachment.outcome.fulfill(.detached(reason: "detached"))
                } else if let terminal = control["terminal"]?.stringValue, let link {
                    if terminal == "pause" {
                        attachment.clientPaused()
                        link.pause()
                    } else if terminal == "ready" {
                        if attachment.clientReady() { link.resume() } else { attachment.ready.fulfill(()) }
                    }
                } else if case .integer(let columns)? = control["resize"]?["columns"], case .integer(let rows)? = control["resize"]?["rows"] {
                    resize(columns: Int(columns), rows: Int(rows), by: attachment)
                }
            }
        }
        let outcome = await withTaskCancellationHandler {
            await attachment.outcome.value
        } onCancel: {
            // `~.` cancels with a signal: the session ends with it. A client that went away
            // (its window closed, killed) leaves the session running.
            leave()
        }
        input.cancel()
        controls.cancel()
        escapes?.cancel()
        // A linked client that never said ready (the session ended, it went away): its writer
        // stops waiting.
        attachment.ready.fulfill(())

        switch outcome {
        case .ended:
            // Every byte the shell wrote reaches the client before its exit status (a link
            // got it all before the channel ended).
            await writer.value
            if let failure = link?.outputFailure {
                let exit = try ChannelExit.afterLocalOutputFailure(failure, of: "session \(id) on \(host)")
                return .init(exitStatus: exit.status, exitSignal: exit.signal, session: id)
            }
            let (ending, reason) = live.withLock { ($0.ending, $0.closedBecause) }
            if let reason {
                await client.emit("notice", ["text": .string("Session \(id) on \(host) was closed (\(reason)).")])
            }
            switch ending {
            case .lost(let error)?: throw error
            case .exited(let exit, _)?: return .init(exitStatus: exit?.status, exitSignal: exit?.signal, session: id)
            case nil: return .init(exitStatus: nil, exitSignal: nil, session: id)
            }
        case .detached(let reason):
            live.withLock { l in if l.attachment === attachment { l.attachment = nil } }
            channel.wake()  // an outbox that held the channel back no longer does
            attachment.outbox.finish()
            if let link {
                // What the engine holds for it goes first (not to a terminal already gone).
                await channel.unlink(link, within: reason == "closed" ? 0 : 2)
            }
            if reason == "closed" {
                // The client is gone: nothing more to show it.
                writer.cancel()
            } else {
                await farewell(client, writer: link == nil ? writer : nil, reason: reason)
            }
            return .init(exitStatus: nil, exitSignal: nil, session: id, detached: true, reason: reason)
        }
    }

    /// The redraw's bytes, if one was asked for. The screen model answers within a moment;
    /// one that does not (stuck on what a host sent) must not keep the client from the live
    /// session: it is told so, and gets nil.
    private func redrawn(_ redraw: Promise<[UInt8]>?, for client: StreamSession) async -> Data? {
        guard let redraw else { return nil }
        if let bytes = await redraw.value(within: 5) { return Data(bytes) }
        logger.warning("workspaces.session.redraw_late", ["session": .int(id)])
        await client.emit("notice", ["text": .string("The screen of session \(id) could not be redrawn in time; what follows is live.")])
        return nil
    }

    /// What becoming the attached client found.
    private struct Swap {
        let previous: Attachment?
        let redraw: Promise<[UInt8]>?
        let resized: (columns: Int, rows: Int)?
    }

    /// Tells a client that leaves a running session why, once its output is through: its
    /// terminal leaves the session's modes (application keys, mouse, the alternate screen)
    /// and a line says how to come back. A client that stopped reading (replaced because it
    /// hung) is given up on after two seconds.
    private func farewell(_ client: StreamSession, writer: Task<Void, Never>?, reason: String) async {
        // The modes as the session's own scanner saw them (the model may lag behind).
        let reset = live.withLock { $0.scanner.modes.resetSequences }
        let id = self.id, host = self.host
        let told = Task {
            await writer?.value
            await client.emit("stdout", data: Data((reset + "\r\n").utf8))
            let text = reason == "attached-elsewhere"
                ? "Session \(id) on \(host) was attached from another terminal; 'termind attach \(id)' takes it back."
                : "Detached from session \(id) on \(host); 'termind attach \(id)' returns to it."
            await client.emit("view", ["title": .string(text), "rows": .array([]), "result": .bool(true)])
        }
        let deadline = Task {
            try? await Task.sleep(for: .seconds(2))
            writer?.cancel()
            told.cancel()
        }
        await told.value
        deadline.cancel()
    }

    /// A window size from the attached client: the model and the remote terminal follow (a
    /// client that was replaced meanwhile changes nothing).
    private func resize(columns: Int, rows: Int, by attachment: Attachment) {
        guard columns > 0, rows > 0 else { return }
        let changed: Bool = live.withLock { l in
            guard l.attachment === attachment, l.ending == nil, (columns, rows) != l.size else { return false }
            l.size = (columns, rows)
            model.resize(rows: rows, columns: columns)
            return true
        }
        guard changed else { return }
        Task {
            do { try await channel.resize(columns: columns, rows: rows) } catch { logger.debug("workspaces.terminal.resize_failed") }
        }
    }

    // MARK: - Typing into it

    /// Types `text` as keys (broadcast): as one bracketed paste when the program asked for it
    /// (a paste end marker inside the text is dropped, so the text cannot end the paste
    /// early), else with each newline as Enter; then Enter when `enter`. Mouse reports are
    /// never typed (any in the text are dropped). Returns what was written.
    func type(_ text: String, enter: Bool) async throws -> (bytes: Int, bracketed: Bool) {
        try requireRunning()
        let bracketed = live.withLock { $0.scanner.modes.bracketedPaste }
        let keys = TerminalInput.keys(for: text, bracketedPaste: bracketed, enter: enter)
        await integration.inputAllowed()
        try await channel.write(Data(keys))
        live.withLock { $0.lastActivity = Date() }
        return (keys.count, bracketed)
    }

    // MARK: - Ending

    /// Ends the session: the remote shell gets `signal` (HUP: as when a terminal closes) and
    /// the channel closes; the attached client, if any, gets the exit.
    /// `reason`: why termind closed it, told to the attached client (`sessions close`, the
    /// server stopping); nil when the client itself ended it (`~.`).
    func close(signal: String = "HUP", because reason: String? = nil) {
        let (running, attached): (Bool, Attachment?) = live.withLock { l in
            guard l.ending == nil else { return (false, nil) }
            l.closing = true
            if l.closedBecause == nil { l.closedBecause = reason }
            return (true, l.attachment)
        }
        guard running else { return }
        // A client that stopped reading (suspended, hung) must not hold the pump, and with it
        // the end, back: what it has not taken is dropped.
        attached?.outbox.finish()
        channel.close(signal: signal)
    }

    private func endedError(_ ending: Ending) -> TermindError {
        switch ending {
        case .exited(let exit, let closed):
            let how = closed ? "was closed" : exit?.signal.map { "ended by SIG\($0)" } ?? "ended with status \(exit?.status.map(String.init) ?? "unknown")"
            return TermindError(.workspacesSessionEnded, "Session \(id) on \(host) \(how); there is nothing to attach to. Start a new one with termind ssh \(host).")
        case .lost(let error):
            return TermindError(.workspacesSessionEnded, "Session \(id) on \(host) ended when its connection was lost (\(error.message)).")
        }
    }

    // MARK: - Listing

    var isEnded: Bool { live.withLock { $0.ending != nil } }

    /// Throws how the session ended, if it has.
    func requireRunning() throws {
        if let ending = live.withLock({ $0.ending }) { throw endedError(ending) }
    }

    func info(now: Date = Date()) -> WorkspacesContracts.SessionInfo {
        live.withLock { l in
            var exit: ChannelExit?
            if case .exited(let value, _)? = l.ending { exit = value }
            return .init(id: id, host: host, command: command, state: l.ending != nil ? "ended" : l.attachment != nil ? "attached" : "detached",
                         started: Self.timestamp(started), lastActivity: Self.timestamp(l.lastActivity), directory: l.directory, title: l.title,
                         size: "\(l.size.columns)x\(l.size.rows)", exitStatus: exit?.status, exitSignal: exit?.signal,
                         workspace: pane?.name, pane: pane?.pane)
        }
    }

    /// The screen's rows as text (for tests and diagnostics).
    func screenLines() async -> [String] { await model.lines().value }

    static func timestamp(_ date: Date) -> String {
        Date.ISO8601FormatStyle().format(date)
    }
}

/// A value set on one thread (the engine's) and read on another after it was set.
private final class Handoff<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
    func set(_ newValue: Value) { value.withLock { $0 = newValue } }
    func get() -> Value { value.withLock { $0 } }
}
