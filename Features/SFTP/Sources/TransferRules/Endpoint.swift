/// One side of a transfer as written on the command line, by scp's rules: `HOST:PATH` is
/// remote when no `/` comes before the first `:` (so `./a:b` and `/x:y` stay local),
/// `[user@][v6addr]:PATH` for an IPv6 address, and `scp://[user@]host[:port][/PATH]` where a
/// port is needed. Anything else is a local path.
public enum Endpoint: Equatable, Sendable {
    case local(String)
    /// `host` as written (a saved host's label, `user@host`, an address); `path` relative to
    /// the remote home unless it starts with `/`; `.` when none was written.
    case remote(host: String, port: Int?, path: String)

    public struct Problem: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    public var isRemote: Bool { if case .remote = self { true } else { false } }

    public var path: String {
        switch self {
        case .local(let path): path
        case .remote(_, _, let path): path
        }
    }

    public static func parse(_ text: String) throws(Problem) -> Endpoint {
        guard !text.isEmpty else { throw Problem(description: "an empty path") }
        guard !text.utf8.contains(0) else { throw Problem(description: "'\(text)' holds a NUL byte") }
        if text.hasPrefix("scp://") { return try uri(text) }
        if text.hasPrefix("/") || text.hasPrefix("./") || text.hasPrefix("../") || text == "." || text == ".." { return .local(text) }
        // [user@][v6]:path
        if let open = text.firstIndex(of: "["), text[..<open].allSatisfy({ $0 != "/" && $0 != ":" }) {
            guard let close = text[open...].firstIndex(of: "]") else { throw Problem(description: "'\(text)': '[' without a closing ']'") }
            let after = text.index(after: close)
            guard after < text.endIndex, text[after] == ":" else { throw Problem(description: "'\(text)': an address in [] must be followed by ':PATH'") }
            let user = text[..<open]
            guard user.isEmpty || user.hasSuffix("@") else { throw Problem(description: "'\(text)': only USER@ may come before '['") }
            let address = text[text.index(after: open)..<close]
            guard !address.isEmpty else { throw Problem(description: "'\(text)': an empty address in []") }
            return .remote(host: String(user) + String(address), port: nil, path: remotePath(text[text.index(after: after)...]))
        }
        guard let colon = text.firstIndex(of: ":"), !text[..<colon].contains("/") else { return .local(text) }
        let host = text[..<colon]
        guard !host.isEmpty else { throw Problem(description: "'\(text)': no host before ':' (write ./\(text) for a local file)") }
        guard !host.hasSuffix("@"), !host.hasPrefix("@") else { throw Problem(description: "'\(text)': '\(host)' is not USER@HOST") }
        return .remote(host: String(host), port: nil, path: remotePath(text[text.index(after: colon)...]))
    }

    private static func remotePath(_ path: Substring) -> String { path.isEmpty ? "." : String(path) }

    /// scp://[user@]host[:port][/path]: the path after the host's `/` as given (relative to
    /// the home unless it starts with another `/`), as OpenSSH's scp reads it.
    private static func uri(_ text: String) throws(Problem) -> Endpoint {
        let rest = text.dropFirst("scp://".count)
        let authority = rest.prefix { $0 != "/" }
        var path = rest.dropFirst(authority.count)
        if path.hasPrefix("/") { path = path.dropFirst() }
        var hostPart = authority
        var user = ""
        if let at = authority.lastIndex(of: "@") {
            user = String(authority[...at])
            hostPart = authority[authority.index(after: at)...]
        }
        var port: Int?
        var host: Substring
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else { throw Problem(description: "'\(text)': '[' without a closing ']'") }
            host = hostPart[hostPart.index(after: hostPart.startIndex)..<close]
            let tail = hostPart[hostPart.index(after: close)...]
            if !tail.isEmpty {
                guard tail.hasPrefix(":"), let value = Int(tail.dropFirst()) else { throw Problem(description: "'\(text)': a port must follow ']:'") }
                port = value
            }
        } else if let colon = hostPart.firstIndex(of: ":") {
            host = hostPart[..<colon]
            guard let value = Int(hostPart[hostPart.index(after: colon)...]) else {
                throw Problem(description: "'\(text)': '\(hostPart[hostPart.index(after: colon)...])' is not a port number")
            }
            port = value
        } else {
            host = hostPart
        }
        guard !host.isEmpty else { throw Problem(description: "'\(text)': no host after scp://") }
        if let port, !(1...65535).contains(port) { throw Problem(description: "'\(text)': port \(port) is not from 1 to 65535") }
        return .remote(host: user + host, port: port, path: remotePath(path))
    }
}

/// Names and paths inside a recursive transfer, as bytes (a remote name need not be UTF-8).
public enum TransferNames {
    /// Why a directory entry's name cannot become a destination name (nil: it can): a
    /// server (or a local directory) could otherwise steer a write outside the destination.
    public static func problem(child name: [UInt8]) -> String? {
        if name.isEmpty { return "an empty name" }
        if name == [0x2E] || name == [0x2E, 0x2E] { return "'\(String(decoding: name, as: UTF8.self))' is not a name inside the directory" }
        if name.contains(0x2F) { return "a name holding '/'" }
        if name.contains(0) { return "a name holding a NUL byte" }
        return nil
    }

    /// The `attempt`th "keep both" name: `report.txt` → `report (1).txt`; `.bashrc` →
    /// `.bashrc (1)`; a directory's whole name gets the suffix.
    public static func keepBoth(_ name: [UInt8], attempt: Int, isDirectory: Bool) -> [UInt8] {
        let suffix = Array(" (\(attempt))".utf8)
        guard !isDirectory, let dot = name.lastIndex(of: 0x2E), dot > 0 else { return name + suffix }
        return Array(name[..<dot]) + suffix + Array(name[dot...])
    }

    /// `digits` random hexadecimal digits (at most 16) for a temporary name: from the
    /// system's generator (getrandom), not `UUID()`, which opens /dev/urandom each time.
    public static func randomToken(digits: Int = 6) -> String {
        let text = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String((String(repeating: "0", count: max(0, 16 - text.count)) + text).suffix(digits))
    }

    /// The temporary name a file is written under before it is renamed into place: in the
    /// same directory (so the rename stays on one file system), hidden, and naming termind.
    public static func temporary(_ name: [UInt8], token: String) -> [UInt8] {
        // Long names are cut so the temporary one stays within NAME_MAX (255).
        let kept = name.count > 200 ? Array(name.prefix(200)) : name
        return Array(".".utf8) + kept + Array(".termind-\(token).part".utf8)
    }

    /// `path` made of normalized components ("a//b/./c/" → "a/b/c"); `..` stays (it is
    /// never resolved textually: a link may stand before it).
    public static func normalized(_ path: [UInt8]) -> [UInt8] {
        let absolute = path.first == 0x2F
        let parts = path.split(separator: 0x2F).filter { $0 != [0x2E] }
        let joined = parts.map(Array.init).joined(separator: [0x2F])
        return (absolute ? [0x2F] : []) + Array(joined)
    }

    /// Whether `path` lies strictly inside `ancestor` (both absolute or both relative to the
    /// same place, normalized): `/a/b` is inside `/a`, `/ab` and `/a` are not.
    public static func isStrictlyInside(_ path: [UInt8], _ ancestor: [UInt8]) -> Bool {
        let p = normalized(path), a = normalized(ancestor)
        guard p.count > a.count, p.starts(with: a) else { return false }
        return a == [0x2F] || p[a.count] == 0x2F
    }

    public static func isSame(_ path: [UInt8], _ other: [UInt8]) -> Bool { normalized(path) == normalized(other) }
}
