import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// `termind mcp`: termind as an MCP server over stdio (docs/mcp.md), for a client that starts
/// it as a command (Claude Code, Codex, Cursor …). It lists the Assistant's host tools and
/// runs each call exactly as the Assistant's own (HostTools): through the kernel on an agent's
/// behalf, under the same policy — tiers, the classifier, the mode, the audit. The session is
/// a conversation of its own (`mcp-CLIENT-N`: its approvals, secret handles and scratch
/// folder, and what the audit names). What needs a person is asked of the termind client's
/// terminal; a client started by an MCP client has none, so it is refused, never approved.
/// Inside a running `termind serve` the stream runs there (the client forwards it), so the
/// pooled connections are shared.
extension AssistantFeature {
    /// A new MCP session: a conversation of its own for the policy, whose questions inside
    /// serve wait for `termind mcp approvals` and in a one-shot termind go to its terminal
    /// (`terminal`; an MCP client gives it none: refused).
    func mcpSession(_ ports: Ports, origin: String, terminal: (@Sendable (JSONValue) async -> JSONValue?)?) async throws -> MCPSession {
        let number = mcpSessions.wrappingAdd(1, ordering: .relaxed).newValue
        let record = try await ports.settings.read(AssistantSettings.Policy.self)
        let name = MCPSession.Name("mcp-\(origin)-\(number)")
        var tools = self.tools(ports, ask: { [approvals] question in
            if !ports.context.resident, let terminal { return await terminal(question) }
            return await approvals.ask(question, session: name.value, seconds: Double(record.approvalTimeoutSeconds))
        })
        // Inside a serve that listens on HTTP: the byte channels' links.
        if let endpoint = http.withLock({ $0 }), let channels = endpoint.channels, let url = endpoint.url {
            tools.channels = channels
            tools.linkBase = String(url.dropLast(MCPHTTPRules.path.count))
        }
        return MCPSession(number: number, origin: origin, tools: tools, policy: policy, mode: record.mode, name: name)
    }

    func mcp(_ request: AssistantStreams.MCP.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.MCP.Result {
        let mcp = try await mcpSession(ports, origin: "stdio", terminal: { question in await session.ask(question) })
        var reader = MCPLineReader(session.input)
        let send: @Sendable (Data) async -> Void = { data in await session.emit("stdout", data: data) }
        // Tool calls run at once (a client may send several and keep pinging meanwhile); each
        // answer goes out whole when it is ready. A cancelled call (notifications/cancelled)
        // is stopped and gets no answer, as the specification says.
        defer {
            mcp.cancelAll()
            // Its links end with it.
            http.withLock { $0 }?.channels?.revoke(owner: mcp.conversation)
        }
        while let line = await reader.next() {
            guard let data = line else {
                await send(MCPProtocol.error(.null, code: MCPProtocol.ErrorCode.invalidRequest, message: "A message is at most \(MCPProtocol.messageLimit) bytes; this one was dropped."))
                continue
            }
            if data.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { continue }
            switch MCPProtocol.parse(data) {
            case .invalid(let id, let code, let message):
                await send(MCPProtocol.error(id, code: code, message: message))
            case .notification(let method, let params):
                mcp.notify(method, params: params)
            case .response:
                continue
            case .request(let id, let method, let params):
                let era: MCPProtocol.Era
                switch mcp.route(method: method, params: params, headers: nil) {
                case .failure(let rejection):
                    await send(MCPProtocol.error(id, code: rejection.code, message: rejection.message, data: rejection.data))
                    continue
                case .success(let chosen):
                    era = chosen
                }
                if method == "tools/call" {
                    // At once, answered when done (or never, when cancelled).
                    mcp.call(id: id, method: method, params: params, era: era) { answer in
                        if let answer { await send(mcp.line(id, answer, era: era)) }
                    }
                } else {
                    await send(mcp.line(id, await mcp.answer(method: method, params: params, era: era), era: era))
                }
            }
        }
        // The input ended: the calls still going are answered first.
        await mcp.drain()
        return .init(calls: mcp.calls)
    }

    /// The shape of what a tool returns as data (`structuredContent`), for the tools that do.
    static let outputSchemas: [String: JSONValue] = {
        func object(_ properties: [String: JSONValue], required: [String]) -> JSONValue {
            .object(["type": .string("object"), "properties": .object(properties), "required": .array(required.map { .string($0) })])
        }
        let anyObjects: JSONValue = .object(["type": .string("array"), "items": .object(["type": .string("object")])])
        let host = object(["label": .object(["type": .string("string")]), "address": .object(["type": .string("string")]),
                           "port": .object(["type": .string("integer")]), "user": .object(["type": .array([.string("string"), .string("null")])]),
                           "tags": .object(["type": .string("array"), "items": .object(["type": .string("string")])])],
                          required: ["label", "address", "port", "tags"])
        return [
            "list_hosts": object(["hosts": .object(["type": .string("array"), "items": host])], required: ["hosts"]),
            "sftp_list": object(["listings": anyObjects], required: ["listings"]),
            "sftp_stat": object(["entries": anyObjects], required: ["entries"]),
            "get_metrics": object(["hosts": anyObjects, "notMonitored": .object(["type": .string("array"), "items": .object(["type": .string("string")])])],
                                  required: ["hosts", "notMonitored"]),
        ]
    }()

    /// MCP's hints for a tool, from what it does (termind's own rules decide regardless).
    static func hints(_ tool: String) -> MCPProtocol.Hints {
        switch tool {
        case _ where HostTools.readingTools.contains(tool):
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: true, openWorld: tool != "list_hosts" && tool != "scratch_read")
        case "fetch", "sftp_download_link":
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: true, openWorld: true)
        case "sftp_link_status":
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: true, openWorld: false)
        case "scratch_write":
            MCPProtocol.Hints(readOnly: false, destructive: false, idempotent: true, openWorld: false)
        case "request_user_secret":
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: false, openWorld: false)
        default:  // ssh_exec, sftp_write, sftp_copy
            MCPProtocol.Hints(readOnly: false, destructive: true, idempotent: false, openWorld: true)
        }
    }
}

