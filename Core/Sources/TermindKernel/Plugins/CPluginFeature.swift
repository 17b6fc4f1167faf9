import CTermindPluginABI
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The documented bounds of C plugin calls (docs/plugins.md).
public enum PluginLimits {
    /// Replies and errors from a plugin are capped; a larger one is an error, not a crash.
    public static let maximumReplyBytes = 4 << 20
    /// Calls of one plugin that run at once, each on a thread of the plugin's own.
    public static let callThreads = 4
    /// Calls of one plugin that wait for a thread; beyond them a call gets `plugin.busy` at once.
    public static let queuedCalls = 64
}

/// Adapts a C ABI plugin to `Feature`: its contracts become endpoints whose handler calls
/// the plugin's `handle`, and its manifest functions become `<id>.fn.<name>@1` contracts
/// called through libffi. Every call runs on the plugin's own `BlockingExecutor`
/// (`callThreads` at once, `queuedCalls` waiting, then `plugin.busy`), so a plugin that
/// blocks delays only its own calls — never the kernel's contracts or other features.
///
/// `@unchecked Sendable`: every stored property is a `let`; `descriptor`, a pointer Swift cannot
/// check, is only read. That the plugin's C code takes concurrent calls (up to `callThreads`) is
/// the plugin's contract (docs/plugins.md), not state of this type.
final class CPluginFeature: Feature, @unchecked Sendable {
    private let manifest: FeatureManifest
    var pluginID: String { manifest.id }
    private let descriptor: UnsafePointer<termind_plugin_descriptor>
    private let functions: [ForeignFunction]
    private let executor: BlockingExecutor
    static let maximumReplyBytes = PluginLimits.maximumReplyBytes
    static let callThreads = PluginLimits.callThreads
    static let queuedCalls = PluginLimits.queuedCalls

    /// The manifest's schemas, read once: each contract's request and reply, each stream's result.
    private let contractSchemas: [String: (request: JSONSchema, response: JSONSchema)]
    private let responseSchemas: [String: JSONSchema]
    /// The functions by their contracts (`<id>.fn.<name>@1`), as a call names them.
    private let functionsByContract: [String: (contract: ContractID, function: ForeignFunction)]

    init(manifest: FeatureManifest, descriptor: UnsafePointer<termind_plugin_descriptor>, functions: [ForeignFunction]) {
        self.manifest = manifest
        contractSchemas = Dictionary(manifest.contracts.map { ($0, manifest.schemas(of: $0)) }, uniquingKeysWith: { a, _ in a })
        responseSchemas = Self.responseSchemas(manifest)
        self.descriptor = descriptor
        self.functions = functions
        functionsByContract = Dictionary(functions.map { function in
            let contract = ContractID(name: "\(manifest.id).fn.\(function.name)", version: 1)
            return (contract.description, (contract, function))
        }, uniquingKeysWith: { a, _ in a })
        executor = BlockingExecutor(name: "termind.plugin.\(manifest.id)", threadLimit: Self.callThreads, queueLimit: Self.queuedCalls)
    }

    private func onExecutor<T: Sendable>(_ contract: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let id = manifest.id
        return try await executor.run(busy: TermindError(
            .pluginBusy,
            "plugin '\(id)' is busy: \(Self.callThreads) calls are running and \(Self.queuedCalls) are waiting; \(contract) was not started. Try again shortly."
        ), body)
    }

