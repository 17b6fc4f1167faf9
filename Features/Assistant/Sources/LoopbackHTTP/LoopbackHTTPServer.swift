import CMicroHTTPD
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// One HTTP request as the server read it: header names lowercased, every header line kept
/// (a name sent twice is there twice), the query's parameters apart from the path.
public struct HTTPServerRequest: Sendable {
    public var method: String
    public var path: String
    public var headers: [(name: String, value: String)]
    public var query: [(name: String, value: String?)]
    public var body: Data
    /// The port the server listens on (a Host header must name it).
    public var localPort: Int
    /// Cancels the task computing this request's answer (the handler's own), which then
    /// answers as the handler returns: for a handler whose work another request may stop.
    public var stop: @Sendable () -> Void = {}

    public init(method: String, path: String, headers: [(name: String, value: String)], query: [(name: String, value: String?)] = [], body: Data = Data(),
                localPort: Int = 0) {
        self.localPort = localPort
        self.method = method
        self.path = path
        self.headers = headers.map { ($0.name.lowercased(), $0.value) }
        self.query = query
        self.body = body
    }

    /// The first value of header `name` (any case).
    public func header(_ name: String) -> String? {
        let key = name.lowercased()
        return headers.first { $0.name == key }?.value
    }

    /// How many times header `name` was sent.
    public func count(_ name: String) -> Int {
        let key = name.lowercased()
        return headers.filter { $0.name == key }.count
    }
}

public struct HTTPServerResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: Data
    /// A body produced as it is sent (instead of `body`), `length` bytes when known.
    public var source: (any HTTPBodySource)?
    public var length: Int?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A response whose body `source` produces while it is sent, a piece after each send.
    public init(status: Int, headers: [(name: String, value: String)] = [], length: Int?, source: any HTTPBodySource) {
        self.status = status
        self.headers = headers
        self.body = Data()
        self.length = length
        self.source = source
    }
}

/// Where a streamed response's bytes come from: asked for the next piece only once the one
/// before was handed to the socket (the client's pace is the source's).
public protocol HTTPBodySource: Sendable {
    /// The next piece, at most `limit` bytes; nil at the end. Throwing cuts the response: the
    /// connection closes (a client that counts bytes sees it short).
    func next(limit: Int) async throws -> Data?
    /// The response ended: sent whole (`complete`), or not (the client left, an error).
    func finished(complete: Bool) async
}

/// Where a streamed request body goes, a piece at a time: the next piece is read from the
/// socket only once `receive` returned.
public protocol HTTPBodySink: Sendable {
    /// One piece of the body; false: the rest is read and dropped.
    func receive(_ chunk: Data) async -> Bool
    /// The body ended (whole, or dropped after a false): the answer.
    func finish() async -> HTTPServerResponse
    /// The client went away before the body ended (no answer is sent).
    func aborted() async
}

extension HTTPBodySink {
    public func aborted() async {}
}

public struct LoopbackHTTPError: Error, CustomStringConvertible {
    public let description: String
}

/// A small HTTP/1.1 server on a loopback address, on GNU libmicrohttpd (its own polling
/// thread, epoll): what parses HTTP is a well-kept C library, not termind. A request is
/// checked on its head first (`check`: before its body is read, so a refused one costs no
/// body), its body is capped (`bodyLimit`: a longer declared length is answered 413 at once,
/// a longer chunked body closes the connection), and the answer is computed by `handle` on
/// Swift's concurrency while the connection waits suspended.
public final class LoopbackHTTPServer: Sendable {
    public typealias Check = @Sendable (HTTPServerRequest) -> HTTPServerResponse?
    public typealias Handler = @Sendable (HTTPServerRequest) async -> HTTPServerResponse
    /// For a request that passed `check`: a sink its body streams to (no cap), or nil for the
    /// capped, buffered body and `handler`.
    public typealias Streamer = @Sendable (HTTPServerRequest) -> (any HTTPBodySink)?

