import FoundationEssentials
import Synchronization

/// A long-running operation that talks back while it runs: it sends events (output), asks
/// the client questions (a choice, prompts to answer) and receives input — so work that
/// needs a person can run inside `termind serve` as well as in-process. A feature declares
/// its streams (`StreamContract`, manifest `streams`) and the kernel routes them; the
/// control socket and an in-process run (`Kernel.runStream`) drive the same session.
///
///     → {"id": 7, "stream": "workspaces.exec@1", "body": {...}, "window": 1048576, "binary": true}
///     ← {"id": 7, "grant": 1048576}                (input the client may send, in bytes)
///     ← {"id": 7, "event": "stdout", "attached": 5}\nhello   (binary: raw bytes follow)
///     ← {"id": 7, "event": "stdout", "data": "aGVsbG8="}     (not binary: base64)
///     → {"id": 7, "credit": 262144}                (event bytes the client has handled)
///     ← {"id": 7, "event": "ask", "askID": 1, "ask": {...}}
///     → {"id": 7, "answer": {"askID": 1, ...}}
///     → {"id": 7, "attached": 5}\nhello       or   {"id": 7, "input": "aGVsbG8="}
///     → {"id": 7, "inputEnd": true}
///     → {"id": 7, "control": {"resize": {"columns": 120, "rows": 40}}}   (see `controls`)
///     → {"id": 7, "cancel": true}            (optionally "signal": "INT": see `cancelSignal`)
///     ← {"id": 7, "ok": true, "body": {...}}  (or "ok": false with the error)
///
/// Bulk bytes travel raw after their line (`attached`) for a client that opened with
/// `binary`, so the data path has no base64 and no JSON string to scan; a plain JSON
/// client gets and sends base64 instead.
///
/// Flow control, both ways, so nothing is dropped and nothing queues without bound:
/// * Events: the client has a window of event bytes (`window`, each line counted with its
///   newline and attached bytes); `emit` waits while the window is used up, and the client
///   gives credit back as it handles events. In-process the window is credited as
///   `onEvent` returns.
/// * Input: the server grants the client input bytes (decoded) as the operation reads
///   them; a client that sends beyond its grant fails the stream (`stream.input_overrun`).
/// Questions, grants and the final reply are not counted (one question waits at a time).
///
/// A client that disconnects cancels its streams: pending questions get no answer (nil),
/// waiting emits return, and the handler's task is cancelled.
public final class StreamSession: Sendable {
    public typealias Handler = @Sendable (_ body: Data, _ session: StreamSession) async throws -> Data

    /// Event bytes a client may have outstanding, unless it asks for another window.
    public static let defaultWindow = 1 << 20
    /// The windows a client may ask for.
    public static let windowRange = (64 << 10)...(16 << 20)

