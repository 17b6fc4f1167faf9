internal import CLibSSH2
import Dispatch
import Foundation
import TermindCore

/// TCP connect with deadlines: name resolution (getaddrinfo cannot be interrupted, so it
/// runs on a thread of Core's blocking executor and a late answer is dropped), then a
/// non-blocking connect to each address in turn, waiting with poll() on the same executor.
/// Returns a connected, non-blocking socket.
enum SocketConnector {
    static func connect(host: String, port: Int, resolveDeadline: Double, connectDeadline: Double) async throws -> Int32 {
        let addresses = try await resolve(host: host, port: port, within: resolveDeadline)
        try Task.checkCancellation()
        return try await BlockingExecutor.run { try connect(addresses, host: host, port: port, deadline: .now() + connectDeadline) }
    }

    struct Address: Sendable {
        var family: Int32
        var socktype: Int32
        var proto: Int32
        var bytes: [UInt8]
    }

    static func resolve(host: String, port: Int, within seconds: Double) async throws -> [Address] {
        let outcome = UncheckedBox<Result<[Address], TermindError>?>(nil)
        let lock = NSLock()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Address], Error>) in
            let finish: @Sendable (Result<[Address], TermindError>) -> Void = { result in
                let first: Bool = lock.withLock {
                    guard outcome.value == nil else { return false }
                    outcome.value = result
                    return true
                }
                if first { continuation.resume(with: result.mapError { $0 as Error }) }
            }
            let accepted = BlockingExecutor.core.submit { finish(lookup(host: host, port: port)) }
            if !accepted {
                finish(.failure(TermindError(.blockingBusy, "termind has too much blocking work queued to resolve \(host); try again.")))
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                finish(.failure(SSHError.make(.sshTimeout, "Resolving \(host) took longer than \(SSHConnection.seconds(seconds)).")))
            }
        }
    }

    private static func lookup(host: String, port: Int) -> Result<[Address], TermindError> {
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

    private static func connect(_ addresses: [Address], host: String, port: Int, deadline: DispatchTime) throws -> Int32 {
        var lastError = "no address"
        for address in addresses {
            let fd = socket(address.family, address.socktype | Int32(SOCK_CLOEXEC.rawValue), address.proto)
            guard fd >= 0 else { continue }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let started = address.bytes.withUnsafeBytes { raw in
                Foundation.connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }
            if started == 0 { return fd }
            guard errno == EINPROGRESS else {
                lastError = String(cString: strerror(errno))
                close(fd)
                continue
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let now = DispatchTime.now()
            let remaining = now < deadline ? Int32(min(Int(Int32.max), Int((deadline.uptimeNanoseconds - now.uptimeNanoseconds) / 1_000_000))) : 0
            let ready = poll(&pfd, 1, remaining)
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if ready > 0 && error == 0 { return fd }
            lastError = ready == 0 ? "no answer before the deadline" : String(cString: strerror(error))
            close(fd)
            if ready == 0 { break }
        }
        throw SSHError.make(lastError == "no answer before the deadline" ? .sshTimeout : .sshConnectFailed,
                            "Cannot connect to \(host) port \(port): \(lastError).")
    }
}
