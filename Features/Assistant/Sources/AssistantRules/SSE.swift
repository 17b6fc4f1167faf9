/// One server-sent event: its `event:` name (nil when the server sent none) and its data
/// lines joined with "\n".
public struct SSEEvent: Sendable, Equatable {
    public var event: String?
    public var data: String

    public init(event: String? = nil, data: String) {
        self.event = event
        self.data = data
    }
}

/// Why a stream of server-sent events was refused.
public struct SSEProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
}

/// The one reader of server-sent events every dialect shares (the WHATWG rules: lines end in
/// LF, CRLF or CR; `:` starts a comment; `data:` lines accumulate; a blank line dispatches;
/// an event unterminated at the end of the stream is dropped). Bounded: a line longer than
/// `lineLimit` or a stream longer than `streamLimit` is refused, never buffered.
public struct SSEReader: Sendable {
    public static let lineLimit = 1 << 20
    public static let streamLimit = 16 << 20

    private var line: [UInt8] = []
    private var lastWasCR = false
    private var event: String?
    private var data: [UInt8] = []
    private var hasData = false
    private var total = 0
    private let lineLimit: Int
    private let streamLimit: Int

    public init(lineLimit: Int = SSEReader.lineLimit, streamLimit: Int = SSEReader.streamLimit) {
        self.lineLimit = lineLimit
        self.streamLimit = streamLimit
    }

    /// The events `bytes` completes, in order.
    public mutating func feed<Bytes: Sequence>(_ bytes: Bytes) throws(SSEProblem) -> [SSEEvent] where Bytes.Element == UInt8 {
        var events: [SSEEvent] = []
        for byte in bytes {
            total += 1
            if total > streamLimit { throw SSEProblem(description: "the stream is longer than \(streamLimit >> 20) MiB") }
            switch byte {
            case 0x0A:
                if lastWasCR {
                    lastWasCR = false
                    continue
                }
                if let event = endLine() { events.append(event) }
            case 0x0D:
                lastWasCR = true
                if let event = endLine() { events.append(event) }
            default:
                lastWasCR = false
                guard line.count < lineLimit else { throw SSEProblem(description: "a line of the stream is longer than \(lineLimit >> 20) MiB") }
                line.append(byte)
            }
        }
        return events
    }

    /// The end of one line; the event it dispatches, if any.
    private mutating func endLine() -> SSEEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            defer {
                event = nil
                data.removeAll(keepingCapacity: true)
                hasData = false
            }
            guard hasData else { return nil }
            return SSEEvent(event: event, data: String(decoding: data, as: UTF8.self))
        }
        if line[0] == 0x3A { return nil }  // a comment (": ping")
        let colon = line.firstIndex(of: 0x3A) ?? line.count
        let field = line[..<colon]
        var value = line[min(colon + 1, line.count)...]
        if value.first == 0x20 { value = value.dropFirst() }
        if field.elementsEqual("data".utf8) {
            if hasData { data.append(0x0A) }
            data.append(contentsOf: value)
            hasData = true
        } else if field.elementsEqual("event".utf8) {
            event = String(decoding: value, as: UTF8.self)
        }
        // `id:` and `retry:` are for reconnecting browsers; termind never resumes a stream.
        return nil
    }
}
