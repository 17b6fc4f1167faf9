internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// Which stream a chunk of channel output came from.
public enum ExecStream: Sendable, Equatable {
    case stdout, stderr
}

/// A command's stdout and stderr, each kept up to `limit` bytes; what is beyond is read,
/// dropped and marks the output `truncated`.
public struct ExecOutput: Sendable {
    public let limit: Int
    public private(set) var stdout = Data()
    public private(set) var stderr = Data()
    public private(set) var truncated = false

    public init(limit: Int) { self.limit = limit }

    public mutating func append(_ stream: ExecStream, _ chunk: Data) {
        let kept = stream == .stdout ? stdout.count : stderr.count
        let room = max(0, limit - kept)
        if chunk.count > room { truncated = true }
        if stream == .stdout { stdout += chunk.prefix(room) } else { stderr += chunk.prefix(room) }
    }
}

/// How a channel's remote process ended.
public struct ChannelExit: Sendable, Equatable {
    /// The remote exit status; nil when the process ended by a signal or reported nothing.
    public var status: Int32?
    public var signal: String?

    /// How a command ends whose handed-over output could not be written (`failure`, the
    /// write's errno; its channel was closed): the reader gone (EPIPE) is SIGPIPE, as a
    /// local pipeline's writer ends; any other failure (a full disk) is
    /// `ssh.local_output_failed` naming `what`, never the remote status of a command whose
    /// output was lost.
    public static func afterLocalOutputFailure(_ failure: Int32, of what: String) throws -> ChannelExit {
        guard failure == EPIPE else {
            throw SSHError.make(.sshLocalOutputFailed, "Writing the output of \(what) failed: \(String(cString: strerror(failure))); its channel was closed.")
        }
        return ChannelExit(status: nil, signal: "PIPE")
    }
}

/// One channel of a shared SSH connection: a command, a shell with a PTY, a direct-tcpip
/// stream. Its output arrives through `next()` with backpressure: when `bufferLimit`
/// bytes wait unread, the session stops reading this channel, so the server's window for
/// it closes and only this channel pauses. `write` suspends while `bufferLimit` bytes of
/// input are queued. Closing it never disturbs other channels of the connection.
public final class SSHChannel: Sendable {
    let engine: SessionEngine
    let state: ChannelState
    private let pump: ChannelPump
    let isPTY: Bool
    /// Agent forwarding was asked for and the server agreed.
    public let agentForwarded: Bool
    /// The connection (and through it the route) stays open while a channel is in use.
    private let owner: SSHConnection

    init(engine: SessionEngine, pump: ChannelPump, isPTY: Bool, owner: SSHConnection, agentForwarded: Bool = false) {
        self.owner = owner
        self.agentForwarded = agentForwarded
        self.engine = engine
        self.pump = pump
        self.state = pump.state
        self.isPTY = isPTY
    }

    /// The next chunk of output, or nil once the channel has ended (then `exit` is set).
    /// Throws when the connection was lost or the channel failed.
    public func next() async throws -> (ExecStream, Data)? {
        try await state.next(wake: engine)
    }

    /// Queues `data` for the remote side, suspending while the input queue is full.
    public func write(_ data: Data) async throws {
        guard !data.isEmpty else { return }
        try await state.enqueue(data, wake: engine)
    }

    /// Queues `data` when it fits under the input bound now, without suspending; false when
    /// it would have to wait or the input is closed (then `write` waits, or says why).
    public func offer(_ data: Data) -> Bool {
        guard !data.isEmpty else { return true }
        guard state.offer(data) else { return false }
        engine.wake()
        return true
    }

    /// Sends EOF once the queued input has been written (the remote side sees its stdin end).
    public func closeInput() {
        state.requestEOF()
        engine.wake()
    }

