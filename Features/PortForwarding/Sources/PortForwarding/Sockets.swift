import Dispatch
import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import PortForwardingAPI
import TermindCore

/// Blocking socket work of forwards — resolving and binding, connecting to a remote
/// forward's local target, reading SOCKS handshakes — runs here, on threads of its own
/// (never Swift's pool or Core's store executor: a slow SOCKS client holds one of these
/// for at most `handshakeSeconds`).
enum ForwardingIO {
    static let executor = BlockingExecutor(name: "termind.forwarding", threadLimit: 32, queueLimit: 4096)
    static let handshakeSeconds: Double = 10
    static let connectSeconds: Double = 10

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await executor.run(busy: TermindError(.forwardingFailed, "Too many forwarded connections are being set up at once (\(executor.queueLimit) wait); try again."), body)
    }

    static func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

    /// `address`'s socket addresses for `port` (numeric or a name; AI_PASSIVE for binding).
    static func resolve(_ address: String, port: Int, passive: Bool) throws -> [(family: Int32, address: Data)] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(address, String(port), &hints, &list)
        guard rc == 0, let list else {
            // Binding a listener, or reaching a remote forward's target from here.
            throw TermindError(passive ? .forwardingBindFailed : .forwardingFailed,
                               "'\(address)' is not an address this machine can resolve (\(String(cString: gai_strerror(rc)))).")
        }
        defer { freeaddrinfo(list) }
        var found: [(Int32, Data)] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let entry = cursor {
            if let sa = entry.pointee.ai_addr { found.append((entry.pointee.ai_family, Data(bytes: sa, count: Int(entry.pointee.ai_addrlen)))) }
            cursor = entry.pointee.ai_next
        }
        return found
    }

    /// A connected TCP socket to `host`:`port` within `connectSeconds` (blocking; run it here).
    static func connect(host: String, port: Int) throws -> Int32 {
        var last = "no address"
        for (family, address) in try resolve(host, port: port, passive: false) {
            let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { last = errnoText(); continue }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            let rc = address.withUnsafeBytes { Glibc.connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count)) }
            if rc == 0 || errno == EINPROGRESS {
                var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if rc == 0 || poll(&poller, 1, Int32(connectSeconds * 1000)) == 1 {
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    if error == 0 { return fd }
                    last = errnoText(error)
                } else {
                    last = "no answer within \(Int(connectSeconds)) s"
                }
            } else {
                last = errnoText()
            }
            close(fd)
        }
        throw TermindError(.forwardingFailed, "Could not connect to \(host):\(port): \(last).")
    }

    /// Reads a SOCKS client's request within `handshakeSeconds`, answering its greeting.
    /// Returns the handshake (its target and replies) or nil after refusing (`fd` stays
    /// the caller's to close either way).
    static func socksRequest(_ fd: Int32) -> (handshake: SOCKSHandshake, host: String, port: Int)? {
        var handshake = SOCKSHandshake()
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(handshakeSeconds * 1e9)
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32((deadline - now) / 1_000_000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready == 1 else { return nil }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
            guard n > 0 else { return nil }
            switch handshake.feed(Array(buffer[0..<n])) {
            case .more(let reply):
                if !reply.isEmpty, !sendAll(fd, reply) { return nil }
            case .connect(let host, let port, _):
                return (handshake, host, port)
            case .refuse(let reply, _):
                if !reply.isEmpty { _ = sendAll(fd, reply) }
                return nil
            }
        }
    }

    @discardableResult
    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n > 0 { offset += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && errno == EAGAIN {
                var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&poller, 1, 5000) == 1 { continue }
            }
            return false
        }
        return true
    }
}

/// A listening TCP socket on this machine (a local or dynamic rule's), bound with
/// SO_REUSEADDR (a port in TIME_WAIT after a restart binds again) and never SO_REUSEPORT (a
/// second live listener on the same port is an error, not a silent share). One thread
/// accepts; `stop()` ends it.
final class LocalListener: Sendable {
    let bound: String
    private let fd: Int32
    private let stopped = Atomic<Bool>(false)

