import Foundation
import TermindCore

/// Answers in OpenAI's Chat Completions streaming format, as the tests of the Assistant's
/// tools script the model: a call of one tool, then a closing text.
extension ReplayServer.Reply {
    /// Server-sent events, one `data:` line each.
    public static func events(_ events: [String]) -> Data { Data(events.map { "data: \($0)\n\n" }.joined().utf8) }

    /// An answer that calls `name` with `arguments` (a JSON object) as call `id`.
    public static func toolCall(_ name: String, _ arguments: [String: JSONValue], id: String) throws -> Self {
        let text = String(decoding: try JSONCoding.encode(JSONValue.object(arguments)), as: UTF8.self)
        let call: JSONValue = .object(["choices": .array([.object(["index": .integer(0), "finish_reason": .string("tool_calls"), "delta": .object([
            "tool_calls": .array([.object(["index": .integer(0), "id": .string(id), "type": .string("function"),
                                           "function": .object(["name": .string(name), "arguments": .string(text)])])]),
        ])])])])
        return .stream(events([String(decoding: try JSONCoding.encode(call), as: UTF8.self), "[DONE]"]))
    }

    /// An answer of `text` that ends the run.
    public static func done(_ text: String = "Done.") -> Self {
        .stream(events([#"{"choices":[{"index":0,"delta":{"content":"\#(text)"},"finish_reason":"stop"}]}"#, "[DONE]"]))
    }
}

/// The saved hosts the Assistant's and MCP's tests act on: web-1 (tag prod) and lab, both on
/// `sshd`, reached with the key `sshd` accepts (the file `key`) as this user, the server's
/// ed25519 key trusted. `run` runs one termind command that must succeed.
public enum AssistantHosts {
    public static func save(on sshd: SSHServerFixture, key: String, _ run: ([String]) throws -> Void) throws {
        try run(["vault", "key", "import", key, "--label", "ci"])
        try run(["vault", "identity", "add", NSUserName(), "--key", "ci"])
        try run(["vault", "host", "add", "127.0.0.1", "--label", "web-1", "--port", "\(sshd.port)", "--identity", NSUserName(), "--tags", "prod"])
        try run(["vault", "host", "add", "127.0.0.1", "--label", "lab", "--port", "\(sshd.port)", "--identity", NSUserName()])
        guard let hostKey = sshd.hostKeys["ssh-ed25519"] else { throw TermindError(code: "test.fixture", message: "no ed25519 host key") }
        try run(["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(sshd.port)"])
    }
}
