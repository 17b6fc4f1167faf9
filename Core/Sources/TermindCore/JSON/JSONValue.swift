import Foundation

/// An arbitrary JSON value, used where a payload passes through without a Swift type
/// (envelope bodies, C plugin replies, libffi arguments).
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int64.self) { self = .integer(i) }
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
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// Converts JSONSerialization's output (one parse, no thrown errors on the way).
    init(foundation object: Any) {
        switch object {
        case let s as String: self = .string(s)
        case let n as NSNumber:
            // Booleans come back as __NSCFBoolean, whose objCType is "c".
            switch String(cString: n.objCType) {
            case "c" where type(of: n) != NSNumber.self: self = .bool(n.boolValue)
            case "d", "f": self = .double(n.doubleValue)
            case "Q" where n.uint64Value > UInt64(Int64.max): self = .double(n.doubleValue)
            default: self = .integer(n.int64Value)
            }
        case let a as [Any]: self = .array(a.map(JSONValue.init(foundation:)))
        case let o as [String: Any]: self = .object(o.mapValues(JSONValue.init(foundation:)))
        default: self = .null
        }
    }

    /// The JSON type name used in validation messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .integer: "integer"
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
}

/// Shared JSON coding settings: sorted keys keep output, hashes and cache keys stable.
public enum JSONCoding {
    public static func encoder(pretty: Bool = false) -> JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return e
    }

    public static func encode<T: Encodable>(_ value: T, pretty: Bool = false) throws -> Data {
        try encoder(pretty: pretty).encode(value)
    }

    /// Parses `data` as JSON, reporting syntax errors with a line and column.
    /// `source` names the input in the message ("Registry.json", "request body").
    public static func parse(_ data: Data, source: String) throws -> JSONValue {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            throw TermindError(code: "json.malformed", message: "\(source) is not valid JSON: \(syntaxLocation(of: error, in: data)).")
        }
        return JSONValue(foundation: object)
    }

    private static func syntaxLocation(of error: any Error, in data: Data) -> String {
        let detail = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? "syntax error"
        // Foundation reports "... around character N." (a byte offset, 0-based).
        guard let range = detail.range(of: "character "),
              let offset = Int(detail[range.upperBound...].prefix(while: \.isNumber)) else {
            if data.isEmpty { return "the input is empty" }
            let lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).count
            let reason = detail.hasSuffix(".") ? String(detail.dropLast()) : detail
            return "\(reason.prefix(1).lowercased() + reason.dropFirst()) (input ends at line \(lines))"
        }
        var line = 1, column = 1
        for byte in data.prefix(offset) {
            if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        let reason = detail[..<range.lowerBound].trimmingCharacters(in: .whitespaces)
            .replacingOccurrences(of: " around", with: "")
        return "\(reason.isEmpty ? "syntax error" : reason.lowercased()) at line \(line), column \(column)"
    }
}