    /// The port listened on (the kernel's choice when 0 was asked).
    public let port: Int
    public let address: String
    let bodyLimit: Int
    let check: Check
    let handler: Handler
    let streamer: Streamer
    /// The library's daemon (its address; 0 once stopped).
    private let daemon = Atomic<Int>(0)
    /// Requests being answered (their connections suspended), to resume before stopping.
    private let live = Mutex<[ObjectIdentifier: Exchange]>([:])
    private let stopping = Atomic<Bool>(false)

    /// Listens on `address` (a loopback address: 127.0.0.0/8, ::1 or localhost) and `port`.
    public init(address: String, port: Int, bodyLimit: Int, check: @escaping Check = { _ in nil }, streamer: @escaping Streamer = { _ in nil },
                handler: @escaping Handler) throws {
        let (fd, bound) = try Self.listen(address: address, port: port)
        self.port = bound
        self.address = address
        self.bodyLimit = bodyLimit
        self.check = check
        self.handler = handler
        self.streamer = streamer
        let started = termind_mhd_start(fd, accessHandler, Unmanaged.passUnretained(self).toOpaque(), completedHandler,
                                        256, 120, 32 * 1024)
        guard let started else {
            close(fd)
            throw LoopbackHTTPError(description: "The HTTP server could not start on \(address):\(bound).")
        }
        daemon.store(Int(bitPattern: started), ordering: .releasing)
    }

    /// Stops listening; requests being answered are cancelled and answered 503 first (the
    /// library must not stop with connections suspended).
    public func stop() async {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for exchange in live.withLock({ Array($0.values) }) { exchange.task.withLock { $0?.cancel() } }
        for _ in 0..<500 where !live.withLock({ $0.isEmpty }) { try? await Task.sleep(for: .milliseconds(10)) }
        if let daemon = OpaquePointer(bitPattern: daemon.exchange(0, ordering: .acquiringAndReleasing)) { MHD_stop_daemon(daemon) }
    }

    deinit {
        if let daemon = OpaquePointer(bitPattern: daemon.exchange(0, ordering: .acquiringAndReleasing)) { MHD_stop_daemon(daemon) }
    }

    /// True for an address that only this machine reaches.
    public static func isLoopback(_ address: String) -> Bool {
        if address == "localhost" || address == "::1" { return true }
        var v4 = in_addr()
        guard inet_pton(AF_INET, address, &v4) == 1 else { return false }
        return UInt32(bigEndian: v4.s_addr) >> 24 == 127
    }

