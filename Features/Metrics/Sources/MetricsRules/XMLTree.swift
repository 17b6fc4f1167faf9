import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A small, strict XML reader for nvidia-smi's `-q -x` output, which comes from a remote
/// host and so is untrusted. Foundation's XMLParser (libxml2) is not used: this reader takes
/// nothing from a DTD — a DOCTYPE naming an external one is skipped unread, one with an
/// internal subset is refused, and no entity other than XML's five and character references
/// exists, so there is no entity expansion to abuse. It is bounded in depth, element count
/// and text per element; the caller bounds the input's size. Errors name the byte offset
/// and what is wrong, never the input's content.
public struct XMLElement: Sendable, Equatable {
    public var name: String
    public var attributes: [String: String]
    public var children: [XMLElement]
    /// The element's own character data (CDATA included), untrimmed.
    public var text: String

    public init(name: String, attributes: [String: String] = [:], children: [XMLElement] = [], text: String = "") {
        self.name = name
        self.attributes = attributes
        self.children = children
        self.text = text
    }

    /// The first child named `name`.
    public subscript(_ name: String) -> XMLElement? { children.first { $0.name == name } }

    /// The child at a path of names, e.g. `element["fb_memory_usage", "used"]`.
    public subscript(_ first: String, _ rest: String...) -> XMLElement? {
        rest.reduce(self[first]) { $0?[$1] }
    }

    public func all(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }

    public var trimmedText: String { text.trimmedWhitespaceAndNewlines }
}

public struct XMLError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    public var description: String { "\(reason) at byte \(offset)" }
}

public enum XMLTree {
    public static let maxDepth = 64
    public static let maxElements = 200_000
    public static let maxText = 64 << 10
    public static let maxAttributes = 32

    public static func parse(_ bytes: [UInt8]) throws(XMLError) -> XMLElement {
        var reader = Reader(bytes: bytes)
        return try reader.document()
    }

    private struct Reader {
        let bytes: [UInt8]
        var i = 0
        var elements = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
            // A UTF-8 byte order mark.
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { i = 3 }
        }

        func error(_ reason: String) -> XMLError { XMLError(offset: i, reason: reason) }

        var atEnd: Bool { i >= bytes.count }
        func peek(_ offset: Int = 0) -> UInt8? { i + offset < bytes.count ? bytes[i + offset] : nil }
        func starts(with prefix: String) -> Bool {
            let p = Array(prefix.utf8)
            return i + p.count <= bytes.count && bytes[i..<(i + p.count)].elementsEqual(p)
        }

        mutating func skipSpace() {
            while let b = peek(), b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { i += 1 }
        }

        /// Skips past `terminator`; fails at the end of input.
        mutating func skip(past terminator: String, what: String) throws(XMLError) {
            let t = Array(terminator.utf8)
            while i + t.count <= bytes.count {
                if bytes[i..<(i + t.count)].elementsEqual(t) { i += t.count; return }
                i += 1
            }
            i = bytes.count
            throw error("an unterminated \(what)")
        }

        /// Prolog, root element, trailing misc.
        mutating func document() throws(XMLError) -> XMLElement {
            var root: XMLElement?
            while true {
                skipSpace()
                if atEnd { break }
                if starts(with: "<?") {
                    try skip(past: "?>", what: "processing instruction")
                } else if starts(with: "<!--") {
                    try skip(past: "-->", what: "comment")
                } else if starts(with: "<!DOCTYPE") {
                    guard root == nil else { throw error("a DOCTYPE after the root element") }
                    try doctype()
                } else if starts(with: "<!") {
                    throw error("a markup declaration outside a DTD")
                } else if peek() == UInt8(ascii: "<") {
                    guard root == nil else { throw error("a second root element") }
                    root = try element(depth: 1)
                } else {
                    throw error("text outside the root element")
                }
            }
            guard let root else { throw error("no root element (the document is empty or truncated)") }
            return root
        }

        /// `<!DOCTYPE name SYSTEM "file.dtd">`: skipped, the DTD never read. An internal
        /// subset (`[ … ]`, where entities would be declared) is refused.
        mutating func doctype() throws(XMLError) {
            var quote: UInt8?
            while let b = peek() {
                i += 1
                if let q = quote {
                    if b == q { quote = nil }
                } else if b == UInt8(ascii: "\"") || b == UInt8(ascii: "'") {
                    quote = b
                } else if b == UInt8(ascii: "[") {
                    throw error("a DTD internal subset (entity declarations are not accepted)")
                } else if b == UInt8(ascii: ">") {
                    return
                }
            }
            throw error("an unterminated DOCTYPE")
        }

        mutating func name() throws(XMLError) -> String {
            let start = i
            while let b = peek(), !(b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D || b == UInt8(ascii: ">") || b == UInt8(ascii: "/")
                                     || b == UInt8(ascii: "=") || b == UInt8(ascii: "<") || b == UInt8(ascii: "\"") || b == UInt8(ascii: "'")) {
                i += 1
            }
            guard i > start, i - start <= 256 else { throw error(i == start ? "a missing name" : "a name longer than 256 bytes") }
            return String(decoding: bytes[start..<i], as: UTF8.self)
        }

