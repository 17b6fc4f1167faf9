import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindStore

/// Where one run of the generic client meets the person who started it: their standard
/// input, output and error, their terminal, environment, working folder and signals.
/// In a plain `termind` process these are the process's own (`Console.process`); inside
/// `termind serve` they belong to the launcher that handed them over the control socket
/// (`RemoteInvocation`), so the same client code runs in either place and never reads,
/// writes or signals the server's own. Every path a person gave is made absolute against
/// `workingDirectory`, every variable is read from `environment`.
final class Console: Sendable {
    let input: Int32
    let output: Int32
    let errorOutput: Int32
    let environment: [String: String]
    let workingDirectory: String
    /// Raw mode, prompts, the editor and `~^Z`: done by the terminal's foreground process.
    let terminal: any ConsoleTerminal
    private let signals: any ConsoleSignals
    /// Wakes the readers of `input` when the run ends (a pipe's read end, whose write end
    /// `finish()` closes), so that none is left reading a person's terminal once their
    /// command is over.
    private let wake: Int32
    private let wakeWriter = Mutex<Int32>(-1)
    /// Readers of `input` still running.
    private let readers = ConditionLock(0)
    /// A reader of our output went away (only seen where SIGPIPE does not end the process).
    private let brokenPipe = Atomic<Bool>(false)
    /// Writes wait while the person's job is stopped (a launcher's Ctrl-Z), as they would
    /// behind a stopped process; `finish()` lets them go.
    private let stopped = StopGate()
    /// What owns the descriptors (a launcher's copies): kept as long as the console is, so
    /// a number it writes to is never closed and reused under it.
    private let descriptorOwner: (any Sendable)?

    init(input: Int32, output: Int32, errorOutput: Int32, environment: [String: String], workingDirectory: String,
         terminal: any ConsoleTerminal, signals: any ConsoleSignals, descriptorOwner: (any Sendable)? = nil) {
        self.descriptorOwner = descriptorOwner
        self.input = input
        self.output = output
        self.errorOutput = errorOutput
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.terminal = terminal
        self.signals = signals
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 { for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) } }
        wake = ends[0]
        wakeWriter.withLock { $0 = ends[1] }
    }

    deinit {
        if wake >= 0 { close(wake) }
        wakeWriter.withLock { if $0 >= 0 { close($0) } }
    }

    /// This process's own standard streams, terminal, environment and signals.
    static func process() -> Console {
        Console(input: STDIN_FILENO, output: STDOUT_FILENO, errorOutput: STDERR_FILENO, environment: ProcessInfo.processInfo.environment,
                workingDirectory: FileManager.default.currentDirectoryPath, terminal: LocalTerminal(), signals: ProcessSignals())
    }

    /// `path` as the person meant it: `~` in their home, relative to their working folder.
    func absolute(_ path: String) -> String {
        LocalPath.absolute(path, relativeTo: workingDirectory, home: environment["HOME"])
    }

    func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// These are this process's own streams and signals (not a launcher's).
    var isProcess: Bool { signals is ProcessSignals }

    /// The variable, or nil when it is unset or empty.
    func variable(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }

    // MARK: - Writing

    /// Writes all of `data` to `fd` (one of ours). Once a reader has gone away (EPIPE, seen
    /// where SIGPIPE does not end the process: inside `serve`) the rest is dropped and the run
    /// ends at once with 141, as a pipeline's writer does.
    func write(_ data: Data, to fd: Int32) {
        guard !data.isEmpty, !brokenPipe.load(ordering: .relaxed) else { return }
        stopped.pass()
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let count = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if count < 0 && errno == EINTR { continue }
                if count < 0 && errno == EAGAIN {
                    var ready = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&ready, 1, 1000)
                    continue
                }
                if count < 0 && errno == EPIPE, !brokenPipe.exchange(true, ordering: .relaxed) {
                    // What SIGPIPE does to a process of its own: the run ends now.
                    terminate(128 + SIGPIPE)
                }
                guard count > 0 else { return }
                offset += count
            }
        }
    }

    func write(_ text: String, to fd: Int32) { write(Data(text.utf8), to: fd) }

    /// The person's job was stopped (true) or continued (false): writes wait meanwhile, and
    /// the watchers are told.
    func setStopped(_ value: Bool) {
        stopped.set(stopped: value)
        for watcher in stopWatchers.withLock({ Array($0.watchers.values) }) { watcher(value) }
    }

    /// Calls `handler` each time the person's job stops or continues, until the returned
    /// closure is called.
    func onStopChange(_ handler: @escaping @Sendable (Bool) -> Void) -> @Sendable () -> Void {
        let id = stopWatchers.withLock { watchers in
            watchers.next += 1
            watchers.watchers[watchers.next] = handler
            return watchers.next
        }
        return { [weak self] in _ = self?.stopWatchers.withLock { $0.watchers.removeValue(forKey: id) } }
    }
    private let stopWatchers = Mutex<(next: Int, watchers: [Int: @Sendable (Bool) -> Void])>((0, [:]))

    // MARK: - Signals

    /// While the returned catcher lives, these signals are the command's to handle (cancel
    /// its stream with the signal, detach a session) instead of ending termind at once.
    func catchSignals(_ numbers: [Int32]) -> any SignalCatching { signals.catchSignals(numbers) }

    /// Calls `handler` on each window change until the returned closure is called.
    func onWindowChange(_ handler: @escaping @Sendable () -> Void) -> @Sendable () -> Void { signals.onWindowChange(handler) }

    /// Ends this run now with `code`, whatever it is still doing (a stream that did not end
    /// within its grace after a signal): the process exits, or the launcher is told.
    func terminate(_ code: Int32) { signals.terminate(code) }

    // MARK: - Reading input

    /// All of standard input, bounded: more than `limit` bytes is a usage error naming
    /// `what` (a runaway pipe must not take all of memory).
    func readAll(limit: Int, what: String) throws -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while data.count <= limit {
            let n = read(input, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 && errno == EAGAIN {
                var ready = pollfd(fd: input, events: Int16(POLLIN), revents: 0)
                _ = poll(&ready, 1, -1)
                continue
            }
            guard n > 0 else { break }
            data.append(contentsOf: buffer[0..<n])
        }
        guard data.count <= limit else {
            throw Invocation.UsageError(description: "\(what): standard input holds more than \(limit >> 20) MiB; give a file instead.")
        }
        return data
    }

    /// The first line of standard input (not a terminal), without its newline.
    func readFirstLine() -> String {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while bytes.count < 1 << 20 {
            let n = read(input, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1, byte != 10 else { break }
            bytes.append(byte)
        }
        defer { for index in bytes.indices { bytes[index] = 0 } }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reads `fd` on a thread of its own, handing each chunk to `body` until it returns
    /// false, the input ends (then `end`), or the run is over (`finish()`).
    func readInput(_ fd: Int32, _ body: @escaping @Sendable (Data) -> Bool, end: @escaping @Sendable () -> Void) {
        readers.withLock { $0 += 1 }
        let wake = self.wake
        let thread = SystemThread.named("termind.input") { [self] in
            defer {
                readers.withLock { $0 -= 1 }
                readers.broadcast()
            }
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                var ready = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
                if poll(&ready, 2, -1) < 0 {
                    if errno == EINTR { continue }
                    break
                }
                if ready[1].revents != 0 { return }  // the run is over: not another byte
                guard ready[0].revents != 0 else { continue }
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) { continue }
                guard n > 0 else { break }
                guard body(Data(buffer[0..<n])) else { return }
            }
            end()
        }
        thread.start()
    }

    /// The run is over: readers of `input` stop (and are waited for), so nothing of this
    /// run reads the person's terminal after it.
    func finish() {
        stopped.open()
        wakeWriter.withLock {
            if $0 >= 0 { close($0) }
            $0 = -1
        }
        readers.withLock(whenever: { $0 == 0 }) { _ in }
    }
}

