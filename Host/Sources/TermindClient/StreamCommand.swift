import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindKernel

/// Runs a command a feature declared with a `stream` (PluginCommand builds its request):
/// generically, for any stream. On the running server when one answers, else in this
/// process — the same stream code either way.
///
/// * `stdout` / `stderr` events (their bytes) are written to ours as they arrive; with
///   `--json` they are collected (up to 16 MiB each) into the report instead.
/// * Questions (`ask` events) are answered from --answers, --yes or the controlling
///   terminal (Questions); progress, records, views and notices are shown (StreamView).
/// * Standard input, when the stream reads input and it is not a terminal, travels to it.
/// * A stream that takes descriptors (`acceptsDescriptors`, e.g. `termind exec`) gets our
///   own stdin, stdout and stderr — those that are not terminals, and not with `--json` —
///   and moves their bytes itself, with no event or input line in between (inside
///   `termind serve` they travel over the control socket as SCM_RIGHTS). One that bridges a
///   terminal gets the terminal itself (stdin and stdout): when `started` says `linked`, it
///   reads the keys and writes the screen, and this client only sets the modes, sends
///   window sizes, says when the terminal is raw (`ready`) or not (`pause`), and acts on
///   the escapes the stream reports (`escape` events).
/// * SIGINT and SIGTERM cancel the stream naming the signal (a remote command gets it);
///   termind exits 128 + the signal once the stream ended (after at most 3 s).
/// * A result with `exitStatus` / `exitSignal` (a command's) sets termind's exit code, as a
///   shell does; other result fields are printed as for a contract's reply.
enum StreamCommand {
    /// What `--json` keeps of each output stream.
    static let outputLimit = 16 << 20

