import CTermindSystem
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The control socket of `termind serve`: a Unix stream socket, mode 0600 in a 0700
/// folder, that accepts only peers with this process's uid. Each connection gets a
/// thread that reads NDJSON envelopes; requests are pipelined (up to
/// `maximumInFlightPerConnection` at once) and answered by id. A malformed, oversized or
/// unknown envelope gets an error reply; a client that vanishes affects nobody else.
///
/// Bounds per connection: one request line (`Envelope.maximumBytes`), 32 requests in
/// flight, and `maximumQueuedReplyBytes` of replies the client has not read — past that
/// the server stops reading the connection's requests until the client catches up. A
/// connection with nothing in flight that sends nothing for `idleTimeout` is closed
/// (with a `socket.idle` notice), so idle clients cannot hold the 128 places forever.
public final class ControlServer: Sendable {
    public static let maximumClients = 128
    public static let maximumInFlightPerConnection = 32
    /// A client that does not read its replies for this long is disconnected.
    public static let sendTimeoutSeconds = 20
    /// Replies a client has not read yet, per connection, before the server stops reading
    /// its requests.
    public static let maximumQueuedReplyBytes = 1 << 20
    /// How long a connection may stay silent with nothing in flight.
    public static let defaultIdleTimeout: TimeInterval = 60

    public let path: String
    private let kernel: Kernel
    private let logger: Logger
    private struct State {
        var listener: Int32 = -1
        var clients: [UInt64: Int32] = [:]
        var nextConnection: UInt64 = 1
        var stopped = false
        var streamHandlers: [String: StreamSession.Handler] = [:]
    }
    private let state = Mutex(State())
    public let idleTimeout: TimeInterval

    public init(path: String, kernel: Kernel, logger: Logger, idleTimeout: TimeInterval = ControlServer.defaultIdleTimeout) {
        self.path = path
        self.kernel = kernel
        self.logger = logger.child("socket")
        self.idleTimeout = idleTimeout
    }

    /// Serves streams named `name` with `handler` besides the features' streams, which the
    /// kernel routes (a test's own stream, say); see StreamSession.
    public func register(stream name: String, handler: @escaping StreamSession.Handler) {
        state.withLock { s in s.streamHandlers[name] = handler }
    }

