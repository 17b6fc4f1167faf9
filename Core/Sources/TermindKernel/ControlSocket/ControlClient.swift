import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// A blocking client of the control socket, for the CLI and tests. One request at a time.
/// When the server closed the connection while it was idle (`socket.idle`), the next call
/// connects again first; a server that is full answers `socket.busy`, which `call` throws.
///
/// The thread running `call` or `stream` reads; other threads may only send while a stream
/// runs (`streamInput`, `streamMessage`). So the descriptor is under `writing` (a sender never
/// writes to one being closed or reused by a reconnect) and the reader under `reading`, which
/// only the one requesting thread takes.
public final class ControlClient: Sendable {
    private let path: String
    /// The connection's descriptor, held while a line is written so that concurrent senders
    /// never interleave.
    private let writing: Mutex<Int32>
    private let reading: Mutex<LineReader>
    private let nextID = Atomic<Int64>(1)

    /// Connects, or throws `socket.connect_failed` when no server listens at `path`.
    public init(path: String) throws {
        self.path = path
        let fd = try SocketIO.connect(path)
        writing = Mutex(fd)
        reading = Mutex(LineReader(fd: fd, maximum: 64 << 20))
    }

    deinit { close(writing.withLock { $0 }) }

    private var fd: Int32 { writing.withLock { $0 } }
    private func takeID() -> JSONValue { .integer(nextID.wrappingAdd(1, ordering: .relaxed).oldValue) }
    private func nextLine() -> LineReader.Event { reading.withLock { $0.next() } }

    /// Sends one contract call and waits for its reply.
    public func call(_ contract: String, body: Data) throws -> Data {
        try reconnectIfClosedWhileIdle()
        let id = takeID()
        guard send(Envelope.encodeRequest(id: id, contract: contract, body: body)) else {
            // A server that was full wrote why before it closed.
            throw pendingNotice() ?? TermindError(.socketClosed, "The termind server closed the connection.")
        }
        return try readReply()
    }

