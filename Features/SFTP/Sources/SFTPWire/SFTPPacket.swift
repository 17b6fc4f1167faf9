import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// SFTP version 3 (draft-ietf-secsh-filexfer-02, as OpenSSH's sftp-server speaks it) on the
/// wire: packets, attributes, status codes. Pure: no I/O. Paths and names are bytes —
/// servers hand out names that are not UTF-8, and they must round-trip unchanged.
public enum SFTPType: UInt8, Sendable {
    case initialize = 1, version = 2, open = 3, close = 4, read = 5, write = 6, lstat = 7, fstat = 8, setstat = 9, fsetstat = 10,
         opendir = 11, readdir = 12, remove = 13, mkdir = 14, rmdir = 15, realpath = 16, stat = 17, rename = 18, readlink = 19, symlink = 20
    case status = 101, handle = 102, data = 103, name = 104, attrs = 105
    case extended = 200, extendedReply = 201
}

/// SSH_FX_* status codes.
public enum SFTPStatus: UInt32, Sendable {
    case ok = 0, eof = 1, noSuchFile = 2, permissionDenied = 3, failure = 4, badMessage = 5, noConnection = 6, connectionLost = 7,
         opUnsupported = 8
}

/// SSH_FXF_* open flags.
public struct SFTPOpenFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let read = SFTPOpenFlags(rawValue: 0x01)
    public static let write = SFTPOpenFlags(rawValue: 0x02)
    public static let append = SFTPOpenFlags(rawValue: 0x04)
    public static let create = SFTPOpenFlags(rawValue: 0x08)
    public static let truncate = SFTPOpenFlags(rawValue: 0x10)
    public static let exclusive = SFTPOpenFlags(rawValue: 0x20)
}

/// A file's attributes; nil where the server did not say.
public struct SFTPAttributes: Sendable, Equatable {
    public var size: UInt64?
    public var uid: UInt32?
    public var gid: UInt32?
    public var permissions: UInt32?
    public var accessTime: UInt32?
    public var modifiedTime: UInt32?

    public init(size: UInt64? = nil, uid: UInt32? = nil, gid: UInt32? = nil, permissions: UInt32? = nil, accessTime: UInt32? = nil,
                modifiedTime: UInt32? = nil) {
        self.size = size
        self.uid = uid
        self.gid = gid
        self.permissions = permissions
        self.accessTime = accessTime
        self.modifiedTime = modifiedTime
    }

    public enum Kind: String, Sendable { case file, directory, symlink, other }

    public var kind: Kind? {
        guard let permissions else { return nil }
        switch permissions & 0o170000 {
        case 0o100000: return .file
        case 0o040000: return .directory
        case 0o120000: return .symlink
        default: return .other
        }
    }

    static let sizeFlag: UInt32 = 0x1, uidgidFlag: UInt32 = 0x2, permissionsFlag: UInt32 = 0x4, timesFlag: UInt32 = 0x8, extendedFlag: UInt32 = 0x8000_0000
}

/// What went wrong in SFTP: the server's status, or a peer that broke the protocol.
public struct SFTPError: Error, Sendable, Equatable {
    public var status: SFTPStatus?
    public var message: String
    public init(status: SFTPStatus?, message: String) {
        self.status = status
        self.message = message
    }
}