    /// Binds and listens. Refuses to replace a socket another server still answers on.
    public func start() throws {
        let directory = PathText.deletingLastComponent(path)
        if !FileManager.default.fileExists(atPath: directory) {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw TermindError.posix(.socketDirectory, "Cannot create the socket folder \(directory)")
            }
        }
        // The folder guards the socket: someone else's (or a shared one) could hold an
        // impostor socket or swap ours, so it must be ours alone.
        try SocketIO.checkPrivateDirectory(directory)
        var info = stat()
        if lstat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFSOCK else {
                throw TermindError(.socketPathInUse, "\(path) exists and is not a socket; remove it or choose another path with --socket.")
            }
            if let fd = try? SocketIO.connect(path) {
                close(fd)
                throw TermindError(.socketInUse, "Another termind server is already listening on \(path).")
            }
            unlink(path) // stale socket of a server that is gone
        }
        var address = try SocketIO.unixAddress(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TermindError.posix(.socketCreateFailed, "Cannot create the control socket") }
        // Create the socket file already restricted; chmod below makes it exact.
        let previous = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previous)
        guard bound == 0 else {
            let error = TermindError.posix(.socketBindFailed, "Cannot bind the control socket at \(path)")
            close(fd)
            throw error
        }
        chmod(path, 0o600)
        guard listen(fd, 64) == 0 else {
            let error = TermindError.posix(.socketListenFailed, "Cannot listen on \(path)")
            close(fd)
            throw error
        }
        state.withLock { s in s.listener = fd }
        let thread = SystemThread.named("termind.accept") { [self] in acceptLoop(fd) }
        thread.start()
        logger.info("socket.listening")
    }

    /// Stops accepting, closes every connection and removes the socket file.
    public func stop() {
        let (fd, open): (Int32, [Int32]) = state.withLock { s in
            s.stopped = true
            defer { s.listener = -1; s.clients.removeAll() }
            return (s.listener, Array(s.clients.values))
        }
        // The accept loop closes the listener once accept() has returned: closed here, its
        // number could be reused (by the next server's listener) while that thread is
        // still on its way into accept(), which would then take the next server's clients.
        if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)); unlink(path) }
        for client in open { shutdown(client, Int32(SHUT_RDWR)) }
    }

    public var connectionCount: Int { state.withLock { s in s.clients.count } }

    private func acceptLoop(_ fd: Int32) {
        while true {
            let client = termind_accept_cloexec(fd)
            if client < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno == EMFILE || errno == ENFILE { usleep(10_000); continue }
                close(fd)  // shut down by stop()
                return
            }
            var uid: uid_t = 0
            guard termind_peer_uid(client, &uid) == 0, uid == getuid() else {
                logger.warning("socket.peer_rejected")
                SocketIO.writeAll(client, Envelope.failure(id: .null, error: TermindError(.socketPeerRejected, "This termind server accepts only its own user.")))
                close(client)
                continue
            }
            let connection: UInt64? = state.withLock { s in
                guard !s.stopped, s.clients.count < Self.maximumClients else { return nil }
                let id = s.nextConnection
                s.nextConnection += 1
                s.clients[id] = client
                return id
            }
            guard let connection else {
                if state.withLock({ s in s.stopped }) {
                    close(client)  // stopping: no reply, the client sees the connection close
                    continue
                }
                SocketIO.writeAll(client, Envelope.failure(id: .null, error: TermindError(.socketBusy, "The termind server has \(Self.maximumClients) clients already; try again shortly.")))
                close(client)
                continue
            }
            let thread = SystemThread.named("termind.client") { [self] in serve(client, connection: connection) }
            thread.start()
        }
    }

    private func serve(_ fd: Int32, connection: UInt64) {
        logger.debug("socket.client.connected", ["connection": .int(Int(connection))])
        var timeout = timeval(tv_sec: Self.sendTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // Reads wake up after idleTimeout to see whether the connection is idle.
        let seconds = max(idleTimeout, 0.01)
        var idle = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, socklen_t(MemoryLayout<timeval>.size))
        let slots = DispatchSemaphore(value: Self.maximumInFlightPerConnection)
        let group = DispatchGroup()
        let inFlight = InFlightCounter()
        let kernel = self.kernel
        var reader = LineReader(fd: fd, maximum: Envelope.maximumBytes, collectsDescriptors: true)
        defer { reader.closeDescriptors() }
        let writer = ReplyWriter(fd: fd, bound: Self.maximumQueuedReplyBytes) { [logger] in
            logger.warning("socket.client.write_failed", ["connection": .int(Int(connection))])
        }
        let reply: @Sendable (Data) -> Void = { line in writer.send(line) }
        let streams = StreamTable()
        let requests = RequestTable()
        // Who the connection's calls and streams are for: its peer, as the kernel reads it.
        var peerPID: pid_t = 0
        let origin = CallOrigin.controlSocket(connection: connection, uid: getuid(), pid: termind_peer_pid(fd, &peerPID) == 0 ? peerPID : nil)
        loop: while true {
            // A client that does not read its replies is not read either (bounded memory).
            writer.waitForRoom()
            let event = reader.next()
            if reader.descriptorsOverflowed {
                reply(Envelope.failure(id: .null, error: TermindError(.streamDescriptorsRefused, "The client sent more descriptors than its stream opens named (at most \(TERMIND_MAX_PASSED_FDS) with each); the connection is closed.")))
                break loop
            }
            switch event {
            case .end:
                break loop
            case .idle:
                guard inFlight.value == 0, streams.isEmpty, writer.queuedBytes == 0 else { continue }
                logger.debug("socket.client.idle", ["connection": .int(Int(connection))])
                reply(Envelope.failure(id: .null, error: TermindError(.socketIdle, "The termind server closed this connection after \(Self.describe(idleTimeout)) without requests; connect again.")))
                break loop
            case .oversized:
                reply(Envelope.failure(id: .null, error: TermindError(.envelopeTooLarge, "The envelope is larger than \(Envelope.maximumBytes) bytes and was skipped.")))
            case .line(let line):
                // One JSON parse per line: a stream line, or a contract request.
                let value: JSONValue
                switch Envelope.parseJSON(line) {
                case .failure(let failure):
                    reply(Envelope.failure(id: failure.id, error: failure.error))
                    continue
                case .success(let parsed):
                    value = parsed
                }
                if let streamLine = StreamLine.parse(value) {
                    switch streamLine {
                    case .message(let id, let object):
                        var attached: Data?
                        if let size = object["attached"] {
                            // Raw input bytes follow the line; a size the server never granted
                            // loses the framing, so the connection ends.
                            guard case .integer(let count) = size, count >= 0, count <= StreamSession.defaultWindow,
                                  let bytes = reader.read(count: Int(count)) else {
                                reply(Envelope.failure(id: id, error: TermindError(.envelopeMalformed, "An \"attached\" size must be a number of bytes from 0 to \(StreamSession.defaultWindow), followed by that many bytes; the connection is closed.")))
                                break loop
                            }
                            attached = bytes
                        }
                        streams.session(id)?.receive(object, attached: attached)
                    case .open(let id, let name, let body, let window, let binary, let roles):
                        // The descriptors sent with this line are received by now (with its first byte).
                        var descriptors: StreamDescriptors?
                        if let roles {
                            guard let fds = reader.takeDescriptors(roles.count) else {
                                reply(Envelope.failure(id: id, error: TermindError(.streamDescriptorsRefused, "The stream's open names descriptors \(roles) that did not come with it; the connection is closed.")))
                                break loop
                            }
                            guard let given = StreamDescriptors(roles: roles, fds: fds) else {
                                for fd in fds { close(fd) }
                                reply(Envelope.failure(id: id, error: TermindError(.streamDescriptorsRefused, "\"descriptors\" must list distinct roles among \(StreamDescriptors.roles) in that order, one per descriptor sent.")))
                                continue
                            }
                            descriptors = given
                        }
                        let endpoint = kernel.stream(name)
                        guard let handler = endpoint?.handler ?? state.withLock({ s in s.streamHandlers[name] }) else {
                            descriptors?.closeAll()
                            reply(Envelope.failure(id: id, error: TermindError(.streamUnknown, "This termind server has no stream '\(name)'.")))
                            continue
                        }
                        if let descriptors, endpoint?.acceptsDescriptors == false {
                            descriptors.closeAll()
                            reply(Envelope.failure(id: id, error: TermindError(.streamDescriptorsRefused, "Stream '\(name)' does not take the client's descriptors.")))
                            continue
                        }
                        let session = StreamSession(id: id, window: window, grantsInput: endpoint?.acceptsInput ?? true, endpoint: endpoint,
                                                    descriptors: descriptors, origin: origin, sink: .socket(binary: binary, write: reply))
                        guard streams.add(session) else {
                            descriptors?.closeAll()
                            reply(Envelope.failure(id: id, error: TermindError(.streamDuplicateId, "A stream with this id is already running on the connection.")))
                            continue
                        }
                        if let descriptors { logger.debug("socket.stream.descriptors", ["count": .int(descriptors.fds.count)]) }
                        slots.wait()
                        group.enter()
                        inFlight.add(1)
                        session.begin()
                        session.start(cancelling: Task {
                            defer { streams.remove(session); inFlight.add(-1); slots.signal(); group.leave() }
                            let result: Result<Data, any Error>
                            do { result = .success(try await Kernel.serving(session) { try await handler(body, session) }) } catch { result = .failure(error) }
                            let outcome = session.outcome(result)
                            // Ended first: no grant or question of this stream follows its reply.
                            session.finish()
                            switch outcome {
                            case .success(let body): reply(Envelope.success(id: id, body: body))
                            case .failure(let error): reply(Envelope.failure(id: id, error: error))
                            }
                        })
                    }
                    continue
                }
                switch Envelope.parseRequest(value) {
                case .failure(let failure):
                    reply(Envelope.failure(id: failure.id, error: failure.error))
                case .success(let request):
                    slots.wait()
                    group.enter()
                    inFlight.add(1)
                    requests.start {
                        defer { inFlight.add(-1); slots.signal(); group.leave() }
                        do {
                            let body = try await kernel.call(request.contract, body: request.body, origin: origin)
                            reply(Envelope.success(id: request.id, body: body))
                        } catch let error as TermindError {
                            reply(Envelope.failure(id: request.id, error: error))
                        } catch {
                            reply(Envelope.failure(id: request.id, error: .from(error)))
                        }
                    }
                }
            }
        }
        // The client is gone: its streams are cancelled (nobody can answer their questions),
        // and so are its calls (no one reads their replies; long blocking work such as an
        // import preview stops at its next check).
        streams.disconnectAll()
        requests.cancelAll()
        group.wait()
        writer.finish()
        state.withLock { s in _ = s.clients.removeValue(forKey: connection) }
        close(fd)
        logger.debug("socket.client.disconnected", ["connection": .int(Int(connection))])
    }
}

