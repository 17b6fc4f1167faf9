/// One side of a transfer as written on the command line, by scp's rules: `HOST:PATH` is
/// remote when no `/` comes before the first `:` (so `./a:b` and `/x:y` stay local),
/// `[user@][v6addr]:PATH` for an IPv6 address, and `scp://[user@]host[:port][/PATH]` where a
/// port is needed. Anything else is a local path. In the API, so that what the policy is
/// told a transfer reaches (`Transfer.hosts(in:)`) is what the feature connects to.
public enum TransferEndpoint: Equatable, Sendable {
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

    public static func parse(_ text: String) throws(Problem) -> TransferEndpoint {
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
    private static func uri(_ text: String) throws(Problem) -> TransferEndpoint {
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

extension TransferEndpoint {
    /// The host `text` names (`USER@HOST` as written), or nil for a local path or one that
    /// does not parse.
    public static func host(in text: String) -> String? {
        guard case .remote(let host, _, _)? = try? parse(text) else { return nil }
        return host
    }
}