    private static func listen(address: String, port: Int) throws -> (Int32, Int) {
        guard isLoopback(address) else {
            throw LoopbackHTTPError(description: "\(address) is not a loopback address: the server listens on 127.0.0.1, another 127.x.y.z, ::1 or localhost only.")
        }
        guard (0...65535).contains(port) else { throw LoopbackHTTPError(description: "\(port) is not a port (0–65535).") }
        let host = address == "localhost" ? "127.0.0.1" : address
        let six = host.contains(":")
        let fd = socket(six ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LoopbackHTTPError(description: "No socket: \(String(cString: strerror(errno))).") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var storage = sockaddr_storage()
        var length: socklen_t
        if six {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET6, host, &a.sin6_addr)
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: a) { UnsafeRawBufferPointer($0) }) }
        } else {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET, host, &a.sin_addr)
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: a) { UnsafeRawBufferPointer($0) }) }
        }
        let bound = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) }
        }
        guard bound == 0, Glibc.listen(fd, 64) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw LoopbackHTTPError(description: "Cannot listen on \(address):\(port): \(reason).")
        }
        var actual = sockaddr_storage()
        var actualLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &actualLength) } }
        // sin_port and sin6_port sit at the same offset.
        let chosen = withUnsafeBytes(of: actual) { $0.load(fromByteOffset: 2, as: UInt16.self) }
        return (fd, Int(UInt16(bigEndian: chosen)))
    }

    // MARK: the library's callbacks (on its polling thread; nothing here blocks)

    /// One request's state from its head to its answer.
    final class Exchange: Sendable {
        let head: Mutex<HTTPServerRequest>
        let response = Mutex<HTTPServerResponse?>(nil)
        let task = Mutex<Task<Void, Never>?>(nil)
        /// Its handler stopped it (`HTTPServerRequest.stop`): its answer still goes out.
        let stopped = Atomic<Bool>(false)
        /// Where its answer is: not asked for yet, being computed (the connection not yet
        /// suspended, or suspended until the answer resumes it), or answered — before the
        /// connection was suspended (then queued at once) or after.
        let answering = Mutex(Answering.idle)
        enum Answering { case idle, computing, suspended, answered }
        /// Its answer is being computed.
        var isComputing: Bool { answering.withLock { $0 == .computing || $0 == .suspended } }
        /// A streamed body's sink, and whether it stopped taking pieces.
        let sink: (any HTTPBodySink)?
        let dropping = Atomic<Bool>(false)
        init(_ head: HTTPServerRequest, sink: (any HTTPBodySink)?) {
            self.head = Mutex(head)
            self.sink = sink
        }

        /// Cancels the answering task; one not stored yet is cancelled as it is stored.
        func stop() {
            stopped.store(true, ordering: .sequentiallyConsistent)
            task.withLock { $0 }?.cancel()
        }
    }

    fileprivate func access(_ connection: OpaquePointer, url: String, method: String, upload: UnsafePointer<CChar>?, size: UnsafeMutablePointer<Int>,
                            context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let raw = context.pointee else {
            // The head: read headers and query, check them before any body is read.
            let request = HTTPServerRequest(method: method, path: url, headers: Self.values(connection, termind_mhd_header_kind).map { ($0.0, $0.1 ?? "") },
                                            query: Self.values(connection, termind_mhd_query_kind), localPort: port)
            if let refused = check(request) {
                context.pointee = Unmanaged.passRetained(Exchange(request, sink: nil)).toOpaque()
                return queue(connection, refused)
            }
            let sink = streamer(request)
            let exchange = Exchange(request, sink: sink)
            context.pointee = Unmanaged.passRetained(exchange).toOpaque()
            if sink == nil, let declared = request.header("content-length").flatMap(Int.init), declared > bodyLimit {
                return queue(connection, HTTPServerResponse(status: 413, headers: [("Content-Type", "text/plain")],
                                                           body: Data("A request body is at most \(bodyLimit) bytes; this one declares \(declared).\n".utf8)))
            }
            return termind_mhd_yes
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(raw).takeUnretainedValue()
        if size.pointee > 0, let sink = exchange.sink {
            // A streamed body: this piece goes to the sink while the connection waits (the
            // next is read from the socket only after).
            let count = size.pointee
            size.pointee = 0
            guard !exchange.dropping.load(ordering: .relaxed), let upload else { return termind_mhd_yes }
            let chunk = Data(bytes: upload, count: count)
            MHD_suspend_connection(connection)
            let resume = ConnectionHandle(connection)
            Task {
                if await !sink.receive(chunk) { exchange.dropping.store(true, ordering: .relaxed) }
                MHD_resume_connection(resume.pointer)
            }
            return termind_mhd_yes
        }
        if size.pointee > 0 {
            let count = size.pointee
            size.pointee = 0
            let over = exchange.head.withLock { head -> Bool in
                guard head.body.count + count <= bodyLimit else { return true }
                if let upload { head.body.append(UnsafeRawPointer(upload).assumingMemoryBound(to: UInt8.self), count: count) }
                return false
            }
            // Over the limit (a chunked body: a declared one was answered 413): the
            // connection is closed.
            return over ? termind_mhd_no : termind_mhd_yes
        }
        // The whole request is in: answer it, or start computing the answer.
        if let response = exchange.response.withLock({ $0 }) { return queue(connection, response) }
        if exchange.isComputing { return termind_mhd_yes }
        if stopping.load(ordering: .relaxed) {
            return queue(connection, HTTPServerResponse(status: 503, body: Data("termind is stopping.\n".utf8)))
        }
        exchange.answering.withLock { $0 = .computing }
        live.withLock { $0[ObjectIdentifier(exchange)] = exchange }
        var head = exchange.head.withLock { $0 }
        head.stop = { exchange.stop() }
        let request = head
        let handler = self.handler
        let resume = ConnectionHandle(connection)
        let sink = exchange.sink
        let body: @Sendable () async -> Void = { [weak self] in
            var response = if let sink { await sink.finish() } else { await handler(request) }
            if Task.isCancelled && !exchange.stopped.load(ordering: .sequentiallyConsistent) {
                response = HTTPServerResponse(status: 503, body: Data("termind is stopping.\n".utf8))
            }
            exchange.response.withLock { $0 = response }
            self?.live.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(exchange)) }
            let waiting = exchange.answering.withLock { state -> Bool in
                defer { state = .answered }
                return state == .suspended
            }
            if waiting { MHD_resume_connection(resume.pointer) }
        }
        // A handler starts on this thread (`immediate`) and goes on in Swift's pool from its
        // first suspension: an answer computed from memory (an MCP call whose policy and
        // data are kept) is queued at once, with no thread woken either way. A streamed
        // body's sink runs as a task of its own.
        let task = sink == nil ? Task.immediate(operation: body) : Task(operation: body)
        exchange.task.withLock { $0 = task }
        if exchange.stopped.load(ordering: .sequentiallyConsistent) { task.cancel() }
        let answered = exchange.answering.withLock { state -> Bool in
            if state == .answered { return true }
            // Suspended under the lock: the task cannot resume the connection before this.
            state = .suspended
            MHD_suspend_connection(connection)
            return false
        }
        if answered, let response = exchange.response.withLock({ $0 }) { return queue(connection, response) }
        return termind_mhd_yes
    }

    fileprivate func completed(_ context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        guard let raw = context.pointee else { return }
        context.pointee = nil
        let exchange = Unmanaged<Exchange>.fromOpaque(raw).takeRetainedValue()
        // A streamed body whose sink never answered: its client went away mid-body.
        if let sink = exchange.sink, exchange.response.withLock({ $0 == nil }), !exchange.isComputing {
            Task { await sink.aborted() }
        }
    }

    private func queue(_ connection: OpaquePointer, _ response: HTTPServerResponse) -> MHD_Result {
        let made: OpaquePointer?
        if let source = response.source {
            let stream = StreamedBody(source: source, length: response.length, connection: connection)
            made = MHD_create_response_from_callback(response.length.map { UInt64($0) } ?? UInt64.max, StreamedBody.piece, readPiece,
                                                     Unmanaged.passRetained(stream).toOpaque(), freeStream)
        } else {
            made = response.body.withUnsafeBytes { bytes in
                MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), termind_mhd_must_copy)
            }
        }
        guard let made else { return termind_mhd_no }
        defer { MHD_destroy_response(made) }
        for (name, value) in response.headers { _ = MHD_add_response_header(made, name, value) }
        return MHD_queue_response(connection, UInt32(response.status), made)
    }

    private static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(String, String?)] {
        final class Sink { var pairs: [(String, String?)] = [] }
        let sink = Sink()
        _ = withExtendedLifetime(sink) {
            MHD_get_connection_values(connection, kind, { cls, _, key, value in
                guard let cls, let key else { return termind_mhd_yes }
                Unmanaged<Sink>.fromOpaque(cls).takeUnretainedValue().pairs.append((String(cString: key), value.map { String(cString: $0) }))
                return termind_mhd_yes
            }, Unmanaged.passUnretained(sink).toOpaque())
        }
        return sink.pairs
    }
}