    func register(_ registrar: FeatureRegistrar) throws {
        let id = manifest.id
        let functions = Dictionary(self.functions.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let responses = responseSchemas
        Self.registerEndpoints(manifest, functions: self.functions.map(\.name), into: registrar, call: { [self] text, request, origin in
            let (reply, parsed) = try await self.handle(contract: text, body: request, origin: origin)
            let replyProblems = (responses[text] ?? .any).problems(in: parsed)
            guard replyProblems.isEmpty else {
                throw TermindError(.pluginBadReply, "The reply of plugin '\(id)' to \(text) does not match the response schema in its manifest: \(replyProblems.prefix(5).joined(separator: "; ")).")
            }
            return reply
        }, serve: { [self] text, request, session in
            let (reply, parsed) = try await self.serve(stream: text, body: request, session: session)
            let replyProblems = (responses[text] ?? .any).problems(in: parsed)
            guard replyProblems.isEmpty else {
                throw TermindError(.pluginBadReply, "The result of plugin '\(id)' for stream \(text) does not match the response schema in its manifest: \(replyProblems.prefix(5).joined(separator: "; ")).")
            }
            return reply
        }, function: { [self] contract, name, body in
            guard let function = functions[name] else { throw TermindError.unknownContract(contract.description) }
            let args = try Self.functionArguments(body, contract)
            let result = try await self.onExecutor(contract.description) { try function.call(args) }
            return try Self.functionReply(result)
        })
    }

    /// A function's reply (`ForeignFunctionCall.Response`), written directly: the same text
    /// as the encoder's, at a fraction of its cost on every call.
    static func functionReply(_ result: JSONValue) throws -> Data {
        try JSONCoding.encode(JSONValue.object(["result": result]))
    }

    /// The endpoints a C plugin's manifest declares — its contracts, streams and functions
    /// (`<id>.fn.<name>@1`), with the schemas it gives them — each request checked against
    /// its schema before `call`, `serve` or `function` runs it: in this process, or in the
    /// plugin's own (`ProcessPluginFeature`), where the same checks run again on the reply.
    static func registerEndpoints(_ manifest: FeatureManifest, functions: [String], into registrar: FeatureRegistrar,
                                  call: @escaping @Sendable (_ contract: String, _ request: Data, CallOrigin) async throws -> Data,
                                  serve: @escaping @Sendable (_ stream: String, _ request: Data, StreamSession) async throws -> Data,
                                  function: @escaping @Sendable (_ contract: ContractID, _ name: String, _ body: Data) async throws -> Data) {
        let id = manifest.id
        for text in manifest.contracts {
            guard let contract = ContractID(parsing: text) else { continue }
            let summary = manifest.commands.first { $0.contract == text }?.summary ?? "Handled by C plugin '\(id)'."
            // The header promises `handle` a JSON object: enforce it, or the declared schema.
            let schemas = manifest.schemas(of: text)
            registrar.handle(ContractEndpoint(id: contract, summary: summary, owner: id, effect: manifest.effect(of: text), requestSchema: schemas.request,
                                              responseSchema: schemas.response) { body, origin in
                try await call(text, try checked(body, schemas.request, text), origin)
            })
        }
        for text in manifest.streams {
            guard let stream = ContractID(parsing: text) else { continue }
            let summary = manifest.commands.first { $0.stream == text }?.summary ?? "Stream served by C plugin '\(id)'."
            let schemas = manifest.schemas(of: text)
            let declared = manifest.schemas[text]
            let events = (declared?.events ?? [:]).compactMapValues { try? JSONSchema.read($0, at: "events").get() }
            registrar.stream(StreamEndpoint(id: stream, summary: summary, owner: id, effect: manifest.effect(of: text), acceptsInput: declared?.acceptsInput ?? false,
                                            requestSchema: schemas.request,
                                            resultSchema: schemas.response, events: events, questions: declared?.questions ?? [:]) { body, session in
                try await serve(text, try checked(body, schemas.request, text), session)
            })
        }
        let requestSchema = functionRequestSchema
        let responseSchema = functionResponseSchema
        for name in functions {
            let contract = ContractID(name: "\(id).fn.\(name)", version: 1)
            let declared = manifest.functions.first { $0.name == name }
            let summary = declared?.summary ?? "C function \(name)\(declared?.signature ?? "")"
            registrar.handle(ContractEndpoint(
                id: contract, summary: summary, owner: id, effect: manifest.effect(of: contract.description),
                requestSchema: requestSchema,
                responseSchema: responseSchema
            ) { body, _ in
                try await function(contract, name, body)
            })
        }
    }

    /// The request (`{}` when empty), checked against its schema.
    /// Derived once: every function takes `{"args": [...]}` and answers `{"result": ...}`.
    static let functionRequestSchema = SchemaDerivation.schema(for: ForeignFunctionCall.Request.self)
    static let functionResponseSchema = SchemaDerivation.schema(for: ForeignFunctionCall.Response.self)

    /// Each contract's and stream's response schema in `manifest`, read once.
    static func responseSchemas(_ manifest: FeatureManifest) -> [String: JSONSchema] {
        Dictionary((manifest.contracts + manifest.streams).map { ($0, manifest.schemas(of: $0).response) }, uniquingKeysWith: { a, _ in a })
    }

    /// A function's arguments (`{"args": [...]}`, none when left out), checked against the
    /// request schema as `ContractCoding.decodeRequest` would, from the parsed value: no
    /// decoder pass on every call.
    static func functionArguments(_ body: Data, _ contract: ContractID) throws -> [JSONValue] {
        let value = body.isEmpty ? JSONValue.object([:]) : try JSONCoding.parse(body, source: "The request body for \(contract)")
        let problems = functionRequestSchema.problems(in: value)
        guard problems.isEmpty else {
            throw TermindError.badRequest("Invalid request for \(contract): \(problems.prefix(5).joined(separator: "; "))\(problems.count > 5 ? "; …" : "").")
        }
        guard case .array(let args)? = value["args"] else { return [] }
        return args
    }

    static func checked(_ body: Data, _ schema: JSONSchema, _ text: String) throws -> Data {
        let request = body.isEmpty ? Data("{}".utf8) : body
        try ContractCoding.check(try JSONCoding.parse(request, source: "The request body for \(text)"), schema, contract: text)
        return request
    }

    func start(_ context: FeatureContext) async throws {
        guard let start = descriptor.pointee.start else { return }
        let id = manifest.id
        try await BlockingExecutor.detached(name: "termind.plugin.\(id).start") {
            var error: UnsafeMutablePointer<CChar>?
            let status = start(&error)
            let message = Self.take(error).message
            guard status == Int32(TERMIND_OK) else {
                throw TermindError(.featureStartFailed, "feature '\(id)' failed to start: \(message ?? "status \(status)").")
            }
        }
    }

    func stop() async {
        guard let stop = descriptor.pointee.stop else { return }
        _ = try? await BlockingExecutor.detached(name: "termind.plugin.\(manifest.id).stop") { stop() }
    }

    /// A contract or function call run on the calling thread, start to end, with the same
    /// checks as the endpoints (request schema, status mapping, reply bound and schema):
    /// what `termind-plugin-host` runs on its own call threads, with no task or executor hop.
    /// `chain` is the caller chain as `PluginWire.chain` writes it (empty: in process): read
    /// only by `call_chain`, so it is passed on as text, never parsed here.
    func blockingCall(_ text: String, body: Data, chain: Data) throws -> Data {
        let id = manifest.id
        if let (contract, function) = functionsByContract[text] {
            return try Self.functionReply(try function.call(try Self.functionArguments(body, contract)))
        }
        guard let schemas = contractSchemas[text], let handler = descriptor.pointee.handle else { throw TermindError.unknownContract(text) }
        let request = try Self.checked(body, schemas.request, text)
        let (reply, parsed) = try Self.serving(chain: chain.isEmpty ? "[]" : String(decoding: chain, as: UTF8.self)) {
            try invoke(text, body: request) { name, request, length, reply in handler(name, request, length, reply) }
        }
        let replyProblems = schemas.response.problems(in: parsed)
        guard replyProblems.isEmpty else {
            throw TermindError(.pluginBadReply, "The reply of plugin '\(id)' to \(text) does not match the response schema in its manifest: \(replyProblems.prefix(5).joined(separator: "; ")).")
        }
        return reply
    }

    /// Calls `handle` and maps its status (docs/plugins.md): OK → the reply, which must be
    /// UTF-8 JSON within the bound; BAD_REQUEST → `request.invalid`; UNKNOWN for a declared
    /// contract → `plugin.unhandled`; FAILED or any other status → `plugin.failed`.
    private func handle(contract: String, body: Data, origin: CallOrigin) async throws -> (Data, JSONValue) {
        let handler = descriptor.pointee.handle
        return try await onExecutor(contract) { [self] in
            guard let handler else { throw TermindError.unknownContract(contract) }
            return try Self.serving(origin) {
                try invoke(contract, body: body) { name, request, length, reply in handler(name, request, length, reply) }
            }
        }
    }

    /// Runs `body` (a call into the plugin, on its thread) with `origin` as the chain the
    /// host table's `call_chain` answers.
    static func serving<T>(_ origin: CallOrigin, _ body: () throws -> T) rethrows -> T {
        try serving(chain: PluginWire.chainText(origin), body)
    }

    static func serving<T>(chain text: String, _ body: () throws -> T) rethrows -> T {
        chains.value = ThreadLocalBox(text)
        defer { chains.value = nil }
        return try body()
    }
    /// Where `call_chain` finds the chain of the call the plugin's thread serves.
    static let chains = ThreadLocal<ThreadLocalBox<String>>()

    /// Runs `handle_stream` for `stream` on one of the plugin's threads; the plugin talks
    /// back through the host table's stream_* calls (CStreamContext).
    private func serve(stream: String, body: Data, session: StreamSession) async throws -> (Data, JSONValue) {
        // An older plugin's descriptor ends before the member: it serves no stream.
        let offset = MemoryLayout<termind_plugin_descriptor>.offset(of: \termind_plugin_descriptor.handle_stream)!
        let handler = Int(descriptor.pointee.size) >= offset + MemoryLayout<UnsafeRawPointer>.size ? descriptor.pointee.handle_stream : nil
        let id = manifest.id
        return try await onExecutor(stream) { [self] in
            guard let handler else {
                throw TermindError(.pluginUnhandled, "plugin '\(id)' declares stream \(stream) but its descriptor has no handle_stream.")
            }
            // The plugin gets a number, not a pointer: a handle kept past its stream's end
            // finds nothing (the stream_* calls say the stream is over), never freed memory.
            let handle = CStreamHandles.open(CStreamContext(session: session))
            defer { CStreamHandles.close(handle) }
            return try Self.serving(session.origin) {
                try invoke(stream, body: body) { name, request, length, reply in
                    handler(name, request, length, handle, reply)
                }
            }
        }
    }

    /// Calls the plugin with a NUL-terminated copy of the body and maps its status.
    private func invoke(_ contract: String, body: Data,
                        _ call: (UnsafePointer<CChar>, UnsafePointer<CChar>, Int, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32) throws -> (Data, JSONValue) {
        let id = manifest.id
        var reply: UnsafeMutablePointer<CChar>?
        let status = contract.withCString { c in
            body.withUnsafeBytes { raw -> Int32 in
                // Give the plugin a NUL-terminated copy, so C string functions are safe.
                let copy = UnsafeMutablePointer<CChar>.allocate(capacity: raw.count + 1)
                defer { copy.deallocate() }
                raw.copyBytes(to: UnsafeMutableRawBufferPointer(start: copy, count: raw.count))
                copy[raw.count] = 0
                return call(c, copy, raw.count, &reply)
            }
        }
        let text = Self.take(reply)
        let who = "plugin '\(id)'"
        switch Int(status) {
        case TERMIND_OK:
            switch text {
            case .none:
                throw TermindError(.pluginBadReply, "\(who) returned TERMIND_OK for \(contract) without a reply (set *reply to a JSON value).")
            case .tooLarge:
                throw TermindError(.pluginBadReply, "The reply of \(who) to \(contract) is larger than \(Self.maximumReplyBytes) bytes (the reply bound).")
            case .invalidUTF8(let offset):
                throw TermindError(.pluginBadReply, "The reply of \(who) to \(contract) is not valid UTF-8 (byte \(offset)).")
            case .text(let reply):
                let data = Data(reply.utf8)
                do {
                    return (data, try JSONCoding.parse(data, source: "The reply of \(who) to \(contract)"))
                } catch let error as TermindError {
                    throw TermindError(.pluginBadReply, error.message)
                }
            }
        case TERMIND_ERR_BAD_REQUEST:
            throw TermindError.badRequest("Invalid request for \(contract): \(text.message ?? "rejected by \(who)").")
        case TERMIND_ERR_UNKNOWN:
            throw TermindError(.pluginUnhandled, "\(who) answered TERMIND_ERR_UNKNOWN for \(contract), which its manifest declares: the plugin does not handle it\(text.message.map { " (\($0))" } ?? "").")
        case TERMIND_ERR_FAILED:
            throw TermindError(.pluginFailed, "\(who) failed on \(contract): \(text.message ?? "no message").")
        default:
            throw TermindError(.pluginFailed, "\(who) failed on \(contract) with status \(status), which is not a TERMIND_* code\(text.message.map { ": \($0)" } ?? "").")
        }
    }

    /// A string a plugin handed back (reply or error message).
    enum Returned {
        case none, tooLarge, invalidUTF8(Int), text(String)

        /// For error messages: the text, or what was wrong with it.
        var message: String? {
            switch self {
            case .none: nil
            case .tooLarge: "its message is larger than \(CPluginFeature.maximumReplyBytes) bytes"
            case .invalidUTF8(let offset): "its message is not valid UTF-8 (byte \(offset))"
            case .text(let text): text
            }
        }
    }

    /// Takes ownership of a string the plugin allocated with host->alloc: never read past
    /// the reply bound, never repaired.
    static func take(_ pointer: UnsafeMutablePointer<CChar>?) -> Returned {
        guard let pointer else { return .none }
        defer { free(pointer) }
        let length = strnlen(pointer, maximumReplyBytes + 1)
        guard length <= maximumReplyBytes else { return .tooLarge }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if let bad = UTF8Validation.firstInvalidOffset(in: bytes) { return .invalidUTF8(bad) }
        return .text(String(decoding: bytes, as: UTF8.self))
    }
}

/// The per-plugin host API table and the context behind it. Allocated once per plugin and
/// never freed (the plugin may keep the pointer for the life of the process).
///
/// `@unchecked Sendable`: `table`, a pointer Swift cannot check, is filled in init, before any
/// plugin has it, and only read afterwards; `logger` is a `let` of a Sendable type.
final class CPluginHost: @unchecked Sendable {
    let logger: Logger
    let table: UnsafeMutablePointer<termind_host_api>

    init(logger: Logger, hostVersion: String) {
        self.logger = logger
        table = .allocate(capacity: 1)
        table.initialize(to: termind_host_api())
        table.pointee.size = UInt32(MemoryLayout<termind_host_api>.size)
        table.pointee.abi_version = UInt32(TERMIND_PLUGIN_ABI_VERSION)
        table.pointee.host_version = UnsafePointer(strdup(hostVersion))
        table.pointee.alloc = { malloc($0) }
        table.pointee.log = { host, level, code in
            guard let host, let context = host.pointee.host_context, let code else { return }
            let plugin = Unmanaged<CPluginHost>.fromOpaque(context).takeUnretainedValue()
            let logLevel = LogLevel(rawValue: Int(level)) ?? .info
            plugin.logger.log(logLevel, LogCode(sanitizing: String(cString: code)))
        }
        table.pointee.free = { free($0) }
        table.pointee.json_string_field = { json, key in
            guard let json, let key else { return nil }
            let value = try? JSONCoding.parse(Data(String(cString: json).utf8), source: "plugin JSON")
            guard let text = value?[String(cString: key)]?.stringValue, !text.utf8.contains(0) else { return nil }
            return strdup(text)
        }
        table.pointee.json_quote = { text in
            let value = text.map { String(cString: $0) } ?? ""
            guard let data = try? JSONCoding.encode(value) else { return strdup("\"\"") }
            return strdup(String(decoding: data, as: UTF8.self))
        }
        table.pointee.stream_emit = { handle, kind, fields, data, length in
            guard let kind, let context = CStreamHandles.context(handle) else { return 2 }
            var object: [String: JSONValue] = [:]
            if let fields {
                guard case .object(let parsed)? = try? JSONCoding.parse(Data(String(cString: fields).utf8), source: "stream_emit fields") else { return 2 }
                object = parsed
            }
            let bytes = data.map { Data(bytes: $0, count: length) }
            return context.emit(String(cString: kind), object, data: bytes) ? 0 : 1
        }
        table.pointee.stream_read = { handle, buffer, capacity in
            guard let buffer, let context = CStreamHandles.context(handle) else { return -1 }
            return context.read(into: buffer, capacity: capacity)
        }
        table.pointee.stream_ask = { handle, question in
            guard let question, let context = CStreamHandles.context(handle),
                  let value = try? JSONCoding.parse(Data(String(cString: question).utf8), source: "stream_ask question") else { return nil }
            guard let answer = context.ask(value), let data = try? JSONCoding.encode(answer) else { return nil }
            return strdup(String(decoding: data, as: UTF8.self))
        }
        table.pointee.stream_cancelled = { handle in
            guard let context = CStreamHandles.context(handle) else { return 1 }
            return context.session.isCancelled ? 1 : 0
        }
        table.pointee.call_chain = {
            guard let chain = CPluginFeature.chains.value?.value else { return nil }
            return strdup(chain)
        }
        // The table outlives every call; keep the context alive with it.
        table.pointee.host_context = Unmanaged.passRetained(self).toOpaque()
    }
}

/// The streams C plugins are serving, by the handle each plugin was given: a number that
/// is never reused, so a handle kept after its stream ended (or one made up) names nothing
/// and the stream_* calls answer as for a stream that is over, instead of reading freed
/// memory and taking the server down.
enum CStreamHandles {
    private static let table = Mutex<(next: UInt, live: [UInt: CStreamContext])>((0, [:]))

    static func open(_ context: CStreamContext) -> UnsafeMutableRawPointer {
        let number = table.withLock { state -> UInt in
            state.next += 1
            state.live[state.next] = context
            return state.next
        }
        return UnsafeMutableRawPointer(bitPattern: number)!
    }

    static func close(_ handle: UnsafeMutableRawPointer) {
        _ = table.withLock { $0.live.removeValue(forKey: UInt(bitPattern: handle)) }
    }

    static func context(_ handle: UnsafeMutableRawPointer?) -> CStreamContext? {
        guard let handle else { return nil }
        return table.withLock { $0.live[UInt(bitPattern: handle)] }
    }
}

/// A running stream as a C plugin's thread sees it: each call blocks that thread (one of
/// the plugin's own, never the cooperative pool) until the session's async work is done.
final class CStreamContext: Sendable {
    let session: StreamSession
    /// Input read from the session but not yet copied out (a chunk larger than the buffer);
    /// held for the whole of a `read`, so that two threads' reads never interleave.
    private let pending = Mutex(Data())

    init(session: StreamSession) { self.session = session }

    private func wait<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox<T>()
        Task {
            box.set(await work())
            done.signal()
        }
        done.wait()
        return box.take()
    }

    /// Sends the event once the client has room; false when the stream is over.
    func emit(_ kind: String, _ fields: [String: JSONValue], data: Data?) -> Bool {
        guard !session.isCancelled, kind != "ask" else { return false }
        let session = self.session
        wait { await session.emit(kind, fields, data: data) }
        return !session.isCancelled
    }

    func ask(_ question: JSONValue) -> JSONValue? {
        let session = self.session
        let answer = wait { await session.ask(question) }
        return StreamQuestion.unanswered(answer) ? nil : answer
    }

    func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int64 {
        pending.withLock { pending in
            if pending.isEmpty {
                let input = session.input
                guard let chunk = wait({ () async -> Data? in
                    var iterator = input.makeAsyncIterator()
                    return await iterator.next()
                }) else { return session.isCancelled ? -1 : 0 }
                pending = chunk
            }
            let count = min(capacity, pending.count)
            pending.withUnsafeBytes { raw in buffer.copyMemory(from: raw.baseAddress!, byteCount: count) }
            pending = pending.count == count ? Data() : Data(pending.dropFirst(count))
            return Int64(count)
        }
    }
}

/// What an async body returned, handed to the thread that waited for it.
private final class ResultBox<T: Sendable>: Sendable {
    private let value = Mutex<T?>(nil)
    func set(_ value: T) { self.value.withLock { $0 = value } }
    func take() -> T { value.withLock { $0.take()! } }
}
