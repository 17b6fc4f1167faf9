import FoundationEssentials

/// Metadata attached to a log line. Only non-sensitive shapes exist: numbers, flags,
/// durations and identifiers. An identifier is restricted to `[A-Za-z0-9._@:+-]` and 64
/// bytes; anything else (a path, a sentence, a token with `/` or `=`) is replaced with
/// `<redacted>` rather than written.
public enum LogValue: Sendable, Equatable, CustomStringConvertible {
    case int(Int)
    case bool(Bool)
    case seconds(Double)
    case identifier(String)

    public var description: String {
        switch self {
        case .int(let v): String(v)
        case .bool(let v): v ? "true" : "false"
        case .seconds(let v): String(printf: "%.6f", v)
        case .identifier(let v): LogValue.sanitizeIdentifier(v)
        }
    }

    static func sanitizeIdentifier(_ raw: String) -> String {
        guard !raw.isEmpty, raw.utf8.count <= 64 else { return "<redacted>" }
        for byte in raw.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "@"), UInt8(ascii: ":"), UInt8(ascii: "-"), UInt8(ascii: "+"):
                continue
            default:
                return "<redacted>"
            }
        }
        return raw
    }
}

