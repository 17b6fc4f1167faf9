#if canImport(Glibc)
import Glibc
#endif

/// The launcher's connection to `termind serve`: a Unix stream socket to a server that runs
/// as this user (SO_PEERCRED, as the server checks its clients), lines written whole with
/// MSG_NOSIGNAL, the first one carrying this process's standard streams as SCM_RIGHTS.
/// Owns the descriptor; `close()` ends it. The client's side of what Core's SocketIO and
/// UnixSocket do for the full client, written again on purpose: the launcher loads no
/// termind library (LinkageTests, ArchitectureTests).
final class LauncherSocket {
    private(set) var fd: Int32
    private var buffer: [UInt8] = []
    /// A server's line is at most this long (questions carry text; nothing bulk comes here).
    static let maximumLine = 1 << 20

    /// nil when nothing listens at `path`, or a server of another user does.
    init?(path: String) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { _ = Glibc.close(fd); return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: bytes) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        // The peer's credentials, as `struct ucred` lays them out (pid, uid, gid).
        var credentials: (pid_t, uid_t, gid_t) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard connected == 0, getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0, credentials.1 == getuid() else {
            _ = Glibc.close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit { close() }

    func close() {
        if fd >= 0 { _ = Glibc.close(fd) }
        fd = -1
    }

    /// Writes `line` (a newline is added) whole; with `descriptors`, they travel on its first
    /// byte as one SCM_RIGHTS message. False when the server is gone.
    func send(_ line: String, descriptors: [Int32] = []) -> Bool {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        var offset = 0
        if !descriptors.isEmpty {
            let sent = Self.sendWithDescriptors(fd, bytes, descriptors)
            guard sent > 0 else { return false }
            offset = sent
        }
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// sendmsg() with the descriptors in a control message laid out as CMSG_SPACE expects
    /// (a `cmsghdr`, then the ints, padded to the word size).
    private static func sendWithDescriptors(_ fd: Int32, _ bytes: [UInt8], _ descriptors: [Int32]) -> Int {
        let header = MemoryLayout<cmsghdr>.size
        let align = MemoryLayout<Int>.size
        let payload = descriptors.count * MemoryLayout<Int32>.size
        let space = (header + align - 1) / align * align + (payload + align - 1) / align * align
        var control = [UInt8](repeating: 0, count: space)
        control.withUnsafeMutableBytes { raw in
            var message = cmsghdr()
            message.cmsg_len = header + payload
            message.cmsg_level = SOL_SOCKET
            message.cmsg_type = Int32(SCM_RIGHTS)
            raw.storeBytes(of: message, as: cmsghdr.self)
            for (index, descriptor) in descriptors.enumerated() {
                raw.storeBytes(of: descriptor, toByteOffset: header + index * MemoryLayout<Int32>.size, as: Int32.self)
            }
        }
        var bytes = bytes
        while true {
            let sent = bytes.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { controlBytes in
                    var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                    return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                        var message = msghdr()
                        message.msg_iov = vectorPointer
                        message.msg_iovlen = 1
                        message.msg_control = controlBytes.baseAddress
                        message.msg_controllen = controlBytes.count
                        return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                    }
                }
            }
            if sent < 0 && errno == EINTR { continue }
            return sent
        }
    }

    enum Read { case line([UInt8]), end, again }

    /// A whole line already read, if any: one read may bring several, so the caller takes
    /// these before it waits for the socket again.
    func bufferedLine() -> [UInt8]? { takeLine() }

    /// The next whole line (without its newline) when one is buffered or arrives with one
    /// read; `.again` when the read brought only part of one; `.end` when the server closed
    /// the connection (or sent a line over `maximumLine`).
    func readLine() -> Read {
        if let line = takeLine() { return .line(line) }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count < 0 && (errno == EINTR || errno == EAGAIN) { return .again }
        guard count > 0 else { return .end }
        buffer += chunk[..<count]
        if let line = takeLine() { return .line(line) }
        return buffer.count > Self.maximumLine ? .end : .again
    }

    private func takeLine() -> [UInt8]? {
        guard let newline = buffer.firstIndex(of: 0x0A) else { return nil }
        let line = Array(buffer[..<newline])
        buffer.removeSubrange(...newline)
        return line
    }
}