/// One MCP session: a conversation of the policy (`mcp-CLIENT-N`: its approvals, secret
/// handles, scratch folder, and what the audit names), the era it speaks, and the tool calls
/// it has going. The transports (stdio, HTTP) hand it requests; it answers them the same way.
final class MCPSession: Sendable {
    let number: Int
    /// How the client reaches it (`stdio`, `http`), for the log and the docs.
    let origin: String
    let tools: HostTools
    /// The tools as `tools/list` gives them, and their names: made once (a call checks its
    /// name against them, and building the specs on every call was work on the hot path).
    private let listed: [JSONValue]
    private let names: Set<String>
    let policy: AssistantPolicy
    let mode: AssistantSettings.Policy.Mode
    private let name: Name
    /// The conversation's name, read by the questions it asks.
    final class Name: Sendable {
        private let state: Mutex<String>
        init(_ value: String) { state = Mutex(value) }
        var value: String { state.withLock { $0 } }
        func withLock<T>(_ body: (inout String) -> T) -> T { state.withLock { body(&$0) } }
    }
    /// `live`: the calls that still owe an answer, by JSON-RPC id, each with the serial of its
    /// run (a client may reuse an id once it has its answer, while the earlier run is still
    /// ending); `runs`: the runs not yet ended, by serial: a task of their own (`call`; nil
    /// until it is stored) or a way to stop the caller's task (`run`).
    private let state = Mutex<(era: MCPProtocol.Era?, calls: Int, live: [String: UInt64], runs: [UInt64: Run], serial: UInt64, lastUsed: Double)>((nil, 0, [:], [:], 0, 0))

    private enum Run {
        case task(Task<Void, Never>?)
        case caller(@Sendable () -> Void)

        func cancel() {
            switch self {
            case .task(let task): task?.cancel()
            case .caller(let stop): stop()
            }
        }
    }

    init(number: Int, origin: String, tools: HostTools, policy: AssistantPolicy, mode: AssistantSettings.Policy.Mode, name: Name) {
        self.number = number
        self.origin = origin
        self.tools = tools
        let specs = tools.specs
        listed = specs.map { spec in
            MCPProtocol.tool(name: spec.name, description: spec.description, inputSchema: spec.parameters, hints: AssistantFeature.hints(spec.name),
                             outputSchema: AssistantFeature.outputSchemas[spec.name])
        }
        names = Set(specs.map(\.name))
        self.policy = policy
        self.mode = mode
        self.name = name
        policy.setMode(mode, conversation: name.value)
        touch()
    }

    var conversation: String { name.value }
    var era: MCPProtocol.Era? { state.withLock { $0.era } }
    var calls: Int { state.withLock { $0.calls } }
    var idleSince: Double { state.withLock { $0.lastUsed } }
    func touch() { state.withLock { $0.lastUsed = Date().timeIntervalSince1970 } }