    /// Changes the PTY's size (a window-change request). Requests are ordered; while one is
    /// in flight only the newest pending size is kept.
    public func resize(columns: Int, rows: Int) async throws {
        guard isPTY else { throw SSHError.make(.sshNotATerminal, "This channel has no terminal to resize.") }
        guard columns > 0, rows > 0, columns <= 10_000, rows <= 10_000 else {
            throw SSHError.make(.sshBadSize, "A terminal size must be between 1×1 and 10000×10000, not \(columns)×\(rows).")
        }
        guard state.claimResize(columns: columns, rows: rows) else { return }
        let pump = self.pump
        let endpoint = engine.endpoint
        let state = self.state
        var finished = false
        // A failed or cancelled resize must not leave later ones blocked.
        defer { if !finished { state.resetResize() } }
        while let size = state.takeResize() {
            _ = try await engine.run("Resizing the terminal", lane: pump) { _ -> Int32? in
                guard let channel = pump.channel else { throw SSHError.make(.sshClosed, "The channel to \(endpoint) is closed.") }
                let rc = libssh2_channel_request_pty_size_ex(channel, Int32(size.columns), Int32(size.rows), 0, 0)
                if rc == termind_ssh2_error_eagain() { return nil }
                guard rc == 0 else { throw SSHError.make(.sshResizeFailed, "\(endpoint) refused the window change.") }
                return rc
            }
        }
        finished = true
    }

    /// How the remote process ended; nil until the channel has ended.
    public var exit: ChannelExit? { state.exitInfo }

    /// For a channel opened with a `TerminalTap`: makes `link` the person's terminal this
    /// channel's pump moves itself (see TerminalLink). `onLinked` runs on the engine thread at
    /// the moment the link takes over, between two chunks of output: what the tap saw before
    /// it was not the link's, what it sees after is. A terminal linked before is let go (its
    /// descriptors closed, what it held dropped). Throws when the channel has ended; the
    /// link is then finished.
    public func link(_ link: TerminalLink, onLinked: @escaping @Sendable () -> Void = {}) async throws {
        let pump = self.pump
        let engine = self.engine
        let endpoint = engine.endpoint
        do {
            // Not cancellable: once queued, the link is the pump's or finished here, never both.
            try await Task.detached {
                _ = try await engine.run("Linking the terminal", lane: pump) { _ -> Bool? in
                    guard pump.hasTap, !pump.isClosing else { throw SSHError.make(.sshClosed, "The channel to \(endpoint) has ended.") }
                    pump.install(link) { engine.wake() }
                    onLinked()
                    return true
                }
            }.value
        } catch {
            link.finish()
            throw error
        }
    }

    /// Lets `link` go: what it holds for the terminal is written first (for at most
    /// `seconds`; nothing while it is paused), then its descriptors are closed.
    public func unlink(_ link: TerminalLink, within seconds: Double = 2) async {
        await link.unlink(within: seconds)
    }

    /// Wakes the engine: a `TerminalTap`'s consumer has room again, or its keys may go.
    public func wake() { engine.wake() }

    /// With an output descriptor handed over (`ChannelDescriptors`): the errno of the write
    /// that failed and ended the channel (EPIPE when its reader went away), else nil.
    public var localOutputError: Int32? { state.localOutputError }

    /// How the channel's command ended, for its caller: `exit`, unless a handed-over output
    /// could not be written (`ChannelExit.afterLocalOutputFailure`, naming `what`).
    public func outcome(of what: String) throws -> ChannelExit? {
        guard let failure = localOutputError else { return exit }
        return try ChannelExit.afterLocalOutputFailure(failure, of: what)
    }

    /// Closes this channel only (unread output is discarded, unsent input dropped).
    public func close() {
        state.requestClose()
        engine.wake()
    }

    /// Closes this channel, sending its remote process `signal` (e.g. "INT" for a Ctrl-C,
    /// "TERM") first instead of the channel's default (TERM for a command, HUP for a shell).
    public func close(signal: String) {
        state.requestClose(signal: signal)
        engine.wake()
    }

    /// A channel nobody holds any more is closed, giving its slot (sshd's MaxSessions) back.
    deinit {
        state.requestClose()
        engine.wake()
    }

    /// Reads everything until the channel ends, each stream bounded by `limit` bytes (the
    /// rest is read and discarded, and `truncated` is set).
    func collect(limit: Int, output: (@Sendable (ExecStream, Data) async -> Void)?) async throws -> ExecOutput {
        var collected = ExecOutput(limit: limit)
        while let (stream, chunk) = try await next() {
            if let output { await output(stream, chunk) } else { collected.append(stream, chunk) }
        }
        return collected
    }
}