/// Writes reply lines to one connection without ever blocking the caller: a line goes out
/// directly with a non-blocking send when nothing is queued, and otherwise (socket full,
/// earlier lines pending) onto the connection's queue, which a writer thread of its own
/// drains with blocking sends. The queue is bounded in bytes: while it holds more than
/// `ControlServer.maximumQueuedReplyBytes`, `waitForRoom()` holds the connection's reader,
/// so a client that stops reading stops being read — its memory stays bounded and it
/// never slows anyone else. After `sendTimeoutSeconds` of blocking the connection is shut down.
final class ReplyWriter: Sendable {
    private let fd: Int32
    private let bound: Int
    private let queue = ConditionLock(Queue())
    private let onFailure: @Sendable () -> Void

    /// The lines not yet written (from `head` on), their size, and the writer thread's state.
    private struct Queue {
        var pending: [Data] = []
        var head = 0
        var pendingBytes = 0
        /// The writer thread holds a line it is sending (still counted in `pendingBytes`).
        var writing = false
        var failed = false
        var finished = false
        var threadRunning = false
        var isEmpty: Bool { head == pending.count }
    }

    init(fd: Int32, bound: Int, onFailure: @escaping @Sendable () -> Void) {
        self.fd = fd
        self.bound = bound
        self.onFailure = onFailure
    }

