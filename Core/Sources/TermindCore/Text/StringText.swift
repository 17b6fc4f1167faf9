import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension String {
    /// printf-style text for numbers, as `String(format:)` writes it without a locale (the C
    /// locale: `.` for the decimal point): `String(printf: "%.1f MiB", 2.25)` is "2.2 MiB".
    /// Only C conversions (`%d`, `%ld`, `%.3f`, `%04d`, `%x`, `%s` of a C string): no `%@`.
    /// Kept here so that Core needs no Foundation for it.
    public init(printf format: String, _ arguments: any CVarArg...) {
        var capacity = 64
        while true {
            var buffer = [CChar](repeating: 0, count: capacity)
            let written = withVaList(arguments) { vsnprintf(&buffer, capacity, format, $0) }
            if written < 0 { self = format; return }
            if Int(written) < capacity {
                self = String(decoding: buffer[..<Int(written)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                return
            }
            capacity = Int(written) + 1
        }
    }
}

extension StringProtocol {
    /// The text without leading and trailing characters for which `drop` holds
    /// (Foundation's `trimmingCharacters(in:)` for a predicate).
    public func trimming(_ drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else { return "" }
        return String(self[first...last])
    }

    /// Without leading and trailing spaces, tabs and newlines (`.whitespacesAndNewlines`).
    public var trimmedWhitespaceAndNewlines: String { trimming(\.isWhitespace) }

    /// Without leading and trailing spaces and tabs (`.whitespaces`: newlines stay).
    public var trimmedWhitespace: String { trimming { $0.isWhitespace && !$0.isNewline } }

    /// The text padded with spaces (or cut) to `width` characters (`padding(toLength:…)`).
    public func padded(to width: Int) -> String {
        count >= width ? String(prefix(width)) : String(self) + String(repeating: " ", count: width - count)
    }
}

extension StringProtocol {
    /// `%XX` sequences decoded (`removingPercentEncoding`): nil when one is cut short, not
    /// hexadecimal, or the bytes are not UTF-8.
    public var percentDecoded: String? {
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        func hex(_ byte: UInt8?) -> UInt8? {
            switch byte {
            case let b? where (48...57).contains(b): b - 48
            case let b? where (65...70).contains(b): b - 55
            case let b? where (97...102).contains(b): b - 87
            default: nil
            }
        }
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = hex(iterator.next()), let low = hex(iterator.next()) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

extension StringProtocol {
    /// Every UTF-8 byte for which `keep` is false written as `%XX` (uppercase), as
    /// `addingPercentEncoding(withAllowedCharacters:)` does for an ASCII allowed set.
    public func percentEncoded(keeping keep: (UInt8) -> Bool) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        for byte in utf8 {
            if byte < 0x80 && keep(byte) { out.append(byte) } else { out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]] }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The bytes a URL path segment keeps as they are: `CharacterSet.urlPathAllowed` (which has
/// no ";") without "/".
public enum URLText {
    public static func isPathSegmentByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: Array("!$&'()*+,-.:=@_~".utf8).contains(byte)
        }
    }
}

extension Data {
    /// Base64url without padding (RFC 4648 §5): tokens, JWT parts.
    public var base64URLEncoded: String {
        base64EncodedString().replacingUTF8("+", with: "-").replacingUTF8("/", with: "_").replacingUTF8("=", with: "")
    }
}
