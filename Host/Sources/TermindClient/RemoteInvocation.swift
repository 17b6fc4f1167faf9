import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindKernel

/// A launcher's command, run inside `termind serve` (stream `client.invoke@1`,
/// docs/contracts.md "The launcher"). The launcher sends its words, working folder and
/// environment, with its standard input, output and error as SCM_RIGHTS; the generic client
/// runs here against those descriptors and the server's own kernel — no second process
/// start, no socket round trip per call — and the reply is the exit code. What only the
/// terminal's foreground process can do (raw mode, prompts, the editor, `~^Z`) is asked of
/// the launcher (`RemoteTerminal`); its SIGINT, SIGTERM, SIGHUP and SIGWINCH arrive as
/// `{"control": {"signal": NAME}}` (`LauncherLink`). A command that must run in the
/// launcher's process (`Invocation.runsInProcess`) is sent back with `{"local": true}`.
enum RemoteInvocation {
    struct Request: Decodable {
        let argv: [String]
        let workingDirectory: String
        let environment: [String: String]
    }

    static let stream = "client.invoke@1"

    static func register(on server: ControlServer, kernel: Kernel) {
        server.register(stream: stream) { body, session in
            try await run(body, session: session, kernel: kernel)
        }
    }

    static func run(_ body: Data, session: StreamSession, kernel: Kernel) async throws -> Data {
        let request: Request
        do {
            request = try JSONDecoder().decode(Request.self, from: body)
        } catch {
            throw TermindError.badRequest("\(stream) takes argv (the words), workingDirectory (absolute) and environment (names to values).")
        }
        guard request.workingDirectory.hasPrefix("/") else {
            throw TermindError.badRequest("\(stream): workingDirectory must be an absolute path.")
        }
        let streams = LauncherDescriptors(session.descriptors)
        defer { streams.release() }
        let link = LauncherLink(session: session)
        let console = Console(input: streams.input, output: streams.output, errorOutput: streams.errorOutput,
                              environment: request.environment, workingDirectory: request.workingDirectory,
                              terminal: RemoteTerminal(link: link), signals: link, descriptorOwner: streams)
        link.console = console
        let parsed = try? Invocation.parse(request.argv, console: console, server: kernel)
        if parsed?.runsInProcess == true { return Data(#"{"local":true}"#.utf8) }
        let code = await link.run {
            if let parsed { return await ClientMain.run(parsed) }
            return await ClientMain.run(request.argv, console: console, server: kernel)  // says what is wrong with the words
        }
        console.finish()
        return Data(#"{"exitCode":\#(code)}"#.utf8)
    }
}

/// The launcher's standard streams, as this run's own copies: a role the launcher had
/// closed reads and writes /dev/null. `release()` points them all at /dev/null at once —
/// a pipe's reader then sees its end even if leftover work still writes — and the numbers
/// themselves close when the last console holding them is gone (never under a writer).
final class LauncherDescriptors: Sendable {
    let input: Int32
    let output: Int32
    let errorOutput: Int32

    init(_ given: StreamDescriptors?) {
        func own(_ fd: Int32?) -> Int32 {
            if let fd, fd >= 0 { let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3); if copy >= 0 { return copy } }
            return open("/dev/null", O_RDWR | O_CLOEXEC)
        }
        input = own(given?.stdin)
        output = own(given?.stdout)
        errorOutput = own(given?.stderr)
    }

    func release() {
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        guard null >= 0 else { return }
        for fd in [input, output, errorOutput] where fd >= 0 && dup2(null, fd) >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        close(null)
    }

    deinit {
        for fd in [input, output, errorOutput] where fd >= 0 { close(fd) }
    }
}

/// One launcher's side of a run: its questions (`ask`), its signals (as a `ConsoleSignals`),
/// and the run's outcome — the command's exit code, or an earlier one when the run is
/// ended at once (`terminate`, or the launcher going away, which cancels the command).
final class LauncherLink: ConsoleSignals, Sendable {
    private let session: StreamSession
    private struct State {
        var catchers: [Weak] = []
        var windowWatchers: [UInt64: @Sendable () -> Void] = [:]
        var nextWatcher: UInt64 = 0
        var outcome: CheckedContinuation<Int32, Never>?
        var resolved: Int32?
        var work: Task<Void, Never>?
        weak var console: Console?
    }
    private let state = Mutex(State())
    /// The run's console, whose writes wait while the launcher's job is stopped.
    var console: Console? {
        get { state.withLock { $0.console } }
        set { state.withLock { $0.console = newValue } }
    }

    private struct Weak { weak var catcher: RemoteSignalCatcher? }

    init(session: StreamSession) { self.session = session }

    /// Runs `body` as a task on an InvocationThread and returns its exit code — or the code
    /// `terminate` gave, or 130 when the launcher went away; the command is then cancelled.
    func run(_ body: @escaping @Sendable () async -> Invocation.Exit) async -> Int32 {
        let signals = Task { [self] in
            for await control in session.controls {
                guard case .string(let name)? = control["signal"] else { continue }
                deliver(name)
            }
        }
        defer { signals.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
                let ended: Int32? = state.withLock { s in
                    if let resolved = s.resolved { return resolved }
                    s.outcome = continuation
                    return nil
                }
                if let ended { return continuation.resume(returning: ended) }
                let thread = InvocationThread.take()
                let task = Task(executorPreference: thread) { [self] in
                    let code = await body()
                    thread.release()
                    resolve(code.rawValue)
                }
                let cancelled: Bool = state.withLock { s in
                    s.work = task
                    return s.resolved != nil
                }
                if cancelled { task.cancel() }
            }
        } onCancel: {
            terminate(130)
        }
    }

    private func resolve(_ code: Int32) {
        let continuation: CheckedContinuation<Int32, Never>? = state.withLock { s in
            guard s.resolved == nil else { return nil }
            s.resolved = code
            defer { s.outcome = nil }
            return s.outcome
        }
        continuation?.resume(returning: code)
    }

    // MARK: - ConsoleSignals

    func catchSignals(_ numbers: [Int32]) -> any SignalCatching {
        let catcher = RemoteSignalCatcher(numbers, link: self)
        state.withLock { s in
            s.catchers.removeAll { $0.catcher == nil }
            s.catchers.append(Weak(catcher: catcher))
        }
        return catcher
    }

    func onWindowChange(_ handler: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let id: UInt64 = state.withLock { s in
            s.nextWatcher += 1
            s.windowWatchers[s.nextWatcher] = handler
            return s.nextWatcher
        }
        return { [weak self] in _ = self?.state.withLock { $0.windowWatchers.removeValue(forKey: id) } }
    }

    /// The run ends now with `code`; the command's task is cancelled.
    func terminate(_ code: Int32) {
        let task = state.withLock { s in s.work }
        resolve(code)
        task?.cancel()
    }

    /// A signal the launcher caught: a window change for the watchers; its job stopped or
    /// continued for the console; any other for the newest catcher that takes it, or — as its
    /// default action would in a process — the end of the run with 128 + its number.
    private func deliver(_ name: String) {
        switch name {
        case "WINCH":
            for watcher in state.withLock({ s in Array(s.windowWatchers.values) }) { watcher() }
            return
        case "TSTP", "CONT":
            state.withLock { s in s.console }?.setStopped(name == "TSTP")
            return
        default:
            break
        }
        guard let number = ["INT": SIGINT, "TERM": SIGTERM, "HUP": SIGHUP, "QUIT": SIGQUIT][name] else { return }
        let catcher = state.withLock { s in s.catchers.reversed().compactMap(\.catcher).first { $0.numbers.contains(number) } }
        guard let catcher else { return terminate(128 + number) }
        catcher.deliver(number)
    }

    // MARK: - Questions to the launcher

    /// Asks the launcher to do `op` and waits for its answer (this thread blocks: callers
    /// are the run's own thread, an event queue or an input reader, never the pool); nil
    /// when the launcher is gone.
    func ask(_ op: String, _ fields: [String: JSONValue] = [:]) -> JSONValue? {
        var question = fields
        question["op"] = .string(op)
        let done = DispatchSemaphore(value: 0)
        let answer = Mutex<JSONValue?>(nil)
        session.ask(.object(question)) { reply in
            answer.withLock { $0 = reply }
            done.signal()
        }
        done.wait()
        return answer.withLock { $0 }
    }
}

/// SignalCatching for a launcher's signals (LauncherLink.deliver): the first one is kept and
/// handed to the handler; one before any handler ends the run at once.
final class RemoteSignalCatcher: SignalCatching, Sendable {
    let numbers: [Int32]
    private weak let link: LauncherLink?
    private let first = FirstSignal()

