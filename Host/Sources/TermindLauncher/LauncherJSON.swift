/// The JSON the launcher reads and writes on the control socket: the few lines of one
/// stream (docs/contracts.md, "The launcher"). Small on purpose — the launcher loads no
/// Foundation and none of termind's libraries, so it cannot use TermindCore's JSONParser —
/// and strict enough for that: RFC 8259 values, depth and size bounded by the line.
public indirect enum LauncherJSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([LauncherJSON])
    case object([String: LauncherJSON])

    public subscript(_ key: String) -> LauncherJSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var string: String? { if case .string(let text) = self { text } else { nil } }
    public var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
    /// A number that is a whole Int32 (an exit code, an id).
    public var int32: Int32? {
        guard case .number(let value) = self, value == value.rounded(), abs(value) <= Double(Int32.max) else { return nil }
        return Int32(value)
    }

    // MARK: - Writing

    /// The value as compact JSON text (object members in key order, so output is stable).
    public var text: String {
        switch self {
        case .null: return "null"
        case .bool(let value): return value ? "true" : "false"
        case .number(let value):
            return value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
        case .string(let value): return Self.quoted(value)
        case .array(let items): return "[" + items.map(\.text).joined(separator: ",") + "]"
        case .object(let members):
            return "{" + members.keys.sorted().map { Self.quoted($0) + ":" + members[$0]!.text }.joined(separator: ",") + "}"
        }
    }

    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    // MARK: - Reading

    /// Parses one JSON text (a whole line without its newline); nil when it is not JSON.
    public static func parse(_ bytes: [UInt8]) -> LauncherJSON? {
        var reader = Reader(bytes: bytes)
        guard let value = reader.value(depth: 0) else { return nil }
        reader.skipSpace()
        return reader.index == bytes.count ? value : nil
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        static let maximumDepth = 64

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func literal(_ word: String, _ value: LauncherJSON) -> LauncherJSON? {
            let expected = Array(word.utf8)
            guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else { return nil }
            index += expected.count
            return value
        }

        mutating func value(depth: Int) -> LauncherJSON? {
            guard depth < Self.maximumDepth else { return nil }
            skipSpace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string().map(LauncherJSON.string)
            case UInt8(ascii: "t"): return literal("true", .bool(true))
            case UInt8(ascii: "f"): return literal("false", .bool(false))
            case UInt8(ascii: "n"): return literal("null", .null)
            default: return number()
            }
        }

        mutating func object(depth: Int) -> LauncherJSON? {
            index += 1
            var members: [String: LauncherJSON] = [:]
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return nil }
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                guard members[key] == nil, let member = value(depth: depth + 1) else { return nil }
                members[key] = member
                skipSpace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                guard bytes[index] == UInt8(ascii: "}") else { return nil }
                index += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) -> LauncherJSON? {
            index += 1
            var items: [LauncherJSON] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
            while true {
                guard let item = value(depth: depth + 1) else { return nil }
                items.append(item)
                skipSpace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                guard bytes[index] == UInt8(ascii: "]") else { return nil }
                index += 1
                return .array(items)
            }
        }

        mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for byte in bytes[index..<index + 4] {
                guard let digit = UInt8(ascii: "0")...UInt8(ascii: "9") ~= byte ? byte - UInt8(ascii: "0")
                        : UInt8(ascii: "a")...UInt8(ascii: "f") ~= byte ? byte - UInt8(ascii: "a") + 10
                        : UInt8(ascii: "A")...UInt8(ascii: "F") ~= byte ? byte - UInt8(ascii: "A") + 10 : nil else { return nil }
                value = value << 4 | UInt32(digit)
            }
            index += 4
            return value
        }

        mutating func string() -> String? {
            index += 1
            // The text's UTF-8, escapes written out, checked whole at the end: an escape's
            // bytes never begin with a continuation byte nor leave one dangling, so bytes
            // that are not UTF-8 between escapes are not UTF-8 in the whole either.
            var out: [UInt8] = []
            func append(_ scalar: Unicode.Scalar) { UTF8.encode(scalar, into: { out.append($0) }) }
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        guard var code = hex4() else { return nil }
                        if (0xD800..<0xDC00).contains(code) {
                            // A surrogate pair: the low half must follow.
                            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { return nil }
                            index += 2
                            guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(code) else { return nil }
                        append(scalar)
                    default: return nil
                    }
                case 0..<0x20: return nil
                default: out.append(byte)
                }
            }
            return nil
        }

        mutating func number() -> LauncherJSON? {
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) || [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "+"), UInt8(ascii: "-")].contains(bytes[index]) {
                index += 1
            }
            guard index > start, let text = String(validating: bytes[start..<index], as: UTF8.self),
                  text.first != "+", !text.hasPrefix("-."), !text.hasPrefix("."), let value = Double(text), value.isFinite else { return nil }
            return .number(value)
        }
    }
}
