/// A strict RFC 8259 JSON parser into `JSONValue`. Integers keep their exact value: an
/// integer literal that fits `Int64` is `.integer`, one above `Int64.max` that fits
/// `UInt64` is `.unsignedInteger`; only fractions, exponents and integers beyond 64 bits
/// become `.double`. Strings must be valid UTF-8 (never repaired), duplicate object keys
/// and numbers that overflow a double are errors, and nesting is bounded.
struct JSONParser {
    /// Deeper nesting is refused: it bounds the parser's stack.
    static let maximumDepth = 512

    struct Failure: Error {
        let reason: String
        let offset: Int
    }

    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    private init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// Parses one JSON text (any value at the top, whitespace around it).
    static func result(_ bytes: UnsafeRawBufferPointer) -> Result<JSONValue, Failure> {
        do throws(Failure) { return .success(try parse(bytes)) } catch { return .failure(error) }
    }

    static func parse(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> JSONValue {
        var parser = JSONParser(bytes)
        parser.skipWhitespace()
        guard parser.index < bytes.count else { throw Failure(reason: "the input is empty", offset: 0) }
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.failure("unexpected \(parser.describeCurrent()) after the JSON value") }
        return value
    }

    // MARK: - Values

    private mutating func value(depth: Int) throws(Failure) -> JSONValue {
        guard depth < Self.maximumDepth else { throw failure("nesting deeper than \(Self.maximumDepth) levels") }
        guard index < bytes.count else { throw failure("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("unexpected \(describeCurrent())")
        }
    }

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if peek(UInt8(ascii: "}")) { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard peek(UInt8(ascii: "\"")) else { throw failure(index < bytes.count ? "expected a string key, got \(describeCurrent())" : "unexpected end of input") }
            let keyOffset = index
            let key = try string()
            skipWhitespace()
            guard peek(UInt8(ascii: ":")) else { throw failure(index < bytes.count ? "expected ':' after an object key, got \(describeCurrent())" : "unexpected end of input") }
            index += 1
            skipWhitespace()
            let member = try value(depth: depth + 1)
            guard members.updateValue(member, forKey: key) == nil else {
                throw Failure(reason: "duplicate key \"\(key)\"", offset: keyOffset)
            }
            skipWhitespace()
            if peek(UInt8(ascii: ",")) { index += 1; continue }
            if peek(UInt8(ascii: "}")) { index += 1; return .object(members) }
            throw failure(index < bytes.count ? "expected ',' or '}' in an object, got \(describeCurrent())" : "unexpected end of input")
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if peek(UInt8(ascii: "]")) { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try value(depth: depth + 1))
            skipWhitespace()
            if peek(UInt8(ascii: ",")) { index += 1; continue }
            if peek(UInt8(ascii: "]")) { index += 1; return .array(elements) }
            throw failure(index < bytes.count ? "expected ',' or ']' in an array, got \(describeCurrent())" : "unexpected end of input")
        }
    }

    private mutating func literal(_ word: StaticString) throws(Failure) {
        let start = index
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
              (0..<count).allSatisfy({ bytes[index + $0] == word.utf8Start[$0] }) else {
            throw Failure(reason: "unexpected \(describeCurrent())", offset: start)
        }
        index += count
    }

    // MARK: - Numbers