/// A streamed response body between its source (Swift concurrency) and the library's reader
/// callback (its polling thread): one piece at a time, the next fetched as soon as the one
/// before was copied out to be sent (so it is usually ready when the library asks again,
/// and at most one piece waits here); while none is ready the connection is suspended.
final class StreamedBody: Sendable {
    static let piece = 65536
    private struct State {
        var ready = Data()
        var ended = false
        var failed = false
        var fetching = false
        var suspended = false
        var sent = 0
    }
    private let state = Mutex(State())
    private let source: any HTTPBodySource
    private let connection: ConnectionHandle
    private let length: Int?

    init(source: any HTTPBodySource, length: Int?, connection: OpaquePointer) {
        self.source = source
        self.length = length
        self.connection = ConnectionHandle(connection)
    }

    /// The reader callback: bytes copied, or the library's end and error marks; 0 after
    /// suspending the connection until a piece is ready.
    func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        let (copied, fetch) = state.withLock { state -> (Int, Bool) in
            if !state.ready.isEmpty {
                let count = min(max, state.ready.count)
                state.ready.withUnsafeBytes { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress!, byteCount: count) }
                state.ready.removeFirst(count)
                state.sent += count
                // Sent whole: the next piece is fetched now, while the library sends this one
                // (a suspend and a resume per piece otherwise).
                guard state.ready.isEmpty, !state.ended, !state.failed, !state.fetching, length.map({ state.sent < $0 }) ?? true else { return (count, false) }
                state.fetching = true
                return (count, true)
            }
            if state.failed { return (-2, false) }
            if state.ended { return (-1, false) }
            state.suspended = true
            MHD_suspend_connection(connection.pointer)
            defer { state.fetching = true }
            return (0, !state.fetching)
        }
        if fetch { start() }
        return copied
    }

    private func start() {
        Task {
            var piece: Data?
            var failed = false
            do { piece = try await source.next(limit: Self.piece) } catch { failed = true }
            // The connection is resumed outside the lock (the library takes its own): while it
            // is suspended the reader is not called, so nothing races the flag.
            let resume = state.withLock { state -> Bool in
                state.fetching = false
                if failed { state.failed = true } else if let piece, !piece.isEmpty { state.ready = piece } else if piece == nil { state.ended = true }
                defer { state.suspended = false }
                return state.suspended
            }
            if resume { MHD_resume_connection(connection.pointer) }
        }
    }

    /// The library is done with the response (sent, or the connection went away).
    func done() {
        // Whole: every declared byte handed to the socket (the library asks no further), or
        // the source's end reached with nothing left.
        let complete = state.withLock { state in
            !state.failed && state.ready.isEmpty && (length.map { state.sent == $0 } ?? state.ended)
        }
        Task { [source] in await source.finished(complete: complete) }
    }
}