        /// At `<`: the element, its attributes, content and end tag.
        mutating func element(depth: Int) throws(XMLError) -> XMLElement {
            guard depth <= maxDepth else { throw error("elements nested deeper than \(maxDepth)") }
            elements += 1
            guard elements <= maxElements else { throw error("more than \(maxElements) elements") }
            i += 1
            var node = XMLElement(name: try name())
            // Attributes.
            while true {
                skipSpace()
                guard let b = peek() else { throw error("an unterminated start tag") }
                if b == UInt8(ascii: "/") {
                    guard peek(1) == UInt8(ascii: ">") else { throw error("a stray '/' in a start tag") }
                    i += 2
                    return node
                }
                if b == UInt8(ascii: ">") { i += 1; break }
                let key = try name()
                skipSpace()
                guard peek() == UInt8(ascii: "=") else { throw error("an attribute without a value") }
                i += 1
                skipSpace()
                guard let q = peek(), q == UInt8(ascii: "\"") || q == UInt8(ascii: "'") else { throw error("an unquoted attribute value") }
                i += 1
                let start = i
                while let c = peek(), c != q {
                    guard c != UInt8(ascii: "<") else { throw error("a '<' in an attribute value") }
                    i += 1
                }
                guard !atEnd else { throw error("an unterminated attribute value") }
                let value = try decodeReferences(bytes[start..<i], at: start)
                i += 1
                guard node.attributes[key] == nil else { throw error("a repeated attribute") }
                guard node.attributes.count < maxAttributes else { throw error("more than \(maxAttributes) attributes") }
                node.attributes[key] = value
            }
            // Content.
            var text: [UInt8] = []
            while true {
                guard let b = peek() else { throw error("an unclosed node (the document is truncated)") }
                if b != UInt8(ascii: "<") {
                    let start = i
                    while let c = peek(), c != UInt8(ascii: "<") { i += 1 }
                    try append(try decodeReferences(bytes[start..<i], at: start).utf8, to: &text)
                    continue
                }
                if starts(with: "</") {
                    i += 2
                    let closing = try name()
                    skipSpace()
                    guard peek() == UInt8(ascii: ">") else { throw error("a malformed end tag") }
                    guard closing == node.name else { throw error("an end tag that does not match its start tag") }
                    i += 1
                    node.text = String(decoding: text, as: UTF8.self)
                    return node
                }
                if starts(with: "<!--") {
                    try skip(past: "-->", what: "comment")
                } else if starts(with: "<![CDATA[") {
                    i += 9
                    let start = i
                    try skip(past: "]]>", what: "CDATA section")
                    try append(bytes[start..<(i - 3)], to: &text)
                } else if starts(with: "<?") {
                    try skip(past: "?>", what: "processing instruction")
                } else if starts(with: "<!") {
                    throw error("a markup declaration inside an node")
                } else {
                    node.children.append(try element(depth: depth + 1))
                }
            }
        }

        func append(_ more: some Collection<UInt8>, to text: inout [UInt8]) throws(XMLError) {
            guard text.count + more.count <= maxText else { throw error("an element's text is longer than \(maxText) bytes") }
            text.append(contentsOf: more)
        }

        /// Character data with XML's five entities and character references; any other
        /// entity is undeclared (there is no DTD) and refused.
        func decodeReferences(_ raw: ArraySlice<UInt8>, at start: Int) throws(XMLError) -> String {
            guard raw.contains(UInt8(ascii: "&")) else { return String(decoding: raw, as: UTF8.self) }
            var out: [UInt8] = []
            var j = raw.startIndex
            while j < raw.endIndex {
                let b = raw[j]
                guard b == UInt8(ascii: "&") else { out.append(b); j += 1; continue }
                guard let semicolon = raw[j...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else {
                    throw XMLError(offset: j, reason: "a '&' that starts no reference")
                }
                let reference = String(decoding: raw[(j + 1)..<semicolon], as: UTF8.self)
                switch reference {
                case "lt": out.append(UInt8(ascii: "<"))
                case "gt": out.append(UInt8(ascii: ">"))
                case "amp": out.append(UInt8(ascii: "&"))
                case "quot": out.append(UInt8(ascii: "\""))
                case "apos": out.append(UInt8(ascii: "'"))
                default:
                    var code: UInt32?
                    if reference.hasPrefix("#x") { code = UInt32(reference.dropFirst(2), radix: 16) } else if reference.hasPrefix("#") { code = UInt32(reference.dropFirst()) }
                    guard let code, code != 0, let scalar = Unicode.Scalar(code) else {
                        throw XMLError(offset: j, reason: "an undeclared entity (only XML's own and character references are accepted)")
                    }
                    out.append(contentsOf: String(Character(scalar)).utf8)
                }
                j = semicolon + 1
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}
