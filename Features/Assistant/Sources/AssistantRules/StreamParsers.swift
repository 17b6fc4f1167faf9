import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A tool call being assembled from a stream's pieces.
struct PendingCall: Sendable {
    var id: String
    var name: String
    var arguments = ""
    /// Arguments given whole as an object (Ollama, Gemini).
    var object: JSONValue?
    var signature: String?
    var done = false

    func call() throws(ParseProblem) -> ToolCall {
        let arguments: JSONValue
        if let object {
            guard case .object = object else { throw ParseProblem("the arguments of the call to \(name) are not a JSON object") }
            arguments = object
        } else {
            arguments = try JSONRead.arguments(self.arguments, name)
        }
        return ToolCall(id: id, name: name, arguments: arguments, signature: signature)
    }
}

/// Shared by the dialects: the answer so far and how it ended.
struct StreamState: Sendable {
    var text = ""
    var calls: [PendingCall] = []
    var complete = false
    var rawFinish: String?
    var usage: TokenUsage?
    var error: ProviderError?
    var problem: ParseProblem?
    var echo: JSONValue?

    mutating func fail(_ problem: ParseProblem) -> ParseProblem {
        self.problem = problem
        complete = false
        return problem
    }

    func outcome(finish: (String?) -> FinishReason?) -> TurnOutcome {
        var calls: [ToolCall] = []
        var problem = self.problem
        if problem == nil {
            for pending in self.calls {
                do { calls.append(try pending.call()) } catch { problem = error; break }
            }
        }
        let complete = complete && problem == nil && error == nil
        let error = self.error ?? problem.map { ProviderError(type: "malformed_event", message: $0.description) }
        guard complete else {
            return TurnOutcome(complete: false, text: text, calls: calls, finish: nil, usage: usage, error: error, echo: echo)
        }
        return TurnOutcome(complete: true, text: text, calls: calls, finish: calls.isEmpty ? finish(rawFinish) : .toolCalls, usage: usage, error: nil, echo: echo)
    }
}

// MARK: - OpenAI Responses

/// `POST /v1/responses` with `stream: true`: typed events (the `type` in each data line;
/// the `event:` line is ignored, as OpenAI's SDK does), ended only by `response.completed`,
/// `response.incomplete` or `response.failed` (or an `error` event). No `[DONE]` is
/// needed; one is ignored.
public struct ResponsesParser: StreamParser {
    private var state = StreamState()
    /// Function-call items by item id, in the order they were added.
    private var byItem: [String: Int] = [:]
    private var finished = false

    public init() {}

    public mutating func consume(_ event: SSEEvent) throws(ParseProblem) -> [StreamDelta] {
        guard !finished, event.data != "[DONE]" else { return [] }
        let value: JSONValue
        do { value = try JSONRead.event(event.data, "an event of the Responses stream") } catch { throw state.fail(error) }
        switch value["type"]?.stringValue {
        case "response.output_text.delta":
            guard let delta = value["delta"]?.stringValue else { return [] }
            state.text += delta
            return [.text(delta)]
        case "response.output_item.added":
            guard let item = value["item"], item["type"]?.stringValue == "function_call" else { return [] }
            let name = item["name"]?.stringValue ?? ""
            byItem[item["id"]?.stringValue ?? "#\(state.calls.count)"] = state.calls.count
            state.calls.append(PendingCall(id: item["call_id"]?.stringValue ?? item["id"]?.stringValue ?? "call-\(state.calls.count + 1)", name: name,
                                           arguments: item["arguments"]?.stringValue ?? ""))
            return [.toolCall(name: name)]
        case "response.function_call_arguments.delta":
            if let index = index(of: value), let delta = value["delta"]?.stringValue { state.calls[index].arguments += delta }
        case "response.function_call_arguments.done":
            if let index = index(of: value), let arguments = value["arguments"]?.stringValue {
                state.calls[index].arguments = arguments
                state.calls[index].done = true
            }
        case "response.output_item.done":
            guard let item = value["item"], item["type"]?.stringValue == "function_call", let id = item["id"]?.stringValue, let index = byItem[id] else { return [] }
            if let arguments = item["arguments"]?.stringValue { state.calls[index].arguments = arguments }
            if let name = item["name"]?.stringValue, !name.isEmpty { state.calls[index].name = name }
            state.calls[index].done = true
        case "response.completed", "response.incomplete":
            finished = true
            let response = value["response"]
            state.complete = true
            state.rawFinish = value["type"]?.stringValue == "response.completed" ? "completed" : response?["incomplete_details"]?["reason"]?.stringValue ?? "incomplete"
            if let usage = response?["usage"], let input = JSONRead.int(usage["input_tokens"]), let output = JSONRead.int(usage["output_tokens"]) {
                state.usage = TokenUsage(input: input, output: output)
            }
            // A truncated answer keeps only the calls that were finished.
            if state.rawFinish != "completed" { state.calls.removeAll { !$0.done } }
            if state.text.isEmpty, let output = response?["output"] { state.text = Self.text(of: output) }
        case "response.failed":
            finished = true
            let error = value["response"]?["error"]
            state.error = ProviderError(type: error?["code"]?.stringValue ?? error?["type"]?.stringValue ?? "failed",
                                        message: error?["message"]?.stringValue ?? "The response failed.")
        case "error":
            finished = true
            // Flat in OpenAI's reference, nested on the wire: both.
            let error = value["error"] ?? value
            state.error = ProviderError(type: error["type"]?.stringValue ?? error["code"]?.stringValue ?? "error",
                                        message: error["message"]?.stringValue ?? "The provider reported an error.")
        default:
            break
        }
        return []
    }

