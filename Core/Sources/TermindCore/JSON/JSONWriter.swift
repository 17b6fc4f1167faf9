/// JSON text of a `JSONValue` written directly, byte for byte what `JSONCoding.encoder()`
/// (Foundation's JSONEncoder with `.sortedKeys, .withoutEscapingSlashes`) writes for it —
/// keys in UTF-8 byte order, `"`, `\` and control characters escaped (`\n \r \t \b \f`,
/// the others `\u00XX`), a double as its shortest form without a trailing `.0` — at a
/// fraction of the encoder's cost: every envelope, MCP answer and frame goes through here.
/// Audit rows hash this text, so it must never drift from what was written before
/// (JSONWriterTests compares the two on random values).
public enum JSONWriter {
    /// `value`'s text; nil when it holds a non-finite double (JSON has none: the caller then
    /// gets JSONEncoder's own error).
    public static func bytes(_ value: JSONValue, sortedKeys: Bool = true) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        return write(value, into: &out, sortedKeys: sortedKeys) ? out : nil
    }

    /// Appends `value`'s text to `out`; false (with `out` partly written) for a non-finite
    /// double, unless `nonFiniteAsNull` writes one as `null`.
    @discardableResult
    public static func write(_ value: JSONValue, into out: inout [UInt8], sortedKeys: Bool = true, nonFiniteAsNull: Bool = false) -> Bool {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number): out.append(contentsOf: String(number).utf8)
        case .unsignedInteger(let number): out.append(contentsOf: String(number).utf8)
        case .double(let number):
            guard number.isFinite else {
                guard nonFiniteAsNull else { return false }
                out.append(contentsOf: "null".utf8)
                return true
            }
            var text = number.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out.append(contentsOf: text.utf8)
        case .string(let text): quote(text, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                guard write(item, into: &out, sortedKeys: sortedKeys, nonFiniteAsNull: nonFiniteAsNull) else { return false }
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            var first = true
            func field(_ key: String, _ item: JSONValue) -> Bool {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                quote(key, into: &out)
                out.append(UInt8(ascii: ":"))
                return write(item, into: &out, sortedKeys: sortedKeys, nonFiniteAsNull: nonFiniteAsNull)
            }
            if sortedKeys && fields.count > 1 {
                for (key, item) in fields.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) where !field(key, item) { return false }
            } else {
                for (key, item) in fields where !field(key, item) { return false }
            }
            out.append(UInt8(ascii: "}"))
        }
        return true
    }

    private static let hex = Array("0123456789abcdef".utf8)

    /// A JSON string: quotes, backslashes and control characters escaped, the rest as is.
    public static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let utf8 = text.utf8
        if !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: utf8)
        } else {
            for byte in utf8 {
                switch byte {
                case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
                case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
                case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
                case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
                case 0x08: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
                case 0x0C: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
                case 0..<0x20:
                    out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 15)]])
                default: out.append(byte)
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
