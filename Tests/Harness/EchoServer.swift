import Foundation
import TermindCore

/// A TCP echo server on a free loopback port (python3), for tunnels: on 127.0.0.1, or on
/// `host` (`::1` for IPv6).
public final class EchoServer {
    public let port: Int
    public let host: String
    private let process: SpawnedProcess

    public init(host: String = "127.0.0.1") throws {
        self.host = host
        port = try SSHServerFixture.freePort()
        let family = host.contains(":") ? "socket.AF_INET6" : "socket.AF_INET"
        process = try SpawnedProcess("/usr/bin/python3", ["-c", """
            import socket, threading
            srv = socket.socket(\(family)); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("\(host)", \(port))); srv.listen(512)
            def serve(c):
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
                c.shutdown(socket.SHUT_WR); c.close()
            while True:
                c, _ = srv.accept()
                threading.Thread(target=serve, args=(c,), daemon=True).start()
            """], captureOutput: false)
        process.closeInput()
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let fd = try? Self.connect(host: host, port: port) {
                close(fd)
                return
            }
            usleep(20_000)
        }
        stop()
        throw TermindError(code: "fixture.echo", message: "the echo server did not listen on \(host) port \(port)")
    }

    public func stop() {
        process.signal(SIGKILL)
        process.wait()
    }

    /// A TCP connection to `host` (an IPv4 or IPv6 address) at `port`, reads timing out after
    /// 30 s; its descriptor.
    public static func connect(host: String, port: Int) throws -> Int32 {
        let six = host.contains(":")
        let fd = socket(six ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let ok: Int32
        if six {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = UInt16(port).bigEndian
            inet_pton(AF_INET6, host, &address.sin6_addr)
            ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr(host)
            ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        guard ok == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw TermindError(code: "test.connect", message: "cannot connect to \(host) port \(port): \(reason)")
        }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }
}
