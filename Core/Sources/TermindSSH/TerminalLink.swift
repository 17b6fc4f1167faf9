import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// What a PTY channel's pump does with the channel's output when the engine bridges a
/// person's terminal itself (`TerminalLink`). Every closure runs on the engine thread, in
/// order, and must not block or wait. A class: the pump asks it several times a pass, and a
/// struct's copy retained each of its closures every time.
public final class TerminalTap: Sendable {
    /// Every chunk of the channel's output (both streams), in order, whether or not a
    /// terminal is linked: returns what the linked terminal shows (nothing goes anywhere
    /// else: without a link the returned bytes are dropped). A durable session's screen model
    /// and shell integration read the output here.
    public let output: @Sendable (Data) -> Data
    /// Whether the pump may read more output now (a consumer of what `output` took has
    /// room); call `SSHChannel.wake()` once it has again.
    public let hasRoom: @Sendable () -> Bool
    /// Whether the linked terminal's keys may go to the channel now (shell integration holds
    /// them while its bootstrap runs); call `SSHChannel.wake()` once they may.
    public let keysAllowed: @Sendable () -> Bool
    /// After a step in which output went through `output`, once what it let through was
    /// written to the terminal: where a consumer starts work of its own (a screen model's
    /// drawing) without delaying the screen.
    public let wrote: @Sendable () -> Void

    public init(output: @escaping @Sendable (Data) -> Data, hasRoom: @escaping @Sendable () -> Bool = { true },
                keysAllowed: @escaping @Sendable () -> Bool = { true }, wrote: @escaping @Sendable () -> Void = {}) {
        self.output = output
        self.hasRoom = hasRoom
        self.keysAllowed = keysAllowed
        self.wrote = wrote
    }
}

/// A person's terminal that a PTY channel's pump moves itself, on the engine thread, as
/// OpenSSH's client loop does: keys read from `input` go to the channel through OpenSSH's
/// escape sequences (`TerminalEscapes`), and the output the channel's `TerminalTap` lets
/// through is written to `output`. No other thread stands between a key and the socket, or
/// between the socket and the screen.
///
/// The link works on copies of the descriptors (a terminal is opened again with a
/// non-blocking description of its own, so the client's is left as it was; a link cannot be
/// made where that fails), closed when it is unlinked or the channel ends. It starts held:
/// nothing is read or written until `resume()` (the client's terminal is raw); `prepend`
/// puts a durable session's redraw before the output held meanwhile. `pause()` holds it
/// again (the client is suspended or stopped: the terminal is its shell's). Output waiting
/// for a held or slow terminal is bounded (`limit`): beyond it the channel is not read, so
/// the server's window holds the remote side back. Escapes are read even while the keys
/// themselves must wait (shell integration's bootstrap); `~?` is answered on the terminal,
/// `~.`, `~^Z` and `~d` are reported in `events`, as is the terminal going away. The keys
/// typed before an escape go; after `~^Z` the rest waits for the next resume, and nothing
/// more is read or written after `~.` (the client ends the session) nor read after `~d`.
///
/// `@unchecked Sendable`: the `var`s from `resumed` to `wakeEngine` are touched only under `lock`;
/// the engine-thread ones only by the pump the link is installed in, on the engine thread, or by
/// `finish()` from `SSHChannel.link` when it was never installed (no pump has it then).
public final class TerminalLink: @unchecked Sendable {
    public enum Event: Sendable, Equatable {
        case disconnect, suspend, detach
        /// The terminal went away (its read or write failed: the window closed, the reader of
        /// a piped stdout went away — `outputError` says which).
        case hungUp
    }

    /// What the person did on the terminal, in order; ends when the link is unlinked or its
    /// channel ends.
    public let events: AsyncStream<Event>
    private let reporter: AsyncStream<Event>.Continuation
    /// Output held for the terminal stops the channel's reading beyond this.
    static let limit = 256 * 1024

    // Asked for from any thread (under `lock`).
    private let lock = PlainLock()
    private var resumed = false
    /// After `~^Z`: no key is read until the next `resume`.
    private var keysHeld = false
    /// After `~.` (keys and output) or `~d` (keys): for good.
    private var keysEnded = false
    private var outputEnded = false
    private var finished = false
    private var prefix: Data?
    private var failedWrite: Int32?
    private var unlinkWaiters: [CheckedContinuation<Void, Never>] = []
    private var unlinkDeadline: DispatchTime?
    private var wakeEngine: (@Sendable () -> Void)?