    func send(_ line: Data) {
        queue.withLock { q in
            guard !q.failed else { return }
            if q.isEmpty && !q.writing {
                let sent = line.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
                if sent == line.count { return }
                if sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK {
                    fail(&q)
                    return
                }
                enqueue(sent > 0 ? Data(line.dropFirst(sent)) : line, in: &q)
            } else {
                enqueue(line, in: &q)
            }
        }
    }

    /// Bytes waiting to be written.
    var queuedBytes: Int { queue.withLock { $0.pendingBytes } }

    /// Blocks while more than the bound waits to be written (and the connection works).
    func waitForRoom() {
        queue.withLock(whenever: { $0.pendingBytes <= bound || $0.failed }) { _ in }
    }

    /// No more lines will come: waits until the queue is written out (or the connection failed).
    func finish() {
        queue.withLock { $0.finished = true }
        queue.broadcast()
        queue.withLock(whenever: { !$0.threadRunning }) { _ in }
    }

    private func enqueue(_ bytes: Data, in q: inout Queue) {
        q.pending.append(bytes)
        q.pendingBytes += bytes.count
        if !q.threadRunning {
            q.threadRunning = true
            let thread = SystemThread.named("termind.client.write") { [self] in drain() }
            thread.start()
        }
        queue.broadcast()
    }

    private func drain() {
        while true {
            let next: Data? = queue.wait { q, _ in
                if q.isEmpty && !q.finished && !q.failed { return .wait }
                if q.isEmpty || q.failed {
                    q.threadRunning = false
                    queue.broadcast()
                    return .done(nil)
                }
                let line = q.pending[q.head]
                q.pending[q.head] = Data()
                q.head += 1
                if q.isEmpty { q.pending.removeAll(keepingCapacity: true); q.head = 0 }
                q.writing = true
                return .done(line)
            }
            guard let line = next else { return }
            let ok = SocketIO.writeAll(fd, line)
            queue.withLock { q in
                q.writing = false
                if !q.failed {
                    q.pendingBytes -= line.count
                    if !ok { fail(&q) }
                }
            }
            queue.broadcast()
        }
    }

    /// Called with the lock held: drops what is queued, wakes the reader, ends the connection
    /// (before the lock is let go, so the descriptor is still this connection's).
    private func fail(_ q: inout Queue) {
        guard !q.failed else { return }
        q.failed = true
        q.pending.removeAll()
        q.head = 0
        q.pendingBytes = 0
        queue.broadcast()
        onFailure()
        shutdown(fd, Int32(SHUT_RDWR))
    }
}

extension ControlServer {
    static func describe(_ interval: TimeInterval) -> String {
        interval >= 1 && interval == interval.rounded() ? "\(Int(interval)) s" : "\(interval) s"
    }
}

/// Requests and streams of one connection that have not answered yet.
final class InFlightCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add(_ n: Int) { count.add(n, ordering: .sequentiallyConsistent) }
    var value: Int { count.load(ordering: .sequentiallyConsistent) }
}

/// The contract calls running for one connection, cancelled when the client goes away.
final class RequestTable: Sendable {
    private let state = Mutex<(next: UInt64, tasks: [UInt64: Task<Void, Never>?])>((0, [:]))

    func start(_ body: @escaping @Sendable () async -> Void) {
        // Reserved before the task exists, so one that ends at once is not listed after it ended.
        let key = state.withLock { table -> UInt64 in
            table.next += 1
            table.tasks[table.next] = .some(nil)
            return table.next
        }
        let task = Task {
            await body()
            _ = state.withLock { $0.tasks.removeValue(forKey: key) }
        }
        state.withLock { if $0.tasks[key] != nil { $0.tasks[key] = task } }
    }

    func cancelAll() {
        for task in state.withLock({ $0.tasks.values.compactMap { $0 } }) { task.cancel() }
    }
}

/// The streams running on one connection, by id.
final class StreamTable: Sendable {
    private let sessions = Mutex<[JSONValue: StreamSession]>([:])

    func add(_ session: StreamSession) -> Bool {
        sessions.withLock { sessions in
            guard sessions[session.id] == nil else { return false }
            sessions[session.id] = session
            return true
        }
    }

    func session(_ id: JSONValue) -> StreamSession? { sessions.withLock { $0[id] } }

    var isEmpty: Bool { sessions.withLock { $0.isEmpty } }

    func remove(_ session: StreamSession) {
        sessions.withLock { sessions in if sessions[session.id] === session { sessions[session.id] = nil } }
    }

    func disconnectAll() {
        for session in sessions.withLock({ Array($0.values) }) { session.cancel() }
    }
}