    private mutating func number() throws(Failure) -> JSONValue {
        let start = index
        let negative = peek(UInt8(ascii: "-"))
        if negative { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw failure("a number needs digits after '-'") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw Failure(reason: "numbers may not have leading zeros", offset: start) }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        var integral = true
        if peek(UInt8(ascii: ".")) {
            integral = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("a number needs digits after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if peek(UInt8(ascii: "e")) || peek(UInt8(ascii: "E")) {
            integral = false
            index += 1
            if peek(UInt8(ascii: "+")) || peek(UInt8(ascii: "-")) { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("a number needs digits in its exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if integral {
            if let exact = Int64(text) { return .integer(exact) }
            if !negative, let exact = UInt64(text) { return .unsignedInteger(exact) }
        }
        guard let double = Double(text), double.isFinite else {
            throw Failure(reason: "the number \(text.prefix(40)) is out of range", offset: start)
        }
        return .double(double)
    }

    // MARK: - Strings

    private mutating func string() throws(Failure) -> String {
        let open = index
        index += 1
        var scalars: [UInt8] = []
        var runStart = index
        while true {
            guard index < bytes.count else { throw Failure(reason: "unterminated string", offset: open) }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text: String
                if scalars.isEmpty {
                    text = try validated(runStart..<index)
                } else {
                    _ = try validated(runStart..<index)
                    scalars.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[runStart..<index]))
                    text = String(decoding: scalars, as: UTF8.self)
                }
                index += 1
                return text
            }
            if byte < 0x20 { throw failure("control character 0x\(String(byte, radix: 16)) in a string (escape it)") }
            if byte == UInt8(ascii: "\\") {
                _ = try validated(runStart..<index)
                scalars.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[runStart..<index]))
                try escape(into: &scalars)
                runStart = index
                continue
            }
            index += 1
        }
    }

    /// Checks a run of raw string bytes for valid UTF-8.
    private func validated(_ range: Range<Int>) throws(Failure) -> String {
        let run = UnsafeRawBufferPointer(rebasing: bytes[range])
        if let bad = UTF8Validation.firstInvalidOffset(in: run) {
            throw Failure(reason: "invalid UTF-8 in a string", offset: range.lowerBound + bad)
        }
        return String(decoding: run, as: UTF8.self)
    }

    private mutating func escape(into out: inout [UInt8]) throws(Failure) {
        let start = index
        index += 1
        guard index < bytes.count else { throw Failure(reason: "unterminated string", offset: start) }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4(at: start)
            if (0xD800...0xDBFF).contains(scalar) {
                guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw Failure(reason: "unpaired surrogate \\u\(String(scalar, radix: 16, uppercase: true))", offset: start)
                }
                index += 2
                let low = try hex4(at: start)
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw Failure(reason: "unpaired surrogate \\u\(String(scalar, radix: 16, uppercase: true))", offset: start)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw Failure(reason: "unpaired surrogate \\u\(String(scalar, radix: 16, uppercase: true))", offset: start)
            }
            out.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
        default:
            throw Failure(reason: "invalid escape '\\\(Character(Unicode.Scalar(byte)))' in a string", offset: start)
        }
    }

    private mutating func hex4(at start: Int) throws(Failure) -> UInt32 {
        guard bytes.count - index >= 4 else { throw Failure(reason: "\\u needs four hex digits", offset: start) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[index]
            let digit: UInt32
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(b - UInt8(ascii: "A") + 10)
            default: throw Failure(reason: "\\u needs four hex digits", offset: start)
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    // MARK: - Helpers

    private func peek(_ byte: UInt8) -> Bool { index < bytes.count && bytes[index] == byte }

    private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private func failure(_ reason: String) -> Failure { Failure(reason: reason, offset: index) }

    private func describeCurrent() -> String {
        guard index < bytes.count else { return "end of input" }
        let byte = bytes[index]
        if (0x21...0x7E).contains(byte) { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16))"
    }
}

/// UTF-8 validation that reports where the first bad byte is (RFC 3629: no overlong
/// forms, no surrogates, nothing above U+10FFFF).
public enum UTF8Validation {
    public static func firstInvalidOffset(in bytes: UnsafeRawBufferPointer) -> Int? {
        var i = 0
        let n = bytes.count
        while i < n {
            let b0 = bytes[i]
            if b0 < 0x80 { i += 1; continue }
            let length: Int
            var lower: UInt8 = 0x80, upper: UInt8 = 0xBF
            switch b0 {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; upper = 0x9F
            case 0xF0: length = 4; lower = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; upper = 0x8F
            default: return i
            }
            guard n - i >= length else { return i }
            guard (lower...upper).contains(bytes[i + 1]) else { return i }
            for k in 2..<max(length, 2) where !(0x80...0xBF).contains(bytes[i + k]) { return i }
            i += length
        }
        return nil
    }

    public static func firstInvalidOffset(in data: some Collection<UInt8>) -> Int? {
        if let found = data.withContiguousStorageIfAvailable({ firstInvalidOffset(in: UnsafeRawBufferPointer($0)) }) { return found }
        return Array(data).withUnsafeBytes { firstInvalidOffset(in: $0) }
    }
}