    private init(fd: Int32, bound: String) {
        self.fd = fd
        self.bound = bound
    }

    /// Binds `address`:`port` (blocking: run it on `ForwardingIO`); `rule` names the rule in errors.
    static func bind(_ address: String, port: Int, rule: String) throws -> LocalListener {
        var failure = "no address"
        for (family, sockaddrBytes) in try ForwardingIO.resolve(address, port: port, passive: true) {
            let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { failure = ForwardingIO.errnoText(); continue }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            if family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
            let rc = sockaddrBytes.withUnsafeBytes { Glibc.bind(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count)) }
            if rc == 0, listen(fd, 512) == 0 {
                return LocalListener(fd: fd, bound: Self.name(of: fd) ?? "\(address):\(port)")
            }
            let code = errno
            close(fd)
            failure = code == EADDRINUSE ? "the address is in use (another program or rule listens there)" : ForwardingIO.errnoText(code)
        }
        let shown = address.contains(":") ? "[\(address)]:\(port)" : "\(address):\(port)"
        throw TermindError(.forwardingBindFailed, "Rule '\(rule)' cannot listen on \(shown): \(failure).")
    }

    /// "127.0.0.1:8080" / "[::1]:8080" as the kernel bound it.
    static func name(of fd: Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        guard rc == 0 else { return nil }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: 32)
        let ok = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), &service, socklen_t(service.count), NI_NUMERICHOST | NI_NUMERICSERV)
            }
        }
        guard ok == 0 else { return nil }
        let address = host.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        let port = service.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return (address.contains(":") ? "[\(address)]" : address) + ":" + port
    }

    /// Accepts on a thread of its own until `stop()`, handing each connection (owned by the
    /// handler from then on) to `handler`.
    func start(_ handler: @escaping @Sendable (Int32) -> Void) {
        let fd = self.fd
        let thread = SystemThread.named("termind.forward.accept") { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    if (errno == EMFILE || errno == ENFILE), !isStopped { usleep(10_000); continue }
                    if isStopped { break }
                    usleep(10_000)
                    continue
                }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                var one: Int32 = 1
                setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                if isStopped { close(client); break }
                handler(client)
            }
            // Closed here, once accept() returned: closed by stop(), the number could be
            // reused by another socket while this thread is still on its way into accept().
            close(fd)
        }
        thread.start()
    }

    private var isStopped: Bool { stopped.load(ordering: .acquiring) }

    /// Stops accepting (the port is free once the accepting thread has closed it).
    func stop() {
        let first = !stopped.exchange(true, ordering: .acquiringAndReleasing)
        if first { shutdown(fd, Int32(SHUT_RDWR)) }
    }
}

/// A rule's flows, so that stopping the rule ends them (and only them): each is a dup of the
/// flow's socket, shut down on stop, closed when the flow ends (so its number is never reused
/// under us).
final class FlowSet: Sendable {
    private struct State {
        var flows: [UInt64: Int32] = [:]
        var next: UInt64 = 0
        var closed = false
    }
    private let state = Mutex(State())

    /// Tracks `fd`'s socket; nil when the set is closed already (then `fd` is shut down).
    func add(_ fd: Int32) -> UInt64? {
        let copy = dup(fd)
        return state.withLock { s in
            guard !s.closed, copy >= 0 else {
                if copy >= 0 { close(copy) }
                shutdown(fd, Int32(SHUT_RDWR))
                return nil
            }
            s.next += 1
            s.flows[s.next] = copy
            return s.next
        }
    }

    func remove(_ id: UInt64?) {
        guard let id, let fd = state.withLock({ s in s.flows.removeValue(forKey: id) }) else { return }
        close(fd)
    }

    /// Ends every flow (their bridges see the sockets shut and finish).
    func closeAll() {
        let open: [Int32] = state.withLock { s in
            s.closed = true
            defer { s.flows = [:] }
            return Array(s.flows.values)
        }
        for fd in open {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }
}
