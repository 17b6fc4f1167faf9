import Foundation
import TermindCore

/// A long-running operation over the control socket that talks back while it runs: it
/// sends events (output), asks the client questions (a host key, a keyboard-interactive
/// prompt) and receives input — so work that needs a person can run inside `termind serve`.
///
///     → {"id": 7, "stream": "ssh.exec@1", "body": {...}}
///     ← {"id": 7, "event": "stdout", "data": "<base64>"}
///     ← {"id": 7, "event": "ask", "askID": 1, "ask": {...}}
///     → {"id": 7, "answer": {"askID": 1, ...}}
///     → {"id": 7, "input": "<base64>"}       → {"id": 7, "inputEnd": true}
///     → {"id": 7, "cancel": true}            (optionally "signal": "INT": see `cancelSignal`)
///     ← {"id": 7, "ok": true, "body": {...}}  (or "ok": false with the error)
///
/// A client that disconnects cancels its streams: pending questions get no answer (nil)
/// and the handler's task is cancelled.
public final class StreamSession: @unchecked Sendable {
    public typealias Handler = @Sendable (_ body: Data, _ session: StreamSession) async throws -> Data

    let id: JSONValue
    private let emitLine: @Sendable (Data) -> Void
    private let lock = NSLock()
    private var nextAsk: Int64 = 0
    private var asks: [Int64: CheckedContinuation<JSONValue?, Never>] = [:]
    private var ended = false
    private var task: Task<Void, Never>?
    private var signal: String?
    private let inputContinuation: AsyncStream<Data>.Continuation
    /// Bytes the client sends for the operation's standard input, until it ends it.
    public let input: AsyncStream<Data>

    init(id: JSONValue, emit: @escaping @Sendable (Data) -> Void) {
        self.id = id
        emitLine = emit
        (input, inputContinuation) = AsyncStream.makeStream(of: Data.self, bufferingPolicy: .bufferingNewest(256))
    }

    /// Sends an event with `fields` (and "id", "event").
    public func emit(_ event: String, _ fields: [String: JSONValue] = [:]) {
        var object = fields
        object["id"] = id
        object["event"] = .string(event)
        guard var line = try? JSONCoding.encode(JSONValue.object(object)) else { return }
        line += Data("\n".utf8)
        emitLine(line)
    }

    /// Sends bytes as a base64 "data" field of `event`.
    public func emit(_ event: String, data: Data) {
        emit(event, ["data": .string(data.base64EncodedString())])
    }

    /// Asks the client and waits for its answer; nil when the client went away, the
    /// stream was cancelled, or the client declined.
    public func ask(_ question: JSONValue) async -> JSONValue? {
        await withCheckedContinuation { (continuation: CheckedContinuation<JSONValue?, Never>) in
            let askID: Int64? = lock.withLock {
                guard !ended else { return nil }
                nextAsk += 1
                asks[nextAsk] = continuation
                return nextAsk
            }
            guard let askID else { continuation.resume(returning: nil); return }
            emit("ask", ["askID": .integer(askID), "ask": question])
        }
    }

    /// The signal the client named when it cancelled ("INT" after a Ctrl-C), for an
    /// operation that passes it on (a remote command's channel closes with it).
    public var cancelSignal: String? { lock.withLock { signal } }

    // MARK: - Server side

    func start(_ task: Task<Void, Never>) { lock.withLock { self.task = task } }

    /// A line from the client addressed to this stream.
    func receive(_ object: [String: JSONValue]) {
        if case .object(let answer)? = object["answer"], case .integer(let askID)? = answer["askID"] {
            let waiting = lock.withLock { asks.removeValue(forKey: askID) }
            waiting?.resume(returning: .object(answer))
        }
        if case .string(let text)? = object["input"], let bytes = Data(base64Encoded: text) {
            inputContinuation.yield(bytes)
        }
        if object["inputEnd"] == .bool(true) { inputContinuation.finish() }
        if object["cancel"] == .bool(true) {
            if case .string(let name)? = object["signal"], ["INT", "TERM", "HUP", "QUIT"].contains(name) {
                lock.withLock { if signal == nil { signal = name } }
            }
            cancel()
        }
    }

    /// The client went away or cancelled: nobody will answer.
    func cancel() {
        let (waiting, task): ([CheckedContinuation<JSONValue?, Never>], Task<Void, Never>?) = lock.withLock {
            ended = true
            defer { asks.removeAll() }
            return (Array(asks.values), self.task)
        }
        inputContinuation.finish()
        for continuation in waiting { continuation.resume(returning: nil) }
        task?.cancel()
    }

    func finish() {
        lock.withLock { ended = true }
        inputContinuation.finish()
    }
}

/// What a client line addressed to a stream looks like (parsed once by the server).
enum StreamLine {
    case open(id: JSONValue, name: String, body: Data)
    case message(id: JSONValue, object: [String: JSONValue])

    /// nil when the line is an ordinary contract request (or something else).
    static func parse(_ value: JSONValue) -> StreamLine? {
        guard case .object(let o) = value, o["contract"] == nil else { return nil }
        let id = o["id"] ?? .null
        if case .string(let name)? = o["stream"] {
            return .open(id: id, name: name, body: Envelope.body(of: o))
        }
        if o["answer"] != nil || o["input"] != nil || o["inputEnd"] != nil || o["cancel"] != nil {
            return .message(id: id, object: o)
        }
        return nil
    }
}
