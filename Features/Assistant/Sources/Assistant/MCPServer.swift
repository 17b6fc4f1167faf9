import AssistantAPI
import AssistantRules
import Foundation
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
    func mcp(_ request: AssistantStreams.MCP.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.MCP.Result {
        let number = mcpSessions.wrappingAdd(1, ordering: .relaxed).newValue
        var conversation = "mcp-\(number)"
        var version: String?
        let record = try await ports.settings.read(AssistantSettings.Policy.self)
        let mode = record.mode
        // Inside serve, what needs a person waits for `termind mcp approvals`; a one-shot
        // termind asks its own terminal (an MCP client gives it none: refused).
        let sessionName = Mutex("mcp-\(number)")
        let tools = self.tools(ports, ask: { [approvals] question in
            guard ports.context.resident else { return await session.ask(question) }
            return await approvals.ask(question, session: sessionName.withLock { $0 }, seconds: Double(record.approvalTimeoutSeconds))
        })
        policy.setMode(mode, conversation: conversation)
        var reader = MCPLineReader(session.input)
        var calls = 0
        let send: @Sendable (Data) async -> Void = { data in await session.emit("stdout", data: data) }
        // Tool calls run at once (a client may send several and keep pinging meanwhile); each
        // answer goes out whole when it is ready. A cancelled call (notifications/cancelled)
        // is stopped and gets no answer, as the specification says.
        let running = MCPCalls()
        defer { running.withLock { $0.tasks.values.forEach { $0.cancel() } } }
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
                if method == "notifications/cancelled", let id = params["requestId"] {
                    let key = String(describing: id)
                    running.withLock { state -> Task<Void, Never>? in
                        state.live.remove(key)
                        return state.tasks.removeValue(forKey: key)
                    }?.cancel()
                }
                continue
            case .response:
                continue
            case .request(let id, let method, let params):
                switch method {
                case "initialize":
                    let chosen = MCPProtocol.negotiate(params["protocolVersion"]?.stringValue)
                    version = chosen
                    if let name = params["clientInfo"]?["name"]?.stringValue {
                        let safe = String(name.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "-" }.prefix(24))
                        let named = "mcp-\(safe.isEmpty ? "client" : safe)-\(number)"
                        policy.setMode(mode, conversation: named)
                        conversation = named
                        sessionName.withLock { $0 = named }
                    }
                    await send(MCPProtocol.result(id, .object([
                        "protocolVersion": .string(chosen),
                        "capabilities": .object(["tools": .object(["listChanged": .bool(false)])]),
                        "serverInfo": .object(["name": .string("termind"), "version": .string("0.1.0")]),
                        "instructions": .string("termind's tools act on the operator's saved SSH hosts under the operator's policy: a refused call is final. Never ask for passwords or keys."),
                    ])))
                case "ping":
                    await send(MCPProtocol.result(id, .object([:])))
                case "tools/list":
                    guard version != nil else { await send(Self.notInitialized(id)); continue }
                    let listed = tools.specs.map { spec in
                        MCPProtocol.tool(name: spec.name, description: spec.description, inputSchema: spec.parameters, hints: Self.hints(spec.name),
                                         outputSchema: Self.outputSchemas[spec.name])
                    }
                    await send(MCPProtocol.result(id, .object(["tools": .array(listed)])))
                case "tools/call":
                    guard version != nil else { await send(Self.notInitialized(id)); continue }
                    guard let name = params["name"]?.stringValue, tools.specs.contains(where: { $0.name == name }) else {
                        await send(MCPProtocol.error(id, code: MCPProtocol.ErrorCode.invalidParams,
                                                     message: "Unknown tool \(params["name"]?.stringValue ?? "(none)"); tools/list lists them."))
                        continue
                    }
                    var arguments = params["arguments"] ?? .object([:])
                    if arguments == .null { arguments = .object([:]) }
                    calls += 1
                    let call = ToolCall(id: "mcp-\(calls)", name: name, arguments: arguments)
                    let key = String(describing: id)
                    running.withLock { _ = $0.live.insert(key) }
                    let task = Task { [conversation] in
                        // Arguments that do not fit the schema come back as a tool error (the
                        // model can correct them), not a protocol error.
                        let outcome = await tools.run(call, conversation: conversation, run: "mcp")
                        let answer = running.withLock { state -> Bool in
                            state.tasks.removeValue(forKey: key)
                            return state.live.remove(key) != nil
                        }
                        guard answer, !Task.isCancelled else { return }
                        let failed = outcome.state != .succeeded
                        await send(MCPProtocol.result(id, MCPProtocol.callResult(text: outcome.text, isError: failed, structured: failed ? nil : outcome.structured)))
                    }
                    running.withLock { state in if state.live.contains(key) { state.tasks[key] = task } }
                default:
                    // server/discover (the stateless 2026-07-28 era) is not spoken yet: a
                    // client in mode auto falls back to initialize on this answer.
                    await send(MCPProtocol.error(id, code: MCPProtocol.ErrorCode.methodNotFound, message: "Method not found: \(method)."))
                }
            }
        }
        // The input ended: the calls still going are answered first.
        for task in running.withLock({ Array($0.tasks.values) }) { await task.value }
        return .init(calls: calls)
    }

    private static func notInitialized(_ id: JSONValue) -> Data {
        MCPProtocol.error(id, code: MCPProtocol.ErrorCode.invalidRequest, message: "The session is not initialized: send initialize first.")
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
        case "fetch":
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: true, openWorld: true)
        case "scratch_write":
            MCPProtocol.Hints(readOnly: false, destructive: false, idempotent: true, openWorld: false)
        case "request_user_secret":
            MCPProtocol.Hints(readOnly: true, destructive: false, idempotent: false, openWorld: false)
        default:  // ssh_exec, sftp_write, sftp_copy
            MCPProtocol.Hints(readOnly: false, destructive: true, idempotent: false, openWorld: true)
        }
    }
}

/// The tool calls of one MCP session still going: those to answer (`live`) and their tasks.
final class MCPCalls: Sendable {
    private let state = Mutex<(live: Set<String>, tasks: [String: Task<Void, Never>])>(([], [:]))
    func withLock<T>(_ body: (inout (live: Set<String>, tasks: [String: Task<Void, Never>])) -> T) -> T { state.withLock { body(&$0) } }
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