/// The channel's buffers between its consumer/producer (any thread) and its pump (the
/// engine thread), in one Mutex.
final class ChannelState: Sendable {
    let limit: Int
    private let buffers = Mutex(Buffers())

    private struct Buffers {
        var output: [(ExecStream, Data)] = []
        var outputBytes = 0
        var waiter: CheckedContinuation<(ExecStream, Data)?, Error>?
        var ended = false
        var failure: TermindError?
        var exitValue: ChannelExit?

        var input: [Data] = []
        var inputBytes = 0
        var inputOffset = 0
        var writers: [(UInt64, CheckedContinuation<Void, Error>)] = []  // (ticket, writer)
        var nextTicket: UInt64 = 0
        var eofRequested = false
        var closeRequested = false
        var closeSignal: String?
        var pendingResize: (columns: Int, rows: Int)?
        var resizing = false
        var localOutputErrno: Int32?
    }

    init(limit: Int) { self.limit = max(64 * 1024, limit) }

    var exitInfo: ChannelExit? { buffers.withLock { $0.exitValue } }

    /// errno of the write to a handed-over output descriptor that failed (EPIPE: its
    /// reader went away), set before the channel ends.
    var localOutputError: Int32? {
        get { buffers.withLock { $0.localOutputErrno } }
        set { buffers.withLock { b in if b.localOutputErrno == nil { b.localOutputErrno = newValue } } }
    }

    // Consumer side.
    func next(wake engine: SessionEngine) async throws -> (ExecStream, Data)? {
        try await withTaskCancellationHandler {
            try await waitForOutput(wake: engine)
        } onCancel: {
            let waiting: CheckedContinuation<(ExecStream, Data)?, Error>? = buffers.withLock { b in
                defer { b.waiter = nil }
                return b.waiter
            }
            waiting?.resume(throwing: CancellationError())
        }
    }

    private func waitForOutput(wake engine: SessionEngine) async throws -> (ExecStream, Data)? {
        try await withCheckedThrowingContinuation { continuation in
            let (immediate, wakeEngine): (Result<(ExecStream, Data)?, Error>?, Bool) = buffers.withLock { b in
                if !b.output.isEmpty {
                    let wasFull = b.outputBytes >= limit
                    let item = b.output.removeFirst()
                    b.outputBytes -= item.1.count
                    return (.success(item), wasFull && b.outputBytes < limit)
                }
                if let failure = b.failure { return (.failure(failure), false) }
                if b.ended { return (.success(nil), false) }
                if Task.isCancelled { return (.failure(CancellationError()), false) }
                b.waiter = continuation
                return (nil, false)
            }
            if wakeEngine { engine.wake() }
            if let immediate { continuation.resume(with: immediate) }
        }
    }

    func enqueue(_ data: Data, wake engine: SessionEngine) async throws {
        let token = SharedSlot<UInt64?>(nil)
        try await withTaskCancellationHandler {
            try await queueInput(data, wake: engine, token: token)
        } onCancel: {
            // The bytes stay queued (they are part of the stream); only the wait ends.
            let waiting: CheckedContinuation<Void, Error>? = buffers.withLock { b in
                guard let mine = token.value, let index = b.writers.firstIndex(where: { $0.0 == mine }) else { return nil }
                return b.writers.remove(at: index).1
            }
            waiting?.resume(throwing: CancellationError())
        }
    }

