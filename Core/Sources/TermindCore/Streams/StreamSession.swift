import Foundation

/// A long-running operation that talks back while it runs: it sends events (output), asks
/// the client questions (a choice, prompts to answer) and receives input — so work that
/// needs a person can run inside `termind serve` as well as in-process. A feature declares
/// its streams (`StreamContract`, manifest `streams`) and the kernel routes them; the
/// control socket and an in-process run (`Kernel.runStream`) drive the same session.
///
///     → {"id": 7, "stream": "workspaces.exec@1", "body": {...}}
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

    package let id: JSONValue
    private let emitLine: @Sendable (Data) -> Void
    private let lock = NSLock()
    private var nextAsk: Int64 = 0
    private var asks: [Int64: CheckedContinuation<JSONValue?, Never>] = [:]
    private var ended = false
    private var cancelTask: (@Sendable () -> Void)?
    private var signal: String?
    /// Bytes the client sends for the operation's standard input, until it ends it.
    public let input = StreamInput(limit: 256)

    package init(id: JSONValue, emit: @escaping @Sendable (Data) -> Void) {
        self.id = id
        emitLine = emit
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

    // MARK: - Server side (the kernel's)

    package func start(_ task: Task<Void, Never>) { start(cancelling: task) }

    /// The task running the handler: `cancel()` cancels it.
    package func start<Success>(cancelling task: Task<Success, Never>) {
        lock.withLock { cancelTask = { task.cancel() } }
    }

    /// A line from the client addressed to this stream.
    package func receive(_ object: [String: JSONValue]) {
        if case .object(let answer)? = object["answer"], case .integer(let askID)? = answer["askID"] {
            let waiting = lock.withLock { asks.removeValue(forKey: askID) }
            waiting?.resume(returning: .object(answer))
        }
        if case .string(let text)? = object["input"], let bytes = Data(base64Encoded: text) {
            // The socket's reader must never wait here (a cancel could not be read): input
            // beyond the bound is dropped until the protocol carries credit (issue 11).
            input.put(bytes, waitForRoom: false)
        }
        if object["inputEnd"] == .bool(true) { input.finish() }
        if object["cancel"] == .bool(true) {
            if case .string(let name)? = object["signal"], ["INT", "TERM", "HUP", "QUIT"].contains(name) {
                lock.withLock { if signal == nil { signal = name } }
            }
            cancel()
        }
    }

    /// The client went away or cancelled: nobody will answer.
    package func cancel() {
        let (waiting, cancelTask): ([CheckedContinuation<JSONValue?, Never>], (@Sendable () -> Void)?) = lock.withLock {
            ended = true
            defer { asks.removeAll() }
            return (Array(asks.values), self.cancelTask)
        }
        input.finish()
        for continuation in waiting { continuation.resume(returning: nil) }
        cancelTask?()
    }

    package func finish() {
        lock.withLock { ended = true }
        input.finish()
    }
}


/// A stream's input: chunks in order, at most `limit` held. An in-process sender waits for
/// room (backpressure all the way to the reader of standard input); the socket's reader
/// cannot, and what arrives beyond the bound is dropped.
public final class StreamInput: AsyncSequence, @unchecked Sendable {
    public typealias Element = Data
    private let condition = NSCondition()
    private var chunks: [Data] = []
    private var finished = false
    private var waiting: CheckedContinuation<Data?, Never>?
    public let limit: Int

    init(limit: Int) { self.limit = limit }

    /// Adds a chunk; false when the input has ended (or, not waiting, was full).
    @discardableResult
    package func put(_ data: Data, waitForRoom: Bool) -> Bool {
        condition.lock()
        while waitForRoom && !finished && chunks.count >= limit { condition.wait() }
        guard !finished, chunks.count < limit else {
            condition.unlock()
            return false
        }
        if let waiting {
            self.waiting = nil
            condition.unlock()
            waiting.resume(returning: data)
            return true
        }
        chunks.append(data)
        condition.unlock()
        return true
    }

    /// No more input: the reader sees the end once it has read what is held.
    package func finish() {
        condition.lock()
        finished = true
        let waiting = self.waiting
        self.waiting = nil
        condition.broadcast()
        condition.unlock()
        waiting?.resume(returning: nil)
    }

    func next() async -> Data? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Data?, Never>) in
            condition.lock()
            if !chunks.isEmpty {
                let chunk = chunks.removeFirst()
                condition.broadcast()
                condition.unlock()
                continuation.resume(returning: chunk)
            } else if finished {
                condition.unlock()
                continuation.resume(returning: nil)
            } else {
                waiting = continuation
                condition.unlock()
            }
        }
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let input: StreamInput
        public mutating func next() async -> Data? { await input.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(input: self) }
}

/// A stream a feature serves: its id, request and result types (their JSON Schemas are
/// derived as for contracts) and whether the client's standard input travels to it.
public protocol StreamContract: Sendable {
    associatedtype Request: Codable & Sendable
    associatedtype Result: Codable & Sendable
    /// Dotted lowercase name in the owning feature's namespace (`workspaces.exec`).
    static var name: String { get }
    static var version: Int { get }
    static var summary: String { get }
    /// Whether the stream reads `input` messages (a client sends its standard input).
    static var acceptsInput: Bool { get }
}

extension StreamContract {
    public static var id: ContractID { ContractID(name: name, version: version) }
    public static var acceptsInput: Bool { false }
}

/// A stream as the kernel routes it.
public struct StreamEndpoint: Sendable {
    public let id: ContractID
    public let summary: String
    public let owner: String
    public let acceptsInput: Bool
    public let requestSchema: JSONSchema
    public let resultSchema: JSONSchema
    public let handler: @Sendable (Data, StreamSession) async throws -> Data

    public init(id: ContractID, summary: String, owner: String, acceptsInput: Bool, requestSchema: JSONSchema, resultSchema: JSONSchema,
                handler: @escaping @Sendable (Data, StreamSession) async throws -> Data) {
        self.id = id
        self.summary = summary
        self.owner = owner
        self.acceptsInput = acceptsInput
        self.requestSchema = requestSchema
        self.resultSchema = resultSchema
        self.handler = handler
    }

    /// Wraps a typed handler: the body is checked against the request schema (each problem
    /// named by field) and decoded; the result is encoded.
    public static func typed<S: StreamContract>(_ stream: S.Type, owner: String,
                                                handler: @escaping @Sendable (S.Request, StreamSession) async throws -> S.Result) -> StreamEndpoint {
        let requestSchema = SchemaDerivation.schema(for: S.Request.self)
        return StreamEndpoint(id: S.id, summary: S.summary, owner: owner, acceptsInput: S.acceptsInput, requestSchema: requestSchema,
                              resultSchema: SchemaDerivation.schema(for: S.Result.self)) { body, session in
            let request: S.Request = try ContractCoding.decodeRequest(body, schema: requestSchema, contract: S.id)
            return try JSONCoding.encode(try await handler(request, session))
        }
    }
}
