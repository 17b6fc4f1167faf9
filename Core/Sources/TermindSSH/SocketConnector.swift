import Dispatch
import Foundation
import TermindCore

/// TCP connect with a deadline: name resolution, then a non-blocking connect to each
/// address in turn, waiting with poll(). Returns a connected, non-blocking socket.
enum SocketConnector {
    static func connect(host: String, port: Int, deadline: DispatchTime) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var results: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &results)
        guard status == 0, let first = results else {
            throw SSHError.make("ssh.resolve_failed", "Cannot resolve \(host): \(String(cString: gai_strerror(status))).")
        }
        defer { freeaddrinfo(results) }
        var lastError = "no address"
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            cursor = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), info.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Foundation.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
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
        throw SSHError.make(lastError == "no answer before the deadline" ? "ssh.timeout" : "ssh.connect_failed",
                            "Cannot connect to \(host) port \(port): \(lastError).")
    }
}