    private func queueInput(_ data: Data, wake engine: SessionEngine, token: SharedSlot<UInt64?>) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let immediate: Result<Void, Error>? = buffers.withLock { b in
                if let failure = b.failure { return .failure(failure) }
                if b.ended || b.closeRequested || b.eofRequested {
                    return .failure(SSHError.make(.sshClosed, "The channel's input is closed."))
                }
                b.input.append(data)
                b.inputBytes += data.count
                if b.inputBytes <= limit { return .success(()) }
                if Task.isCancelled { return .failure(CancellationError()) }
                b.nextTicket += 1
                token.value = b.nextTicket
                b.writers.append((b.nextTicket, continuation))
                return nil
            }
            engine.wake()
            if let immediate { continuation.resume(with: immediate) }
        }
    }

    /// `data` queued if the input is open and it fits under the limit now.
    func offer(_ data: Data) -> Bool {
        buffers.withLock { b in
            guard b.failure == nil, !b.ended, !b.closeRequested, !b.eofRequested, b.inputBytes + data.count <= limit else { return false }
            b.input.append(data)
            b.inputBytes += data.count
            return true
        }
    }

    func requestEOF() { buffers.withLock { $0.eofRequested = true } }
    /// Closing ends the consumer's side at once (unread output is dropped, `next()` returns
    /// nil); the pump finishes the close handshake with the server in the background.
    func requestClose(signal: String? = nil) {
        buffers.withLock { b in
            b.closeRequested = true
            if b.closeSignal == nil { b.closeSignal = signal }
        }
        finish(exit: nil, error: nil)
    }

    func claimResize(columns: Int, rows: Int) -> Bool {
        buffers.withLock { b in
            b.pendingResize = (columns, rows)
            if b.resizing { return false }
            b.resizing = true
            return true
        }
    }

    func resetResize() { buffers.withLock { b in b.resizing = false; b.pendingResize = nil } }

    func takeResize() -> (columns: Int, rows: Int)? {
        buffers.withLock { b in
            guard let size = b.pendingResize else { b.resizing = false; return nil }
            b.pendingResize = nil
            return size
        }
    }

    // Pump side (engine thread).
    var roomForOutput: Int {
        buffers.withLock { b in b.closeRequested ? limit : b.ended || b.failure != nil ? 0 : max(0, limit - b.outputBytes) }
    }
    /// Whether its user asked to close the channel: nil when not, else the signal asked for
    /// (empty when none).
    var closeRequest: String?? { buffers.withLock { b in b.closeRequested ? .some(b.closeSignal) : .none } }
    var wantsEOF: Bool { buffers.withLock { b in b.eofRequested && b.input.isEmpty } }

    func deliver(_ stream: ExecStream, _ data: Data) {
        let waiting: CheckedContinuation<(ExecStream, Data)?, Error>? = buffers.withLock { b in
            if b.closeRequested { return nil }
            if let waiter = b.waiter {
                b.waiter = nil
                return waiter
            }
            b.output.append((stream, data))
            b.outputBytes += data.count
            return nil
        }
        waiting?.resume(returning: (stream, data))
    }

    /// The unsent input at the head of the queue (the same bytes until `consumed`).
    func pendingInput() -> Data? {
        buffers.withLock { b in
            guard let head = b.input.first else { return nil }
            return b.inputOffset == 0 ? head : head.dropFirst(b.inputOffset)
        }
    }

    func consumed(_ count: Int) {
        let released: [CheckedContinuation<Void, Error>] = buffers.withLock { b in
            b.inputOffset += count
            b.inputBytes -= count
            if let head = b.input.first, b.inputOffset >= head.count {
                b.input.removeFirst()
                b.inputOffset = 0
            }
            guard b.inputBytes <= limit else { return [] }
            defer { b.writers.removeAll() }
            return b.writers.map(\.1)
        }
        for writer in released { writer.resume() }
    }

    func finish(exit: ChannelExit?, error: TermindError?) {
        let ended: (waiting: CheckedContinuation<(ExecStream, Data)?, Error>?, blocked: [CheckedContinuation<Void, Error>])? = buffers.withLock { b in
            guard !b.ended else { return nil }
            b.ended = true
            b.exitValue = exit
            b.failure = error
            defer {
                b.waiter = nil
                b.writers.removeAll()
                b.input.removeAll()
                b.inputBytes = 0
            }
            return (b.waiter, b.writers.map(\.1))
        }
        guard let ended else { return }
        if let waiting = ended.waiting {
            if let error { waiting.resume(throwing: error) } else { waiting.resume(returning: nil) }
        }
        for writer in ended.blocked { writer.resume(throwing: error ?? SSHError.make(.sshClosed, "The channel closed before its input was sent.")) }
    }
}