/// Holds writers while a job is stopped; open for good once the run is over.
private final class StopGate: Sendable {
    private let gate = ConditionLock((stopped: false, opened: false))

    func pass() {
        gate.withLock(whenever: { !$0.stopped || $0.opened }) { _ in }
    }

    func set(stopped value: Bool) {
        gate.withLock { $0.stopped = value }
        gate.broadcast()
    }

    func open() {
        gate.withLock { $0.opened = true }
        gate.broadcast()
    }
}

/// What only the foreground process of the person's terminal does (`Console.terminal`).
protocol ConsoleTerminal: Sendable {
    /// Standard input (a terminal) in raw mode, or back as it was found.
    func setRaw(_ raw: Bool)
    /// One line typed after `prompt` (shown as given: callers escape it), without its
    /// newline: on the controlling terminal, or on standard input with the prompt on
    /// standard error; echo off unless `echo`. nil when there is no such terminal.
    func readLine(_ prompt: String, echo: Bool, controllingTerminal: Bool) -> String?
    /// `text` (shown as given) on the controlling terminal, if there is one.
    func show(_ text: String)
    /// `command "$1"` run by /bin/sh on `path`, on the controlling terminal; its exit
    /// status, -1 when it could not run.
    func edit(_ path: String, command: String) -> Int32
    /// Stops termind as a shell's job until it is continued (`~^Z`).
    func suspend()
}

/// Signals for the commands of one run (`Console.catchSignals`).
protocol ConsoleSignals: Sendable {
    func catchSignals(_ numbers: [Int32]) -> any SignalCatching
    func onWindowChange(_ handler: @escaping @Sendable () -> Void) -> @Sendable () -> Void
    func terminate(_ code: Int32)
}

/// The signals a command handles itself: the first one caught is kept and handed to
/// `onSignal`'s handler.
protocol SignalCatching: AnyObject, Sendable {
    var caught: Int32? { get }
    func onSignal(_ handler: @escaping @Sendable (Int32) -> Void)
    /// Offers each signal to `body` before recording it (see FirstSignal.divert).
    func divert(_ body: @escaping @Sendable (Int32) -> Bool)
}

/// This process's signals: SIGINT and the like through a SignalCatcher, SIGWINCH through a
/// dispatch source; `terminate` ends the process.
struct ProcessSignals: ConsoleSignals {
    func catchSignals(_ numbers: [Int32]) -> any SignalCatching { SignalCatcher(numbers) }

    func onWindowChange(_ handler: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        signal(SIGWINCH, SIG_IGN)
        let source = SignalSource(DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global()))
        source.source.withLock {
            $0.setEventHandler(handler: handler)
            $0.resume()
        }
        return { source.source.withLock { $0.cancel() } }
    }

    /// A dispatch signal source, which may be cancelled from any thread.
    private final class SignalSource: Sendable {
        let source: Mutex<any DispatchSourceSignal>
        init(_ source: sending any DispatchSourceSignal) { self.source = Mutex(source) }
    }

    func terminate(_ code: Int32) {
        LocalTerminal.restoreActive()
        StreamView.restoreTerminal()
        _exit(code)
    }
}
