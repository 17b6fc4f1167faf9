import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What MCP's Streamable HTTP endpoint checks before it reads a body (docs/mcp.md, "HTTP"),
/// pure: the path, the Host and Origin (a page in a browser — DNS rebinding included — is
/// refused 403), no query string (a token in a URL ends up in logs and histories), the Bearer
/// token (compared in constant time), and for a POST the media types.
public enum MCPHTTPRules {
    public static let path = "/mcp"

    /// A refusal: the status, a message for the body, and headers to add.
    public struct Refusal: Equatable, Sendable {
        public var status: Int
        public var message: String
        public var headers: [String: String]
        init(_ status: Int, _ message: String, headers: [String: String] = [:]) {
            self.status = status
            self.message = message
            self.headers = headers
        }
    }

    /// The request's head as the rules need it.
    public struct Head: Sendable {
        public var method: String
        public var path: String
        public var query: [String]
        /// Every value of a header (lowercased name).
        public var values: @Sendable (String) -> [String]
        public init(method: String, path: String, query: [String], values: @escaping @Sendable (String) -> [String]) {
            self.method = method
            self.path = path
            self.query = query
            self.values = values
        }
        public func header(_ name: String) -> String? { values(name).first }
    }

    /// Why `head` is refused before its body is read, or nil. `port` is the one listened on
    /// (a Host or Origin must name it); `token` the one accepted now (nil: none exists yet,
    /// so nothing is accepted).
    public static func check(_ head: Head, port: Int, token: String?) -> Refusal? {
        guard head.path == path else { return Refusal(404, "Not found: MCP is served at \(path).") }
        if let refused = checkPlace(head, port: port) { return refused }
        return checkToken(head, token: token)
    }

    /// The checks every request of the listener gets (MCP's and the byte channels'): its Host
    /// and Origin name this loopback server, and it has no query string.
    public static func checkPlace(_ head: Head, port: Int) -> Refusal? {
        let hosts = ["127.0.0.1:\(port)", "localhost:\(port)", "[::1]:\(port)"]
        guard let host = head.header("host")?.lowercased(), hosts.contains(host) else {
            return Refusal(403, "Forbidden: the Host header must be this loopback server's own (\(hosts[0])).")
        }
        for origin in head.values("origin") where !hosts.contains(where: { "http://\($0)" == origin.lowercased() }) {
            return Refusal(403, "Forbidden: requests from another origin (\(origin.prefix(100))) are refused.")
        }
        guard head.query.isEmpty else {
            return Refusal(400, "This server takes no query string: a token or capability goes only in a header (a URL ends up in logs).")
        }
        return nil
    }

    static func checkToken(_ head: Head, token: String?) -> Refusal? {
        let authorizations = head.values("authorization")
        guard authorizations.count == 1, let token, let given = bearer(authorizations[0]), constantTimeEqual(given, token) else {
            return Refusal(401, authorizations.isEmpty ? "Unauthorized: send Authorization: Bearer TOKEN (termind mcp token show)."
                                                       : "Unauthorized: the token is not termind's current one (termind mcp token rotate makes a new one).",
                           headers: ["WWW-Authenticate": "Bearer realm=\"termind\""])
        }
        switch head.method {
        case "POST":
            guard let type = head.header("content-type"), isMediaType(type, "application/json") else {
                return Refusal(415, "A POST to MCP's endpoint is application/json.")
            }
            if let accept = head.header("accept"), !accepts(accept, "application/json") && !accepts(accept, "text/event-stream") {
                return Refusal(406, "Not acceptable: the answer is application/json or text/event-stream.")
            }
            return nil
        case "GET", "DELETE":
            return nil
        default:
            return Refusal(405, "MCP's endpoint takes POST, GET and DELETE.", headers: ["Allow": "POST, GET, DELETE"])
        }
    }

    /// The token in `Bearer TOKEN` (the scheme in any case), or nil.
    /// The credentials of `Bearer CREDENTIALS` (the scheme in any case, spaces around), or nil.
    /// In bytes: it runs for every request, and Character-wise splitting and trimming were
    /// a sixth of the listener thread's time.
    static func bearer(_ value: String) -> String? {
        let bytes = trimmed(value.utf8[...])
        guard let space = bytes.firstIndex(of: UInt8(ascii: " ")), equalIgnoringCase(bytes[..<space], "bearer") else { return nil }
        let credentials = trimmed(bytes[space...])
        return credentials.isEmpty ? nil : String(credentials)
    }

    /// Equal without returning early on the first differing byte (the length is no secret).
    public static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a.utf8, b.utf8) { difference |= x ^ y }
        return difference == 0
    }

    /// Whether a Content-Type names `type` (any case; parameters such as a charset aside).
    static func isMediaType(_ value: String, _ type: String) -> Bool {
        let utf8 = value.utf8[...]
        return equalIgnoringCase(trimmed(utf8[..<(utf8.firstIndex(of: UInt8(ascii: ";")) ?? utf8.endIndex)]), type)
    }

    /// Without leading and trailing spaces and tabs.
    private static func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        func blank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var start = bytes.startIndex, end = bytes.endIndex
        while start < end, blank(bytes[start]) { start = bytes.index(after: start) }
        while end > start, blank(bytes[bytes.index(before: end)]) { end = bytes.index(before: end) }
        return bytes[start..<end]
    }

    /// ASCII letters in any case; `lowercase` is lowercase already.
    private static func equalIgnoringCase<Bytes: Collection<UInt8>>(_ bytes: Bytes, _ lowercase: String) -> Bool {
        bytes.count == lowercase.utf8.count && zip(bytes, lowercase.utf8).allSatisfy { ((0x41...0x5A).contains($0) ? $0 | 0x20 : $0) == $1 }
    }

    /// Whether an Accept header admits `type` (exactly, by its family's wildcard or `*/*`).
    public static func accepts(_ accept: String, _ type: String) -> Bool {
        let family = (type.split(separator: "/").first.map(String.init) ?? type) + "/*"
        // Asked on every request: each media type compared in place, without copies.
        return accept.utf8.split(separator: UInt8(ascii: ",")).contains { item in
            var name = item.prefix { $0 != UInt8(ascii: ";") }
            while let first = name.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { name = name.dropFirst() }
            while let last = name.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { name = name.dropLast() }
            func lower(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte | 0x20 : byte }
            func equals(_ text: String) -> Bool {
                name.count == text.utf8.count && zip(name, text.utf8).allSatisfy { lower($0) == lower($1) }
            }
            return equals(type) || equals("*/*") || equals(family)
        }
    }

    /// A new token: 256 random bits, base64url without padding (43 characters).
    public static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Data(bytes).base64URLEncoded
    }

    /// Whether `token` looks like one of termind's (so a pasted one with a stray character
    /// is not kept).
    public static func isToken(_ token: String) -> Bool {
        token.count == 43 && token.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
    }
}