    /// Between calls nothing is due from the server: anything readable now is a notice
    /// (idle, busy) or the end of the connection. After an idle close, connect again.
    private func reconnectIfClosedWhileIdle() throws {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 0) > 0 else { return }
        if let notice = pendingNotice(), !notice.is(.socketIdle) { throw notice }
        // Under `writing`: a late message from another thread (an input reader's end, a
        // signal) never writes to a descriptor being closed or reused.
        let fd = try writing.withLock { fd in
            close(fd)
            fd = -1
            fd = try SocketIO.connect(path)
            return fd
        }
        reading.withLock { $0 = LineReader(fd: fd, maximum: 64 << 20) }
    }

    /// The error a server sent before closing (`socket.busy`, `socket.idle`), if any.
    private func pendingNotice() -> TermindError? {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 100) > 0, case .line(let line) = nextLine(),
              let reply = try? Envelope.parseReply(line), case .failure(let error) = reply.result else { return nil }
        return error
    }

    /// Runs a stream (see StreamSession): `onEvent` gets each event object (its reply, if
    /// any, is sent back — an answer); returns the final body or throws its error. The
    /// server sends at most `window` bytes of events ahead of what `onEvent` has handled.
    /// `streamMessage` and `streamInput` may be used from another thread meanwhile.
    /// `descriptors` (still the caller's) travel with the open line as SCM_RIGHTS; the server
    /// holds copies of its own.
    public func stream(_ name: String, body: Data, window: Int = StreamSession.defaultWindow, descriptors: StreamDescriptors? = nil,
                       onOpen: (JSONValue) -> Void = { _ in }, onEvent: (StreamEvent) throws -> JSONValue?) throws -> Data {
        try reconnectIfClosedWhileIdle()
        let id = takeID()
        var open = Data("{\"id\":".utf8)
        open += (try? JSONCoding.encode(id)) ?? Data("null".utf8)
        open += Data(",\"stream\":".utf8) + ((try? JSONCoding.encode(name)) ?? Data("\"\"".utf8))
        open += Data(",\"window\":\(window),\"binary\":true".utf8)
        if let descriptors {
            open += Data(",\"descriptors\":".utf8) + ((try? JSONCoding.encode(descriptors.roles)) ?? Data("[]".utf8))
        }
        open += Data(",\"body\":".utf8) + (body.isEmpty ? Data("{}".utf8) : body) + Data("}\n".utf8)
        let allowance = InputAllowance()
        inputAllowance.withLock { $0 = (id, allowance) }
        defer {
            allowance.end()
            inputAllowance.withLock { $0 = nil }
        }
        guard send(open, descriptors: descriptors?.fds ?? []) else { throw TermindError(.socketClosed, "The termind server closed the connection.") }
        onOpen(id)
        var handled = 0
        while true {
            guard case .line(let line) = nextLine() else {
                throw TermindError(.socketClosed, "The termind server closed the connection before the operation ended.")
            }
            let value = try JSONCoding.parse(line, source: "The server's reply")
            guard case .object(let object) = value else { continue }
            if object["ok"] != nil {
                return try Envelope.parseReply(line).result.get()
            }
            if case .integer(let bytes)? = object["grant"] {
                allowance.add(Int(clamping: bytes))
                continue
            }
            var event = StreamEvent(fields: object)
            var size = line.count + 1
            if let attached = object["attached"] {
                guard case .integer(let count) = attached, count >= 0, count <= Envelope.maximumBytes,
                      let bytes = reading.withLock({ $0.read(count: Int(count)) }) else {
                    throw TermindError(.envelopeMalformed, "The server sent an event with a broken \"attached\" size.")
                }
                event.fields["attached"] = nil
                event.data = bytes
                size += bytes.count
            } else if case .string(let text)? = object["data"] {
                event.data = Data(base64Encoded: text)
            }
            let counted = event.kind != "ask"
            if let answer = try onEvent(event) {
                _ = streamMessage(id: id, ["answer": answer])
            }
            // Credit goes back in batches, as the server counts it: each line with its
            // newline and attached bytes.
            if counted {
                handled += size
                if handled >= max(window, StreamSession.windowRange.lowerBound) / 4 {
                    _ = streamMessage(id: id, ["credit": .integer(Int64(handled))])
                    handled = 0
                }
            }
        }
    }

    /// Sends `data` as input of the running stream `id`, in pieces the server granted:
    /// blocks while it granted nothing more; false once the stream ended or the server is gone.
    public func streamInput(id: JSONValue, _ data: Data) -> Bool {
        guard let (current, allowance) = inputAllowance.withLock({ $0 }), current == id else { return false }
        var offset = data.startIndex
        while offset < data.endIndex {
            guard let room = allowance.take(upTo: data.endIndex - offset) else { return false }
            // Raw after its line, in one write so no other message comes between them.
            var frame = Data("{\"id\":".utf8) + ((try? JSONCoding.encode(id)) ?? Data("null".utf8)) + Data(",\"attached\":\(room)}\n".utf8)
            frame += data[offset..<(offset + room)]
            guard send(frame) else { return false }
            offset += room
        }
        return true
    }

    private let inputAllowance = Mutex<(JSONValue, InputAllowance)?>(nil)

    /// Sends one stream message (inputEnd, cancel, an answer) for stream `id`.
    @discardableResult
    public func streamMessage(id: JSONValue, _ fields: [String: JSONValue]) -> Bool {
        var object = fields
        object["id"] = id
        guard var line = try? JSONCoding.encode(JSONValue.object(object)) else { return false }
        line += Data("\n".utf8)
        return send(line)
    }

    private func send(_ data: Data, descriptors: [Int32] = []) -> Bool {
        writing.withLock { fd in SocketIO.writeAll(fd, data, descriptors: descriptors) }
    }

    /// Sends raw bytes, with `descriptors` (SCM_RIGHTS) on the first (tests use this to send
    /// malformed envelopes and stray descriptors).
    public func sendRaw(_ data: Data, descriptors: [Int32] = []) -> Bool { send(data, descriptors: descriptors) }

    /// Reads the next reply line, whatever its id.
    public func readReply() throws -> Data {
        switch nextLine() {
        case .line(let line):
            let reply = try Envelope.parseReply(line)
            return try reply.result.get()
        case .oversized:
            throw TermindError(.envelopeTooLarge, "The server's reply is larger than 64 MiB.")
        case .end, .idle:
            throw TermindError(.socketClosed, "The termind server closed the connection before replying.")
        }
    }

    /// Reads the next reply line with its id, without throwing on an error reply.
    public func readEnvelope() throws -> (id: JSONValue, result: Result<Data, TermindError>) {
        guard case .line(let line) = nextLine() else {
            throw TermindError(.socketClosed, "The termind server closed the connection before replying.")
        }
        return try Envelope.parseReply(line)
    }
}

/// The input bytes a stream's server has granted and the client not yet sent.
final class InputAllowance: Sendable {
    private let allowance = ConditionLock((bytes: 0, ended: false))

    func add(_ granted: Int) {
        allowance.withLock { $0.bytes += max(0, granted) }
        allowance.broadcast()
    }

    /// Up to `wanted` bytes of the allowance (waiting for some); nil once the stream ended.
    func take(upTo wanted: Int) -> Int? {
        allowance.withLock(whenever: { $0.bytes > 0 || $0.ended }) { a in
            guard !a.ended else { return nil }
            let taken = min(a.bytes, wanted)
            a.bytes -= taken
            return taken
        }
    }

    func end() {
        allowance.withLock { $0.ended = true }
        allowance.broadcast()
    }
}
