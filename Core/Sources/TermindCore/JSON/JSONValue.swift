import FoundationEssentials

/// An arbitrary JSON value, used where a payload passes through without a Swift type
/// (envelope bodies, C plugin replies, libffi arguments). Integers keep their exact
/// value end to end: every integer that fits `Int64` is `.integer`; `.unsignedInteger`
/// holds only those above `Int64.max` up to `UInt64.max` (use `JSONValue(exactly:)`).
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    /// An integer above `Int64.max` (never one that fits `.integer`).
    case unsignedInteger(UInt64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int64.self) { self = .integer(i) }
        else if let u = try? c.decode(UInt64.self) { self = .unsignedInteger(u) }
        else if let d = try? c.decode(Double.self) { self = .double(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .integer(let i): try c.encode(i)
        case .unsignedInteger(let u): try c.encode(u)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// The canonical value of an unsigned integer: `.integer` when it fits `Int64`.
    public init(exactly value: UInt64) {
        self = value <= UInt64(Int64.max) ? .integer(Int64(value)) : .unsignedInteger(value)
    }

    /// The JSON type name used in validation messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .integer, .unsignedInteger: "integer"
        case .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }

    /// The value as a `UInt64`, when it is a non-negative integer.
    public var uint64Value: UInt64? {
        switch self {
        case .integer(let i): UInt64(exactly: i)
        case .unsignedInteger(let u): u
        default: nil
        }
    }
}

/// Shared JSON coding settings: sorted keys keep output, hashes and cache keys stable.
public enum JSONCoding {
    public static func encoder(pretty: Bool = false) -> JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return e
    }

    /// A `JSONValue` is written directly (JSONWriter: the same bytes as the encoder's).
    public static func encode<T: Encodable>(_ value: T, pretty: Bool = false) throws -> Data {
        if !pretty, let json = value as? JSONValue, let bytes = JSONWriter.bytes(json) { return Data(bytes) }
        return try encoder(pretty: pretty).encode(value)
    }

    /// Parses `data` as JSON (RFC 8259, strictly: see `JSONParser`), reporting an error
    /// with its line and column. `source` names the input in the message
    /// ("Registry.json", "The request body for kernel.ping@1").
    public static func parse(_ data: Data, source: @autoclosure () -> String) throws -> JSONValue {
        switch data.withUnsafeBytes({ JSONParser.result($0) }) {
        case .success(let value):
            return value
        case .failure(let error):
            if error.offset == 0 && data.isEmpty {
                throw TermindError(.jsonMalformed, "\(source()) is not valid JSON: the input is empty.")
            }
            let (line, column) = location(of: error.offset, in: data)
            throw TermindError(.jsonMalformed, "\(source()) is not valid JSON: \(error.reason) at line \(line), column \(column).")
        }
    }

    /// 1-based line and column (in bytes) of a byte offset.
    static func location(of offset: Int, in data: Data) -> (line: Int, column: Int) {
        var line = 1, column = 1
        for byte in data.prefix(offset) {
            if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return (line, column)
    }
}
