import CTermindSystem
import TermindCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Small POSIX helpers for the Unix control socket. All descriptors are CLOEXEC.
enum SocketIO {
    static func unixAddress(_ path: String) throws -> sockaddr_un {
        guard let address = UnixSocket.address(path) else {
            throw TermindError(.socketPathTooLong, "The socket path \(path) is \(path.utf8.count) bytes; Unix sockets allow at most \(UnixSocket.pathLimit).")
        }
        return address
    }

    /// Refuses a folder that is not a directory owned by this user with no group/other access.
    static func checkPrivateDirectory(_ directory: String) throws {
        var info = stat()
        guard lstat(directory, &info) == 0 else { throw TermindError.posix(.socketDirectory, "Cannot inspect the socket folder \(directory)") }
        guard (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == getuid(), info.st_mode & 0o077 == 0 else {
            throw TermindError(.socketDirectoryUnsafe, "The socket folder \(directory) must be a directory owned by you with mode 0700 (it is mode \(String(info.st_mode & 0o777, radix: 8)), owner uid \(info.st_uid)); another user could impersonate the server. Remove it or choose another path with --socket.")
        }
    }

    /// Connects and checks that the server runs as this user (SO_PEERCRED): requests may
    /// carry secrets, so they go to nobody else.
    static func connect(_ path: String) throws -> Int32 {
        let fd = try connectUnchecked(path)
        var uid: uid_t = 0
        guard termind_peer_uid(fd, &uid) == 0, uid == getuid() else {
            close(fd)
            throw TermindError(.socketPeerRejected, "The process listening on \(path) does not run as you; termind will not send it anything.")
        }
        return fd
    }

    private static func connectUnchecked(_ path: String) throws -> Int32 {
        do {
            return try UnixSocket.connect(try unixAddress(path))
        } catch UnixSocket.Failure.create {
            throw TermindError.posix(.socketCreateFailed, "Cannot create a Unix socket")
        } catch UnixSocket.Failure.connect {
            throw TermindError.posix(.socketConnectFailed, "Cannot connect to the termind server at \(path)")
        }
    }

    /// Writes all of `data`, with `descriptors` (SCM_RIGHTS) on its first byte; false when
    /// the peer is gone.
    @discardableResult
    static func writeAll(_ fd: Int32, _ data: Data, descriptors: [Int32] = []) -> Bool {
        data.withUnsafeBytes { raw in
            var offset = 0
            if !descriptors.isEmpty {
                let n = descriptors.withUnsafeBufferPointer { termind_send_fds(fd, raw.baseAddress!, UInt(raw.count), $0.baseAddress!, Int32($0.count)) }
                guard n > 0 else { return false }
                offset = n
            }
            while offset < raw.count {
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n < 0 { if errno == EINTR { continue }; return false }
                offset += n
            }
            return true
        }
    }
}

/// Reads newline-delimited frames from a descriptor with a size bound. Each byte is
/// scanned for a newline once (memchr over the newly read bytes only), so a long line
/// costs linear time; a line over `maximum` is reported once and skipped to its end.
/// With a receive timeout on the descriptor (SO_RCVTIMEO), a read that times out is
/// reported as `.idle` and the reader can be asked again.
struct LineReader {
    enum Event { case line(Data), oversized, idle, end }

    let fd: Int32
    let maximum: Int
    /// Whether descriptors sent with the bytes (SCM_RIGHTS) are taken (the server's side);
    /// otherwise the kernel closes any that arrive.
    let collectsDescriptors: Bool
    /// Descriptors received and not yet claimed, oldest first. They arrive with the first
    /// byte of the line they belong to, so when a line is complete they are here — and at
    /// most the next line's as well: more than that many is a broken peer.
    private(set) var descriptors: [Int32] = []
    static let maximumHeldDescriptors = 2 * Int(TERMIND_MAX_PASSED_FDS)
    /// Set when the peer sent more descriptors than may be held, or another control message.
    private(set) var descriptorsOverflowed = false
    private var buffer: [UInt8] = []
    private var chunk = [UInt8](repeating: 0, count: 65_536)
    private var start = 0      // first unconsumed byte
    private var scanned = 0    // bytes from `start` already known to hold no newline
    private var discarding = false