    static let serverInfo: JSONValue = .object(["name": .string("termind"), "version": .string("0.1.0")])
    static let instructions = "termind's tools act on the operator's saved SSH hosts under the operator's policy: a refused call is final. Never ask for passwords or keys."
    static let capabilities: JSONValue = .object(["tools": .object(["listChanged": .bool(false)])])

    /// The era of one request on this session: the first request decides the session's
    /// (one enveloped with `_meta` and not `initialize` opens the stateless era, anything
    /// else the handshake's); a later one from the other era is refused, as the reference
    /// server refuses it. `headers` (HTTP) are checked against the body.
    func route(method: String, params: JSONValue, headers: ((String) -> String?)?) -> Result<MCPProtocol.Era, MCPProtocol.Rejection> {
        let enveloped = MCPProtocol.hasModernEnvelope(method: method, params: params)
        let current = era
        if current?.isModern == true || (current == nil && enveloped) {
            if method == "initialize" {
                return .failure(MCPProtocol.unsupported(params["protocolVersion"]?.stringValue ?? "(none)"))
            }
            switch MCPProtocol.classifyModern(method: method, params: params, headers: headers) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let route):
                state.withLock { $0.era = .modern(route.version) }
                if let client = route.clientName { rename(client) }
                return .success(.modern(route.version))
            }
        }
        if enveloped {
            return .failure(MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.invalidRequest,
                                                  message: "This session began with initialize: its requests carry no 2026-07-28 _meta envelope."))
        }
        if method == "initialize" {
            let chosen = MCPProtocol.negotiate(params["protocolVersion"]?.stringValue)
            state.withLock { $0.era = .handshake(chosen) }
            if let client = params["clientInfo"]?["name"]?.stringValue { rename(client) }
            return .success(.handshake(chosen))
        }
        guard let current, method != "server/discover" else {
            if method == "ping" || method == "server/discover" { return .success(.handshake(MCPProtocol.versions[0])) }
            return .failure(MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.invalidRequest, message: "The session is not initialized: send initialize first."))
        }
        return .success(current)
    }

    /// Names the conversation after the client (`mcp-claude-code-3`), once.
    private func rename(_ client: String) {
        let safe = String(client.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "-" }.prefix(24))
        // The audit's conversation names how the client came (stdio, http) and who it says it is.
        let named = "mcp-\(origin)-\(safe.isEmpty ? "client" : safe)-\(number)"
        let changed = name.withLock { current -> Bool in
            guard current == "mcp-\(origin)-\(number)" else { return false }
            current = named
            return true
        }
        if changed { policy.setMode(mode, conversation: named) }
    }

    /// The answer to one request of `era`.
    func answer(method: String, params: JSONValue, era: MCPProtocol.Era) async -> Result<JSONValue, MCPProtocol.Rejection> {
        touch()
        switch method {
        case "initialize":
            guard case .handshake(let version) = era else { return .failure(MCPProtocol.unsupported(params["protocolVersion"]?.stringValue ?? "(none)")) }
            return .success(.object(["protocolVersion": .string(version), "capabilities": Self.capabilities, "serverInfo": Self.serverInfo,
                                     "instructions": .string(Self.instructions)]))
        case "server/discover":
            guard era.isModern else {
                // The handshake era has no discover: a client in the SDK's mode auto falls back.
                return .failure(MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.methodNotFound, message: "Method not found: server/discover (this session uses initialize)."))
            }
            return .success(.object(["supportedVersions": .array((MCPProtocol.modernVersions + MCPProtocol.versions).map { .string($0) }),
                                     "capabilities": Self.capabilities, "instructions": .string(Self.instructions),
                                     "ttlMs": .integer(60_000), "cacheScope": .string("private")]))
        case "ping":
            return .success(.object([:]))
        case "tools/list":
            var result: [String: JSONValue] = ["tools": .array(listed)]
            // The list is the same for every client and changes only with termind's version.
            if era.isModern { result["ttlMs"] = .integer(60_000); result["cacheScope"] = .string("private") }
            return .success(.object(result))
        case "tools/call":
            guard let name = params["name"]?.stringValue, names.contains(name) else {
                return .failure(MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.invalidParams,
                                                      message: "Unknown tool \(params["name"]?.stringValue ?? "(none)"); tools/list lists them."))
            }
            var arguments = params["arguments"] ?? .object([:])
            if arguments == .null { arguments = .object([:]) }
            let number = state.withLock { state -> Int in state.calls += 1; return state.calls }
            // Arguments that do not fit the schema come back as a tool error (the model can
            // correct them), not a protocol error.
            let outcome = await tools.run(ToolCall(id: "mcp-\(number)", name: name, arguments: arguments), conversation: conversation, run: "mcp")
            let failed = outcome.state != .succeeded
            return .success(MCPProtocol.callResult(text: outcome.text, isError: failed, structured: failed ? nil : outcome.structured))
        default:
            return .failure(MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.methodNotFound, message: "Method not found: \(method)."))
        }
    }

    /// An answer as its JSON-RPC line (a stateless-era result stamped as that era wants).
    func line(_ id: JSONValue, _ answer: Result<JSONValue, MCPProtocol.Rejection>, era: MCPProtocol.Era) -> Data {
        switch answer {
        case .success(let result):
            return MCPProtocol.result(id, era.isModern ? MCPProtocol.modernResult(result, serverInfo: Self.serverInfo) : result)
        case .failure(let rejection):
            return MCPProtocol.error(id, code: rejection.code, message: rejection.message, data: rejection.data)
        }
    }

    /// A notification: `notifications/cancelled` stops the call it names (which then gets no
    /// answer); the others need nothing.
    func notify(_ method: String, params: JSONValue) {
        guard method == "notifications/cancelled", let id = params["requestId"] else { return }
        let key = Self.key(id)
        state.withLock { state -> Run? in
            state.live.removeValue(forKey: key).flatMap { state.runs[$0] }
        }?.cancel()
    }

    /// Runs request `id` at once in a task of its own, where `notifications/cancelled` can
    /// stop it: `deliver` gets its answer, or nil when it was cancelled (no answer is owed then).
    func call(id: JSONValue, method: String, params: JSONValue, era: MCPProtocol.Era,
              deliver: @escaping @Sendable (Result<JSONValue, MCPProtocol.Rejection>?) async -> Void) {
        let (key, serial) = begin(id, .task(nil))
        // Made outside the lock (the task's first steps take it), stored unless it already
        // ended. It starts on this thread (`immediate`) and goes on as a task of its own from
        // its first suspension: a call answered from what is kept in memory is done without
        // waking another thread, and one that waits (a command on a host) lets the next
        // request in, as before.
        let task = Task.immediate { [self] in
            let answer = await answer(method: method, params: params, era: era)
            await deliver(settle(key, serial) && !Task.isCancelled ? answer : nil)
            self.state.withLock { _ = $0.runs.removeValue(forKey: serial) }
        }
        state.withLock { state in if state.runs[serial] != nil { state.runs[serial] = .task(task) } }
    }

    /// Runs request `id` in the caller's own task (an HTTP request's: no second task and no
    /// hand-over for each call), where `notifications/cancelled` calls `stop` (which cancels
    /// that task). Returns its answer, or nil when it was cancelled (no answer is owed then).
    func run(id: JSONValue, method: String, params: JSONValue, era: MCPProtocol.Era,
             stop: @escaping @Sendable () -> Void) async -> Result<JSONValue, MCPProtocol.Rejection>? {
        let (key, serial) = begin(id, .caller(stop))
        let answer = await answer(method: method, params: params, era: era)
        let owed = settle(key, serial)
        state.withLock { _ = $0.runs.removeValue(forKey: serial) }
        return owed && !Task.isCancelled ? answer : nil
    }

    /// Lists a run of request `id` as the one that owes its answer.
    private func begin(_ id: JSONValue, _ run: Run) -> (key: String, serial: UInt64) {
        let key = Self.key(id)
        return state.withLock { state in
            state.serial += 1
            state.live[key] = state.serial
            state.runs[state.serial] = run
            return (key, state.serial)
        }
    }

    /// Whether run `serial` still owes its answer (not cancelled), settled before the answer
    /// goes: once the client has it, it may send its next request under the same id.
    private func settle(_ key: String, _ serial: UInt64) -> Bool {
        state.withLock { state in
            guard state.live[key] == serial else { return false }
            state.live.removeValue(forKey: key)
            return true
        }
    }

    /// A request id as a key of the calls in flight (its JSON text: 7 and "7" differ).
    private static func key(_ id: JSONValue) -> String {
        JSONWriter.bytes(id).map { String(decoding: $0, as: UTF8.self) } ?? "\(id)"
    }

    /// Waits for the calls still going.
    func drain() async {
        let tasks = state.withLock { state in state.runs.values.compactMap { run -> Task<Void, Never>? in if case .task(let task) = run { task } else { nil } } }
        for task in tasks { await task.value }
    }

    func cancelAll() { state.withLock { Array($0.runs.values) }.forEach { $0.cancel() } }
}

