import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// termind as an MCP client (docs/mcp.md, "Other MCP servers"), pure: what a server's tool is
/// called in termind, what its listing says, what rule a tool gets before the person sets one,
/// and what a server's answer to the era probe means.
public enum MCPClientRules {
    /// A tool of a configured server as termind offers it to its model.
    public struct Tool: Sendable, Equatable {
        /// `mcp__SERVER__TOOL`.
        public var name: String
        public var server: String
        /// The server's own name for it.
        public var remote: String
        public var description: String
        public var inputSchema: JSONValue
        /// The server's hints (nil: not said).
        public var readOnly: Bool?
        public var destructive: Bool?

        /// Whether the server says it only reads: read-only and not destructive, both said.
        public var saysReadOnly: Bool { readOnly == true && destructive != true }
    }

    /// `mcp__SERVER__TOOL`, or nil when the server's tool name cannot be one (a model's function
    /// names are 1 to 64 of `[A-Za-z0-9_-]`).
    public static func name(server: String, tool: String) -> String? {
        let serverPart = server.replacingUTF8(".", with: "-")
        let name = "mcp__\(serverPart)__\(tool)"
        guard !tool.isEmpty, name.count <= 64, tool.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) else { return nil }
        return name
    }

    public static func isName(_ name: String) -> Bool {
        guard name.hasPrefix("mcp__") else { return false }
        let rest = name.dropFirst(5)
        guard let split = rest.firstRange(of: "__") else { return false }
        return !rest[..<split.lowerBound].isEmpty && !rest[split.upperBound...].isEmpty && name.count <= 64
    }

    /// The tools of a `tools/list` result for `server`, and the names that could not be
    /// offered (said so in `termind assistant mcp tools`).
    public static func tools(server: String, listed: JSONValue) -> (tools: [Tool], skipped: [String]) {
        var tools: [Tool] = []
        var skipped: [String] = []
        for item in JSONRead.items(listed["tools"]) {
            guard let remote = item["name"]?.stringValue else { continue }
            guard let name = name(server: server, tool: remote), !tools.contains(where: { $0.name == name }) else { skipped.append(remote); continue }
            var schema = item["inputSchema"] ?? .object(["type": .string("object")])
            if case .object = schema {} else { schema = .object(["type": .string("object")]) }
            let annotations = item["annotations"]
            tools.append(Tool(name: name, server: server, remote: remote,
                              description: String((item["description"]?.stringValue ?? item["title"]?.stringValue ?? "").prefix(2048)),
                              inputSchema: schema, readOnly: JSONRead.bool(annotations?["readOnlyHint"]), destructive: JSONRead.bool(annotations?["destructiveHint"])))
        }
        return (tools, skipped)
    }

    /// A tool's rule: the person's when set (rediscovery never changes it); otherwise `approve`
    /// only for a tool its server says is read-only and not destructive, else `ask`. A hint
    /// never loosens anything else: a denied tool stays denied, and the host tiers, the mode
    /// and the audit apply as to termind's own tools.
    public static func rule(explicit: PolicyRules.ToolRule?, tool: Tool) -> PolicyRules.ToolRule {
        if let explicit { return explicit }
        return tool.saysReadOnly ? .approve : .ask
    }

    /// Whether calls of this tool run one at a time (all that may change something do).
    public static func serialized(_ tool: Tool) -> Bool { !tool.saysReadOnly }

    /// What the answer to `server/discover` says about the era: the stateless one when it
    /// lists a version termind speaks there, else the handshake's (any error, any other
    /// answer).
    public static func era(fromDiscover result: JSONValue?) -> MCPProtocol.Era? {
        guard let result else { return nil }
        let versions = JSONRead.items(result["supportedVersions"]).compactMap(\.stringValue)
        guard let version = MCPProtocol.modernVersions.first(where: { versions.contains($0) }) else { return nil }
        return .modern(version)
    }

    /// The `_meta` envelope of a stateless-era request termind sends.
    public static func envelope(version: String) -> JSONValue {
        .object([MCPProtocol.Meta.protocolVersion: .string(version), MCPProtocol.Meta.clientCapabilities: .object([:]),
                 MCPProtocol.Meta.clientInfo: .object(["name": .string("termind"), "version": .string("0.1.0")])])
    }

    /// A tool result as the model sees it: its text parts joined (a part of another kind is
    /// named, not shown), and whether the server called it an error.
    public static func resultText(_ result: JSONValue) -> (text: String, isError: Bool) {
        var parts: [String] = []
        for part in JSONRead.items(result["content"]) {
            if part["type"]?.stringValue == "text", let text = part["text"]?.stringValue { parts.append(text) } else {
                parts.append("[\(part["type"]?.stringValue ?? "unknown") content not shown]")
            }
        }
        if parts.isEmpty, let structured = result["structuredContent"], let data = try? JSONCoding.encode(structured) {
            parts.append(String(decoding: data, as: UTF8.self))
        }
        return (parts.joined(separator: "\n"), JSONRead.bool(result["isError"]) ?? false)
    }
}