    // Engine thread only.
    private var input: LocalDescriptor?
    private var output: LocalDescriptor?
    private var escapes: TerminalEscapes
    /// Keys filtered and not yet taken by the channel.
    private var keys = Data()
    /// Keys typed after `~^Z` in the same read: they follow the next resume.
    private var afterSuspend = Data()
    private var hungUp = false
    private var queue: [Data] = []
    private var queueOffset = 0
    private(set) var queuedBytes = 0

    /// `input` and `output` are borrowed (the link opens or copies its own); `detachable`:
    /// `~d` detaches (a durable session).
    public init(input: Int32, output: Int32, detachable: Bool) throws {
        let adoptedInput = try LocalDescriptor.adopt(input, writing: false, role: "terminal input")
        do {
            self.output = try LocalDescriptor.adopt(output, writing: true, role: "terminal output")
        } catch {
            adoptedInput.close()
            throw error
        }
        self.input = adoptedInput
        escapes = TerminalEscapes(detachable: detachable)
        (events, reporter) = AsyncStream.makeStream(of: Event.self)
    }

    deinit { closeDescriptors() }

    /// Lets keys and output move (first after the client's terminal went raw, then after
    /// each pause); `prefix` (a redraw) is written before any output held meanwhile.
    public func resume(prefix: Data = Data()) {
        prepend(prefix)
        let wake: (@Sendable () -> Void)? = lock.withLock {
            resumed = true
            keysHeld = false
            return wakeEngine
        }
        wake?()
    }

    /// Puts `prefix` before any output held so far, without letting anything move yet.
    public func prepend(_ prefix: Data) {
        guard !prefix.isEmpty else { return }
        lock.withLock { self.prefix = (self.prefix ?? Data()) + prefix }
    }

    /// Holds keys and output (the client is suspended or stopped) until `resume`: nothing is
    /// read from or written to a terminal that belongs to another program meanwhile.
    public func pause() {
        lock.withLock { resumed = false }
    }

    /// With `hungUp`: the errno of a write to the terminal's output that failed for a reason
    /// other than the terminal going away (EIO: its window closed) — a piped stdout's reader
    /// gone (EPIPE), a full disk. nil when its input ended or failed, or the terminal went.
    public var outputFailure: Int32? { lock.withLock { failedWrite == EIO ? nil : failedWrite } }

    // MARK: - The pump's side (engine thread)

    func linked(wake: @escaping @Sendable () -> Void) {
        lock.withLock { wakeEngine = wake }
    }

    /// Asks the pump to let the link go: waits until what is held for the terminal was
    /// written (for at most `within` seconds) and the descriptors are closed.
    func unlink(within seconds: Double) async {
        await withCheckedContinuation { continuation in
            let wake: (@Sendable () -> Void)?? = lock.withLock {
                guard !finished else { return .none }
                unlinkWaiters.append(continuation)
                if unlinkDeadline == nil { unlinkDeadline = .now() + seconds }
                return .some(wakeEngine)
            }
            switch wake {
            case .none: continuation.resume()
            case .some(let wake): wake?()
            }
        }
    }

    /// Whether output may be written now.
    private var writing: Bool { lock.withLock { resumed && !outputEnded } }
    /// Whether keys may be read now.
    private var reading: Bool { lock.withLock { resumed && !keysHeld && !keysEnded } }

    /// Whether an unlink is asked for and may end now: what is held went, or cannot go (a
    /// held link writes nothing more), or its time to flush is up.
    var unlinkDue: Bool {
        let (deadline, writing): (DispatchTime?, Bool) = lock.withLock { (unlinkDeadline, resumed && !outputEnded) }
        guard let deadline else { return false }
        return drained || !writing || DispatchTime.now() >= deadline
    }

    /// Whether everything meant for the terminal has gone (or can never go).
    var drained: Bool { queuedBytes == 0 || hungUp || output == nil || lock.withLock { outputEnded } }

    /// Whether the pump should stop reading the channel for this link.
    var isFull: Bool { queuedBytes >= Self.limit && !drained }

    func enqueue(_ data: Data) {
        guard !data.isEmpty, !hungUp, output != nil else { return }
        queue.append(data)
        queuedBytes += data.count
    }

    /// What to wait for while the engine sleeps: keys when none wait to be sent (so a key
    /// that cannot go yet never makes poll() return at once), the terminal's room for output.
    func addPollRequests(to requests: inout [pollfd]) {
        guard !hungUp else { return }
        if let input, input.pollable, keys.isEmpty, afterSuspend.isEmpty, reading {
            requests.append(pollfd(fd: input.fd, events: Int16(POLLIN), revents: 0))
        }
        if let output, output.pollable, queuedBytes > 0 || lock.withLock({ prefix != nil }), writing {
            requests.append(pollfd(fd: output.fd, events: Int16(POLLOUT), revents: 0))
        }
    }

