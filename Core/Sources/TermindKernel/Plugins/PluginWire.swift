import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// The frames termind and a plugin's own process (`termind-plugin-host`) exchange over their
/// socketpair: a 4-byte big-endian length, then that many bytes: one JSON object, or (for a
/// contract call and its successful reply, the frames every call pays for) a tag byte and
/// fixed fields, with the body as raw bytes rather than a JSON string inside JSON:
///
///     call:  0x01, id (8 bytes, big-endian), contract length (2), contract,
///            caller chain length (4), caller chain (JSON, `chain`; none: in process), body
///     reply: 0x02, id (8 bytes), body
///
/// Binary data of streams travels base64 in a field. Both ends read on a thread of their own
/// and write whole frames under a lock, so frames never interleave.
public enum PluginWire {
    /// A reply may be 4 MiB of JSON (the reply bound), plus its envelope and base64.
    static let maximumFrame = 8 << 20

    struct Closed: Error {}

    static let callTag: UInt8 = 0x01
    static let replyTag: UInt8 = 0x02

    /// A frame as read: a JSON object, or one of the two binary frames.
    enum Frame {
        case object([String: JSONValue])
        /// `chain`: the caller chain's JSON as `chain` wrote it, unparsed (empty: in process).
        case call(id: Int64, contract: String, chain: Data, body: Data)
        case reply(id: Int64, body: Data)
    }

    /// Writes one frame; false when the other end is gone.
    static func write(_ fd: Int32, _ object: [String: JSONValue]) -> Bool {
        // Serialized here, not by JSONEncoder: a frame per call each way, and the encoder's
        // cost was most of an isolated call's.
        var frame: [UInt8] = [0, 0, 0, 0]
        frame.reserveCapacity(256)
        serialize(.object(object), into: &frame)
        return send(fd, &frame)
    }

    /// Writes a contract call (binary: `call` above); false when the other end is gone.
    static func writeCall(_ fd: Int32, id: Int64, contract: String, origin: CallOrigin, body: Data) -> Bool {
        var frame: [UInt8] = [0, 0, 0, 0, callTag]
        frame.reserveCapacity(32 + contract.utf8.count + body.count)
        append(id, bytes: 8, to: &frame)
        let name = Array(contract.utf8.prefix(Int(UInt16.max)))
        append(Int64(name.count), bytes: 2, to: &frame)
        frame.append(contentsOf: name)
        let chain: [UInt8] = origin.chain.isEmpty ? [] : Array(chainText(origin).utf8)
        append(Int64(chain.count), bytes: 4, to: &frame)
        frame.append(contentsOf: chain)
        frame.append(contentsOf: body)
        return send(fd, &frame)
    }

    /// Writes a call's successful reply (binary: `reply` above); false when the other end is gone.
    static func writeReply(_ fd: Int32, id: Int64, body: Data) -> Bool {
        var frame: [UInt8] = [0, 0, 0, 0, replyTag]
        frame.reserveCapacity(13 + body.count)
        append(id, bytes: 8, to: &frame)
        frame.append(contentsOf: body)
        return send(fd, &frame)
    }

    private static func append(_ value: Int64, bytes: Int, to frame: inout [UInt8]) {
        for shift in stride(from: (bytes - 1) * 8, through: 0, by: -8) { frame.append(UInt8(truncatingIfNeeded: value >> Int64(shift))) }
    }

    private static func integer(_ bytes: ArraySlice<UInt8>) -> Int64 {
        bytes.reduce(0) { $0 << 8 | Int64($1) }
    }

