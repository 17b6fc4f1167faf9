import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// The wire protocols termind speaks to models.
public enum ModelProtocol: String, Codable, Sendable, Equatable, CaseIterable {
    /// OpenAI's Responses API (`POST …/v1/responses`, the full URL): the default.
    case responses
    /// OpenAI-compatible Chat Completions (`POST {base}/chat/completions`): OpenAI, Ollama,
    /// llama.cpp's server, vLLM, any base URL.
    case chat
    /// Anthropic Messages (`POST {base}/v1/messages`).
    case anthropic
    /// Gemini API `streamGenerateContent?alt=sse` with an API key.
    case gemini
    /// Gemini on Vertex AI with a service account (a signed JWT exchanged for a token).
    case vertex
}

/// A tool the model may call: its name, what it does, and its arguments' JSON Schema.
public struct ToolSpec: Codable, Sendable, Equatable {
    public var name: String
    public var description: String
    public var parameters: JSONValue

    public init(name: String, description: String, parameters: JSONValue) {
        self.name = name
        self.description = description
        self.parameters = parameters
    }
}

/// A tool call as the model made it. `id` is the provider's (Gemini sends none: termind
/// numbers it); `signature` is what must be echoed back with it (Gemini's thoughtSignature).
public struct ToolCall: Codable, Sendable, Equatable {
    public var id: String
    public var name: String
    public var arguments: JSONValue
    public var signature: String?

    public init(id: String, name: String, arguments: JSONValue, signature: String? = nil) {
        self.id = id
        self.name = name
        self.arguments = arguments
        self.signature = signature
    }
}

/// One entry of what the model is sent, provider-neutral.
public enum TranscriptItem: Codable, Sendable, Equatable {
    case user(String)
    /// What the model answered: text, and the tool calls it made (in its order). `echo` is
    /// opaque provider state that must go back with it (a Gemini text part's signature,
    /// Anthropic thinking blocks), never shown.
    case assistant(text: String, calls: [ToolCall], echo: JSONValue?)
    /// A tool's result for call `id` (`name` for providers that match by name).
    case toolResult(id: String, name: String, output: String, isError: Bool)
}

/// One request to a model.
public struct ModelRequest: Sendable, Equatable {
    public var model: String
    /// The system prompt (termind's; stable, so providers can cache it).
    public var system: String?
    public var items: [TranscriptItem]
    /// Empty for a model that cannot call tools: it is offered none.
    public var tools: [ToolSpec]
    public var maxOutputTokens: Int?

    public init(model: String, system: String? = nil, items: [TranscriptItem], tools: [ToolSpec] = [], maxOutputTokens: Int? = nil) {
        self.model = model
        self.system = system
        self.items = items
        self.tools = tools
        self.maxOutputTokens = maxOutputTokens
    }
}

public enum FinishReason: String, Codable, Sendable, Equatable {
    case stop
    case toolCalls = "tool_calls"
    /// The output limit ended the answer.
    case length
    /// A content filter ended it.
    case filtered
}

public struct TokenUsage: Codable, Sendable, Equatable {
    public var input: Int
    public var output: Int
    public init(input: Int, output: Int) {
        self.input = input
        self.output = output
    }
}

/// An error the provider reported inside a stream (an `error` event, `response.failed`,
/// an error object in a 200): its type as the provider names it and its message.
public struct ProviderError: Codable, Sendable, Equatable {
    public var type: String
    public var message: String
    public init(type: String, message: String) {
        self.type = type
        self.message = message
    }
}

/// What a streamed answer came to. Only a `complete` one may be shown as an answer or have
/// its tool calls dispatched; anything else is discarded.
public struct TurnOutcome: Sendable, Equatable {
    public var complete: Bool
    public var text: String
    public var calls: [ToolCall]
    public var finish: FinishReason?
    public var usage: TokenUsage?
    public var error: ProviderError?
    public var echo: JSONValue?

    public init(complete: Bool, text: String, calls: [ToolCall], finish: FinishReason?, usage: TokenUsage?, error: ProviderError?, echo: JSONValue? = nil) {
        self.complete = complete
        self.text = text
        self.calls = calls
        self.finish = finish
        self.usage = usage
        self.error = error
        self.echo = echo
    }
}

/// What a stream shows while it runs: text as it arrives (only ever provisional until the
/// outcome is complete), and a tool call's name once it starts.
public enum StreamDelta: Sendable, Equatable {
    case text(String)
    case toolCall(name: String)
}

/// A dialect's reader of one streamed answer: fed events, it reports deltas; at the end it
/// says what the answer came to.
public protocol StreamParser: Sendable {
    /// The deltas `event` carries. Throws for an event that breaks the dialect (malformed
    /// JSON): the stream is then over and incomplete.
    mutating func consume(_ event: SSEEvent) throws(ParseProblem) -> [StreamDelta]
    /// The outcome once the body ended (or was refused).
    func outcome() -> TurnOutcome
}

public struct ParseProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Reading the JSON of a stream's events (functions, not an extension: the Core type's
/// namespace stays Core's own).
public enum JSONRead {
    /// An integer however the server wrote it (1, 1.0).
    public static func int(_ value: JSONValue?) -> Int? {
        switch value {
        case .integer(let value)?: Int(exactly: value)
        case .unsignedInteger(let value)?: Int(exactly: value)
        case .double(let value)?: Int(exactly: value)
        default: nil
        }
    }

    public static func items(_ value: JSONValue?) -> [JSONValue] { if case .array(let items)? = value { items } else { [] } }

    public static func bool(_ value: JSONValue?) -> Bool? { if case .bool(let flag)? = value { flag } else { nil } }

    /// Parses a data line as JSON for a dialect (`what` names it in the problem).
    static func event(_ data: String, _ what: String) throws(ParseProblem) -> JSONValue {
        do { return try JSONCoding.parse(Data(data.utf8), source: what) } catch {
            throw ParseProblem("\(what) is not valid JSON")
        }
    }

    /// A tool call's arguments: a JSON text (most dialects) or already an object; must end
    /// up an object.
    static func arguments(_ text: String, _ name: String) throws(ParseProblem) -> JSONValue {
        let trimmed = text.trimmedWhitespaceAndNewlines
        guard !trimmed.isEmpty else { return .object([:]) }
        let value: JSONValue
        do { value = try JSONCoding.parse(Data(trimmed.utf8), source: "arguments") } catch {
            throw ParseProblem("the arguments of the call to \(name) are not valid JSON")
        }
        guard case .object = value else { throw ParseProblem("the arguments of the call to \(name) are not a JSON object") }
        return value
    }
}
