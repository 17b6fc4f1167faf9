#if canImport(Glibc)
import Glibc
#endif

/// Small whole-file reads and writes on descriptors, for the few places Core used
/// Foundation's `FileHandle` for them.
public enum FileText {
    /// Every byte of `path` read to its end (a /proc file reports no size), or nil when it
    /// cannot be opened; at most `limit` bytes.
    public static func read(_ path: String, limit: Int = 1 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < limit {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes.append(contentsOf: chunk[..<n])
        }
        return Array(bytes.prefix(limit))
    }

    /// Writes all of `text` to `fd` (standard error by default), retrying short writes.
    public static func write(_ text: String, to fd: Int32 = STDERR_FILENO) {
        write(Array(text.utf8), to: fd)
    }

    public static func write(_ bytes: [UInt8], to fd: Int32) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            offset += n
        }
    }
}
