import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// One thing a run shows: the record a script gets (`--json`), and what a person gets on
/// standard output and as a notice.
struct RunEvent: Sendable {
    var record: JSONValue?
    var stdout: String?
    var notice: String?

    /// Sends it to `session` in that client's way.
    func send(to session: StreamSession, json: Bool) async {
        if json {
            if let record { await session.emit("record", ["record": record]) }
            return
        }
        if let stdout { await session.emit("stdout", data: Data(stdout.utf8)) }
        if let notice { await session.emit("notice", ["text": .string(notice)]) }
    }
}

/// How a run shows itself: the answer's text as it arrives, a discarded attempt, tool calls
/// and their outcomes. A person gets the text on standard output and the rest as notices; a
/// script (`--json`) gets one record per event. Events go to one client, or to whoever is
/// attached to a run that outlives its client (LiveRun).
struct RunEmitter: Sendable {
    let deliver: @Sendable (RunEvent) async -> Void

    init(session: StreamSession, json: Bool) {
        deliver = { event in await event.send(to: session, json: json) }
    }

    init(deliver: @escaping @Sendable (RunEvent) async -> Void) {
        self.deliver = deliver
    }

    func text(_ text: String) async {
        await deliver(RunEvent(record: .object(["type": .string("text"), "text": .string(text)]), stdout: text))
    }

    /// What was shown of an attempt is void: it is sent again after `delay` seconds.
    func discard(_ reason: String, shown: Bool, retryIn delay: Double) async {
        await deliver(RunEvent(record: .object(["type": .string("discard"), "reason": .string(reason), "retryIn": .double(delay)]),
                               stdout: shown ? "\n" : nil,
                               notice: "\(shown ? "The answer above is discarded: " : "")\(reason); asking again in \(Self.seconds(delay))."))
    }

    func call(_ call: ToolCall) async {
        await deliver(RunEvent(record: .object(["type": .string("tool_call"), "id": .string(call.id), "name": .string(call.name), "arguments": call.arguments]),
                               notice: "→ \(call.name) \(Self.short(call.arguments))"))
    }

    func result(_ call: ToolCall, state: AssistantContracts.CallView.State, preview: String) async {
        await deliver(RunEvent(record: .object(["type": .string("tool_result"), "id": .string(call.id), "name": .string(call.name),
                                                "state": .string(state.rawValue), "preview": .string(preview)]),
                               notice: state == .succeeded ? nil : "  \(call.name) \(state.rawValue): \(preview.prefix(300))"))
    }

    func notice(_ text: String) async {
        await deliver(RunEvent(notice: text))
    }

    /// The end of an answer's text on a terminal: a newline when it had none.
    func endText(_ text: String) async {
        if !text.isEmpty && !text.hasSuffix("\n") { await deliver(RunEvent(stdout: "\n")) }
    }

    static func seconds(_ value: Double) -> String { value == value.rounded() ? "\(Int(value)) s" : String(printf: "%.1f s", value) }

    static func short(_ arguments: JSONValue) -> String {
        let text = (try? JSONCoding.encode(arguments)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        return text.count > 200 ? String(text.prefix(200)) + "…" : text
    }
}

/// A tool's outcome: its state and the text the model is sent.
struct ToolOutcome: Sendable {
    let state: AssistantContracts.CallView.State
    let text: String
    /// The result as data, for a client that takes it so (MCP's `structuredContent`, matching
    /// the tool's output schema); the model of termind's own runs gets `text`.
    var structured: JSONValue? = nil
}

/// The tools a run offers. Part of the runtime's shape so the host tools (issue 37) slot in:
/// each call is checked against its schema before anything runs, then dispatched through
/// the kernel on the conversation's behalf (the policy decides).
protocol ToolBox: Sendable {
    var specs: [ToolSpec] { get }
    func run(_ call: ToolCall, conversation: String, run: String) async -> ToolOutcome
    /// Whether `call` is proven to only read and to run without asking anybody, so it may run
    /// alongside others (false when in doubt).
    func readsOnly(_ call: ToolCall, conversation: String) async -> Bool
    /// Runs a batch of calls that all only read, at once; the outcomes in the calls' order.
    func runBatch(_ calls: [ToolCall], conversation: String, run: String) async -> [ToolOutcome]
}

extension ToolBox {
    func readsOnly(_ call: ToolCall, conversation: String) async -> Bool { false }

    /// Each call on its own, at most `ConversationRun.batchWidth` at once (OpenSSH lets a
    /// connection carry 10 sessions, and a host's other channels share it).
    func runBatch(_ calls: [ToolCall], conversation: String, run: String) async -> [ToolOutcome] {
        await eachAtOnce(calls, conversation: conversation, run: run)
    }

