import Foundation
import TermindCore

/// A TCP echo server on a free loopback port (python3), for tunnels.
public final class EchoServer {
    public let port: Int
    private let process: SpawnedProcess

    public init() throws {
        port = try SSHServerFixture.freePort()
        process = try SpawnedProcess("/usr/bin/python3", ["-c", """
            import socket, threading
            srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("127.0.0.1", \(port))); srv.listen(512)
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
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            close(fd)
            if ok == 0 { return }
            usleep(20_000)
        }
        throw TermindError(code: "fixture.echo", message: "the echo server did not listen")
    }

    public func stop() {
        process.signal(SIGKILL)
        process.wait()
    }
}