    /// Runs the stream on `session`; returns what to do once the session is closed (print
    /// the result, exit with the command's status).
    /// `emitsOutput`: the stream declares `stdout`/`stderr` events, so its `--json` result
    /// carries them (a command's, even when it printed nothing); other streams' results do
    /// only when output came anyway.
    static func run(_ stream: String, body: [String: JSONValue], acceptsInput: Bool, acceptsDescriptors: Bool = false, terminalField: String? = nil,
                    emitsOutput: Bool = true, quietResult: Bool = false, interruptible: Bool = false, inv: Invocation,
                    session: Session) async throws -> () -> Invocation.Exit {
        let console = inv.console
        let questions = try Questions(inv)
        var body = body
        // A stream that bridges a terminal, with one on standard input: raw mode until it ends.
        let bridge: TerminalBridge? = terminalField != nil && !inv.json ? TerminalBridge(console: console) : nil
        if let field = terminalField, let bridge {
            let size = TerminalBridge.size(bridge.fd) ?? (80, 24)
            let locale = console.environment.filter { $0.key == "LANG" || $0.key.hasPrefix("LC_") }.mapValues { JSONValue.string($0) }
            body[field] = .object(["term": .string(console.variable("TERM") ?? "xterm-256color"),
                                   "columns": .integer(Int64(size.columns)), "rows": .integer(Int64(size.rows)), "environment": .object(locale)])
        }
        let interrupt = console.catchSignals(bridge == nil ? [SIGINT, SIGTERM] : [SIGINT, SIGTERM, SIGHUP])
        // The bridge starts once the stream says its terminal is ready (`started`): questions
        // asked while connecting (host key, passphrase) still see a cooked terminal.
        let bridged = BridgeStart()
        defer {
            bridged.stop()
            bridge?.restore()
        }
        let handed: StreamDescriptors? = if !acceptsDescriptors || inv.json {
            nil
        } else if bridge != nil {
            terminalHandOver(console)
        } else {
            handOver(readsInput: acceptsInput, console: console)
        }
        let output = CollectedOutput(keep: inv.json, console: console)
        let view = StreamView(json: inv.json, console: console)
        if let bridge { view.terminalIsRaw = { bridge.isRaw } }
        // A scripted answer that does not fit its question: the question goes unanswered
        // (the feature fails closed) and termind reports why once the stream ended.
        let answerFailure = Mutex<TermindError?>(nil)
        // `~.` on the bridged terminal ended the session.
        let disconnected = Mutex(false)
        // An interruptible stream's turn was interrupted already (its next Ctrl-C ends it).
        let turnInterrupted = Mutex(false)
        let reply: Data
        do {
            defer { view.finish() }
            reply = try await session.stream(stream, body: try JSONCoding.encode(JSONValue.object(body)), descriptors: handed, onOpen: { control in
                if interruptible {
                    // The first Ctrl-C of a turn interrupts the turn; the next one (before the
                    // stream asks again) ends the stream.
                    interrupt.divert { number in
                        guard number == SIGINT, !turnInterrupted.withLock({ interrupted in defer { interrupted = true }; return interrupted }) else { return false }
                        view.clearProgress()
                        _ = control.send(["control": .object(["interrupt": .bool(true)])])
                        return true
                    }
                }
                interrupt.onSignal { number in
                    bridge?.restore()
                    view.finish()
                    if bridged.detachable {
                        // A session that outlives its client (the window closed, termind killed):
                        // this client leaves it, the session goes on.
                        _ = control.send(["control": .object(["detach": .bool(true)])])
                    } else {
                        _ = control.send(["cancel": .bool(true), "signal": .string(SignalCatcher.name(number))])
                    }
                    DispatchQueue.global().asyncAfter(deadline: .now() + 3) { console.terminate(128 + number) }  // never races main's exit
                }
                if bridge == nil {
                    // Handed over, standard input is the stream's to read.
                    if handed?.stdin == nil { sendInput(acceptsInput ? console.input : -1, to: control, console: console) }
                } else {
                    bridged.control = control
                }
            }) { event in
                // The result's view ends a bridged session: the terminal is cooked again first.
                if event.kind == "view", event["result"] == .bool(true) { bridge?.restore() }
                if view.handle(event) { return nil }
                switch event.kind {
                case "started"? where bridge != nil:
                    guard let bridge, let control = bridged.control else { return nil }
                    let detachable = event["detachable"] == .bool(true)
                    bridged.detachable = detachable
                    bridge.enterRaw()
                    bridged.watch(watchWindow(bridge, control: control, console: console))
                    // A stream that took our terminal moves the keys itself; it waits for raw.
                    guard event["linked"] != .bool(true) else {
                        bridged.linked = true
                        sendTerminal("ready", to: control)
                        // Our job stopped from outside (the launcher's SIGTSTP): the stream
                        // leaves the terminal alone until it is continued.
                        bridged.watch(console.onStopChange { stopped in sendTerminal(stopped ? "pause" : "ready", to: control) })
                        return nil
                    }
                    sendInput(acceptsInput ? console.input : -1, terminal: true, detachable: detachable, to: control, console: console) { action in
                        escaped(action, bridge: bridge, control: control, linked: false, detachable: detachable, disconnected: disconnected, view: view, console: console)
                    }
                    return nil
                case "escape"? where bridge != nil:
                    // What the person typed, read by a stream that took our terminal.
                    guard let bridge, let control = bridged.control, bridged.linked else { return nil }
                    let action: TerminalEscapes.Action? = switch event["action"]?.stringValue {
                    case "disconnect"?: .disconnect
                    case "suspend"?: .suspend
                    case "detach"?: .detach
                    default: nil
                    }
                    if let action {
                        _ = escaped(action, bridge: bridge, control: control, linked: true, detachable: bridged.detachable, disconnected: disconnected, view: view, console: console)
                    }
                    return nil
                case let kind? where kind == "stdout" || kind == "stderr":
                    if let data = event.data {
                        if !inv.json { view.clearProgress() }
                        output.add(kind, data)
                    }
                    return nil
                case "ask"?:
                    guard case .integer(let askID)? = event["askID"], let question = event["ask"] else { return nil }
                    turnInterrupted.withLock { $0 = false }
                    view.pause()
                    var answer: [String: JSONValue] = ["unanswered": .bool(true)]
                    do {
                        if case .object(let given) = try questions.answer(question) { answer = given }
                    } catch {
                        answerFailure.withLock { $0 = $0 ?? TermindError.from(error) }
                    }
                    answer["askID"] = .integer(askID)
                    return .object(answer)
                default:
                    return nil
                }
            }
        } catch {
            if disconnected.withLock({ $0 }) { return { escapedOut(console) } }
            if let number = interrupt.caught { return interrupted(number, json: inv.json, console: console) }
            throw answerFailure.withLock({ $0 }) ?? error
        }
        if disconnected.withLock({ $0 }) { return { escapedOut(console) } }
        if let number = interrupt.caught { return interrupted(number, json: inv.json, console: console) }
        if let failure = answerFailure.withLock({ $0 }) { throw failure }
        let result = try JSONCoding.parse(reply, source: "The stream's result")
        return { finish(result, output: output, json: inv.json, console: console, shown: view.showedResult || terminalField != nil || quietResult,
                        emitsOutput: emitsOutput, lines: view.wroteJSONLines) }
    }

