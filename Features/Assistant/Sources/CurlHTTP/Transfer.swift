import CCurl
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// One request on the engine: its easy handle (touched only on the engine's thread) and
/// what its reader waits for (behind a lock). The engine holds a reference from `start` to
/// `release`.
///
/// `@unchecked Sendable`: `easy` is configured in init and `start` before `submit` hands the
/// transfer to the engine, then used only on the engine's thread until deinit frees it; the
/// slist and pin pointers are written only in init; all else the reader and the engine share
/// is in `state`, a Mutex.
final class Transfer: @unchecked Sendable {
    let easy: UnsafeMutableRawPointer
    let origin: String
    private let request: HTTPRequest
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var resolveList: UnsafeMutablePointer<curl_slist>?
    /// The pinned address as C text, for the socket callback (freed with the transfer).
    private var pinnedText: UnsafeMutablePointer<CChar>?

    private struct State {
        var status = 0
        var headers: [HTTPHeader] = []
        var head: HTTPHead?
        var headWaiter: CheckedContinuation<HTTPHead, any Error>?
        var chunks: [Data] = []
        var chunkStart = 0
        var buffered = 0
        var paused = false
        var received = 0
        var anyByte = false
        var lastByte: UInt64 = 0
        var done = false
        var failure: HTTPFailure?
        var bodyWaiter: CheckedContinuation<Data?, any Error>?
        var cancelled = false
        /// Set by the reader's side (a limit passed) for the engine to report.
        var abort: HTTPFailure?
    }
    private let state = Mutex(State())

    init(_ request: HTTPRequest) throws(HTTPFailure) {
        self.request = request
        origin = request.origin
        guard HTTPURL(request.url) != nil else {
            throw HTTPFailure(HTTPErrorCode.badURL, "'\(origin)' is not an http(s) URL with a host.", beforeResponse: true)
        }
        guard let easy = curl_easy_init() else { throw HTTPFailure(HTTPErrorCode.interrupted, "libcurl could not make a request handle.", beforeResponse: true) }
        self.easy = easy
        configure()
    }

    private func configure() {
        termind_curl_string(easy, CURLOPT_URL, request.url)
        termind_curl_long(easy, CURLOPT_NOSIGNAL, 1)
        termind_curl_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        // Redirects are termind's to follow (HTTPClient), so every hop is checked.
        termind_curl_long(easy, CURLOPT_FOLLOWLOCATION, 0)
        termind_curl_long(easy, CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(request.connectTimeout * 1000)))
        termind_curl_long(easy, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        termind_curl_long(easy, CURLOPT_TCP_KEEPALIVE, 1)
        termind_curl_string(easy, CURLOPT_USERAGENT, "termind")
        // The system's trust store (Debian's libcurl: /etc/ssl/certs), peer and name checked.
        termind_curl_long(easy, CURLOPT_SSL_VERIFYPEER, 1)
        termind_curl_long(easy, CURLOPT_SSL_VERIFYHOST, 2)
        switch request.method {
        case "GET": termind_curl_long(easy, CURLOPT_HTTPGET, 1)
        case "POST": termind_curl_long(easy, CURLOPT_POST, 1)
        default: termind_curl_string(easy, CURLOPT_CUSTOMREQUEST, request.method)
        }
        if let body = request.body {
            termind_curl_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            body.withUnsafeBytes { bytes in
                // Copied by curl: the request's bytes need not outlive this call.
                _ = termind_curl_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
            }
        }
        // No `Expect: 100-continue` round trip before a body.
        for line in request.headers.map({ "\($0.name): \($0.value)" }) + ["Expect:"] {
            headerList = curl_slist_append(headerList, line)
        }
        termind_curl_list(easy, CURLOPT_HTTPHEADER, headerList)
        // A pinned address: curl connects there for the URL's host and port (no lookup of its
        // own that could answer differently), and never through a proxy.
        if let pinned = request.pinned, let url = HTTPURL(request.url) {
            resolveList = curl_slist_append(resolveList, "\(url.host):\(url.port):\(pinned.contains(":") ? "[\(pinned)]" : pinned)")
            termind_curl_list(easy, CURLOPT_RESOLVE, resolveList)
            termind_curl_string(easy, CURLOPT_NOPROXY, "*")
            // And curl may open a socket to that address only, whatever else it meets.
            pinnedText = strdup(pinned)
            termind_curl_pin_sockets(easy, pinnedText)
        }
        termind_curl_write_function(easy, CURLOPT_WRITEFUNCTION) { data, size, count, user in
            guard let user else { return 0 }
            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().body(data, size * count)
        }
        termind_curl_write_function(easy, CURLOPT_HEADERFUNCTION) { data, size, count, user in
            guard let user else { return 0 }
            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().header(data, size * count)
        }
    }

