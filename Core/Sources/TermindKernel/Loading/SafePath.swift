import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
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