/// Builds one packet: `uint32 length, byte type, …`.
public struct SFTPWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(_ type: SFTPType, id: UInt32? = nil, capacity: Int = 64) {
        bytes = [0, 0, 0, 0, type.rawValue]
        bytes.reserveCapacity(capacity)
        if let id { uint32(id) }
    }

    public mutating func uint32(_ value: UInt32) {
        bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    public mutating func uint64(_ value: UInt64) {
        uint32(UInt32(value >> 32))
        uint32(UInt32(value & 0xFFFF_FFFF))
    }

    public mutating func string(_ value: some Collection<UInt8>) {
        uint32(UInt32(value.count))
        bytes += value
    }

    public mutating func string(_ text: String) { string(Array(text.utf8)) }

    public mutating func attributes(_ a: SFTPAttributes) {
        var flags: UInt32 = 0
        if a.size != nil { flags |= SFTPAttributes.sizeFlag }
        if a.uid != nil, a.gid != nil { flags |= SFTPAttributes.uidgidFlag }
        if a.permissions != nil { flags |= SFTPAttributes.permissionsFlag }
        if a.accessTime != nil, a.modifiedTime != nil { flags |= SFTPAttributes.timesFlag }
        uint32(flags)
        if let size = a.size { uint64(size) }
        if let uid = a.uid, let gid = a.gid { uint32(uid); uint32(gid) }
        if let permissions = a.permissions { uint32(permissions) }
        if let atime = a.accessTime, let mtime = a.modifiedTime { uint32(atime); uint32(mtime) }
    }

    /// The packet with its length filled in: the writer's own bytes, patched in place (its
    /// copy let go first, so a 255 KiB write is not copied once more).
    public consuming func finished() -> [UInt8] {
        var out = bytes
        bytes = []
        let length = UInt32(out.count - 4)
        out[0] = UInt8(length >> 24); out[1] = UInt8(length >> 16 & 0xFF); out[2] = UInt8(length >> 8 & 0xFF); out[3] = UInt8(length & 0xFF)
        return out
    }
}

/// Reads one packet's payload (after its length), failing on anything short or oversized.
public struct SFTPReader: Sendable {
    private let bytes: [UInt8]
    private var offset: Int
    private let end: Int

    public init(_ bytes: [UInt8], from start: Int = 0, to end: Int? = nil) {
        self.bytes = bytes
        offset = start
        self.end = end ?? bytes.count
    }

    public var remaining: Int { end - offset }

    static func short(_ what: String) -> SFTPError { SFTPError(status: .badMessage, message: "The server's SFTP packet ends inside its \(what).") }

