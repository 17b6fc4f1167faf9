import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Reads a file a person named (an ssh_config, a known_hosts, a key) with a size bound and
/// without surprises: only a regular file is read — a directory, FIFO, socket or device
/// (`/dev/zero`) is refused at once instead of blocking or reading without end — and a file
/// over `limit` bytes is refused before it is read. Errors name the file, what it is meant to
/// be (`what`, e.g. "ssh_config file") and what is wrong.
public enum BoundedFile {
    public static func read(_ path: String, limit: Int, what: String, code: ErrorCode) throws -> Data {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else {
            throw TermindError(code, "Cannot read the \(what) \(path): \(String(cString: strerror(errno))).")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw TermindError(code, "Cannot read the \(what) \(path): \(String(cString: strerror(errno))).")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw TermindError(code, "The \(what) \(path) is \(kind(info.st_mode)), not a regular file; it was not read.")
        }
        guard info.st_size <= limit else {
            throw TermindError(code, "The \(what) \(path) is \(info.st_size) bytes; at most \(limit) bytes are read (\(limit >> 10) KiB).")
        }
        var data = Data(count: limit + 1)
        var total = 0
        while total <= limit {
            let n = data.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, limit + 1 - total) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else {
                throw TermindError(code, "Cannot read the \(what) \(path): \(String(cString: strerror(errno))).")
            }
            if n == 0 { break }
            total += n
        }
        guard total <= limit else {
            throw TermindError(code, "The \(what) \(path) grew past \(limit) bytes while it was read; it was not read.")
        }
        data.count = total
        return data
    }

    static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO (named pipe)"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFLNK: "a symbolic link"
        default: "not a regular file"
        }
    }
}