/// Moves one channel's data in bounded steps: input out, stdout and stderr in (while the
/// consumer has room), EOF, then the close handshake, the exit status, and freeing.
///
/// With descriptors handed over (`ChannelDescriptors`) the pump moves those streams itself,
/// on the engine thread, like OpenSSH's own loop: stdin is read into a bounded buffer and
/// written to the channel, channel output is read into a bounded buffer per stream and
/// written to its descriptor; a buffer that is not empty stops reading its source (the
/// server's window closes for this channel alone). No other thread touches those bytes.
///
/// `@unchecked Sendable`: its `var`s are touched only on the engine thread (`step`, `fail` from
/// `die`, the `engine.run` bodies that read `channel` or `install` a link) once `attach` handed it
/// over; before that only its maker touches it (a refused `attach` runs `fail` there). `state` is
/// a ChannelState, under its own lock.
final class ChannelPump: EnginePump, @unchecked Sendable {
    private(set) var channel: OpaquePointer?
    let state: ChannelState
    private let endpoint: String
    /// Open, closing, the close handshake: decided by the pure machine, performed here.
    private(set) var lifecycle: ChannelLifecycle
    private var closing: Bool { lifecycle.isClosing }
    /// At most this many bytes move per step, so one busy channel cannot starve the others.
    private static let stepBudget = 512 * 1024
    /// Each handed-over stream's buffer: a quarter of a pass's budget, read and written whole.
    static let localBufferSize = 256 * 1024

    /// The handed-over descriptors (the pump's own copies, closed when it ends) and their
    /// buffers: input from `localInput`; outputs[0] stdout, [1] stderr.
    private var localInput: (descriptor: LocalDescriptor, buffer: ByteQueue)?
    private var localInputEnded = false
    private var localOutputs: [(descriptor: LocalDescriptor, buffer: ByteQueue)?]

    /// A terminal channel bridged by the engine (`TerminalTap`): its output goes through the
    /// tap to the linked terminal, if any, never to `next()`; its keys come from the link
    /// after any input queued with `write`.
    private let tap: TerminalTap?
    private var link: TerminalLink?

    init(channel: OpaquePointer, state: ChannelState, endpoint: String, hangup: String? = nil, local: LocalDescriptors = LocalDescriptors(),
         tap: TerminalTap? = nil) {
        self.channel = channel
        self.state = state
        self.endpoint = endpoint
        // `hangup` goes to the remote process group when this side closes the channel first
        // (OpenSSH otherwise keeps a running command and its channel until the command exits).
        lifecycle = ChannelLifecycle(.session(hangup: hangup))
        self.tap = tap
        localInput = local.input.map { ($0, ByteQueue(capacity: Self.localBufferSize)) }
        localOutputs = [local.output, local.error].map { $0.map { ($0, ByteQueue(capacity: Self.localBufferSize)) } }
    }

    deinit { closeLocal() }

    override var wantsSessionInput: Bool {
        if closing { return true }
        if let tap { return !(link?.isFull ?? false) && tap.hasRoom() }
        // A stream with room: its consumer's queue, or an empty buffer for its descriptor.
        let queueRoom = state.roomForOutput > 0
        return localOutputs.contains { output in output.map { $0.buffer.isEmpty } ?? queueRoom }
    }

    override func addPollRequests(to requests: inout [pollfd]) {
        guard !closing else { return }
        if let input = localInput, input.descriptor.pollable, !localInputEnded, input.buffer.isEmpty {
            requests.append(pollfd(fd: input.descriptor.fd, events: Int16(POLLIN), revents: 0))
        }
        for case let output? in localOutputs where output.descriptor.pollable && !output.buffer.isEmpty {
            requests.append(pollfd(fd: output.descriptor.fd, events: Int16(POLLOUT), revents: 0))
        }
        link?.addPollRequests(to: &requests)
    }

    var hasTap: Bool { tap != nil }

    /// Whether the channel is closing or gone (engine thread).
    var isClosing: Bool { closing || channel == nil }