    private func index(of value: JSONValue) -> Int? {
        value["item_id"]?.stringValue.flatMap { byItem[$0] }
    }

    /// The text of a completed response's message items (for a server that sent no deltas).
    private static func text(of output: JSONValue) -> String {
        JSONRead.items(output).filter { $0["type"]?.stringValue == "message" }
            .flatMap { JSONRead.items($0["content"]) }
            .compactMap { $0["type"]?.stringValue == "output_text" ? $0["text"]?.stringValue : nil }.joined()
    }

    public func outcome() -> TurnOutcome {
        state.outcome { raw in
            switch raw {
            case "max_output_tokens": .length
            case "content_filter": .filtered
            default: .stop
            }
        }
    }
}

// MARK: - Chat Completions

/// `POST {base}/chat/completions` with `stream: true`: chunks, ended by `data: [DONE]`.
/// Tool-call pieces are joined by `index`; where a server sends none (Ollama in late 2024)
/// an entry with an id or a name starts a call and one without continues the last.
/// `finish_reason: "stop"` with tool calls present still means tool calls; arguments may
/// be a string or an object.
public struct ChatParser: StreamParser {
    private var state = StreamState()
    private var byIndex: [Int: Int] = [:]
    private var finished = false

    public init() {}

    public mutating func consume(_ event: SSEEvent) throws(ParseProblem) -> [StreamDelta] {
        guard !finished else { return [] }
        if event.data.trimmedWhitespace == "[DONE]" {
            finished = true
            if state.error == nil { state.complete = true }
            return []
        }
        let value: JSONValue
        do { value = try JSONRead.event(event.data, "a chunk of the chat completion stream") } catch { throw state.fail(error) }
        if let error = value["error"], error != .null {
            finished = true
            state.error = ProviderError(type: error["type"]?.stringValue ?? error["code"]?.stringValue ?? "error",
                                        message: error["message"]?.stringValue ?? "The provider reported an error.")
            return []
        }
        if let usage = value["usage"], let input = JSONRead.int(usage["prompt_tokens"]), let output = JSONRead.int(usage["completion_tokens"]) {
            state.usage = TokenUsage(input: input, output: output)
        }
        var deltas: [StreamDelta] = []
        guard let choice = JSONRead.items(value["choices"]).first else { return [] }
        let delta = choice["delta"] ?? choice["message"]
        if let text = delta?["content"]?.stringValue, !text.isEmpty {
            state.text += text
            deltas.append(.text(text))
        }
        for entry in JSONRead.items(delta?["tool_calls"]) {
            let function = entry["function"]
            let name = function?["name"]?.stringValue ?? ""
            let slot: Int
            if let index = JSONRead.int(entry["index"]) {
                if let known = byIndex[index] { slot = known } else {
                    slot = state.calls.count
                    byIndex[index] = slot
                    state.calls.append(PendingCall(id: "", name: ""))
                }
            } else if entry["id"]?.stringValue != nil || !name.isEmpty || state.calls.isEmpty {
                slot = state.calls.count
                state.calls.append(PendingCall(id: "", name: ""))
            } else {
                slot = state.calls.count - 1
            }
            if let id = entry["id"]?.stringValue, !id.isEmpty { state.calls[slot].id = id }
            if !name.isEmpty && state.calls[slot].name.isEmpty {
                state.calls[slot].name = name
                deltas.append(.toolCall(name: name))
            }
            switch function?["arguments"] {
            case .string(let piece)?: state.calls[slot].arguments += piece
            case .object(let object)?: state.calls[slot].object = .object(object)
            default: break
            }
        }
        if let reason = choice["finish_reason"]?.stringValue { state.rawFinish = reason }
        return deltas
    }