    /// Hands the transfer to the engine and waits for the response's head.
    func start() async throws -> HTTPHead {
        let pointer = Unmanaged.passRetained(self).toOpaque()
        termind_curl_pointer(easy, CURLOPT_WRITEDATA, pointer)
        termind_curl_pointer(easy, CURLOPT_HEADERDATA, pointer)
        state.withLock { $0.lastByte = Self.monotonic() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let early = state.withLock { state -> HTTPFailure? in
                    if state.cancelled { return HTTPFailure(HTTPErrorCode.cancelled, "The request to \(origin) was cancelled.", beforeResponse: true) }
                    state.headWaiter = continuation
                    return nil
                }
                if let early { continuation.resume(throwing: early) }
                CurlEngine.shared.submit(.add(self))
            }
        } onCancel: {
            cancel()
        }
    }

    /// The next piece of the body; nil once it ended.
    func next() async throws -> Data? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                var resume = false
                let outcome = state.withLock { state -> Result<Data?, HTTPFailure>? in
                    if state.chunkStart < state.chunks.count {
                        let chunk = state.chunks[state.chunkStart]
                        state.chunkStart += 1
                        if state.chunkStart == state.chunks.count {
                            state.chunks.removeAll(keepingCapacity: true)
                            state.chunkStart = 0
                        }
                        state.buffered -= chunk.count
                        if state.paused && state.buffered <= HTTPLimits.window / 2 {
                            state.paused = false
                            // Time the reader took is not the server's silence.
                            state.lastByte = Self.monotonic()
                            resume = true
                        }
                        return .success(chunk)
                    }
                    if let failure = state.failure { return .failure(failure) }
                    if state.cancelled { return .failure(HTTPFailure(HTTPErrorCode.cancelled, "The request to \(origin) was cancelled.", beforeResponse: false)) }
                    if state.done { return .success(nil) }
                    state.bodyWaiter = continuation
                    return nil
                }
                if resume { CurlEngine.shared.submit(.resume(self)) }
                if let outcome { continuation.resume(with: outcome.mapError { $0 as any Error }) }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Stops the request: its connection is closed, whoever waits gets `http.cancelled`.
    func cancel() {
        let waiters = state.withLock { state -> (CheckedContinuation<HTTPHead, any Error>?, CheckedContinuation<Data?, any Error>?)? in
            guard !state.done, !state.cancelled else { return nil }
            state.cancelled = true
            defer { state.headWaiter = nil; state.bodyWaiter = nil }
            return (state.headWaiter, state.bodyWaiter)
        }
        guard let waiters else { return }
        let failure = HTTPFailure(HTTPErrorCode.cancelled, "The request to \(origin) was cancelled.", beforeResponse: false)
        waiters.0?.resume(throwing: failure)
        waiters.1?.resume(throwing: failure)
        CurlEngine.shared.submit(.cancel(self))
    }

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    // MARK: - On the engine's thread

    private func header(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data else { return 0 }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self).trimming(\.isNewline)
        var status = 0
        if line.isEmpty { _ = withUnsafeMutablePointer(to: &status) { termind_curl_info_long(easy, CURLINFO_RESPONSE_CODE, $0) } }
        let waiter = state.withLock { state -> (CheckedContinuation<HTTPHead, any Error>, HTTPHead)? in
            if state.cancelled { return nil }
            state.lastByte = Self.monotonic()
            if line.hasPrefix("HTTP/") {
                // A new header block (after a 1xx, or a redirect's): start over.
                state.headers = []
            } else if let colon = line.firstIndex(of: ":"), !line.isEmpty {
                state.headers.append(HTTPHeader(String(line[..<colon]), line[line.index(after: colon)...].trimmedWhitespace))
            } else if line.isEmpty, status >= 200, state.head == nil {
                let head = HTTPHead(status: status, headers: state.headers, url: request.url)
                state.head = head
                defer { state.headWaiter = nil }
                return state.headWaiter.map { ($0, head) }
            }
            return nil
        }
        if let (continuation, head) = waiter { continuation.resume(returning: head) }
        return isCancelled ? 0 : count
    }

    private func body(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data else { return 0 }
        enum Outcome { case take(CheckedContinuation<Data?, any Error>?), pause, abort }
        let outcome = state.withLock { state -> Outcome in
            if state.cancelled { return .abort }
            if state.received + count > request.responseLimit {
                state.abort = HTTPFailure(HTTPErrorCode.tooLarge, "The response from \(origin) is larger than \(request.responseLimit >> 20) MiB, the most termind reads; it was refused.",
                                          beforeResponse: false)
                return .abort
            }
            if state.buffered >= HTTPLimits.window {
                state.paused = true
                return .pause
            }
            state.received += count
            state.anyByte = true
            state.lastByte = Self.monotonic()
            if let waiter = state.bodyWaiter {
                // The reader waits: the bytes go to it directly.
                state.bodyWaiter = nil
                return .take(waiter)
            }
            state.chunks.append(Data(bytes: data, count: count))
            state.buffered += count
            return .take(nil)
        }
        switch outcome {
        case .abort: return 0
        case .pause: return termind_curl_writefunc_pause
        case .take(let waiter):
            waiter?.resume(returning: Data(bytes: data, count: count))
            return count
        }
    }

    /// The failure when the response stayed silent past its idle deadline.
    func overdue(now: UInt64) -> HTTPFailure? {
        state.withLock { state in
            guard !state.paused, !state.done, now &- state.lastByte > UInt64(request.idleTimeout * 1e9) else { return nil }
            return HTTPFailure(HTTPErrorCode.timeout, "\(origin) sent nothing for \(Self.seconds(request.idleTimeout)); the request was given up.", beforeResponse: !state.anyByte)
        }
    }

    /// What a curl result means for the reader, in termind's words.
    func failure(for code: CURLcode) -> HTTPFailure {
        let (abort, anyByte) = state.withLock { ($0.abort, $0.anyByte) }
        if let abort { return abort }
        let reason = String(cString: curl_easy_strerror(code))
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT:
            return HTTPFailure(HTTPErrorCode.connect, "termind could not reach \(origin): \(reason).", beforeResponse: true)
        case CURLE_OPERATION_TIMEDOUT:
            return HTTPFailure(HTTPErrorCode.timeout, anyByte ? "\(origin) stopped answering: \(reason)." : "\(origin) did not answer within \(Self.seconds(request.connectTimeout)): \(reason).",
                               beforeResponse: !anyByte)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return HTTPFailure(HTTPErrorCode.tls, "The TLS connection to \(origin) failed: \(reason).", beforeResponse: true)
        default:
            return HTTPFailure(HTTPErrorCode.interrupted, "The connection to \(origin) broke \(anyByte ? "during the response" : "before a response"): \(reason).",
                               beforeResponse: !anyByte)
        }
    }

    /// The end, with `failure` or complete; wakes whoever waits.
    func finished(_ failure: HTTPFailure?) {
        let waiters = state.withLock { state -> (CheckedContinuation<HTTPHead, any Error>?, CheckedContinuation<Data?, any Error>?) in
            state.done = true
            state.failure = state.cancelled ? nil : failure
            defer { state.headWaiter = nil; state.bodyWaiter = nil }
            return (state.headWaiter, state.bodyWaiter)
        }
        if let head = waiters.0 {
            if let failure { head.resume(throwing: failure) } else {
                // A complete response with no header block (HTTP/0.9, refused by curl): an error.
                head.resume(throwing: HTTPFailure(HTTPErrorCode.interrupted, "\(origin) answered without a status line.", beforeResponse: false))
            }
        }
        if let body = waiters.1 {
            if let failure { body.resume(throwing: failure) } else { body.resume(returning: nil) }
        }
    }

    /// Drops the engine's reference (engine thread, once, after the handle left the multi
    /// handle); the handle is freed with the last reference.
    func release() {
        Unmanaged.passUnretained(self).release()
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        curl_slist_free_all(resolveList)
        free(pinnedText)
    }

    static func monotonic() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(printf: "%.1f s", value)
    }
}