    /// Fills in the length of `frame` (its first four bytes) and sends it whole.
    private static func send(_ fd: Int32, _ frame: inout [UInt8]) -> Bool {
        let length = frame.count - 4
        guard length <= maximumFrame else { return false }
        frame[0] = UInt8(truncatingIfNeeded: length >> 24)
        frame[1] = UInt8(truncatingIfNeeded: length >> 16)
        frame[2] = UInt8(truncatingIfNeeded: length >> 8)
        frame[3] = UInt8(truncatingIfNeeded: length)
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

    /// `value` as the frames carry it.
    public static func text(_ value: JSONValue) -> String {
        var out: [UInt8] = []
        serialize(value, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// RFC 8259 text of `value` (object keys in no particular order: the reader parses; a
    /// non-finite double as null).
    static func serialize(_ value: JSONValue, into out: inout [UInt8]) {
        JSONWriter.write(value, into: &out, sortedKeys: false, nonFiniteAsNull: true)
    }

    /// Frames read through a buffer: one `recv` takes in as many frames as have arrived.
    struct Reader {
        let fd: Int32
        private var bytes: [UInt8] = []
        private var start = 0
        private var chunk = [UInt8](repeating: 0, count: 64 << 10)
        /// Whether the last `recv` that took bytes in took fewer than it asked for: the socket
        /// held no more at that moment, so a reader woken by an edge-triggered epoll set
        /// need not ask again (the next arrival wakes a reader anyway).
        private(set) var drained = false

        init(fd: Int32) { self.fd = fd }

        enum Received { case bytes, wouldBlock, closed }

        /// One `recv` into the buffer (`MSG_DONTWAIT` unless `wait`): whether it took bytes in,
        /// found nothing yet, or found the end of the stream.
        mutating func receive(wait: Bool) -> Received {
            while true {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, wait ? 0 : Int32(MSG_DONTWAIT)) }
                if n < 0 && errno == EINTR { continue }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .wouldBlock }
                guard n > 0 else { return .closed }
                // What was parsed already goes: the buffer holds at most a frame and a chunk.
                if start > 0 {
                    bytes.removeSubrange(0..<start)
                    start = 0
                }
                bytes.append(contentsOf: chunk[0..<n])
                drained = n < chunk.count
                return .bytes
            }
        }

        /// The next whole frame already received, nil when more bytes are needed; throws
        /// `Closed` on a frame out of bounds, or neither a JSON object nor a well-formed
        /// binary frame.
        mutating func buffered() throws -> Frame? {
            let available = bytes.count - start
            guard available >= 4 else { return nil }
            let length = Int(UInt32(bytes[start]) << 24 | UInt32(bytes[start + 1]) << 16 | UInt32(bytes[start + 2]) << 8 | UInt32(bytes[start + 3]))
            guard length > 0, length <= maximumFrame else { throw Closed() }
            guard available >= 4 + length else { return nil }
            let range = (start + 4)..<(start + 4 + length)
            start += 4 + length
            defer {
                if start == bytes.count {
                    bytes.removeAll(keepingCapacity: bytes.capacity <= 1 << 20)
                    start = 0
                }
            }
            let frame = bytes[range]
            switch frame.first {
            case replyTag:
                guard frame.count >= 9 else { throw Closed() }
                return .reply(id: integer(frame.dropFirst().prefix(8)), body: Data(frame.dropFirst(9)))
            case callTag:
                guard frame.count >= 15 else { throw Closed() }
                let id = integer(frame.dropFirst().prefix(8))
                let nameLength = Int(integer(frame.dropFirst(9).prefix(2)))
                guard frame.count >= 15 + nameLength else { throw Closed() }
                let name = frame.dropFirst(11).prefix(nameLength)
                let chainLength = Int(integer(frame.dropFirst(11 + nameLength).prefix(4)))
                guard frame.count >= 15 + nameLength + chainLength, let contract = String(validating: name, as: UTF8.self) else { throw Closed() }
                return .call(id: id, contract: contract, chain: Data(frame.dropFirst(15 + nameLength).prefix(chainLength)),
                             body: Data(frame.dropFirst(15 + nameLength + chainLength)))
            default:
                guard case .object(let object) = try? JSONCoding.parse(Data(frame), source: "a plugin frame") else { throw Closed() }
                return .object(object)
            }
        }

        /// The next frame, blocking until it has arrived; throws `Closed` at the end of the
        /// stream or on a frame out of bounds or malformed.
        mutating func nextFrame() throws -> Frame {
            while true {
                if let frame = try buffered() { return frame }
                guard case .bytes = receive(wait: true) else { throw Closed() }
            }
        }

        /// The next frame, which must be a JSON object (while loading, nothing else is sent).
        mutating func next() throws -> [String: JSONValue] {
            guard case .object(let object) = try nextFrame() else { throw Closed() }
            return object
        }
    }