    init(fd: Int32, maximum: Int, collectsDescriptors: Bool = false) {
        self.fd = fd
        self.maximum = maximum
        self.collectsDescriptors = collectsDescriptors
    }

    /// The `count` oldest received descriptors (now the caller's); nil when fewer arrived.
    mutating func takeDescriptors(_ count: Int) -> [Int32]? {
        guard count <= descriptors.count else { return nil }
        defer { descriptors.removeFirst(count) }
        return Array(descriptors.prefix(count))
    }

    /// Closes every descriptor received and not claimed (the connection ends).
    mutating func closeDescriptors() {
        for fd in descriptors { close(fd) }
        descriptors.removeAll()
    }

    /// One recv() of up to `count` bytes into `chunk`, keeping the descriptors that came
    /// with them.
    private mutating func receive(count: Int) -> Int {
        let (socket, collecting) = (fd, collectsDescriptors)
        let (n, received, truncated) = Self.receive(socket, collecting: collecting, into: &chunk, count: count)
        descriptors += received
        if truncated || descriptors.count > Self.maximumHeldDescriptors { descriptorsOverflowed = true }
        return n
    }

    private static func receive(_ socket: Int32, collecting: Bool, into buffer: inout [UInt8], count: Int) -> (Int, [Int32], Bool) {
        guard collecting else {
            return (buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress!, count, 0) }, [], false)
        }
        var received = [Int32](repeating: -1, count: Int(TERMIND_MAX_PASSED_FDS))
        var number: Int32 = 0
        var truncated: Int32 = 0
        let n = buffer.withUnsafeMutableBytes { raw in
            received.withUnsafeMutableBufferPointer { termind_recv_fds(socket, raw.baseAddress!, UInt(count), $0.baseAddress!, &number, &truncated) }
        }
        return (n, Array(received.prefix(Int(number))), truncated != 0)
    }

    mutating func next() -> Event {
        while true {
            if let newline = findNewline() {
                let line = buffer[start..<newline]
                start = newline + 1
                scanned = 0
                if discarding { discarding = false; continue }
                // The newline can arrive in the same read that crosses the bound.
                if line.count > maximum { return .oversized }
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\t") }) { continue }
                return .line(Data(line))
            }
            if !discarding && buffer.count - start > maximum {
                dropPending()
                discarding = true
                return .oversized
            }
            if discarding { dropPending() }
            compact()
            let n = receive(count: chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .idle }
            guard n > 0 else { return .end }
            chunk.withUnsafeBufferPointer { buffer.append(contentsOf: UnsafeBufferPointer(rebasing: $0[0..<n])) }
        }
    }

    /// The next `count` bytes as they are (the raw bytes attached to a line); nil when the
    /// connection ends first (or a receive timeout passes).
    mutating func read(count: Int) -> Data? {
        var data = Data(capacity: count)
        let held = min(count, buffer.count - start)
        if held > 0 {
            data.append(contentsOf: buffer[start..<(start + held)])
            start += held
            scanned = 0
        }
        while data.count < count {
            let wanted = min(chunk.count, count - data.count)
            let n = receive(count: wanted)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            chunk.withUnsafeBufferPointer { data.append(contentsOf: UnsafeBufferPointer(rebasing: $0[0..<n])) }
        }
        return data
    }

    private mutating func findNewline() -> Int? {
        let from = start + scanned
        guard from < buffer.count else { return nil }
        let found = buffer.withUnsafeBytes { raw -> Int? in
            guard let hit = memchr(raw.baseAddress! + from, Int32(UInt8(ascii: "\n")), raw.count - from) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(hit))
        }
        if found == nil { scanned = buffer.count - start }
        return found
    }

    private mutating func dropPending() {
        buffer.removeAll(keepingCapacity: true)
        start = 0
        scanned = 0
    }

    /// Moves unconsumed bytes to the front once the consumed prefix dominates.
    private mutating func compact() {
        guard start > 0, start >= buffer.count - start else { return }
        buffer.removeFirst(start)
        start = 0
    }
}

extension TermindError {
    /// An error for a failed system call, with the reason from errno appended.
    static func posix(_ code: ErrorCode, _ message: String) -> TermindError {
        TermindError(code, "\(message): \(String(cString: strerror(errno))).")
    }
}