    public func outcome() -> TurnOutcome {
        var state = state
        for index in state.calls.indices where state.calls[index].id.isEmpty { state.calls[index].id = "call-\(index + 1)" }
        return state.outcome { raw in
            switch raw {
            case "length": .length
            case "content_filter": .filtered
            default: .stop
            }
        }
    }
}

// MARK: - Anthropic Messages

/// `POST /v1/messages` with `stream: true`: `message_start`, content blocks (text,
/// `tool_use` with `input_json_delta` pieces, thinking with its signature), `message_delta`,
/// `message_stop` (the only successful end); `ping` is ignored and an `error` event ends it.
public struct AnthropicParser: StreamParser {
    private var state = StreamState()
    private var blocks: [Int: Block] = [:]
    private var inputTokens: Int?
    private var thinking: [JSONValue] = []
    private var finished = false

    private enum Block: Sendable {
        case text
        case tool(Int)
        case thinking(text: String, signature: String)
        case other
    }

    public init() {}

    public mutating func consume(_ event: SSEEvent) throws(ParseProblem) -> [StreamDelta] {
        guard !finished else { return [] }
        let value: JSONValue
        do { value = try JSONRead.event(event.data, "an event of the Messages stream") } catch { throw state.fail(error) }
        switch event.event ?? value["type"]?.stringValue {
        case "message_start":
            let usage = value["message"]?["usage"]
            inputTokens = (JSONRead.int(usage?["input_tokens"]) ?? 0) + (JSONRead.int(usage?["cache_read_input_tokens"]) ?? 0)
                + (JSONRead.int(usage?["cache_creation_input_tokens"]) ?? 0)
        case "content_block_start":
            guard let index = JSONRead.int(value["index"]), let block = value["content_block"] else { return [] }
            switch block["type"]?.stringValue {
            case "text":
                blocks[index] = .text
                if let text = block["text"]?.stringValue, !text.isEmpty {
                    state.text += text
                    return [.text(text)]
                }
            case "tool_use":
                let name = block["name"]?.stringValue ?? ""
                blocks[index] = .tool(state.calls.count)
                state.calls.append(PendingCall(id: block["id"]?.stringValue ?? "toolu-\(state.calls.count + 1)", name: name))
                return [.toolCall(name: name)]
            case "thinking":
                blocks[index] = .thinking(text: block["thinking"]?.stringValue ?? "", signature: block["signature"]?.stringValue ?? "")
            case "redacted_thinking":
                thinking.append(block)
                blocks[index] = .other
            default:
                blocks[index] = .other
            }
        case "content_block_delta":
            guard let index = JSONRead.int(value["index"]), let delta = value["delta"], let block = blocks[index] else { return [] }
            switch (block, delta["type"]?.stringValue) {
            case (.text, "text_delta"):
                guard let text = delta["text"]?.stringValue else { return [] }
                state.text += text
                return [.text(text)]
            case (.tool(let call), "input_json_delta"):
                state.calls[call].arguments += delta["partial_json"]?.stringValue ?? ""
            case (.thinking(let text, let signature), "thinking_delta"):
                blocks[index] = .thinking(text: text + (delta["thinking"]?.stringValue ?? ""), signature: signature)
            case (.thinking(let text, _), "signature_delta"):
                blocks[index] = .thinking(text: text, signature: delta["signature"]?.stringValue ?? "")
            default:
                break
            }
        case "content_block_stop":
            guard let index = JSONRead.int(value["index"]) else { return [] }
            if case .thinking(let text, let signature)? = blocks[index] {
                thinking.append(.object(["type": .string("thinking"), "thinking": .string(text), "signature": .string(signature)]))
            }
        case "message_delta":
            if let reason = value["delta"]?["stop_reason"]?.stringValue { state.rawFinish = reason }
            if let output = JSONRead.int(value["usage"]?["output_tokens"]) { state.usage = TokenUsage(input: inputTokens ?? 0, output: output) }
        case "message_stop":
            finished = true
            state.complete = true
            if !thinking.isEmpty { state.echo = .object(["thinking": .array(thinking)]) }
        case "error":
            finished = true
            let error = value["error"]
            state.error = ProviderError(type: error?["type"]?.stringValue ?? "error", message: error?["message"]?.stringValue ?? "The provider reported an error.")
        default:
            break  // ping, and event types added later
        }
        return []
    }