    /// Acts on an escape typed on the bridged terminal (read here, or by a stream that took
    /// the terminal: `linked`); false when no more keys are to be read.
    private static func escaped(_ action: TerminalEscapes.Action, bridge: TerminalBridge, control: StreamControl, linked: Bool, detachable: Bool,
                                disconnected: borrowing Mutex<Bool>, view: StreamView, console: Console) -> Bool {
        switch action {
        case .disconnect:
            // As ssh's ~.: the session ends now; the remote shell gets a HUP.
            disconnected.withLock { $0 = true }
            bridge.restore()
            view.finish()
            _ = control.send(["cancel": .bool(true), "signal": .string("HUP")])
            return false
        case .suspend:
            // As ssh's ~^Z: the terminal as it was, termind stopped; raw again on fg.
            bridge.restore()
            console.terminal.suspend()
            bridge.enterRaw()
            sendSize(bridge, to: control)
            if linked { sendTerminal("ready", to: control) }
        case .detach:
            // ~d: this client leaves; the server answers with the result (detached).
            _ = control.send(["control": .object(["detach": .bool(true)])])
            return false
        case .help:
            console.write(TerminalEscapes.help(detachable: detachable), to: console.errorOutput)
        case .send:
            break
        }
        return true
    }

    /// Tells a stream that took our terminal whether it may use it now.
    private static func sendTerminal(_ state: String, to control: StreamControl) {
        _ = control.send(["control": .object(["terminal": .string(state)])])
    }

    /// The terminal a bridging stream may take (stdin, a terminal, and stdout), so that the
    /// SSH engine moves keys and screen itself; nil when stdout is closed.
    private static func terminalHandOver(_ console: Console) -> StreamDescriptors? {
        guard fcntl(console.output, F_GETFD) >= 0 else { return nil }
        return StreamDescriptors(stdin: console.input, stdout: console.output)
    }

    /// Our standard streams a stream may take over: not terminals (a person's keys and
    /// screen stay with this process), not closed ones; stdin only when it reads input.
    private static func handOver(readsInput: Bool, console: Console) -> StreamDescriptors? {
        func usable(_ fd: Int32) -> Bool { fd >= 0 && fcntl(fd, F_GETFD) >= 0 && !console.isTerminal(fd) }
        let descriptors = StreamDescriptors(stdin: readsInput && usable(console.input) ? console.input : nil,
                                            stdout: usable(console.output) ? console.output : nil,
                                            stderr: usable(console.errorOutput) ? console.errorOutput : nil)
        return descriptors.fds.isEmpty ? nil : descriptors
    }

