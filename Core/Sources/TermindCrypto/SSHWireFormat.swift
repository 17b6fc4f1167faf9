import FoundationEssentials
import TermindCore

/// Writes the SSH wire encoding of RFC 4251 §5 (uint32, string, mpint) used by key blobs,
/// key files and signatures. Values are appended big-endian; `bytes` is the result.
public struct SSHWireWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func uint32(_ value: UInt32) {
        bytes += [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16),
                  UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
    }

    /// A length-prefixed byte string.
    public mutating func string(_ value: some Collection<UInt8>) {
        uint32(UInt32(value.count))
        bytes += value
    }

    public mutating func string(_ value: String) { string(Array(value.utf8)) }

    /// A non-negative integer given as unsigned big-endian magnitude: leading zeros are
    /// dropped and a zero byte is prepended when the top bit is set (two's complement).
    public mutating func mpint(unsigned magnitude: some Collection<UInt8>) {
        let trimmed = magnitude.drop { $0 == 0 }
        if let first = trimmed.first, first & 0x80 != 0 {
            uint32(UInt32(trimmed.count + 1))
            bytes.append(0)
            bytes += trimmed
        } else {
            string(trimmed)
        }
    }

    /// Raw bytes with no length prefix (magic strings, padding).
    public mutating func raw(_ value: some Collection<UInt8>) { bytes += value }

    /// Overwrites the buffer with zeros (for writers that held private key material).
    public mutating func wipe() {
        wipeStorage(bytes)
        bytes = []
    }
}

/// Zeroes an array's storage in place, including every copy that shares it (a plain
/// `withUnsafeMutableBytes` would wipe a fresh copy instead when the buffer is shared).
/// Best effort: copies Swift made earlier into other buffers are out of reach.
func wipeStorage(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { buffer in
        guard let base = buffer.baseAddress else { return }
        secureZero(UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(mutating: base), count: buffer.count))
    }
}

/// Reads the SSH wire encoding written by `SSHWireWriter`. Every read is bounds-checked;
/// running past the end or an impossible length throws `key.malformed` naming `context`
/// (e.g. "public key blob"), never the bytes themselves.
public struct SSHWireReader: Sendable {
    private let bytes: [UInt8]
    public private(set) var offset = 0
    /// What is being read, for error messages.
    public let context: String

    public init(_ bytes: some Collection<UInt8>, context: String) {
        self.bytes = Array(bytes)
        self.context = context
    }

    public var remaining: Int { bytes.count - offset }
    public var isAtEnd: Bool { offset == bytes.count }

    public mutating func uint32() throws -> UInt32 {
        let raw = try take(4, what: "integer")
        return raw.reduce(0) { $0 << 8 | UInt32($1) }
    }

    public mutating func string() throws -> [UInt8] {
        let length = try uint32()
        return try take(Int(length), what: "string of \(length) bytes")
    }

    /// A string that must be UTF-8 text (algorithm, cipher and curve names, comments).
    public mutating func text() throws -> String {
        let raw = try string()
        guard let value = String(validating: raw, as: UTF8.self) else {
            throw SSHKeyError.malformed("The \(context) has a name or comment that is not UTF-8 text.")
        }
        return value
    }

    /// A non-negative mpint, returned as minimal unsigned big-endian magnitude.
    /// Negative values are rejected: no key component is negative.
    public mutating func unsignedMPInt() throws -> [UInt8] {
        let raw = try string()
        if let first = raw.first, first & 0x80 != 0 {
            throw SSHKeyError.malformed("The \(context) holds a negative integer where a key component was expected.")
        }
        return Array(raw.drop { $0 == 0 })
    }

    public mutating func raw(_ count: Int) throws -> [UInt8] { try take(count, what: "\(count) bytes") }

    /// Everything not read yet.
    public mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }

    /// Throws unless every byte has been read.
    public func expectEnd() throws {
        guard isAtEnd else {
            throw SSHKeyError.malformed("The \(context) has \(remaining) unexpected bytes after its last field.")
        }
    }

    private mutating func take(_ count: Int, what: String) throws -> [UInt8] {
        guard count >= 0, count <= remaining else {
            throw SSHKeyError.malformed("The \(context) is truncated: it ends where \(what) should be.")
        }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }
}