private let readPiece: MHD_ContentReaderCallback = { cls, _, buffer, max in
    guard let cls, let buffer else { return -2 }
    return Unmanaged<StreamedBody>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, max: max)
}

private let freeStream: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    let stream = Unmanaged<StreamedBody>.fromOpaque(cls).takeRetainedValue()
    stream.done()
}

/// A suspended connection, resumed from the task that computed its answer (the library
/// allows resuming from any thread).
///
/// `@unchecked Sendable`: `pointer` is an OpaquePointer Swift cannot check; it is a `let`, and
/// other threads only pass it to MHD_resume_connection, which libmicrohttpd allows from any thread.
private struct ConnectionHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

private let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, _, upload, size, context in
    guard let cls, let connection, let size, let context else { return termind_mhd_no }
    let server = Unmanaged<LoopbackHTTPServer>.fromOpaque(cls).takeUnretainedValue()
    return server.access(connection, url: url.map { String(cString: $0) } ?? "/", method: method.map { String(cString: $0) } ?? "",
                         upload: upload, size: size, context: context)
}

private let completedHandler: MHD_RequestCompletedCallback = { cls, _, context, _ in
    guard let cls, let context else { return }
    Unmanaged<LoopbackHTTPServer>.fromOpaque(cls).takeUnretainedValue().completed(context)
}