    /// Standard input follows the open, from a thread of its own that waits while the stream
    /// has no room (in-process: the command's window); a terminal, or none, ends it at once.
    /// After a signal cancelled the stream: one line saying so, then 128 + its number.
    /// After `~.`: as ssh says it, and 255.
    private static func escapedOut(_ console: Console) -> Invocation.Exit {
        console.write("Connection closed.\n", to: console.errorOutput)
        return Invocation.Exit(rawValue: 255)
    }

    private static func interrupted(_ number: Int32, json: Bool, console: Console) -> () -> Invocation.Exit {
        {
            let name = "SIG" + SignalCatcher.name(number)
            _ = console.failure(TermindError(.streamCancelled, "Cancelled by \(name); the operation on the server was stopped."), json: json)
            return Invocation.Exit(rawValue: 128 + number)
        }
    }

    /// The terminal's size now, as a `resize` control.
    private static func sendSize(_ bridge: TerminalBridge, to control: StreamControl) {
        guard let size = TerminalBridge.size(bridge.fd) else { return }
        _ = control.send(["control": .object(["resize": .object(["columns": .integer(Int64(size.columns)), "rows": .integer(Int64(size.rows))])])])
    }

    /// SIGWINCH: the terminal's new size goes to the stream as a `resize` control.
    /// The size now is sent too: it may have changed while the session was being opened.
    /// Returns what stops the watch.
    private static func watchWindow(_ bridge: TerminalBridge, control: StreamControl, console: Console) -> @Sendable () -> Void {
        let sendSize: @Sendable () -> Void = { Self.sendSize(bridge, to: control) }
        let stop = console.onWindowChange(sendSize)
        sendSize()
        return stop
    }

    /// On a bridged terminal the keys go through OpenSSH's escape sequences first
    /// (`TerminalEscapes`): `escape` acts on each one and says whether to read on.
    private static func sendInput(_ fd: Int32, terminal: Bool = false, detachable: Bool = false, to control: StreamControl, console: Console,
                                  escape: (@Sendable (TerminalEscapes.Action) -> Bool)? = nil) {
        // A terminal's keys go to a stream only when it bridges the terminal (raw mode).
        guard fd >= 0, terminal || !console.isTerminal(fd) else {
            _ = control.send(["inputEnd": .bool(true)])
            return
        }
        // Only the reader's thread touches the escape state.
        let escapes = Mutex(TerminalEscapes(detachable: detachable))
        console.readInput(fd, { chunk in
            guard let escape else { return control.input(chunk) }
            for action in escapes.withLock({ $0.filter(chunk) }) {
                if case .send(let bytes) = action {
                    guard control.input(bytes) else { return false }
                } else if !escape(action) {
                    return false
                }
            }
            return true
        }, end: { _ = control.send(["inputEnd": .bool(true)]) })
    }

    /// Prints the result and returns the exit code; a command's status and signal become
    /// termind's (128 + the signal's number, as a shell reports it).
    /// `shown`: a view already showed the result's human form, or there is none (a terminal
    /// session's: what it had to say, the terminal showed). `lines`: with `--json` the
    /// stream wrote JSON lines to standard output (records, views), so the result is one
    /// more line, not a pretty-printed document after them.
    static func finish(_ result: JSONValue, output: CollectedOutput, json: Bool, console: Console, shown: Bool = false, emitsOutput: Bool = true,
                       lines: Bool = false) -> Invocation.Exit {
        let printJSON: (JSONValue) -> Void = { value in
            if lines, let line = try? JSONCoding.encode(value) { console.write(line + Data("\n".utf8), to: console.output) } else { console.json(value) }
        }
        // When the result was shown as a view, a status or signal it carries still sets the
        // exit code (`termind sftp`'s 3: some paths failed; a session's remote status).
        guard case .object(var fields) = result else {
            if json { printJSON(result) } else if !shown { console.human(result) }
            return .success
        }
        let isCommand = fields.keys.contains("exitStatus") || fields.keys.contains("exitSignal")
        let signal = fields["exitSignal"]?.stringValue
        let status: Int32? = if case .integer(let value)? = fields["exitStatus"] { Int32(truncatingIfNeeded: value) } else { nil }
        if json {
            if (isCommand && emitsOutput) || output.seen { fields.merge(output.report()) { $1 } }
            printJSON(JSONValue.object(fields))
        } else if !shown {
            fields["exitStatus"] = nil
            fields["exitSignal"] = nil
            if !fields.isEmpty { console.human(.object(fields)) }
        }
        guard isCommand else { return .success }
        if let signal {
            // As a shell, nothing is said of a SIGPIPE: the reader of our output went away.
            if !json && signal != "PIPE" { console.error("the remote command was killed by SIG\(signal).") }
            return Invocation.Exit(rawValue: 128 + (signalNumbers[signal] ?? 15))
        }
        return Invocation.Exit(rawValue: status ?? 255)
    }