    public func outcome() -> TurnOutcome {
        state.outcome { raw in
            switch raw {
            case "max_tokens": .length
            case "refusal": .filtered
            default: .stop
            }
        }
    }
}

// MARK: - Gemini

/// `streamGenerateContent?alt=sse`: each data line a whole response. Function calls come
/// whole (arguments an object); a part's `thoughtSignature` must go back with that part.
/// The chunk carrying `finishReason` ends the answer; an error object (even in an HTTP
/// 200) ends it as an error.
public struct GeminiParser: StreamParser {
    private var state = StreamState()
    private var textSignature: String?

    public init() {}

    public mutating func consume(_ event: SSEEvent) throws(ParseProblem) -> [StreamDelta] {
        guard state.error == nil else { return [] }
        let value: JSONValue
        do { value = try JSONRead.event(event.data, "a chunk of the Gemini stream") } catch { throw state.fail(error) }
        if let error = value["error"] {
            state.error = ProviderError(type: error["status"]?.stringValue ?? JSONRead.int(error["code"]).map(String.init) ?? "error",
                                        message: error["message"]?.stringValue ?? "The provider reported an error.")
            state.complete = false
            return []
        }
        if let usage = value["usageMetadata"], let input = JSONRead.int(usage["promptTokenCount"]) {
            state.usage = TokenUsage(input: input, output: JSONRead.int(usage["candidatesTokenCount"]) ?? 0)
        }
        guard let candidate = JSONRead.items(value["candidates"]).first else { return [] }
        var deltas: [StreamDelta] = []
        for part in JSONRead.items(candidate["content"]?["parts"]) {
            let signature = part["thoughtSignature"]?.stringValue
            if let call = part["functionCall"] {
                let name = call["name"]?.stringValue ?? ""
                state.calls.append(PendingCall(id: call["id"]?.stringValue ?? "gemini-call-\(state.calls.count + 1)", name: name,
                                               object: call["args"] ?? .object([:]), signature: signature))
                deltas.append(.toolCall(name: name))
            } else if let text = part["text"]?.stringValue {
                if part["thought"] == .bool(true) { continue }
                if let signature { textSignature = signature }
                guard !text.isEmpty else { continue }
                state.text += text
                deltas.append(.text(text))
            } else if let signature {
                textSignature = signature
            }
        }
        if let reason = candidate["finishReason"]?.stringValue {
            state.rawFinish = reason
            if reason == "MALFORMED_FUNCTION_CALL" {
                state.error = ProviderError(type: reason, message: "The model produced a malformed function call.")
            } else {
                state.complete = true
            }
        }
        if let textSignature { state.echo = .object(["textSignature": .string(textSignature)]) }
        return deltas
    }

    public func outcome() -> TurnOutcome {
        state.outcome { raw in
            switch raw {
            case "MAX_TOKENS": .length
            case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY": .filtered
            default: .stop
            }
        }
    }
}
