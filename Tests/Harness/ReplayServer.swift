import Foundation
import Synchronization
import TermindCore

/// A loopback HTTP/1.1 server that answers each request as a test scripts it: a status,
/// headers and a body sent in steps (bytes, pauses, an abrupt close, a hang), chunked the way
/// streaming APIs send server-sent events. It records every request (method, target,
/// headers, body) so tests can assert what was sent, and notices a client that hangs up
/// during a reply. Keep-alive connections are served request after request.
public final class ReplayServer: @unchecked Sendable {
    public struct Request: Sendable {
        public let method: String
        /// As sent: a path (`/v1/responses?x=1`), or an absolute URL when sent to a proxy.
        public let target: String
        public let headers: [(name: String, value: String)]
        public let body: Data

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
        public var path: String {
            guard target.hasPrefix("http://") || target.hasPrefix("https://"), let url = URL(string: target) else { return target }
            return url.path + (url.query.map { "?" + $0 } ?? "")
        }
        /// The body as JSON.
        public func json() throws -> JSONValue { try JSONCoding.parse(body, source: "the request body") }
    }

    public enum Step: Sendable {
        case bytes(Data)
        /// Waits (a slow stream).
        case pause(Double)
        /// Closes the connection at once, mid-reply (a cut stream).
        case close
        /// Sends nothing more until the client goes away.
        case hang
    }

    public struct Reply: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var steps: [Step]
        /// Chunked transfer encoding (a stream) or Content-Length (steps of bytes only).
        public var chunked: Bool

        public init(status: Int = 200, headers: [(String, String)] = [("Content-Type", "text/event-stream")], steps: [Step], chunked: Bool = true) {
            self.status = status
            self.headers = headers
            self.steps = steps
            self.chunked = chunked
        }

        /// A whole body at once.
        public static func body(_ text: String, status: Int = 200, contentType: String = "application/json", headers: [(String, String)] = []) -> Reply {
            Reply(status: status, headers: [("Content-Type", contentType)] + headers, steps: [.bytes(Data(text.utf8))], chunked: false)
        }