    private static let signalNumbers: [String: Int32] = ["HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9, "USR1": 10,
                                                         "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15]
}

/// A stream's output: written through as it arrives, or kept (bounded) for `--json`.
final class CollectedOutput: Sendable {
    private let keep: Bool
    private let console: Console
    private struct State {
        var streams: [String: Data] = [:]
        var truncated = false
        var seen = false
    }
    private let state = Mutex(State())
    /// Whether any output arrived.
    var seen: Bool { state.withLock { $0.seen } }

    init(keep: Bool, console: Console) {
        self.keep = keep
        self.console = console
    }

    func add(_ kind: String, _ data: Data) {
        state.withLock { s in s.seen = true }
        guard keep else {
            console.write(data, to: kind == "stdout" ? console.output : console.errorOutput)
            return
        }
        state.withLock { s in
            let room = max(0, StreamCommand.outputLimit - s.streams[kind, default: Data()].count)
            if data.count > room { s.truncated = true }
            s.streams[kind, default: Data()].append(data.prefix(room))  // in place, not a copy per chunk
        }
    }

    /// `stdout`, `stderr` (text, or base64 when not valid UTF-8, so every byte arrives as
    /// sent, with `stdoutEncoding` / `stderrEncoding`) and `truncated`.
    func report() -> [String: JSONValue] {
        state.withLock { s in
            var fields: [String: JSONValue] = ["truncated": .bool(s.truncated)]
            for kind in ["stdout", "stderr"] {
                let data = s.streams[kind, default: Data()]
                if let text = String(data: data, encoding: .utf8) {
                    fields[kind] = .string(text)
                    fields[kind + "Encoding"] = .string("utf-8")
                } else {
                    fields[kind] = .string(data.base64EncodedString())
                    fields[kind + "Encoding"] = .string("base64")
                }
            }
            return fields
        }
    }
}

/// A bridged stream's way to send (known once it opened) and its watches, set from the
/// event thread once the stream started and stopped when the command ends.
private final class BridgeStart: Sendable {
    private struct State {
        var controlValue: StreamControl?
        var stops: [@Sendable () -> Void] = []
        var detachableValue = false
        var linkedValue = false
    }
    private let state = Mutex(State())

    /// The stream took our terminal (`started` said `linked`).
    var linked: Bool {
        get { state.withLock { s in s.linkedValue } }
        set { state.withLock { s in s.linkedValue = newValue } }
    }

    /// The session outlives this client (`started` said `detachable`): leaving detaches.
    var detachable: Bool {
        get { state.withLock { s in s.detachableValue } }
        set { state.withLock { s in s.detachableValue = newValue } }
    }

    var control: StreamControl? {
        get { state.withLock { s in s.controlValue } }
        set { state.withLock { s in s.controlValue = newValue } }
    }

    /// `stop` ends a watch (window changes, job stops) when the command ends.
    func watch(_ stop: @escaping @Sendable () -> Void) { state.withLock { s in s.stops.append(stop) } }

    func stop() {
        let stops: [@Sendable () -> Void] = state.withLock { s in
            defer { s.stops.removeAll() }
            return s.stops
        }
        for stop in stops { stop() }
    }
}