    /// Makes `link` the terminal this pump moves (engine thread); one linked before is let go.
    func install(_ link: TerminalLink, wake: @escaping @Sendable () -> Void) {
        self.link?.finish()
        self.link = link
        link.linked(wake: wake)
    }

    override func step(_ engine: SessionEngine, _ session: OpaquePointer) -> PumpStep {
        guard let channel else { return .finished }
        let eagain = Int(termind_ssh2_error_eagain())
        var progressed = false
        if let signal = state.closeRequest { lifecycle.closeRequested(signal: signal) }

        if !closing {
            // Input: the same bytes are offered again after EAGAIN.
            var budget = Self.stepBudget
            if let input = localInput {
                while budget > 0 {
                    if input.buffer.isEmpty && !localInputEnded {
                        let n = input.buffer.fill(atMost: input.buffer.capacity, scratch: engine.scratchBytes) { input.descriptor.read($0, $1) }
                        if n > 0 { progressed = true }
                        else if n < 0 && errno == EINTR { continue }
                        else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                        else { localInputEnded = true; progressed = true }  // the end, or a read error: EOF either way
                    }
                    guard !input.buffer.isEmpty, engine.canSend else { break }
                    let n = input.buffer.drain { Int(termind_ssh2_channel_write(channel, $0.assumingMemoryBound(to: CChar.self), min($1, budget))) }
                    if n > 0 { budget -= n; progressed = true; continue }
                    if n == eagain { break }
                    if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while sending input") }
                    lifecycle.refused()  // the channel is gone on the server side
                    break
                }
            } else {
                while budget > 0, engine.canSend, let pending = state.pendingInput() {
                    let n = pending.withUnsafeBytes { raw in
                        Int(termind_ssh2_channel_write(channel, raw.baseAddress!.assumingMemoryBound(to: CChar.self), min(raw.count, budget)))
                    }
                    if n > 0 { state.consumed(n); budget -= n; progressed = true; continue }
                    if n == eagain { break }
                    if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while sending input") }
                    lifecycle.refused()  // the channel is gone on the server side
                    break
                }
                // Then the linked terminal's keys, read as they come (no thread in between) and
                // sent at once: a person waits for their echo, so they do not wait for the rest
                // of the pass as bulk data does. Escapes are read even when keys cannot go.
                if let link {
                    link.readKeys(scratch: engine.scratch, inputQuiet: link.inputFD.map { engine.pollFoundNoInput(on: $0) } ?? false, progressed: &progressed)
                }
                if let link, let tap, !closing, budget > 0, engine.canSend, let keys = link.pendingKeys, tap.keysAllowed() {
                    let n = keys.withUnsafeBytes { raw in
                        Int(termind_ssh2_channel_write(channel, raw.baseAddress!.assumingMemoryBound(to: CChar.self), min(raw.count, budget)))
                    }
                    if n > 0 {
                        link.sent(n)
                        progressed = true
                        engine.flush()  // a failure is the pass's to find, at its own flush
                    } else if n != eagain {
                        if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while sending keys") }
                        lifecycle.refused()
                    }
                }
            }
            let inputDone = localInput.map { localInputEnded && $0.buffer.isEmpty } ?? state.wantsEOF
            if lifecycle.wantsToSendEOF(inputDone: inputDone) {
                let outcome = ChannelLifecycle.Outcome.of(libssh2_channel_send_eof(channel), eagain: Int32(eagain), isFatal: SessionEngine.isFatal)
                if outcome == .sessionLost { return .sessionLost("while closing input") }
                lifecycle.eofSending(outcome)
                if outcome == .done { progressed = true }
            }
            // Output, while the consumer has room.
            var readBudget = Self.stepBudget
            if let tap {
                // A bridged terminal: every chunk through the tap, what it shows to the link.
                var tapped = false
                defer { if tapped { tap.wrote() } }
                // Whether the reading ended with libssh2 holding none of the channel's data: a
                // round read nothing, and no bytes came from the server during it (a stderr
                // read may pull in packets for stdout).
                var readAll = false
                while readBudget > 0, !closing, !(link?.isFull ?? false), tap.hasRoom() {
                    let receivedBefore = engine.receivedBytes
                    var read = false
                    for id in [Int32(0), SSH_EXTENDED_DATA_STDERR] where !closing {
                        let n = termind_ssh2_channel_read(channel, id, engine.scratch, min(SessionEngine.scratchSize, readBudget))
                        if n > 0 {
                            read = true
                            readBudget -= n
                            progressed = true
                            // The tap sees every chunk, linked or not (the screen model); what
                            // it lets through is written at once, before reading on.
                            let visible = tap.output(Data(bytes: engine.scratch, count: n))
                            tapped = true
                            if let link {
                                link.enqueue(visible)
                                link.flush(progressed: &progressed)
                            }
                        } else if n < 0 && n != eagain {
                            if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while the channel was open") }
                            lifecycle.refused()
                        }
                    }
                    if !read {
                        readAll = engine.receivedBytes == receivedBefore
                        break
                    }
                }
                if let link {
                    link.flush(progressed: &progressed)
                    if link.unlinkDue {
                        link.finish()
                        self.link = nil
                        progressed = true
                        readAll = false
                    }
                }
                let eof = libssh2_channel_eof(channel) == 1
                // The server's EOF once everything it sent went through the tap and to the terminal.
                lifecycle.passEnded(serverEOF: eof, progressed: progressed, delivered: tap.hasRoom() && (link?.drained ?? true))
                // Keys sent and echo written, with nothing left over: poll() sees what comes next.
                if progressed, readAll, !eof, !closing, lifecycle.eofSent || !inputDone, state.pendingInput() == nil,
                   let link, link.pendingKeys == nil, link.drained {
                    return .settled
                }
            }
            for (index, (id, stream)) in [(Int32(0), ExecStream.stdout), (SSH_EXTENDED_DATA_STDERR, ExecStream.stderr)].enumerated() where !closing && tap == nil {
                if let output = localOutputs[index] {
                    // What waits goes out first; the channel is read again once it all went.
                    while readBudget > 0 {
                        if !output.buffer.isEmpty {
                            let n = output.buffer.drain { output.descriptor.write($0, $1) }
                            if n > 0 { progressed = true; continue }
                            if n < 0 && errno == EINTR { continue }
                            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                            // The reader went away (EPIPE) or the write failed: nothing more can
                            // be delivered; the channel closes and the caller learns why.
                            // (sshd takes no PIPE signal request: the command gets the usual TERM.)
                            state.localOutputError = n < 0 ? errno : EIO
                            lifecycle.localOutputFailed()
                            progressed = true
                            break
                        }
                        let n = output.buffer.fill(atMost: readBudget, scratch: engine.scratchBytes) {
                            termind_ssh2_channel_read(channel, id, $0.assumingMemoryBound(to: CChar.self), $1)
                        }
                        if n > 0 { readBudget -= n; progressed = true; continue }
                        if n < 0 && n != eagain {
                            if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while the channel was open") }
                            lifecycle.refused()
                        }
                        break
                    }
                    continue
                }
                while readBudget > 0 {
                    let room = min(state.roomForOutput, SessionEngine.scratchSize, readBudget)
                    guard room > 0 else { break }
                    let n = termind_ssh2_channel_read(channel, id, engine.scratch, room)
                    if n > 0 {
                        state.deliver(stream, Data(bytes: engine.scratch, count: n))
                        readBudget -= n
                        progressed = true
                        continue
                    }
                    if n < 0 && n != eagain {
                        if SessionEngine.isFatal(Int32(n)) { return .sessionLost("while the channel was open") }
                        lifecycle.refused()
                    }
                    break
                }
            }
            if tap == nil && !closing {
                // The server's EOF once everything it sent has been delivered.
                let delivered = state.roomForOutput > 0 && localOutputs.allSatisfy { $0?.buffer.isEmpty ?? true }
                lifecycle.passEnded(serverEOF: libssh2_channel_eof(channel) == 1, progressed: progressed, delivered: delivered)
            }
        }
        guard closing else { return progressed ? .progressed : .idle }
        let idle: PumpStep = progressed ? .progressed : .idle
        let eagain32 = Int32(eagain)
        while true {
            let action = lifecycle.nextAction(lanePending: engine.hasPendingOperations(lane: self), serverEOF: libssh2_channel_eof(channel) == 1)
            switch action {
            case .releaseLocal:
                // Nothing moves to or from handed-over descriptors once closing: they go now,
                // so a reader downstream sees its end without waiting for the server's CLOSE.
                closeLocal()
            case .waitForLane:
                // Requests still queued on this channel's lane (a resize, the start of a
                // channel whose opener gave up) use the channel: it is closed after them.
                return idle
            case .sendSignal(let name):
                let rc = name.withCString { libssh2_channel_signal_ex(channel, $0, name.utf8.count) }
                lifecycle.completed(action, .of(rc, eagain: eagain32, isFatal: SessionEngine.isFatal))
                if rc == eagain32 { return idle }
            case .sendClose:
                let outcome = ChannelLifecycle.Outcome.of(libssh2_channel_close(channel), eagain: eagain32, isFatal: SessionEngine.isFatal)
                lifecycle.completed(action, outcome)
                if outcome == .again { return idle }
                if outcome == .sessionLost { return .sessionLost("while closing a channel") }
            case .awaitServerClose:
                let outcome = ChannelLifecycle.Outcome.of(libssh2_channel_wait_closed(channel), eagain: eagain32, isFatal: SessionEngine.isFatal)
                lifecycle.completed(action, outcome)
                if outcome == .again {
                    // Drain what still arrives so the server's CLOSE can be read.
                    _ = termind_ssh2_channel_read(channel, 0, engine.scratch, SessionEngine.scratchSize)
                    _ = termind_ssh2_channel_read(channel, SSH_EXTENDED_DATA_STDERR, engine.scratch, SessionEngine.scratchSize)
                    return .idle
                }
                if outcome == .sessionLost { return .sessionLost("while closing a channel") }
            case .free:
                var signal: UnsafeMutablePointer<CChar>?
                var signalLength = 0
                libssh2_channel_get_exit_signal(channel, &signal, &signalLength, nil, nil, nil, nil)
                let signalName = signal.map { String(cString: $0) }
                if let signal { libssh2_free(session, signal) }
                let status = libssh2_channel_get_exit_status(channel)
                let freed = libssh2_channel_free(channel)
                lifecycle.completed(action, freed == eagain32 ? .again : .done)
                if freed == eagain32 { return .idle }
                self.channel = nil
                state.finish(exit: ChannelExit(status: signalName == nil ? status : nil, signal: signalName), error: nil)
                return .finished
            case .none:
                return idle
            }
        }
    }

