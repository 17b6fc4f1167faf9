import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Where a provider is and how it is reached: the URL as saved (materialized at save time:
/// the full Responses URL, the others' base), and for Vertex its project and location.
public struct ProviderAddress: Sendable, Equatable {
    public var modelProtocol: ModelProtocol
    public var url: String
    public var project: String?
    public var location: String?

    public init(_ modelProtocol: ModelProtocol, url: String, project: String? = nil, location: String? = nil) {
        self.modelProtocol = modelProtocol
        self.url = url
        self.project = project
        self.location = location
    }

    /// The URL a protocol uses when none is given (what `provider add` saves).
    public static func defaultURL(_ modelProtocol: ModelProtocol, location: String? = nil) -> String {
        switch modelProtocol {
        case .responses: "https://api.openai.com/v1/responses"
        case .chat: "https://api.openai.com/v1"
        case .anthropic: "https://api.anthropic.com"
        case .gemini: "https://generativelanguage.googleapis.com/v1beta"
        case .vertex:
            location.map { $0 == "global" ? "https://aiplatform.googleapis.com/v1" : "https://\($0)-aiplatform.googleapis.com/v1" }
                ?? "https://aiplatform.googleapis.com/v1"
        }
    }

    private var base: String { url.hasSuffix("/") ? String(url.dropLast()) : url }

    /// Where a streamed answer from `model` is asked for.
    public func streamURL(model: String) -> String {
        let model = model.hasPrefix("models/") ? String(model.dropFirst("models/".count)) : model
        let escaped = model.percentEncoded(keeping: URLText.isPathSegmentByte)
        switch modelProtocol {
        case .responses: return url
        case .chat: return base + "/chat/completions"
        case .anthropic: return base + "/v1/messages"
        case .gemini: return base + "/models/\(escaped):streamGenerateContent?alt=sse"
        case .vertex:
            return base + "/projects/\(project ?? "")/locations/\(location ?? "")/publishers/google/models/\(escaped):streamGenerateContent?alt=sse"
        }
    }

    /// Where the provider lists its models (nil: it has no such list; Vertex's are manual).
    public var modelsURL: String? {
        switch modelProtocol {
        case .responses: base.hasSuffix("/responses") ? String(base.dropLast("/responses".count)) + "/models" : nil
        case .chat: base + "/models"
        case .anthropic: base + "/v1/models"
        case .gemini: base + "/models"
        case .vertex: nil
        }
    }

    /// The headers that carry `secret` (nil: anonymous, no auth header at all). Vertex's
    /// secret here is the access token its service account was exchanged for.
    public func authHeaders(_ secret: String?) -> [(String, String)] {
        guard let secret, !secret.isEmpty else { return [] }
        switch modelProtocol {
        case .responses, .chat, .vertex: return [("Authorization", "Bearer " + secret)]
        case .anthropic: return [("x-api-key", secret)]
        case .gemini: return [("x-goog-api-key", secret)]
        }
    }

    /// Headers every request of the protocol carries (no secret).
    public var protocolHeaders: [(String, String)] {
        modelProtocol == .anthropic ? [("anthropic-version", "2023-06-01")] : []
    }

    /// The names of the models in a models listing (OpenAI's `data[].id`, Anthropic's
    /// `data[].id`, Gemini's `models[].name`, Ollama's `models[].name`).
    public static func modelNames(in listing: JSONValue) -> [String] {
        let openAI = JSONRead.items(listing["data"]).compactMap { $0["id"]?.stringValue }
        let named = JSONRead.items(listing["models"]).compactMap { $0["name"]?.stringValue ?? $0["model"]?.stringValue }
        return (openAI.isEmpty ? named : openAI).map { $0.hasPrefix("models/") ? String($0.dropFirst("models/".count)) : $0 }
    }
}

/// The JSON body of a streamed request in each dialect, from the provider-neutral request.
/// Deterministic (keys sorted when encoded), so a provider's prompt cache sees the same
/// prefix turn after turn.
public enum WireBody {
    public static func body(_ request: ModelRequest, _ modelProtocol: ModelProtocol) -> JSONValue {
        switch modelProtocol {
        case .responses: responses(request)
        case .chat: chat(request)
        case .anthropic: anthropic(request)
        case .gemini, .vertex: gemini(request)
        }
    }

    /// The JSON text of a call's arguments, as the OpenAI dialects carry them.
    static func jsonText(_ value: JSONValue) -> String {
        (try? JSONCoding.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func responses(_ request: ModelRequest) -> JSONValue {
        var input: [JSONValue] = []
        for item in request.items {
            switch item {
            case .user(let text):
                input.append(.object(["role": .string("user"), "content": .string(text)]))
            case .assistant(let text, let calls, _):
                if !text.isEmpty { input.append(.object(["role": .string("assistant"), "content": .string(text)])) }
                for call in calls {
                    input.append(.object(["type": .string("function_call"), "call_id": .string(call.id), "name": .string(call.name), "arguments": .string(jsonText(call.arguments))]))
                }
            case .toolResult(let id, _, let output, _):
                input.append(.object(["type": .string("function_call_output"), "call_id": .string(id), "output": .string(output)]))
            }
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "stream": .bool(true), "store": .bool(false), "input": .array(input)]
        if let system = request.system { body["instructions"] = .string(system) }
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map {
                .object(["type": .string("function"), "name": .string($0.name), "description": .string($0.description), "parameters": $0.parameters])
            })
        }
        if let limit = request.maxOutputTokens { body["max_output_tokens"] = .integer(Int64(limit)) }
        return .object(body)
    }

    static func chat(_ request: ModelRequest) -> JSONValue {
        var messages: [JSONValue] = []
        if let system = request.system { messages.append(.object(["role": .string("system"), "content": .string(system)])) }
        for item in request.items {
            switch item {
            case .user(let text):
                messages.append(.object(["role": .string("user"), "content": .string(text)]))
            case .assistant(let text, let calls, _):
                var message: [String: JSONValue] = ["role": .string("assistant"), "content": text.isEmpty && !calls.isEmpty ? .null : .string(text)]
                if !calls.isEmpty {
                    message["tool_calls"] = .array(calls.map {
                        .object(["id": .string($0.id), "type": .string("function"),
                                 "function": .object(["name": .string($0.name), "arguments": .string(jsonText($0.arguments))])])
                    })
                }
                messages.append(.object(message))
            case .toolResult(let id, _, let output, _):
                messages.append(.object(["role": .string("tool"), "tool_call_id": .string(id), "content": .string(output)]))
            }
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "stream": .bool(true), "messages": .array(messages),
                                         "stream_options": .object(["include_usage": .bool(true)])]
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map {
                .object(["type": .string("function"), "function": .object(["name": .string($0.name), "description": .string($0.description), "parameters": $0.parameters])])
            })
        }
        if let limit = request.maxOutputTokens { body["max_tokens"] = .integer(Int64(limit)) }
        return .object(body)
    }

    static func anthropic(_ request: ModelRequest) -> JSONValue {
        // Consecutive blocks of one role go in one message (tool results in the user turn
        // that follows the calls), as the API requires.
        var messages: [(role: String, content: [JSONValue])] = []
        func add(_ role: String, _ blocks: [JSONValue]) {
            guard !blocks.isEmpty else { return }
            if messages.last?.role == role { messages[messages.count - 1].content += blocks } else { messages.append((role, blocks)) }
        }
        for item in request.items {
            switch item {
            case .user(let text):
                add("user", [.object(["type": .string("text"), "text": .string(text)])])
            case .assistant(let text, let calls, let echo):
                var blocks = JSONRead.items(echo?["thinking"])
                if !text.isEmpty { blocks.append(.object(["type": .string("text"), "text": .string(text)])) }
                blocks += calls.map { .object(["type": .string("tool_use"), "id": .string($0.id), "name": .string($0.name), "input": $0.arguments]) }
                add("assistant", blocks)
            case .toolResult(let id, _, let output, let isError):
                var block: [String: JSONValue] = ["type": .string("tool_result"), "tool_use_id": .string(id), "content": .string(output)]
                if isError { block["is_error"] = .bool(true) }
                add("user", [.object(block)])
            }
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "stream": .bool(true), "max_tokens": .integer(Int64(request.maxOutputTokens ?? 4096)),
                                         "messages": .array(messages.map { .object(["role": .string($0.role), "content": .array($0.content)]) })]
        if let system = request.system { body["system"] = .string(system) }
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { .object(["name": .string($0.name), "description": .string($0.description), "input_schema": $0.parameters]) })
        }
        return .object(body)
    }

    static func gemini(_ request: ModelRequest) -> JSONValue {
        var contents: [(role: String, parts: [JSONValue])] = []
        func add(_ role: String, _ parts: [JSONValue]) {
            guard !parts.isEmpty else { return }
            if contents.last?.role == role { contents[contents.count - 1].parts += parts } else { contents.append((role, parts)) }
        }
        for item in request.items {
            switch item {
            case .user(let text):
                add("user", [.object(["text": .string(text)])])
            case .assistant(let text, let calls, let echo):
                var parts: [JSONValue] = []
                if !text.isEmpty {
                    var part: [String: JSONValue] = ["text": .string(text)]
                    if let signature = echo?["textSignature"] { part["thoughtSignature"] = signature }
                    parts.append(.object(part))
                }
                for call in calls {
                    var function: [String: JSONValue] = ["name": .string(call.name), "args": call.arguments]
                    if !call.id.hasPrefix("gemini-call-") { function["id"] = .string(call.id) }
                    var part: [String: JSONValue] = ["functionCall": .object(function)]
                    if let signature = call.signature { part["thoughtSignature"] = .string(signature) }
                    parts.append(.object(part))
                }
                add("model", parts)
            case .toolResult(let id, let name, let output, let isError):
                var function: [String: JSONValue] = ["name": .string(name), "response": .object([isError ? "error" : "output": .string(output)])]
                if !id.hasPrefix("gemini-call-") { function["id"] = .string(id) }
                add("user", [.object(["functionResponse": .object(function)])])
            }
        }
        var body: [String: JSONValue] = ["contents": .array(contents.map { .object(["role": .string($0.role), "parts": .array($0.parts)]) })]
        if let system = request.system { body["systemInstruction"] = .object(["parts": .array([.object(["text": .string(system)])])]) }
        if !request.tools.isEmpty {
            body["tools"] = .array([.object(["functionDeclarations": .array(request.tools.map {
                .object(["name": .string($0.name), "description": .string($0.description), "parametersJsonSchema": $0.parameters])
            })])])
        }
        if let limit = request.maxOutputTokens { body["generationConfig"] = .object(["maxOutputTokens": .integer(Int64(limit))]) }
        return .object(body)
    }
}
