import Foundation
import TermindCore

/// A blocking client of the control socket, for the CLI and tests. One request at a time.
/// When the server closed the connection while it was idle (`socket.idle`), the next call
/// connects again first; a server that is full answers `socket.busy`, which `call` throws.
public final class ControlClient: @unchecked Sendable {
    private let path: String
    private var fd: Int32
    private var reader: LineReader
    private var nextID: Int64 = 1

    /// Connects, or throws `socket.connect_failed` when no server listens at `path`.
    public init(path: String) throws {
        self.path = path
        fd = try SocketIO.connect(path)
        reader = LineReader(fd: fd, maximum: 64 << 20)
    }

    deinit { close(fd) }

    /// Sends one contract call and waits for its reply.
    public func call(_ contract: String, body: Data) throws -> Data {
        try reconnectIfClosedWhileIdle()
        let id = JSONValue.integer(nextID)
        nextID += 1
        guard SocketIO.writeAll(fd, Envelope.encodeRequest(id: id, contract: contract, body: body)) else {
            // A server that was full wrote why before it closed.
            throw pendingNotice() ?? TermindError(code: "socket.closed", message: "The termind server closed the connection.")
        }
        return try readReply()
    }

    /// Between calls nothing is due from the server: anything readable now is a notice
    /// (idle, busy) or the end of the connection. After an idle close, connect again.
    private func reconnectIfClosedWhileIdle() throws {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 0) > 0 else { return }
        if let notice = pendingNotice(), notice.code != "socket.idle" { throw notice }
        close(fd)
        fd = try SocketIO.connect(path)
        reader = LineReader(fd: fd, maximum: 64 << 20)
    }

    /// The error a server sent before closing (`socket.busy`, `socket.idle`), if any.
    private func pendingNotice() -> TermindError? {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 100) > 0, case .line(let line) = reader.next(),
              let reply = try? Envelope.parseReply(line), case .failure(let error) = reply.result else { return nil }
        return error
    }

    /// Runs a stream (see StreamSession): `onEvent` gets each event object (its reply, if
    /// any, is sent back — an answer); returns the final body or throws its error.
    /// `send` may be used from another thread meanwhile (standard input).
    public func stream(_ name: String, body: Data, onOpen: (JSONValue) -> Void = { _ in },
                       onEvent: ([String: JSONValue]) throws -> JSONValue?) throws -> Data {
        try reconnectIfClosedWhileIdle()
        let id = JSONValue.integer(nextID)
        nextID += 1
        var open = Data("{\"id\":".utf8)
        open += (try? JSONCoding.encode(id)) ?? Data("null".utf8)
        open += Data(",\"stream\":".utf8) + ((try? JSONCoding.encode(name)) ?? Data("\"\"".utf8))
        open += Data(",\"body\":".utf8) + (body.isEmpty ? Data("{}".utf8) : body) + Data("}\n".utf8)
        guard send(open) else { throw TermindError(code: "socket.closed", message: "The termind server closed the connection.") }
        onOpen(id)
        while true {
            guard case .line(let line) = reader.next() else {
                throw TermindError(code: "socket.closed", message: "The termind server closed the connection before the operation ended.")
            }
            let value = try JSONCoding.parse(line, source: "The server's reply")
            guard case .object(let object) = value else { continue }
            if object["ok"] != nil {
                return try Envelope.parseReply(line).result.get()
            }
            if let answer = try onEvent(object) {
                _ = streamMessage(id: id, ["answer": answer])
            }
        }
    }

    /// Sends one stream message (input, inputEnd, cancel) for stream `id`.
    @discardableResult
    public func streamMessage(id: JSONValue, _ fields: [String: JSONValue]) -> Bool {
        var object = fields
        object["id"] = id
        guard var line = try? JSONCoding.encode(JSONValue.object(object)) else { return false }
        line += Data("\n".utf8)
        return send(line)
    }

    private let writeLock = NSLock()
    private func send(_ data: Data) -> Bool { writeLock.withLock { SocketIO.writeAll(fd, data) } }

    /// Sends raw bytes (tests use this to send malformed envelopes).
    public func sendRaw(_ data: Data) -> Bool { SocketIO.writeAll(fd, data) }

    /// Reads the next reply line, whatever its id.
    public func readReply() throws -> Data {
        switch reader.next() {
        case .line(let line):
            let reply = try Envelope.parseReply(line)
            return try reply.result.get()
        case .oversized:
            throw TermindError(code: "envelope.too_large", message: "The server's reply is larger than 64 MiB.")
        case .end, .idle:
            throw TermindError(code: "socket.closed", message: "The termind server closed the connection before replying.")
        }
    }

    /// Reads the next reply line with its id, without throwing on an error reply.
    public func readEnvelope() throws -> (id: JSONValue, result: Result<Data, TermindError>) {
        guard case .line(let line) = reader.next() else {
            throw TermindError(code: "socket.closed", message: "The termind server closed the connection before replying.")
        }
        return try Envelope.parseReply(line)
    }
}