    /// The caller chain's text as `call_chain` gives it to a C plugin (and as it crosses to a
    /// plugin's process): keys sorted, so a plugin sees the same text for the same chain.
    static func chainText(_ origin: CallOrigin) -> String {
        var out: [UInt8] = []
        JSONWriter.write(chain(origin), into: &out, sortedKeys: true, nonFiniteAsNull: true)
        return String(decoding: out, as: UTF8.self)
    }

    /// The caller chain as it crosses (and as `call_chain` shows it to a C plugin): links of
    /// kind, id and detail.
    static func chain(_ origin: CallOrigin) -> JSONValue {
        .array(origin.chain.map { link in
            var fields: [String: JSONValue] = ["kind": .string(link.kind.rawValue), "id": .string(link.id)]
            if let detail = link.detail { fields["detail"] = .string(detail) }
            return .object(fields)
        })
    }

    /// The caller chain `chain` wrote (in-process when there is none).
    static func origin(_ value: JSONValue?) -> CallOrigin {
        guard case .array(let links)? = value else { return .inProcess }
        let chain = links.compactMap { link -> Caller? in
            guard let kind = link["kind"]?.stringValue.flatMap(Caller.Kind.init(rawValue:)), let id = link["id"]?.stringValue else { return nil }
            return Caller(kind, id, detail: link["detail"]?.stringValue)
        }
        return chain.isEmpty ? .inProcess : CallOrigin(chain: chain)
    }

    /// The strings of a JSON array (none when it is not one).
    static func strings(_ value: JSONValue?) -> [String] {
        guard case .array(let items)? = value else { return [] }
        return items.compactMap(\.stringValue)
    }

    /// An error as it crosses: code and message, the same the caller would get in process.
    static func encode(_ error: any Error) -> JSONValue {
        let failure = TermindError.from(error)
        return .object(["code": .string(failure.code), "message": .string(failure.message)])
    }

    /// The codes a call to a plugin can end with in process; anything else a plugin's
    /// process says becomes `plugin.failed`.
    static let passedCodes: Set<String> = ["request.invalid", "plugin.failed", "plugin.unhandled", "plugin.bad_reply", "plugin.busy",
                                           "plugin.function_bind", "plugin.sandbox", "contract.unknown", "stream.cancelled", "stream.undeclared",
                                           "stream.input_overrun", "feature.start_failed", "feature.descriptor_mismatch", "feature.start_timeout"]

    /// An error from a plugin's process: a known code, and a message without control
    /// characters and of a bounded length (it reaches a person's terminal) — otherwise word
    /// for word what the same call says in process.
    static func decode(_ value: JSONValue?, plugin: String) -> TermindError {
        let code = value?["code"]?.stringValue.flatMap { passedCodes.contains($0) ? $0 : nil } ?? "plugin.failed"
        var message = clean(value?["message"]?.stringValue ?? "", limit: 2_000)
        if message.isEmpty { message = "plugin '\(plugin)' failed the call." }
        return TermindError(code: code, message: message)
    }

    /// `text` without control characters (terminal escapes among them), at most `limit` characters.
    static func clean(_ text: String, limit: Int) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7f && !(0x80...0x9f).contains($0.value) }).prefix(limit))
    }
}
