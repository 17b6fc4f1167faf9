import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// AF_UNIX stream sockets: the one place that builds their addresses and connects them
/// (termind's control socket, an ssh-agent's socket). Descriptors are close-on-exec.
public enum UnixSocket {
    /// The address of `path`; nil when the path is longer than `sockaddr_un` holds.
    public static func address(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= pathLimit else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// The longest path an address holds (its terminating zero aside).
    public static let pathLimit = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    public enum Failure: Error {
        /// socket(2) failed; `errno` says why.
        case create
        /// connect(2) failed; `errno` says why.
        case connect
    }

    /// A connected stream socket to `address` (blocking, as connect(2) to a local socket
    /// returns at once or fails); `errno` is kept for the caller's message on failure.
    public static func connect(_ address: sockaddr_un) throws(Failure) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .create }
        var address = address
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            errno = code
            throw .connect
        }
        return fd
    }
}
