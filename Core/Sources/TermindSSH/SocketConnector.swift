internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// TCP connect with deadlines and Happy Eyeballs (RFC 8305): name resolution (getaddrinfo
/// cannot be interrupted, so it runs on a thread of the network executor and a late answer is
/// dropped), then the addresses interleaved by family, an attempt started every 250 ms — or at
/// once when the ones in flight have all failed — until one connects; the others are closed.
/// A black-holed first address costs 250 ms, not the whole deadline. Cancelling the task ends
/// the attempts at once. Returns a connected, non-blocking socket.
///
/// Resolution and connects each run on an executor of their own, so a DNS outage parks only
/// lookups (never a connect to an address, the store, or key derivation) and a reconnect storm
/// only connects. An address literal is never looked up.
enum SocketConnector {
    /// Where name lookups wait (a silent name server holds each for glibc's whole timeout).
    static let resolver = BlockingExecutor(name: "termind.resolve", threadLimit: 16, queueLimit: 512)
    /// Where connect attempts wait.
    static let connector = BlockingExecutor(name: "termind.connect", threadLimit: 16, queueLimit: 512)
    /// RFC 8305's recommended Connection Attempt Delay.
    static let attemptDelay: Double = 0.25

    static func connect(host: String, port: Int, resolveDeadline: Double, connectDeadline: Double) async throws -> Int32 {
        let addresses = try await resolve(host: host, port: port, within: resolveDeadline)
        try Task.checkCancellation()
        return try await connect(addresses, host: host, port: port, within: connectDeadline)
    }

    struct Address: Sendable, Equatable {
        var family: Int32
        var socktype: Int32
        var proto: Int32
        var bytes: [UInt8]
    }