    override func fail(_ error: TermindError) {
        // The session is gone (its free releases every channel); only report.
        lifecycle.sessionLost()
        channel = nil
        closeLocal()
        state.finish(exit: nil, error: error)
    }

    /// Closes the pump's copies of handed-over descriptors (flags restored where shared) and
    /// lets a linked terminal go.
    private func closeLocal() {
        localInput?.descriptor.close()
        localInput = nil
        for output in localOutputs { output?.descriptor.close() }
        localOutputs = [nil, nil]
        link?.finish()
        link = nil
    }
}

/// The descriptors a channel's pump moves itself (its own copies; see ChannelDescriptors).
struct LocalDescriptors {
    var input: LocalDescriptor?
    var output: LocalDescriptor?
    var error: LocalDescriptor?

    /// Copies of the borrowed `descriptors`; nothing is kept when one of them is unusable.
    static func adopt(_ descriptors: ChannelDescriptors?) throws -> LocalDescriptors {
        var adopted = LocalDescriptors()
        guard let descriptors else { return adopted }
        do {
            adopted.input = try descriptors.input.map { try LocalDescriptor.adopt($0, writing: false, role: "standard input") }
            adopted.output = try descriptors.output.map { try LocalDescriptor.adopt($0, writing: true, role: "standard output") }
            adopted.error = try descriptors.error.map { try LocalDescriptor.adopt($0, writing: true, role: "standard error") }
        } catch {
            adopted.close()
            throw error
        }
        return adopted
    }

    func close() {
        input?.close()
        output?.close()
        error?.close()
    }
}