    package let id: JSONValue
    private let sink: StreamSink
    private struct State {
        var nextAsk: Int64 = 0
        /// Questions waiting for their answers, by askID: each is told once (nil: no answer).
        var asks: [Int64: @Sendable (JSONValue?) -> Void] = [:]
        var ended = false
        var cancelTask: (@Sendable () -> Void)?
        var signal: String?
        var failureValue: TermindError?
        /// Event bytes the client can take now (may go below zero by one line).
        var credit: Int
        var creditWaiters: [(ticket: UInt64, size: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        var nextTicket: UInt64 = 0
        /// Input the operation has read since the last grant.
        var consumedSinceGrant = 0
        var descriptorsClosed = false
    }
    private let state: Mutex<State>
    private let grantsInput: Bool
    /// Bytes the client sends for the operation's standard input, until it ends it.
    public let input: StreamInput
    /// State updates the client sends while the stream runs (`{"control": {...}}`, e.g. a
    /// terminal's new size, `{"resize": {"columns": 120, "rows": 40}}`): latest wins, so at
    /// most the 16 newest wait to be read.
    public let controls: AsyncStream<JSONValue>
    private let controlFeed: AsyncStream<JSONValue>.Continuation
    /// The client's event window, in bytes.
    public let window: Int
    /// The client's own standard streams, when it handed them over (the stream declares
    /// `acceptsDescriptors`); closed once the handler has returned.
    public let descriptors: StreamDescriptors?

    /// Who the stream runs for (its caller chain, as the kernel built it).
    public let origin: CallOrigin

    /// The stream the current task serves, set by the kernel as it runs a handler (package:
    /// no feature sets it): a question the kernel must ask (the policy's) goes to its client.
    @TaskLocal package static var current: StreamSession?

    /// The topic of the kernel's own question (the policy asking a person to approve what
    /// an agent asked for): every stream may ask it.
    public static let policyTopic = "kernel.policy"

    /// What the stream declared it emits and asks (nil: anything, for a test's own stream).
    private let declaration: (events: [String: JSONSchema], questions: [String: String])?

    /// `grantsInput`: the client learns its input allowance from `grant` lines (the socket);
    /// in-process a sender waits for room in `input` instead. `endpoint`: the declaration
    /// the session holds the handler to.
    package init(id: JSONValue, window: Int = StreamSession.defaultWindow, grantsInput: Bool = false, endpoint: StreamEndpoint? = nil,
                 descriptors: StreamDescriptors? = nil, origin: CallOrigin = .inProcess, sink: StreamSink) {
        self.origin = origin
        self.id = id
        self.descriptors = descriptors
        declaration = endpoint.map { ($0.events, $0.questions) }
        self.window = min(max(window, Self.windowRange.lowerBound), Self.windowRange.upperBound)
        self.grantsInput = grantsInput
        state = Mutex(State(credit: self.window))
        input = StreamInput(limit: Self.defaultWindow)
        (controls, controlFeed) = AsyncStream.makeStream(of: JSONValue.self, bufferingPolicy: .bufferingNewest(16))
        self.sink = sink
        input.onConsumed { [weak self] bytes, empty in self?.consumed(bytes, drained: empty) }
    }

    /// Sends an event with `fields` (and "id", "event"), once the client has room for it.
    /// Returns at once (sending nothing) when the client is gone or the task is cancelled.
    /// `ask` is not an event kind a handler emits: questions go through `ask(_:)`.
    public func emit(_ event: String, _ fields: [String: JSONValue] = [:]) async {
        await emit(event, fields, data: nil)
    }

    /// Sends bytes with `event` (a `data` event: output): raw after the line for a binary
    /// client, base64 in "data" otherwise, as they are in-process.
    public func emit(_ event: String, data: Data) async {
        await emit(event, [:], data: data)
    }

    /// Sends `event` with `fields` and, when given, `data` as `emit(_:data:)` sends it.
    public func emit(_ event: String, _ fields: [String: JSONValue], data: Data?) async {
        guard event != "ask" else {
            assertionFailure("StreamSession.emit(\"ask\"): use ask(_:)")
            return
        }
        if let declaration {
            guard let schema = declaration.events[event] else {
                return fail(TermindError(.streamUndeclared, "The stream emitted a '\(event)' event, which it does not declare (it declares \(declaration.events.keys.sorted().joined(separator: ", "))); it was stopped."))
            }
            let problems = schema.problems(in: .object(fields), at: event)
            guard problems.isEmpty else {
                return fail(TermindError(.streamUndeclared, "The stream emitted a '\(event)' event that does not match its declaration: \(problems.prefix(3).joined(separator: "; ")); it was stopped."))
            }
        }
        var object = fields
        object["id"] = id
        object["event"] = .string(event)
        switch sink {
        case .socket(let binary, let write):
            if let data, !binary { object["data"] = .string(data.base64EncodedString()) }
            if let data, binary { object["attached"] = .integer(Int64(data.count)) }
            guard var line = try? JSONCoding.encode(JSONValue.object(object)) else { return }
            line += Data("\n".utf8)
            if let data, binary { line += data }
            guard await reserve(line.count) else { return }
            write(line)
        case .local(let deliver):
            // Counted as the bytes it carries, plus a line's worth for its fields.
            let size = (data?.count ?? 0) + 64
            guard await reserve(size) else { return }
            deliver(StreamEvent(fields: object, data: data), size)
        }
    }

    /// Asks the client and waits for its answer; nil when the client went away, the
    /// stream was cancelled or ended, or the client declined.
    public func ask(_ question: JSONValue) async -> JSONValue? {
        await withCheckedContinuation { (continuation: CheckedContinuation<JSONValue?, Never>) in
            ask(question) { continuation.resume(returning: $0) }
        }
    }

    /// Asks the client; `reply` gets the answer (nil as for `ask(_:)`) on whichever thread
    /// it arrives, for a caller that waits without a task (a launcher's terminal).
    public func ask(_ question: JSONValue, reply: @escaping @Sendable (JSONValue?) -> Void) {
        if let declaration {
            let topic = question["topic"]?.stringValue ?? "", kind = question["kind"]?.stringValue ?? ""
            guard declaration.questions[topic] == kind || (topic == Self.policyTopic && kind == "confirm") else {
                fail(TermindError(.streamUndeclared, "The stream asked a '\(kind)' question on topic '\(topic)', which it does not declare; it was stopped."))
                return reply(nil)
            }
        }
        let askID: Int64? = state.withLock { s in
            guard !s.ended else { return nil }
            s.nextAsk += 1
            s.asks[s.nextAsk] = reply
            return s.nextAsk
        }
        guard let askID else { return reply(nil) }
        send(["askID": .integer(askID), "event": .string("ask"), "ask": question])
    }

    /// The signal the client named when it cancelled ("INT" after a Ctrl-C), for an
    /// operation that passes it on (a remote command's channel closes with it).
    public var cancelSignal: String? { state.withLock { s in s.signal } }

    /// Whether the stream was cancelled (by its client, or the client went away), or is over.
    public var isCancelled: Bool { state.withLock { s in s.ended } }

    /// Why the session failed the stream itself (a client that broke the protocol), if it did.
    public var failure: TermindError? { state.withLock { s in s.failureValue } }

    // MARK: - Flow control

    /// Waits until `size` bytes of events may go; false when they never will.
    private func reserve(_ size: Int) async -> Bool {
        let ticket: UInt64? = state.withLock { s in
            if s.ended { return nil }
            if s.creditWaiters.isEmpty && s.credit > 0 {
                s.credit -= size
                return 0
            }
            s.nextTicket += 1
            return s.nextTicket
        }
        guard let ticket else { return false }
        if ticket == 0 { return true }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool? = state.withLock { s in
                    if s.ended || Task.isCancelled { return false }
                    if s.creditWaiters.isEmpty && s.credit > 0 { s.credit -= size; return true }
                    s.creditWaiters.append((ticket, size, continuation))
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLock { (s: inout State) -> CheckedContinuation<Bool, Never>? in
                guard let index = s.creditWaiters.firstIndex(where: { $0.ticket == ticket }) else { return nil }
                return s.creditWaiters.remove(at: index).continuation
            }
            waiter?.resume(returning: false)
        }
    }

    /// The client handled `bytes` of events.
    package func credit(_ bytes: Int) {
        guard bytes > 0 else { return }
        let ready: [CheckedContinuation<Bool, Never>] = state.withLock { s in
            s.credit = min(s.credit + bytes, window)
            var ready: [CheckedContinuation<Bool, Never>] = []
            while s.credit > 0, !s.creditWaiters.isEmpty {
                let waiter = s.creditWaiters.removeFirst()
                s.credit -= waiter.size
                ready.append(waiter.continuation)
            }
            return ready
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// The operation read `bytes` of input: the client may send as many more (batched).
    private func consumed(_ bytes: Int, drained: Bool) {
        guard grantsInput else { return }
        let grant: Int = state.withLock { s in
            s.consumedSinceGrant += bytes
            guard !s.ended, s.consumedSinceGrant >= input.limit / 4 || drained else { return 0 }
            defer { s.consumedSinceGrant = 0 }
            return s.consumedSinceGrant
        }
        if grant > 0 { send(["grant": .integer(Int64(grant))]) }
    }

    /// A line outside the event window (a question, a grant).
    private func send(_ fields: [String: JSONValue]) {
        var object = fields
        object["id"] = id
        // Under the lock, so nothing follows the end of the stream (the final reply).
        state.withLock { s in
            guard !s.ended else { return }
            switch sink {
            case .socket(_, let write):
                guard var line = try? JSONCoding.encode(JSONValue.object(object)) else { return }
                line += Data("\n".utf8)
                write(line)
            case .local(let deliver):
                deliver(StreamEvent(fields: object, data: nil), 0)
            }
        }
    }

    // MARK: - Server side (the kernel's)

    /// Before the handler starts: a client that may send input (`grantsInput`) is told its
    /// first grant, ahead of anything the handler sends.
    package func begin() {
        if grantsInput { send(["grant": .integer(Int64(input.limit))]) }
    }

    /// The task running the handler: `cancel()` cancels it (at once when the stream was
    /// cancelled or failed before the task was handed over).
    package func start<Success>(cancelling task: Task<Success, Never>) {
        let cancelled: Bool = state.withLock { s in
            s.cancelTask = { task.cancel() }
            return s.ended
        }
        if cancelled { task.cancel() }
    }

    /// A line from the client addressed to this stream, with the bytes attached to it.
    package func receive(_ object: [String: JSONValue], attached: Data? = nil) {
        if case .object(let answer)? = object["answer"], case .integer(let askID)? = answer["askID"] {
            let waiting = state.withLock { s in s.asks.removeValue(forKey: askID) }
            waiting?(.object(answer))
        }
        if case .integer(let bytes)? = object["credit"], bytes > 0 { credit(Int(clamping: bytes)) }
        let bytes: Data? = if case .string(let text)? = object["input"] { Data(base64Encoded: text) } else { attached }
        if let bytes {
            // The socket's reader never waits here (a cancel could not be read): the client
            // sends only what it was granted, so there is room, or it broke the protocol.
            if !input.put(bytes, waitForRoom: false) && !input.isFinished {
                fail(TermindError(.streamInputOverrun,
                                  "The client sent more input than the server granted (\(input.limit) bytes held); the operation was stopped."))
            }
        }
        if object["inputEnd"] == .bool(true) { input.finish() }
        if let control = object["control"] { controlFeed.yield(control) }
        if object["cancel"] == .bool(true) {
            if case .string(let name)? = object["signal"], ["INT", "TERM", "HUP", "QUIT"].contains(name) {
                state.withLock { s in if s.signal == nil { s.signal = name } }
            }
            cancel()
        }
    }

    /// What the client hears of the handler's outcome: the session's own failure (a client
    /// or handler that broke the protocol) first, a cancellation as `stream.cancelled`.
    package func outcome(_ result: Result<Data, any Error>) -> Result<Data, TermindError> {
        if let failure { return .failure(failure) }
        switch result {
        case .success(let body): return .success(body)
        case .failure(let error as TermindError): return .failure(error)
        case .failure(is CancellationError): return .failure(TermindError(.streamCancelled, "The operation was cancelled."))
        case .failure(let error): return .failure(TermindError.from(error))
        }
    }

    /// Ends the stream with `error` (reported instead of the handler's outcome).
    private func fail(_ error: TermindError) {
        state.withLock { s in if s.failureValue == nil { s.failureValue = error } }
        cancel()
    }

    /// The client cancelled: nobody will answer; the handler's task is cancelled.
    package func cancel() {
        let (waiting, emitters, cancelTask): ([@Sendable (JSONValue?) -> Void], [CheckedContinuation<Bool, Never>], (@Sendable () -> Void)?) = state.withLock { s in
            s.ended = true
            defer { s.asks.removeAll(); s.creditWaiters.removeAll() }
            return (Array(s.asks.values), s.creditWaiters.map(\.continuation), s.cancelTask)
        }
        input.finish()
        controlFeed.finish()
        for reply in waiting { reply(nil) }
        // Emitters waiting for room give up (a C plugin's thread among them).
        for emitter in emitters { emitter.resume(returning: false) }
        cancelTask?()
    }

    /// The handler has returned: nothing more is sent, the handed-over descriptors close, and
    /// a question still waiting (asked by work the handler left behind) gets no answer.
    package func finish() {
        let (close, waiting): (Bool, [@Sendable (JSONValue?) -> Void]) = state.withLock { s in
            s.ended = true
            defer { s.descriptorsClosed = true; s.asks.removeAll() }
            return (!s.descriptorsClosed, Array(s.asks.values))
        }
        for reply in waiting { reply(nil) }
        input.finish()
        controlFeed.finish()
        if close { descriptors?.closeAll() }
    }
}


/// Where a session's lines go.
package enum StreamSink: Sendable {
    /// A client on the control socket: encoded lines, in one piece each (a data event with
    /// its attached bytes), for the connection's writer.
    case socket(binary: Bool, write: @Sendable (Data) -> Void)
    /// In-process: each event as it is, with the size `credit(_:)` is to be given back
    /// once it was handled (0 for a question).
    case local(@Sendable (StreamEvent, Int) -> Void)
}

/// An event as a client receives it: its fields ("id", "event", and the event's own), and
/// for a data event (`stdout`, `stderr`, …) its bytes, however they travelled.
public struct StreamEvent: Sendable {
    public var fields: [String: JSONValue]
    public var data: Data?

    public init(fields: [String: JSONValue], data: Data? = nil) {
        self.fields = fields
        self.data = data
    }

    /// The event's kind ("stdout", "ask", "progress", …).
    public var kind: String? { fields["event"]?.stringValue }

    public subscript(_ field: String) -> JSONValue? { fields[field] }
}

/// A stream's input: chunks in order, at most `limit` bytes held. An in-process sender
/// waits for room (backpressure all the way to the reader of standard input); the socket's
/// reader never waits, because its client sends only what the session granted.
public final class StreamInput: AsyncSequence, Sendable {
    public typealias Element = Data
    private let held = ConditionLock(Held())
    /// Bytes held at most.
    public let limit: Int

    /// The chunks not yet read (from `head` on), their size, whether the input ended, the
    /// reader waiting for the next chunk, and who is told of each chunk read.
    private struct Held {
        var chunks: [Data] = []
        var head = 0
        var bytes = 0
        var finished = false
        var waiting: CheckedContinuation<Data?, Never>?
        var onConsumed: Consumed?
        typealias Consumed = @Sendable (Int, Bool) -> Void
    }

    init(limit: Int) { self.limit = limit }

    /// Told after each chunk the reader takes: its size, and whether nothing is left held.
    /// Set by the StreamSession that makes the input, before anyone else holds it.
    func onConsumed(_ consumed: @escaping @Sendable (Int, Bool) -> Void) {
        held.withLock { $0.onConsumed = consumed }
    }

    /// Adds a chunk (one larger than `limit` is accepted alone, when nothing is held); false
    /// when the input has ended or, not waiting, there was no room.
    @discardableResult
    package func put(_ data: Data, waitForRoom: Bool) -> Bool {
        let limit = self.limit
        let fits = { (h: Held) in h.bytes == 0 || h.bytes + data.count <= limit }
        let (accepted, reader, consumed) = held.withLock(whenever: { !waitForRoom || $0.finished || fits($0) }) { h in
            guard !h.finished, fits(h) else { return (false, nil, nil) as (Bool, CheckedContinuation<Data?, Never>?, Held.Consumed?) }
            if let reader = h.waiting {
                h.waiting = nil
                return (true, reader, h.onConsumed)
            }
            h.chunks.append(data)
            h.bytes += data.count
            return (true, nil, nil)
        }
        if let reader {
            reader.resume(returning: data)
            consumed?(data.count, true)
        }
        return accepted
    }

    /// Whether the input has ended (the client ended it, or the stream did).
    package var isFinished: Bool { held.withLock { $0.finished } }

    /// No more input: the reader sees the end once it has read what is held.
    package func finish() {
        let reader = held.withLock { h in
            h.finished = true
            defer { h.waiting = nil }
            return h.waiting
        }
        held.broadcast()
        reader?.resume(returning: nil)
    }

    func next() async -> Data? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Data?, Never>) in
            enum Taken { case chunk(Data, empty: Bool, Held.Consumed?), end, waiting }
            let taken: Taken = held.withLock { h in
                if h.head < h.chunks.count {
                    let chunk = h.chunks[h.head]
                    h.chunks[h.head] = Data()
                    h.head += 1
                    if h.head == h.chunks.count { h.chunks.removeAll(keepingCapacity: true); h.head = 0 }
                    h.bytes -= chunk.count
                    return .chunk(chunk, empty: h.bytes == 0, h.onConsumed)
                }
                if h.finished { return .end }
                h.waiting = continuation
                return .waiting
            }
            switch taken {
            case .chunk(let chunk, let empty, let consumed):
                held.broadcast()
                continuation.resume(returning: chunk)
                consumed?(chunk.count, empty)
            case .end:
                continuation.resume(returning: nil)
            case .waiting:
                break
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
    /// What it does, the worst it may do with any request (see `Effect`).
    static var effect: Effect { get }
    /// What one request does, where less than `effect` (see `Contract.effect(of:)`).
    static func effect(of request: Request) -> Effect
    /// The hosts one request reaches (see `Contract.hosts(in:)`).
    static func hosts(in request: Request) -> [String]
    /// Whether the stream reads `input` messages (a client sends its standard input).
    static var acceptsInput: Bool { get }
    /// Whether the stream takes the client's own standard streams (`StreamDescriptors`)
    /// instead of input lines and data events, when the client can hand them over.
    static var acceptsDescriptors: Bool { get }
    /// The event kinds it emits, each with the schema of its fields (`StreamEvents`); an
    /// undeclared kind fails the stream instead of reaching the client.
    static var events: [String: JSONSchema] { get }
    /// The questions it may ask: topic → kind (`choice`, `confirm`, `prompts`); another
    /// topic or kind fails the stream.
    static var questions: [String: String] { get }
}

extension StreamContract {
    public static var id: ContractID { ContractID(name: name, version: version) }
    public static func effect(of request: Request) -> Effect { effect }
    public static func hosts(in request: Request) -> [String] { [] }
    public static var acceptsInput: Bool { false }
    public static var acceptsDescriptors: Bool { false }
    public static var events: [String: JSONSchema] { [:] }
    public static var questions: [String: String] { [:] }
}

/// The schemas of the event kinds the generic client renders (docs/contracts.md, Streams),
/// for a stream's `events`.
public enum StreamEvents {
    /// `stdout`, `stderr`: bytes (attached or base64 `data`), no other field.
    public static let data = fields([])
    /// `key`: what the rate and ETA are measured over when `item` changes as the work goes
    /// (a batch naming its current file); the item itself by default.
    public static let progress = fields([("item", .string(), false), ("done", .number, true), ("total", .number, false), ("unit", .enumeration(["bytes", "items"]), false),
                                         ("key", .string(), false)])
    public static let record = fields([("record", .dictionary(.any), true)])
    /// A table (`rows`), optionally followed by titled tables (`sections`: `title`, `rows`);
    /// `columns` names the fields its tables show first, in order; `json` is what `--json`
    /// prints instead of the view; `result: true` marks the human form of the stream's
    /// result (shown instead of it; left out with `--json`).
    public static let view = fields([("title", .string(), false), ("rows", .array(.dictionary(.any)), true), ("refresh", .number, false),
                                     ("sections", .array(.dictionary(.any)), false), ("columns", .array(.string()), false), ("json", .any, false),
                                     ("result", .boolean, false)])
    public static let notice = fields([("text", .string(), true)])
    /// Output on both streams, as a command's.
    public static let output: [String: JSONSchema] = ["stdout": data, "stderr": data]

    /// An object with these fields (closed: another field is an error).
    public static func fields(_ fields: [(name: String, schema: JSONSchema, required: Bool)]) -> JSONSchema {
        .object(fields.map { JSONSchema.Property(name: $0.name, schema: $0.schema, required: $0.required) })
    }
}

/// A stream as the kernel routes it.
public struct StreamEndpoint: Sendable {
    public let id: ContractID
    public let summary: String
    public let owner: String
    /// What it does; nil when its owner did not say (see `ContractEndpoint.effect`).
    public let effect: Effect?
    /// What one request body does and which hosts it reaches, for the policy (see
    /// `ContractEndpoint.facts`).
    public let facts: (@Sendable (Data) -> RequestFacts?)?
    public let acceptsInput: Bool
    /// See `StreamContract.acceptsDescriptors`.
    public let acceptsDescriptors: Bool
    public var requestSchema: JSONSchema { request.schema }
    public var resultSchema: JSONSchema { result.schema }
    private let request: DeferredSchema
    private let result: DeferredSchema
    /// The event kinds it emits with their fields' schemas, and its questions (topic → kind).
    public let events: [String: JSONSchema]
    public let questions: [String: String]
    public let handler: @Sendable (Data, StreamSession) async throws -> Data

    public init(id: ContractID, summary: String, owner: String, effect: Effect?, acceptsInput: Bool, requestSchema: JSONSchema, resultSchema: JSONSchema,
                events: [String: JSONSchema], questions: [String: String], acceptsDescriptors: Bool = false,
                handler: @escaping @Sendable (Data, StreamSession) async throws -> Data) {
        self.init(id: id, summary: summary, owner: owner, effect: effect, acceptsInput: acceptsInput, request: DeferredSchema(requestSchema),
                  result: DeferredSchema(resultSchema), events: events, questions: questions, acceptsDescriptors: acceptsDescriptors, handler: handler)
    }

    /// With schemas derived when first asked for.
    public init(id: ContractID, summary: String, owner: String, effect: Effect?, acceptsInput: Bool, request: DeferredSchema, result: DeferredSchema,
                events: [String: JSONSchema], questions: [String: String], acceptsDescriptors: Bool = false,
                facts: (@Sendable (Data) -> RequestFacts?)? = nil,
                handler: @escaping @Sendable (Data, StreamSession) async throws -> Data) {
        self.effect = effect
        self.facts = facts
        self.acceptsDescriptors = acceptsDescriptors
        self.events = events
        self.questions = questions
        self.id = id
        self.summary = summary
        self.owner = owner
        self.acceptsInput = acceptsInput
        self.request = request
        self.result = result
        self.handler = handler
    }

    /// Wraps a typed handler: the body is checked against the request schema (each problem
    /// named by field) and decoded; the result is encoded.
    public static func typed<S: StreamContract>(_ stream: S.Type, owner: String,
                                                handler: @escaping @Sendable (S.Request, StreamSession) async throws -> S.Result) -> StreamEndpoint {
        let requestSchema = DeferredSchema.of(S.Request.self)
        return StreamEndpoint(id: S.id, summary: S.summary, owner: owner, effect: S.effect, acceptsInput: S.acceptsInput, request: requestSchema,
                              result: DeferredSchema.of(S.Result.self), events: S.events, questions: S.questions,
                              acceptsDescriptors: S.acceptsDescriptors,
                              facts: RequestFacts.reader(S.Request.self, effect: S.effect(of:), hosts: S.hosts(in:))) { body, session in
            let request: S.Request = try ContractCoding.decodeRequest(body, schema: requestSchema.schema, contract: S.id)
            return try JSONCoding.encode(try await handler(request, session))
        }
    }
}