    /// The terminal's input descriptor (the engine knows whether its last poll() found keys).
    var inputFD: Int32? { input?.fd }

    /// Reads the keys typed (when none wait) and acts on escapes; `scratch` is the engine's
    /// buffer. Escapes are read even while the keys themselves must wait to be sent.
    /// `inputQuiet`: the poll() just before found no keys, so no read is tried.
    func readKeys(scratch: UnsafeMutablePointer<CChar>, inputQuiet: Bool, progressed: inout Bool) {
        guard !hungUp, reading else { return }
        if keys.isEmpty, !afterSuspend.isEmpty {
            swap(&keys, &afterSuspend)
            return
        }
        guard keys.isEmpty, !inputQuiet, let input else { return }
        let n = input.read(scratch, 16 << 10)
        if n > 0 {
            progressed = true
            let typed = UnsafeRawBufferPointer(start: scratch, count: n)
            if escapes.takesAsTyped(typed) {
                keys = Data(typed)
                return
            }
            var held = false
            for action in escapes.filter(Data(typed)) {
                switch action {
                case .send(let bytes):
                    if held { afterSuspend.append(bytes) } else if keys.isEmpty { keys = bytes } else { keys.append(bytes) }
                case .help: enqueue(Data(TerminalEscapes.help(detachable: escapes.detachable).utf8))
                case .disconnect: held = true; hold(.disconnect)
                case .suspend: held = true; hold(.suspend)
                case .detach: held = true; hold(.detach)
                }
            }
        } else if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            progressed = true
            hangUp(writeError: nil)
        }
    }

    /// Keys waiting to be sent (those typed before an escape go too).
    var pendingKeys: Data? { keys.isEmpty || hungUp ? nil : keys }

    /// `count` keys went to the channel.
    func sent(_ count: Int) {
        if count == keys.count { keys = Data() } else { keys.removeFirst(count) }
    }

    /// An escape the client acts on: `~^Z` holds keys and output until the next resume (the
    /// terminal goes back to the shell that suspends termind), `~d` ends the keys, `~.` ends
    /// keys and output (the client ends the session and says so on the terminal).
    private func hold(_ event: Event) {
        lock.withLock {
            switch event {
            case .disconnect:
                keysEnded = true
                outputEnded = true
            case .detach:
                keysEnded = true
            case .suspend, .hungUp:
                keysHeld = true
                resumed = false
            }
        }
        reporter.yield(event)
    }

    private func hangUp(writeError: Int32?) {
        guard !hungUp else { return }
        hungUp = true
        queue.removeAll()
        queueOffset = 0
        queuedBytes = 0
        lock.withLock { failedWrite = writeError }
        reporter.yield(.hungUp)
    }

    /// Writes what is held to the terminal until it would block.
    func flush(progressed: inout Bool) {
        guard let output, !hungUp, writing else { return }
        if let wanted = lock.withLock({ () -> Data? in defer { prefix = nil }; return prefix }) {
            // Before everything held meanwhile (a durable session's redraw).
            if queueOffset > 0, let head = queue.first { queue[0] = head.dropFirst(queueOffset); queueOffset = 0 }
            queue.insert(wanted, at: 0)
            queuedBytes += wanted.count
        }
        while let head = queue.first {
            let n = head.withUnsafeBytes { raw in output.write(raw.baseAddress! + queueOffset, raw.count - queueOffset) }
            if n > 0 {
                progressed = true
                queueOffset += n
                queuedBytes -= n
                if queueOffset == head.count { queue.removeFirst(); queueOffset = 0 }
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            progressed = true
            hangUp(writeError: n < 0 ? errno : EIO)
            return
        }
    }

    /// Closes the descriptors and ends `events`; unlink waiters return.
    func finish() {
        closeDescriptors()
        queue.removeAll()
        queuedBytes = 0
        let waiters: [CheckedContinuation<Void, Never>] = lock.withLock {
            finished = true
            wakeEngine = nil
            defer { unlinkWaiters.removeAll() }
            return unlinkWaiters
        }
        reporter.finish()
        for waiter in waiters { waiter.resume() }
    }

    private func closeDescriptors() {
        input?.close()
        input = nil
        output?.close()
        output = nil
    }
}