    static func resolve(host: String, port: Int, within seconds: Double) async throws -> [Address] {
        if let literal = literal(host, port: port) { return [literal] }
        let outcome = Mutex<Bool>(false)
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Address], Error>) in
            let finish: @Sendable (Result<[Address], TermindError>) -> Void = { result in
                let first = outcome.withLock { done -> Bool in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume(with: result.mapError { $0 as Error }) }
            }
            let accepted = resolver.submit { finish(lookup(host: host, port: port)) }
            if !accepted {
                finish(.failure(TermindError(.blockingBusy, "termind has too many connections being made to resolve \(host) now; try again.")))
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                finish(.failure(SSHError.make(.sshTimeout, "Resolving \(host) took longer than \(SSHConnection.seconds(seconds)).")))
            }
        }
    }

    /// An IPv4 or IPv6 address written as one (`[…]` allowed): no lookup.
    static func literal(_ host: String, port: Int) -> Address? {
        var text = host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        var four = in_addr()
        if inet_pton(AF_INET, text, &four) == 1 {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            a.sin_addr = four
            return Address(family: AF_INET, socktype: Int32(SOCK_STREAM.rawValue), proto: Int32(IPPROTO_TCP), bytes: withUnsafeBytes(of: a) { [UInt8]($0) })
        }
        var six = in6_addr()
        if !text.contains("%"), inet_pton(AF_INET6, text, &six) == 1 {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            a.sin6_addr = six
            return Address(family: AF_INET6, socktype: Int32(SOCK_STREAM.rawValue), proto: Int32(IPPROTO_TCP), bytes: withUnsafeBytes(of: a) { [UInt8]($0) })
        }
        return nil
    }

    private static func lookup(host: String, port: Int) -> Result<[Address], TermindError> {
        BlockingCheck.blocking("getaddrinfo")
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var results: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &results)
        guard status == 0, results != nil else {
            return .failure(SSHError.make(.sshResolveFailed, "Cannot resolve \(host): \(String(cString: gai_strerror(status)))."))
        }
        defer { freeaddrinfo(results) }
        var addresses: [Address] = []
        var cursor = results
        while let info = cursor {
            cursor = info.pointee.ai_next
            let bytes = [UInt8](UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen)))
            addresses.append(Address(family: info.pointee.ai_family, socktype: info.pointee.ai_socktype, proto: info.pointee.ai_protocol, bytes: bytes))
        }
        return .success(addresses)
    }

    /// RFC 8305 §4: the resolver's order kept within each family, the families taking turns,
    /// the first address's family first.
    static func interleave(_ addresses: [Address]) -> [Address] {
        guard let first = addresses.first else { return [] }
        var preferred = addresses.filter { $0.family == first.family }
        var other = addresses.filter { $0.family != first.family }
        var ordered: [Address] = []
        while !preferred.isEmpty || !other.isEmpty {
            if !preferred.isEmpty { ordered.append(preferred.removeFirst()) }
            if !other.isEmpty { ordered.append(other.removeFirst()) }
        }
        return ordered
    }

    /// Connects to the first of `addresses` (interleaved) that answers within `seconds`.
    static func connect(_ addresses: [Address], host: String, port: Int, within seconds: Double) async throws -> Int32 {
        // Cancellation wakes the attempts' poll() through this eventfd.
        let wake = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wake >= 0 else { throw SSHError.make(.sshConnectFailed, "Cannot connect to \(host): no eventfd (\(String(cString: strerror(errno)))).") }
        defer { close(wake) }
        let ordered = interleave(addresses)
        return try await withTaskCancellationHandler {
            try await connector.run(busy: TermindError(.blockingBusy, "termind has too many connections being made to reach \(host) now; try again.")) {
                try attempt(ordered, host: host, port: port, deadline: DispatchTime.now() + seconds, wake: wake)
            }
        } onCancel: {
            var one: UInt64 = 1
            _ = write(wake, &one, 8)
        }
    }

    private static func attempt(_ ordered: [Address], host: String, port: Int, deadline: DispatchTime, wake: Int32) throws -> Int32 {
        BlockingCheck.blocking("a TCP connect's poll")
        var pending = ordered[...]
        var inFlight: [Int32] = []
        var lastError = "no address"
        var nextStart = DispatchTime.now()
        func closeAll() { inFlight.forEach { close($0) }; inFlight.removeAll() }
        while true {
            let now = DispatchTime.now()
            // Start the next attempt: at its time, or at once when none is in flight.
            if !pending.isEmpty, now >= nextStart || inFlight.isEmpty {
                let address = pending.removeFirst()
                nextStart = now + attemptDelay
                switch start(address) {
                case .connected(let fd):
                    closeAll()
                    return fd
                case .inProgress(let fd):
                    inFlight.append(fd)
                case .failed(let reason):
                    lastError = reason
                    nextStart = now
                }
                continue
            }
            guard !inFlight.isEmpty else {
                throw SSHError.make(.sshConnectFailed, "Cannot connect to \(host) port \(port): \(lastError).")
            }
            guard now < deadline else {
                closeAll()
                throw SSHError.make(.sshTimeout, "Cannot connect to \(host) port \(port): no answer before the deadline.")
            }
            var until = deadline
            if !pending.isEmpty, nextStart < until { until = nextStart }
            let milliseconds = Int32(clamping: (until.uptimeNanoseconds - min(until.uptimeNanoseconds, now.uptimeNanoseconds) + 999_999) / 1_000_000)
            var descriptors = [pollfd(fd: wake, events: Int16(POLLIN), revents: 0)] + inFlight.map { pollfd(fd: $0, events: Int16(POLLOUT), revents: 0) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), milliseconds)
            if ready < 0, errno != EINTR {
                closeAll()
                throw SSHError.make(.sshConnectFailed, "Cannot connect to \(host) port \(port): poll failed (\(String(cString: strerror(errno)))).")
            }
            if descriptors[0].revents != 0 {
                closeAll()
                throw CancellationError()
            }
            var failedNow = false
            for descriptor in descriptors.dropFirst() where descriptor.revents != 0 {
                var error: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(descriptor.fd, SOL_SOCKET, SO_ERROR, &error, &length)
                if error == 0, descriptor.revents & Int16(POLLOUT) != 0 {
                    inFlight.removeAll { $0 == descriptor.fd }
                    closeAll()
                    return descriptor.fd
                }
                lastError = String(cString: strerror(error == 0 ? ECONNREFUSED : error))
                close(descriptor.fd)
                inFlight.removeAll { $0 == descriptor.fd }
                failedNow = true
            }
            // A failure starts the next attempt at once (RFC 8305 §5).
            if failedNow { nextStart = DispatchTime.now() }
        }
    }

    private enum Start { case connected(Int32), inProgress(Int32), failed(String) }

    private static func start(_ address: Address) -> Start {
        let fd = socket(address.family, address.socktype | Int32(SOCK_CLOEXEC.rawValue), address.proto)
        guard fd >= 0 else { return .failed(String(cString: strerror(errno))) }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let started = address.bytes.withUnsafeBytes { raw in
            Glibc.connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        if started == 0 { return .connected(fd) }
        guard errno == EINPROGRESS else {
            let reason = String(cString: strerror(errno))
            close(fd)
            return .failed(reason)
        }
        return .inProgress(fd)
    }
}