    /// Each call on its own, at most `ConversationRun.batchWidth` at once.
    func eachAtOnce(_ calls: [ToolCall], conversation: String, run: String) async -> [ToolOutcome] {
        await withTaskGroup(of: (Int, ToolOutcome).self) { group in
            var pending = calls.enumerated().makeIterator()
            func next() -> Bool {
                guard let (index, call) = pending.next() else { return false }
                group.addTask { (index, await self.run(call, conversation: conversation, run: run)) }
                return true
            }
            for _ in 0..<ConversationRun.batchWidth where !next() { break }
            var results = [ToolOutcome?](repeating: nil, count: calls.count)
            for await (index, result) in group {
                results[index] = result
                _ = next()
            }
            return results.map { $0 ?? ToolOutcome(state: .unknown, text: "The call's outcome is not known.") }
        }
    }
}

/// One run of a conversation: the turn loop. A turn streams the answer to the client; tool
/// calls are dispatched only once the answer is complete and valid, in the model's order,
/// each result stored before the next request; a dispatched call is never sent again.
/// Transient failures send the same request again (what was shown is discarded); the final
/// failure is an error entry, never assistant text.
actor ConversationRun {
    private let store: ConversationStore
    private let client: ModelClient
    private let model: ResolvedModel
    private let conversation: String
    private let tools: any ToolBox
    private let emitter: RunEmitter
    private let system: String
    private let compactor: Compactor?

    init(store: ConversationStore, client: ModelClient, model: ResolvedModel, conversation: String, tools: any ToolBox, emitter: RunEmitter, system: String,
         compactor: Compactor? = nil) {
        self.compactor = compactor
        self.store = store
        self.client = client
        self.model = model
        self.conversation = conversation
        self.tools = tools
        self.emitter = emitter
        self.system = system
    }

    private static func now() -> Double { Date().timeIntervalSince1970 }

    /// The most calls of a read-only batch that run at once.
    static let batchWidth = 6

    private func allRead(_ calls: [ToolCall]) async -> Bool {
        for call in calls where !(await tools.readsOnly(call, conversation: conversation)) { return false }
        return true
    }

    func run(prompt: String) async throws -> AssistantStreams.Run.Result {
        let run = try await store.startRun(conversation, now: Self.now())
        var usage = TokenUsage(input: 0, output: 0)
        var calls = 0
        var last = ""
        do {
            try await store.append(conversation, role: .user, text: prompt, run: run, now: Self.now())
            while true {
                try Task.checkCancellation()
                var items = try await store.transcript(conversation)
                if let compactor, compactor.needed(items, system: system) {
                    do {
                        if try await compactor.condense(conversation, store: store) {
                            items = try await store.transcript(conversation)
                            await emitter.notice("(the conversation so far was condensed to fit \(model.id); its messages are kept)")
                        }
                    } catch is CancellationError {
                        throw CancellationError()
                    } catch {
                        await emitter.notice("The conversation could not be condensed (\(TermindError.from(error).message)); it is sent whole.")
                    }
                }
                let request = ModelRequest(model: model.model, system: system, items: items, tools: model.tools ? tools.specs : [], maxOutputTokens: model.maxOutputTokens)
                let outcome = try await Answerer(client: client, model: model, emitter: emitter).answer(request)
                if let used = outcome.usage {
                    usage.input += used.input
                    usage.output += used.output
                }
                // The answer and its calls are stored (calls pending) before any runs.
                try await store.append(conversation, role: .assistant, text: outcome.text, calls: outcome.calls, echo: outcome.echo, run: run,
                                       usage: outcome.usage, now: Self.now())
                await emitter.endText(outcome.text)
                last = outcome.text
                if outcome.calls.isEmpty { break }
                // A batch whose every call only reads runs at once; the answers still go in the
                // model's order. Anything else runs one call at a time (questions one by one).
                if outcome.calls.count > 1, await allRead(outcome.calls) {
                    for call in outcome.calls {
                        calls += 1
                        await emitter.call(call)
                        try await store.callStarted(conversation, call.id, now: Self.now())
                    }
                    let results = await tools.runBatch(outcome.calls, conversation: conversation, run: run)
                    for (call, result) in zip(outcome.calls, results) {
                        let state: AssistantContracts.CallView.State = Task.isCancelled ? .unknown : result.state
                        let text = result.text
                        try await store.callFinished(conversation, call.id, state: state, result: text, run: run, now: Self.now())
                        await emitter.result(call, state: state, preview: ConversationStore.preview(text))
                    }
                    continue
                }
                for call in outcome.calls {
                    try Task.checkCancellation()
                    calls += 1
                    await emitter.call(call)
                    try await store.callStarted(conversation, call.id, now: Self.now())
                    let result = await tools.run(call, conversation: conversation, run: run)
                    // A call cancelled while it ran may have taken effect: unknown, never "not run".
                    let state: AssistantContracts.CallView.State = Task.isCancelled ? .unknown : result.state
                    try await store.callFinished(conversation, call.id, state: state, result: result.text, run: run, now: Self.now())
                    await emitter.result(call, state: state, preview: ConversationStore.preview(result.text))
                }
            }
            try await store.endRun(run, state: .completed, usage: usage, error: nil, now: Self.now())
            return .init(conversation: conversation, run: run, state: .completed, text: last, inputTokens: usage.input, outputTokens: usage.output, toolCalls: calls)
        } catch {
            let cancelled = error is CancellationError || Task.isCancelled || TermindError.from(error).code == ErrorCode.cancelled.rawValue
            let failure = TermindError.from(error)
            if !cancelled {
                _ = try? await store.append(conversation, role: .error, text: failure.message, run: run, now: Self.now())
            }
            try? await store.endRun(run, state: cancelled ? .cancelled : .failed, usage: usage, error: cancelled ? nil : failure, now: Self.now())
            if cancelled { throw CancellationError() }
            throw TermindError(code: failure.code, message: "\(failure.message) (conversation \(conversation); termind assistant show \(conversation))")
        }
    }
}

/// Gets one complete, valid answer to a request: the same request is sent again after a
/// transient failure (after 1, 2, 4, 8, 16 s or the server's Retry-After), and what was
/// shown of the failed attempt is declared void first.
actor Answerer {
    private let client: ModelClient
    private let model: ResolvedModel
    /// Where text goes as it arrives (nil: the answer is buffered, shown by nobody).
    private let emitter: RunEmitter?
    private let notices: StreamSession?
    private var shown = false

    init(client: ModelClient, model: ResolvedModel, emitter: RunEmitter?, notices: StreamSession? = nil) {
        self.client = client
        self.model = model
        self.emitter = emitter
        self.notices = notices
    }

    private func showed(_ delta: StreamDelta) async {
        guard case .text(let text) = delta, let emitter else { return }
        shown = true
        await emitter.text(text)
    }

    func answer(_ request: ModelRequest) async throws -> TurnOutcome {
        var attempt = 0
        while true {
            shown = false
            let reason: String
            var retryAfter: Double?
            do {
                let outcome = try await client.stream(request, with: model) { [self] delta in await showed(delta) }
                if outcome.complete { return outcome }
                if let error = outcome.error {
                    let said = Redaction.scrub(error.message, secrets: [])
                    guard error.type != "malformed_event" else {
                        throw TermindError(.assistantIncomplete, "\(model.provider)'s answer broke its protocol (\(said)); it was discarded.")
                    }
                    guard RetryRule.isTransient(streamError: error.type) else {
                        throw TermindError(.assistantProviderFailed, "\(model.provider) reported \(error.type): \(said)")
                    }
                    reason = "\(model.provider) reported \(error.type)"
                } else {
                    reason = "\(model.provider)'s answer ended before its end"
                }
            } catch let failure as ModelFailure {
                guard failure.transient else { throw failure.error }
                reason = failure.error.message
                retryAfter = failure.retryAfter
            }
            guard let delay = RetryRule.delay(after: attempt, retryAfter: retryAfter) else {
                throw TermindError(.assistantProviderFailed, "\(reason); gave up after \(attempt + 1) attempts.")
            }
            if let emitter {
                await emitter.discard(reason, shown: shown, retryIn: delay)
            } else {
                await notices?.emit("notice", ["text": .string("\(reason); asking again in \(RunEmitter.seconds(delay)).")])
            }
            attempt += 1
            try await Task.sleep(for: .seconds(delay))
        }
    }
}

/// Condenses a conversation that nears its model's context: what came before the latest
/// prompt is summarized by a buffered request whose answer counts only complete; the
/// summary then stands for those messages in what models are sent (they stay stored).
struct Compactor: Sendable {
    let client: ModelClient
    let model: ResolvedModel
    /// The chat model's context, in tokens.
    let limit: Int

