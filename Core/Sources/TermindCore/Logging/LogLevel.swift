public enum LogLevel: Int, Sendable, Comparable, Codable, CaseIterable {
    case debug = 0, info, warning, error

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var name: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .warning: "warning"
        case .error: "error"
        }
    }
}

/// A stable English event code such as `"kernel.feature.started"`.
///
/// Only string *literals* can become a `LogCode` (there is no interpolation), so a
/// secret, path or remote output can never be spliced into the message itself.
public struct LogCode: Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let description: String
    public init(stringLiteral value: StaticString) { description = value.description }
    /// For codes that arrive over the C ABI; they are sanitized like identifiers.
    public init(sanitizing raw: String) { description = LogValue.sanitizeIdentifier(raw) }
}
