import Foundation
import TermindCore

/// A blocking client of the control socket, for the CLI and tests. One request at a time.
public final class ControlClient {
    private let fd: Int32
    private var reader: LineReader
    private var nextID: Int64 = 1

    /// Connects, or throws `socket.connect_failed` when no server listens at `path`.
    public init(path: String) throws {
        fd = try SocketIO.connect(path)
        reader = LineReader(fd: fd, maximum: 64 << 20)
    }

    deinit { close(fd) }

    /// Sends one contract call and waits for its reply.
    public func call(_ contract: String, body: Data) throws -> Data {
        let id = JSONValue.integer(nextID)
        nextID += 1
        guard SocketIO.writeAll(fd, Envelope.encodeRequest(id: id, contract: contract, body: body)) else {
            throw TermindError(code: "socket.closed", message: "The termind server closed the connection.")
        }
        return try readReply()
    }

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
        case .end:
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