/// MCP's stdio framing: one message a line. A line longer than `MCPProtocol.messageLimit` is
/// dropped up to its newline and reported as nil (the session answers with an error and goes on).
struct MCPLineReader {
    private var iterator: StreamInput.AsyncIterator
    private var buffer = Data()
    private var ended = false
    private var skipping = false

    init(_ input: StreamInput) { iterator = input.makeAsyncIterator() }

    /// The next line (nil inside: one too long); nil at the end of input.
    mutating func next() async -> Data?? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Data(buffer[buffer.startIndex..<newline])
                buffer.removeSubrange(buffer.startIndex...newline)
                if skipping {
                    skipping = false
                    return .some(nil)
                }
                return .some(line)
            }
            if buffer.count > MCPProtocol.messageLimit {
                buffer.removeAll()
                skipping = true
            }
            if ended {
                defer { buffer.removeAll() }
                if skipping { skipping = false; return .some(nil) }
                return buffer.isEmpty ? nil : .some(buffer)
            }
            if let chunk = await iterator.next() { buffer.append(chunk) } else { ended = true }
        }
    }
}

/// What MCP sessions inside `termind serve` ask a person (an approval, a secret), waiting for
/// `termind mcp approvals` to put it to someone at a terminal. Unanswered within the policy's
/// `approvalTimeoutSeconds` (or no one attached at all): refused, never approved.
final class MCPApprovals: Sendable {
    struct Pending: Sendable {
        let id: Int
        let session: String
        let question: JSONValue
        let answer: @Sendable (JSONValue?) -> Void
    }
    private struct State {
        var next = 1
        var pending: [Int: Pending] = [:]
        var listeners: [Int: AsyncStream<Pending>.Continuation] = [:]
        var nextListener = 1
    }
    private let state = Mutex(State())