    public mutating func byte() throws -> UInt8 {
        guard offset < end else { throw Self.short("type") }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func uint32() throws -> UInt32 {
        guard end - offset >= 4 else { throw Self.short("32-bit field") }
        defer { offset += 4 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    public mutating func uint64() throws -> UInt64 {
        UInt64(try uint32()) << 32 | UInt64(try uint32())
    }

    /// A string's bytes, at most what is left of the packet.
    public mutating func string() throws -> ArraySlice<UInt8> {
        let length = Int(try uint32())
        guard length <= end - offset else { throw Self.short("string") }
        defer { offset += length }
        return bytes[offset..<(offset + length)]
    }

    public mutating func text() throws -> String { String(decoding: try string(), as: UTF8.self) }

    public mutating func attributes() throws -> SFTPAttributes {
        let flags = try uint32()
        var a = SFTPAttributes()
        if flags & SFTPAttributes.sizeFlag != 0 { a.size = try uint64() }
        if flags & SFTPAttributes.uidgidFlag != 0 { a.uid = try uint32(); a.gid = try uint32() }
        if flags & SFTPAttributes.permissionsFlag != 0 { a.permissions = try uint32() }
        if flags & SFTPAttributes.timesFlag != 0 { a.accessTime = try uint32(); a.modifiedTime = try uint32() }
        if flags & SFTPAttributes.extendedFlag != 0 {
            let count = try uint32()
            guard count <= 1024 else { throw SFTPError(status: .badMessage, message: "The server sent \(count) extended attributes (at most 1024 are read).") }
            for _ in 0..<count { _ = try string(); _ = try string() }
        }
        return a
    }
}

/// Splits a byte stream into SFTP packets, bounding each by `maximum` bytes so a server
/// cannot make us buffer without limit. Each packet's bytes are copied once, straight into
/// the packet's own array (sized from its length field), whatever pieces they came in.
public struct SFTPFramer: Sendable {
    public let maximum: Int
    /// The next packet's length field, while fewer than its 4 bytes came.
    private var header: [UInt8] = []
    /// The packet being filled, and how many of its bytes are still to come (0: none begun).
    private var packet: [UInt8] = []
    private var missing = 0

    /// OpenSSH's sftp-server sends packets of at most 256 KiB of data plus headers; a
    /// client asking for more than the server's limits is the client's own mistake.
    public init(maximum: Int = 1 << 20) { self.maximum = maximum }

    /// Adds what arrived; returns the complete packets (each: type byte then payload).
    public mutating func feed<Bytes: Collection<UInt8>>(_ data: Bytes) throws -> [[UInt8]] {
        var packets: [[UInt8]] = []
        var index = data.startIndex
        while index != data.endIndex {
            if missing == 0 {
                while header.count < 4, index != data.endIndex {
                    header.append(data[index])
                    data.formIndex(after: &index)
                }
                guard header.count == 4 else { break }
                let length = Int(UInt32(header[0]) << 24 | UInt32(header[1]) << 16 | UInt32(header[2]) << 8 | UInt32(header[3]))
                header.removeAll(keepingCapacity: true)
                guard length >= 1 else { throw SFTPError(status: .badMessage, message: "The server sent an empty SFTP packet.") }
                guard length <= maximum else {
                    throw SFTPError(status: .badMessage, message: "The server sent an SFTP packet of \(length) bytes (at most \(maximum) are accepted).")
                }
                packet = []
                packet.reserveCapacity(length)
                missing = length
                continue
            }
            let end = data.index(index, offsetBy: missing, limitedBy: data.endIndex) ?? data.endIndex
            packet.append(contentsOf: data[index..<end])
            missing -= data.distance(from: index, to: end)
            index = end
            if missing == 0 {
                packets.append(packet)
                packet = []
            }
        }
        return packets
    }
}

/// What the server said it supports, from its VERSION packet.
public struct SFTPServerInfo: Sendable, Equatable {
    public var version: UInt32
    /// Extension name → version string ("posix-rename@openssh.com" → "1").
    public var extensions: [String: String]

    public init(version: UInt32, extensions: [String: String]) {
        self.version = version
        self.extensions = extensions
    }

    public func supports(_ name: String) -> Bool { extensions[name] != nil }

    /// Parses a VERSION packet (type byte first).
    public static func parse(_ packet: [UInt8]) throws -> SFTPServerInfo {
        var reader = SFTPReader(packet)
        guard try reader.byte() == SFTPType.version.rawValue else { throw SFTPError(status: .badMessage, message: "The server did not answer SFTP's INIT with VERSION.") }
        let version = try reader.uint32()
        var extensions: [String: String] = [:]
        while reader.remaining > 0, extensions.count < 256 {
            let name = try reader.text()
            extensions[name] = try reader.text()
        }
        return SFTPServerInfo(version: version, extensions: extensions)
    }
}

/// `limits@openssh.com`: what the server accepts per packet, read, write and open handles
/// (0: no limit said).
public struct SFTPLimits: Sendable, Equatable {
    public var maxPacket: UInt64
    public var maxRead: UInt64
    public var maxWrite: UInt64
    public var maxOpenHandles: UInt64

    public init(maxPacket: UInt64, maxRead: UInt64, maxWrite: UInt64, maxOpenHandles: UInt64) {
        self.maxPacket = maxPacket
        self.maxRead = maxRead
        self.maxWrite = maxWrite
        self.maxOpenHandles = maxOpenHandles
    }

    /// Without the extension: 32 KiB requests, what every SFTP v3 server takes.
    public static let conservative = SFTPLimits(maxPacket: 34_000, maxRead: 32_768, maxWrite: 32_768, maxOpenHandles: 0)

    public static func parse(_ reader: inout SFTPReader) throws -> SFTPLimits {
        SFTPLimits(maxPacket: try reader.uint64(), maxRead: try reader.uint64(), maxWrite: try reader.uint64(), maxOpenHandles: try reader.uint64())
    }

    /// The request size to use for reads (writes): the server's limit, at most 255 KiB (as
    /// OpenSSH's sftp), at least 1 KiB.
    public var readSize: Int { Self.clamp(maxRead) }
    public var writeSize: Int { Self.clamp(maxWrite == 0 ? 0 : min(maxWrite, maxPacket > 1024 ? maxPacket - 1024 : maxWrite)) }

    static func clamp(_ value: UInt64) -> Int {
        value == 0 ? 32_768 : Int(max(1024, min(value, 255 * 1024)))
    }
}
