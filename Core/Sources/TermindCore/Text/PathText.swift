#if canImport(Glibc)
import Glibc
#endif

/// Path text as Foundation's `NSString` path methods give it on Linux, without Foundation
/// (a one-shot command loads no more than it needs). `PathTextTests` compares each with
/// `NSString` on the same inputs.
public enum PathText {
    /// `base` and `component` joined by one slash (`appendingPathComponent`): an empty base
    /// gives the component; a trailing slash of the base is not doubled.
    public static func appending(_ base: String, _ component: String) -> String {
        if component.isEmpty { return base }
        if base.isEmpty { return component }
        return base.hasSuffix("/") ? base + component : base + "/" + component
    }

    /// The last component (`lastPathComponent`): "b" of "/a/b/"; "/" of "/".
    public static func lastComponent(_ path: String) -> String {
        let trimmed = trailingSlashesRemoved(path)
        if trimmed == "/" || trimmed.isEmpty { return trimmed }
        guard let slash = trimmed.lastIndex(of: "/") else { return trimmed }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// The path without its last component (`deletingLastPathComponent`): "/a" of "/a/b",
    /// "/" of "/a" and of "/", "" of "a".
    public static func deletingLastComponent(_ path: String) -> String {
        let trimmed = trailingSlashesRemoved(path)
        if trimmed == "/" { return "/" }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        let head = trailingSlashesRemoved(String(trimmed[..<slash]))
        return head.isEmpty ? "/" : head
    }

    /// `standardizingPath` on Linux: `~` expanded from `home`, empty and `.` components
    /// dropped, and for an absolute path `..` taken back and symbolic links resolved as far
    /// as the path exists ("/tmp/link/new" is "/tmp/real/new"). A relative path keeps its `..`.
    public static func standardized(_ path: String, home: String? = nil) -> String {
        var path = path
        if path == "~" || path.hasPrefix("~/"), let home, !home.isEmpty { path = home + path.dropFirst() }
        let absolute = path.hasPrefix("/")
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) where part != "." {
            if absolute, part == ".." { if !parts.isEmpty { parts.removeLast() } } else { parts.append(part) }
        }
        guard absolute else { return parts.isEmpty ? (path.isEmpty ? "" : ".") : parts.joined(separator: "/") }
        let lexical = "/" + parts.joined(separator: "/")
        // The longest prefix that exists, resolved; the rest as written.
        var cut = parts.count
        while cut > 0 {
            let prefix = "/" + parts[..<cut].joined(separator: "/")
            if let real = realpath(prefix, nil) {
                defer { free(real) }
                let resolved = String(cString: real)
                let rest = parts[cut...].joined(separator: "/")
                return rest.isEmpty ? resolved : appending(resolved, rest)
            }
            cut -= 1
        }
        return lexical
    }

    /// Runs of slashes made one and trailing slashes dropped ("/" stays "/").
    private static func trailingSlashesRemoved(_ path: String) -> String {
        var collapsed = ""
        for character in path where !(character == "/" && collapsed.hasSuffix("/")) { collapsed.append(character) }
        var path = Substring(collapsed)
        while path.count > 1, path.hasSuffix("/") { path = path.dropLast() }
        return String(path)
    }
}

/// The user this process runs as, from the password database (`NSUserName()` and
/// `NSHomeDirectory()` without Foundation).
public enum LocalUser {
    /// The login name ("" when the database has no entry).
    public static var name: String { entry { String(cString: $0.pw_name) } ?? "" }
    /// The home folder ("/" when the database has no entry).
    public static var home: String { entry { $0.pw_dir.map { String(cString: $0) } } ?? "/" }

    private static func entry<T>(_ read: (passwd) -> T?) -> T? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(getuid(), &entry, &buffer, buffer.count, &found) == 0, found != nil else { return nil }
        return read(entry)
    }
}