    /// Asks `question` for MCP session `session`; nil when nobody answered in time.
    func ask(_ question: JSONValue, session: String, seconds: Double) async -> JSONValue? {
        await withCheckedContinuation { (continuation: CheckedContinuation<JSONValue?, Never>) in
            let answered = Mutex(false)
            let finish: @Sendable (JSONValue?) -> Void = { reply in
                let first = answered.withLock { done -> Bool in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume(returning: reply) }
            }
            let (id, listeners) = state.withLock { state -> (Int, [AsyncStream<Pending>.Continuation]) in
                let id = state.next
                state.next += 1
                state.pending[id] = Pending(id: id, session: session, question: question, answer: finish)
                return (id, Array(state.listeners.values))
            }
            let item = state.withLock { $0.pending[id] }!
            for listener in listeners { listener.yield(item) }
            Task { [self] in
                try? await Task.sleep(for: .seconds(seconds))
                if let gone = state.withLock({ $0.pending.removeValue(forKey: id) }) { gone.answer(nil) }
            }
        }
    }

    /// Answers pending question `id` (nil: refused); false when it is gone (answered, timed out).
    func answer(_ id: Int, _ reply: JSONValue?) -> Bool {
        guard let item = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return false }
        item.answer(reply)
        return true
    }

    /// The questions pending now, then each new one as it comes.
    func follow() -> (AsyncStream<Pending>, cancel: @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream<Pending>.makeStream()
        let key = state.withLock { state -> Int in
            let key = state.nextListener
            state.nextListener += 1
            state.listeners[key] = continuation
            for item in state.pending.values.sorted(by: { $0.id < $1.id }) { continuation.yield(item) }
            return key
        }
        return (stream, { [self] in _ = state.withLock { $0.listeners.removeValue(forKey: key) }; continuation.finish() })
    }
}

extension AssistantFeature {
    /// `termind mcp approvals`: puts what MCP sessions ask to the person at this terminal, one
    /// question at a time, until Ctrl-C (or `count` answered).
    func mcpApprovals(_ request: AssistantStreams.MCPApprovals.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.MCPApprovals.Result {
        guard ports.context.resident else {
            throw TermindError(.assistantInvalid, "MCP sessions ask their questions inside termind serve; this termind runs none. Start termind serve, and have the MCP client run termind mcp.")
        }
        let (questions, stop) = approvals.follow()
        defer { stop() }
        await session.emit("notice", ["text": .string("Waiting for what MCP sessions ask (Ctrl-C leaves).")])
        var answered = 0
        for await item in questions {
            await session.emit("notice", ["text": .string("MCP session \(item.session) asks:")])
            let reply = await session.ask(item.question)
            if StreamQuestion.unanswered(reply) { throw CancellationError() }
            _ = approvals.answer(item.id, reply)
            answered += 1
            if let count = request.count, answered >= count { break }
        }
        return .init(answered: answered)
    }
}
