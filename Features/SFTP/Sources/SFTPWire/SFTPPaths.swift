import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Remote paths as bytes: joining, server-side glob patterns, and showing a name that may
/// not be UTF-8 (or may hold control characters) without corrupting a terminal.
public enum SFTPPaths {
    /// Whether `component` is a glob pattern: it holds `*`, `?` or `[` that no backslash
    /// makes literal (`\*` is a star in a name, as fnmatch and OpenSSH's sftp read it).
    public static func isPattern(_ component: some Collection<UInt8>) -> Bool {
        var escaped = false
        for byte in component {
            if escaped { escaped = false; continue }
            if byte == UInt8(ascii: "\\") { escaped = true; continue }
            if byte == UInt8(ascii: "*") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[") { return true }
        }
        return false
    }

    /// A path or component that is no pattern, as the name it stands for: each backslash
    /// gives the byte after it as it is.
    public static func unescape(_ text: [UInt8]) -> [UInt8] {
        guard text.contains(UInt8(ascii: "\\")) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var escaped = false
        for byte in text {
            if !escaped && byte == UInt8(ascii: "\\") { escaped = true; continue }
            escaped = false
            out.append(byte)
        }
        return out
    }

    /// fnmatch(3) on bytes; a leading `.` matches only a pattern that starts with one.
    public static func matches(_ name: [UInt8], pattern: [UInt8]) -> Bool {
        let flags = FNM_PERIOD
        return (pattern + [0]).withUnsafeBufferPointer { p in
            (name + [0]).withUnsafeBufferPointer { n in
                fnmatch(UnsafeRawPointer(p.baseAddress!).assumingMemoryBound(to: CChar.self),
                        UnsafeRawPointer(n.baseAddress!).assumingMemoryBound(to: CChar.self), flags) == 0
            }
        }
    }

    /// The paths `pattern` names: itself (backslashes removed) when it holds no glob
    /// characters, else its matches,
    /// component by component, from `list` (a directory's entries, sorted, links unfollowed);
    /// only directories lead on to a next component (`isDirectory` tells for a link). At
    /// most `limit` paths; none is an error ("no match").
    public static func expand(_ pattern: [UInt8], limit: Int, list: (_ directory: [UInt8]) async throws -> [SFTPSession.Entry],
                              isDirectory: (_ link: [UInt8]) async -> Bool) async throws -> [[UInt8]] {
        guard isPattern(pattern) else { return [unescape(pattern)] }
        let (absolute, parts) = components(pattern)
        let here: [UInt8] = [UInt8(ascii: ".")]
        var paths: [[UInt8]] = [absolute ? [UInt8(ascii: "/")] : here]
        for (index, part) in parts.enumerated() {
            let last = index == parts.count - 1
            var next: [[UInt8]] = []
            for base in paths {
                guard isPattern(part) else {
                    let name = unescape(part)
                    next.append(base == here && !absolute ? name : join(base, name))
                    continue
                }
                guard let entries = try? await list(base) else { continue }
                for entry in entries where matches(entry.name, pattern: part) {
                    let path = base == here && !absolute ? entry.name : join(base, entry.name)
                    if last || entry.attributes.kind == .directory {
                        next.append(path)
                    } else if entry.attributes.kind == .symlink, await isDirectory(path) {
                        next.append(path)
                    }
                }
                guard next.count <= limit else { throw SFTPError(status: .failure, message: "matches more than \(limit) paths") }
            }
            paths = next
        }
        guard !paths.isEmpty else { throw SFTPError(status: .noSuchFile, message: "no match") }
        return paths
    }

    public static func join(_ directory: [UInt8], _ name: [UInt8]) -> [UInt8] {
        if directory.isEmpty || directory == [UInt8(ascii: ".")] { return name }
        return directory.last == UInt8(ascii: "/") ? directory + name : directory + [UInt8(ascii: "/")] + name
    }

    /// The components of `path` (empty ones dropped) and whether it is absolute.
    public static func components(_ path: [UInt8]) -> (absolute: Bool, parts: [[UInt8]]) {
        (path.first == UInt8(ascii: "/"), path.split(separator: UInt8(ascii: "/")).map(Array.init))
    }

    /// The parent directory and last component ("a/b/c" → ("a/b", "c"); "c" → (".", "c")).
    public static func split(_ path: [UInt8]) -> (parent: [UInt8], name: [UInt8]) {
        var trimmed = path
        while trimmed.count > 1, trimmed.last == UInt8(ascii: "/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: UInt8(ascii: "/")) else { return ([UInt8(ascii: ".")], trimmed) }
        let parent = slash == 0 ? [UInt8(ascii: "/")] : Array(trimmed[..<slash])
        return (parent, Array(trimmed[(slash + 1)...]))
    }

    /// The name as text a terminal shows safely: valid UTF-8 stays, except control characters;
    /// other bytes and controls are written `\xNN` (and `\` as `\\`).
    public static func display(_ bytes: [UInt8]) -> String {
        if let text = String(validating: bytes, as: UTF8.self), !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || $0 == "\\" }) {
            return text
        }
        var out = ""
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\\") { out += "\\\\"; index += 1; continue }
            if byte < 0x20 || byte == 0x7F { out += String(printf: "\\x%02X", byte); index += 1; continue }
            if byte < 0x80 { out.unicodeScalars.append(Unicode.Scalar(byte)); index += 1; continue }
            // A whole valid UTF-8 sequence stays; a stray byte is escaped.
            let length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1
            if length > 1, index + length <= bytes.count, let text = String(validating: bytes[index..<(index + length)], as: UTF8.self) {
                out += text
                index += length
            } else {
                out += String(printf: "\\x%02X", byte)
                index += 1
            }
        }
        return out
    }

    /// Whether the bytes are valid UTF-8 (then a JSON string carries them exactly).
    public static func isText(_ bytes: [UInt8]) -> Bool { String(validating: bytes, as: UTF8.self) != nil }

    /// `rwxr-xr-x`-style with the kind's letter first.
    public static func modeString(_ permissions: UInt32) -> String {
        let kind: Character = switch permissions & 0o170000 {
        case 0o040000: "d"
        case 0o120000: "l"
        case 0o100000: "-"
        case 0o020000: "c"
        case 0o060000: "b"
        case 0o010000: "p"
        case 0o140000: "s"
        default: "?"
        }
        var text = String(kind)
        let letters: [Character] = ["r", "w", "x"]
        for shift in stride(from: 6, through: 0, by: -3) {
            for bit in 0..<3 {
                text.append(permissions >> UInt32(shift) & (4 >> UInt32(bit)) != 0 ? letters[bit] : "-")
            }
        }
        return text
    }
}