    init(_ numbers: [Int32], link: LauncherLink) {
        self.numbers = numbers
        self.link = link
    }

    var caught: Int32? { first.caught }
    func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) { first.onSignal(handler) }
    func divert(_ body: @escaping @Sendable (Int32) -> Bool) { first.divert(body) }

    func deliver(_ number: Int32) {
        if first.record(number) == .unhandled { link?.terminate(128 + number) }
    }
}

/// The launcher's terminal, asked over its link: it sets the modes, reads the prompts and
/// runs the editor, as the foreground process of that terminal.
struct RemoteTerminal: ConsoleTerminal {
    let link: LauncherLink

    func setRaw(_ raw: Bool) { _ = link.ask(raw ? "raw" : "restore") }

    func readLine(_ prompt: String, echo: Bool, controllingTerminal: Bool) -> String? {
        link.ask("line", ["text": .string(prompt), "echo": .bool(echo), "terminal": .bool(controllingTerminal)])?["text"]?.stringValue
    }

    func show(_ text: String) { _ = link.ask("show", ["text": .string(text)]) }

    func edit(_ path: String, command: String) -> Int32 {
        guard case .integer(let status)? = link.ask("edit", ["path": .string(path), "command": .string(command)])?["status"] else { return -1 }
        return Int32(truncatingIfNeeded: status)
    }

    func suspend() { _ = link.ask("suspend") }
}