    /// Roughly four bytes a token: condensing starts at three quarters of the context.
    func needed(_ items: [TranscriptItem], system: String) -> Bool {
        var bytes = system.utf8.count
        for item in items {
            switch item {
            case .user(let text): bytes += text.utf8.count
            case .assistant(let text, let calls, _):
                bytes += text.utf8.count + calls.reduce(0) { $0 + $1.name.utf8.count + ((try? JSONCoding.encode($1.arguments))?.count ?? 0) }
            case .toolResult(_, _, let output, _): bytes += output.utf8.count
            }
        }
        return bytes / 4 > limit * 3 / 4
    }

    /// Whether a summary was made and kept.
    func condense(_ conversation: String, store: ConversationStore) async throws -> Bool {
        guard let (upto, items) = try await store.compactable(conversation) else { return false }
        let request = ModelRequest(model: model.model, system: """
            Condense this conversation between an operator and termind's assistant so it can go on from the summary alone.             Keep the facts, host names, commands and their results that still matter, decisions made and what is left to do. Plain text.
            """, items: items + [.user("Condense the conversation above.")], maxOutputTokens: model.maxOutputTokens ?? 1024)
        let outcome = try await Answerer(client: client, model: model, emitter: nil).answer(request)
        let summary = outcome.text.trimmedWhitespaceAndNewlines
        guard !summary.isEmpty else { return false }
        try await store.compact(conversation, upto: upto, summary: summary, now: Date().timeIntervalSince1970)
        return true
    }
}