        /// Server-sent events split into pieces of at most `piece` bytes, `gap` seconds apart.
        public static func stream(_ body: Data, piece: Int = 64, gap: Double = 0) -> Reply {
            var steps: [Step] = []
            var offset = 0
            while offset < body.count {
                let end = min(body.count, offset + piece)
                steps.append(.bytes(body.subdata(in: offset..<end)))
                if gap > 0 { steps.append(.pause(gap)) }
                offset = end
            }
            return Reply(steps: steps)
        }
    }

    public let port: Int
    public var url: String { "http://127.0.0.1:\(port)" }

    private let listener: Int32
    private struct State {
        var requests: [Request] = []
        var replies: [Reply] = []
        var handler: (@Sendable (Request) -> Reply)?
        var hangUps = 0
        var written = 0
        var bodyStarts: [Double] = []
        var connections = 0
        var stopped = false
    }
    private let state = Mutex(State())

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw TermindError(code: "fixture.replay", message: "the replay server could not listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [weak self] in
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }
                guard let self else { close(client); return }
                self.state.withLock { $0.connections += 1 }
                Thread { self.serve(client) }.start()
            }
        }.start()
    }

    /// Replies given in order, one per request; when none is left, `handler`'s (or a 500).
    public func enqueue(_ replies: Reply...) { state.withLock { $0.replies += replies } }
    public func answer(with handler: @escaping @Sendable (Request) -> Reply) { state.withLock { $0.handler = handler } }

    public var requests: [Request] { state.withLock { $0.requests } }
    /// Replies the client hung up on before they ended.
    public var hangUps: Int { state.withLock { $0.hangUps } }
    /// Body bytes written to clients so far.
    public var written: Int { state.withLock { $0.written } }
    public var connections: Int { state.withLock { $0.connections } }
    /// When each reply's first body bytes were written (monotonic seconds, as
    /// `DispatchTime.now().uptimeNanoseconds / 1e9`): what a client's first token is timed from.
    public var bodyStarts: [Double] { state.withLock { $0.bodyStarts } }

    public func stop() {
        state.withLock { $0.stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { stop() }

    // MARK: - A connection

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var buffer = Data()
        while let request = readRequest(fd, &buffer) {
            if request.method == "CONNECT" {
                // A proxy's tunnel (https through HTTPS_PROXY): recorded, then bytes both ways.
                state.withLock { $0.requests.append(request) }
                return tunnel(fd, to: request.target, pending: buffer)
            }
            let reply = state.withLock { state -> Reply in
                state.requests.append(request)
                if !state.replies.isEmpty { return state.replies.removeFirst() }
                return state.handler?(request) ?? .body(#"{"error": "the replay server has no reply scripted"}"#, status: 500)
            }
            guard write(fd, reply) else { return }
        }
    }

    /// Connects to `target` (`host:port`), says so, and copies bytes both ways until either
    /// side closes.
    private func tunnel(_ fd: Int32, to target: String, pending: Data) {
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]),
              let upstream = try? EchoServer.connect(host: String(target[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: port) else {
            _ = send(fd, Data("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n".utf8))
            return
        }
        defer { close(upstream) }
        guard send(fd, Data("HTTP/1.1 200 Connection established\r\n\r\n".utf8)), pending.isEmpty || send(upstream, pending) else { return }
        var descriptors = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)]
        var chunk = [UInt8](repeating: 0, count: 65536)
        while poll(&descriptors, 2, 30_000) > 0 {
            for (from, to) in [(0, 1), (1, 0)] where descriptors[from].revents != 0 {
                let count = recv(descriptors[from].fd, &chunk, chunk.count, 0)
                guard count > 0, send(descriptors[to].fd, Data(chunk[..<count])) else { return }
            }
        }
    }

    /// One request: its head, then a Content-Length or chunked body.
    private func readRequest(_ fd: Int32, _ buffer: inout Data) -> Request? {
        let separator = Data("\r\n\r\n".utf8)
        var headEnd: Range<Data.Index>?
        while true {
            headEnd = buffer.range(of: separator)
            if headEnd != nil { break }
            guard receive(fd, &buffer) else { return nil }
        }
        guard let end = headEnd else { return nil }
        let lines = String(decoding: buffer[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        buffer.removeSubrange(..<end.upperBound)
        let first = lines.first?.split(separator: " ") ?? []
        guard first.count >= 2 else { return nil }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let value = { (name: String) in headers.first { $0.name.lowercased() == name }?.value }
        var body = Data()
        if let length = value("content-length").flatMap(Int.init) {
            while buffer.count < length { guard receive(fd, &buffer) else { return nil } }
            body = buffer.prefix(length)
            buffer.removeFirst(length)
        } else if value("transfer-encoding")?.lowercased() == "chunked" {
            while true {
                var lineEnd = buffer.range(of: Data("\r\n".utf8))
                while lineEnd == nil { guard receive(fd, &buffer) else { return nil }; lineEnd = buffer.range(of: Data("\r\n".utf8)) }
                let size = Int(String(decoding: buffer[..<lineEnd!.lowerBound], as: UTF8.self).split(separator: ";").first ?? "", radix: 16) ?? 0
                buffer.removeSubrange(..<lineEnd!.upperBound)
                while buffer.count < size + 2 { guard receive(fd, &buffer) else { return nil } }
                body.append(buffer.prefix(size))
                buffer.removeFirst(size + 2)
                if size == 0 { break }
            }
        }
        return Request(method: String(first[0]), target: String(first[1]), headers: headers, body: body)
    }

    private func receive(_ fd: Int32, _ buffer: inout Data) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = recv(fd, &chunk, chunk.count, 0)
        guard count > 0 else { return false }
        buffer.append(contentsOf: chunk[..<count])
        return true
    }

    /// Sends `reply`; false when the connection is done (closed by a step or by the client).
    private func write(_ fd: Int32, _ reply: Reply) -> Bool {
        var head = "HTTP/1.1 \(reply.status) \(Self.reason(reply.status))\r\n"
        for (name, value) in reply.headers { head += "\(name): \(value)\r\n" }
        if reply.chunked {
            head += "Transfer-Encoding: chunked\r\n"
        } else {
            let length = reply.steps.reduce(0) { total, step in if case .bytes(let data) = step { total + data.count } else { total } }
            head += "Content-Length: \(length)\r\n"
        }
        head += "\r\n"
        guard send(fd, Data(head.utf8)) else { return hungUp() }
        var started = false
        for step in reply.steps {
            switch step {
            case .bytes(let data):
                guard !data.isEmpty else { continue }
                let framed = reply.chunked ? Data(String(data.count, radix: 16).utf8) + Data("\r\n".utf8) + data + Data("\r\n".utf8) : data
                if !started {
                    started = true
                    let now = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
                    state.withLock { $0.bodyStarts.append(now) }
                }
                guard send(fd, framed) else { return hungUp() }
                state.withLock { $0.written += data.count }
            case .pause(let seconds):
                if clientLeft(fd, within: seconds) { return hungUp() }
            case .close:
                return false
            case .hang:
                while !clientLeft(fd, within: 3600) {}
                return hungUp()
            }
        }
        if reply.chunked { guard send(fd, Data("0\r\n\r\n".utf8)) else { return hungUp() } }
        return true
    }

    private func hungUp() -> Bool {
        state.withLock { $0.hangUps += 1 }
        return false
    }

    private func send(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let sent = Foundation.send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if sent <= 0 { return false }
                offset += sent
            }
            return true
        }
    }

    /// Waits up to `seconds`; true as soon as the client closed its side.
    private func clientLeft(_ fd: Int32, within seconds: Double) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN) | 0x2000 /* POLLRDHUP */, revents: 0)
        let ready = poll(&entry, 1, Int32(min(seconds, 3600) * 1000))
        guard ready > 0 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) <= 0
    }

    private static func reason(_ status: Int) -> String {
        [200: "OK", 301: "Moved Permanently", 302: "Found", 307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized",
         404: "Not Found", 408: "Request Timeout", 409: "Conflict", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
         503: "Service Unavailable", 529: "Overloaded"][status] ?? "Status"
    }
}
