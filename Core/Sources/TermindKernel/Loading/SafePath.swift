import Foundation
import TermindCore

/// Ownership and permission checks on the files a plugin is made of, in the manner of
/// OpenSSH's `safe_path()` for its configuration files: plugin code runs with the user's
/// credentials, so nobody else may be able to change it, or any folder on the way to it.
///
/// Paths are resolved first (`realpath`: `..` and symlinks). Then every directory from `/`
/// down to the file, and the file itself, must be owned by the user or root. Inside the
/// *strict* part of the path (the plugin root and everything under it; for a file outside
/// it, the file's own folder) nothing may be writable by group or others. Above it, a
/// directory writable by others is accepted only when it is owned by root and sticky (as
/// `/tmp` is), since then nobody else can rename what it holds.
enum SafePath {
    struct Unsafe: Error, CustomStringConvertible {
        let description: String
    }

    /// `path` with `..` and symlinks resolved, or nil when it does not exist.
    static func resolve(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Whether `path` (resolved) is `folder` (resolved) or inside it.
    static func isInside(_ path: String, _ folder: String) -> Bool {
        path == folder || path.hasPrefix(folder == "/" ? "/" : folder + "/")
    }

    /// Checks `path` (already resolved) and every directory above it; `strictFrom` is the
    /// resolved folder from which on nothing may be writable by group or others.
    static func check(_ path: String, strictFrom: String) throws(Unsafe) {
        var components: [String] = ["/"]
        var current = ""
        for part in path.split(separator: "/") {
            current += "/" + part
            components.append(current)
        }
        let uid = getuid()
        for component in components {
            var info = stat()
            guard lstat(component, &info) == 0 else {
                throw Unsafe(description: "\(component) cannot be inspected: \(String(cString: strerror(errno)))")
            }
            if info.st_uid != uid && info.st_uid != 0 {
                throw Unsafe(description: "\(component) is owned by uid \(info.st_uid), not by you or root")
            }
            let mode = info.st_mode
            guard mode & 0o022 != 0 else { continue }
            let isDirectory = (mode & S_IFMT) == S_IFDIR
            let stickyRootDirectory = isDirectory && mode & S_ISVTX != 0 && info.st_uid == 0
            if isInside(component, strictFrom) || !stickyRootDirectory {
                throw Unsafe(description: "\(component) is writable by group or others (mode \(String(mode & 0o7777, radix: 8)))")
            }
        }
    }
}

/// Reads a small file without trusting it: it must be a regular file (not a FIFO, a
/// device or a folder) of at most `limit` bytes, and it is never read past that.
enum BoundedFile {
    static func read(_ path: String, limit: Int, name: String) throws -> Data {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw TermindError(code: "file.unreadable", message: "Cannot read \(name) at \(path): \(String(cString: strerror(errno))).")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw TermindError(code: "file.unreadable", message: "Cannot inspect \(name) at \(path): \(String(cString: strerror(errno))).")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw TermindError(code: "file.not_regular", message: "\(name) at \(path) is not a regular file (it is \(kind(info.st_mode))).")
        }
        guard Int(info.st_size) <= limit else {
            throw TermindError(code: "file.too_large", message: "\(name) at \(path) is \(info.st_size) bytes; at most \(limit) are read.")
        }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while data.count <= limit {
            let n = Foundation.read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 {
                throw TermindError(code: "file.unreadable", message: "Cannot read \(name) at \(path): \(String(cString: strerror(errno))).")
            }
            if n == 0 { return data }
            data.append(contentsOf: buffer[0..<n])
        }
        throw TermindError(code: "file.too_large", message: "\(name) at \(path) grew past \(limit) bytes while it was read.")
    }

    private static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: "a FIFO"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFDIR: "a folder"
        case S_IFSOCK: "a socket"
        default: "not a plain file"
        }
    }
}
