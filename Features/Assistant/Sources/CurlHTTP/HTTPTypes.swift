import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// One request header. Values of sensitive headers (`isSensitive`) are never logged.
public struct HTTPHeader: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// Headers that carry credentials: their values never reach a log, an error, or a
    /// redirect to another origin.
    public var isSensitive: Bool { Self.sensitive.contains(name.lowercased()) }

    static let sensitive: Set<String> = ["authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie", "set-cookie"]
}

/// A request: `body` is sent as it is (nil: none). Deadlines: `connectTimeout` covers name
/// resolution, the TCP connection and the TLS handshake; `idleTimeout` is the longest the
/// response may stay silent (while the reader keeps up: time the reader takes is never
/// counted). A response longer than `responseLimit` bytes is refused.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [HTTPHeader]
    public var body: Data?
    public var connectTimeout: Double
    public var idleTimeout: Double
    public var responseLimit: Int
    /// The numeric address to connect to for the URL's host (checked by the caller; no proxy
    /// is used). Set per hop by `HTTPClient.send`'s `pin`.
    public var pinned: String?

    public init(method: String = "POST", url: String, headers: [HTTPHeader] = [], body: Data? = nil,
                connectTimeout: Double = 15, idleTimeout: Double = 120, responseLimit: Int = HTTPLimits.response) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.responseLimit = responseLimit
    }

    /// The origin (`https://host:port`), what redirects and errors name: never the path or
    /// query, which could hold a key.
    public var origin: String { HTTPURL(url)?.origin ?? "an invalid URL" }
}

public enum HTTPLimits {
    /// The most a response may hold (raw bytes, before any decoding).
    public static let response = 16 << 20
    /// Redirects followed for one request.
    public static let redirects = 5
    /// Bytes the client buffers ahead of its reader before it stops reading the socket.
    static let window = 256 << 10
}

/// A response's status line and headers.
public struct HTTPHead: Sendable, Equatable {
    public let status: Int
    public let headers: [HTTPHeader]
    /// The URL that answered (after redirects).
    public let url: String

    public init(status: Int, headers: [HTTPHeader], url: String) {
        self.status = status
        self.headers = headers
        self.url = url
    }

    /// The first header of that name (case-insensitive).
    public func value(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }

    /// `Retry-After` in seconds (delta-seconds or an HTTP date), when present and sane.
    public func retryAfter(now: Date = Date()) -> Double? {
        guard let text = value("retry-after")?.trimmedWhitespace, !text.isEmpty else { return nil }
        if let seconds = Double(text), seconds >= 0, seconds.isFinite { return seconds }
        return Self.httpDate(text).map { max(0, $0.timeIntervalSince(now)) }
    }

    /// An HTTP date in the IMF-fixdate form RFC 9110 requires (`Sun, 06 Nov 1994 08:49:37 GMT`).
    static func httpDate(_ text: String) -> Date? {
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT" || parts[5] == "UTC",
              let day = Int32(parts[1]), (1...31).contains(day), let month = months.firstIndex(of: String(parts[2])),
              let year = Int32(parts[3]), (1970...9999).contains(year) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int32($0) }
        guard clock.count == 3, (0...23).contains(clock[0]), (0...59).contains(clock[1]), (0...60).contains(clock[2]) else { return nil }
        var fields = tm()
        fields.tm_year = year - 1900
        fields.tm_mon = Int32(month)
        fields.tm_mday = day
        fields.tm_hour = clock[0]
        fields.tm_min = clock[1]
        fields.tm_sec = clock[2]
        return Date(timeIntervalSince1970: Double(timegm(&fields)))
    }
}

/// The parts of an http(s) URL the client decides on.
public struct HTTPURL: Sendable, Equatable {
    public let scheme: String
    public let host: String
    public let port: Int

    public init?(_ text: String) {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.host, !host.isEmpty else { return nil }
        self.scheme = scheme
        self.host = host.lowercased()
        port = components.port ?? (scheme == "https" ? 443 : 80)
    }

    public var origin: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return (scheme == "https" && port == 443) || (scheme == "http" && port == 80) ? "\(scheme)://\(shown)" : "\(scheme)://\(shown):\(port)"
    }
}

/// Why a request failed. `beforeResponse`: no byte of a response arrived (the request may
/// be sent again without anyone having seen part of an answer).
public struct HTTPFailure: Error, Sendable, TermindErrorConvertible, CustomStringConvertible {
    public let code: ErrorCode
    public let message: String
    public let beforeResponse: Bool

    public init(_ code: ErrorCode, _ message: String, beforeResponse: Bool) {
        self.code = code
        self.message = message
        self.beforeResponse = beforeResponse
    }

    public var termindError: TermindError { TermindError(code: code.rawValue, message: message) }
    public var description: String { message }
}

/// The codes of HTTPFailure (a namespace of their own: Core's ErrorCode stays Core's).
public enum HTTPErrorCode {
    /// The server could not be reached (DNS, TCP, proxy).
    public static let connect: ErrorCode = "http.connect"
    /// A deadline passed: connecting, or the response went silent for too long.
    public static let timeout: ErrorCode = "http.timeout"
    /// The TLS handshake failed or the certificate is not trusted.
    public static let tls: ErrorCode = "http.tls"
    /// The connection broke while the request or response was under way.
    public static let interrupted: ErrorCode = "http.interrupted"
    /// The response is larger than the client accepts.
    public static let tooLarge: ErrorCode = "http.too_large"
    /// A redirect the client does not follow (too many, to another scheme, refused by a rule).
    public static let redirect: ErrorCode = "http.redirect"
    /// A URL that is not http(s) with a host.
    public static let badURL: ErrorCode = "http.bad_url"
    /// The request was cancelled by its caller.
    public static let cancelled: ErrorCode = "http.cancelled"
}
