import Foundation
import TermindCore

/// The frames termind and a plugin's own process (`termind-plugin-host`) exchange over their
/// socketpair: a 4-byte big-endian length, then one JSON object of that many bytes. Binary
/// data travels base64 in a field. Both ends read on a thread of their own and write whole
/// frames under a lock, so frames never interleave.
enum PluginWire {
    /// A reply may be 4 MiB of JSON (the reply bound), plus its envelope and base64.
    static let maximumFrame = 8 << 20

    struct Closed: Error {}

    /// Writes one frame; false when the other end is gone.
    static func write(_ fd: Int32, _ object: [String: JSONValue]) -> Bool {
        guard let body = try? JSONCoding.encode(JSONValue.object(object)), body.count <= maximumFrame else { return false }
        var frame = Data(count: 4)
        let length = UInt32(body.count).bigEndian
        withUnsafeBytes(of: length) { frame.replaceSubrange(0..<4, with: $0) }
        frame += body
        return frame.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                offset += n
            }
            return true
        }
    }

    /// Reads one frame, blocking; throws `Closed` at the end of the stream or on a frame
    /// that is not a JSON object within the bound.
    static func read(_ fd: Int32) throws -> [String: JSONValue] {
        var header = [UInt8](repeating: 0, count: 4)
        try readFully(fd, &header, 4)
        let length = Int(UInt32(header[0]) << 24 | UInt32(header[1]) << 16 | UInt32(header[2]) << 8 | UInt32(header[3]))
        guard length > 0, length <= maximumFrame else { throw Closed() }
        var body = [UInt8](repeating: 0, count: length)
        try readFully(fd, &body, length)
        guard case .object(let object) = try? JSONCoding.parse(Data(body), source: "a plugin frame") else { throw Closed() }
        return object
    }

    private static func readFully(_ fd: Int32, _ buffer: inout [UInt8], _ count: Int) throws {
        var offset = 0
        try buffer.withUnsafeMutableBytes { raw in
            while offset < count {
                let n = Glibc.read(fd, raw.baseAddress! + offset, count - offset)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Closed() }
                offset += n
            }
        }
    }

    /// An error as it crosses: code and message, the same the caller would get in process.
    static func encode(_ error: any Error) -> JSONValue {
        let failure = TermindError.from(error)
        return .object(["code": .string(failure.code), "message": .string(failure.message)])
    }

    static func decode(_ value: JSONValue?) -> TermindError {
        TermindError(code: value?["code"]?.stringValue ?? "plugin.failed", message: value?["message"]?.stringValue ?? "The plugin's process failed the call.")
    }
}
