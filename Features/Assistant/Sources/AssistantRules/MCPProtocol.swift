import Foundation
import TermindCore

/// MCP's JSON-RPC framing and the handshake era's rules (docs/mcp.md), pure: what a line
/// is, which protocol version a session speaks, how a tool is listed and a result shaped.
/// The transport (a stream's input and output lines) and the tools are the feature's.
public enum MCPProtocol {
    /// The handshake-era revisions termind speaks, newest first.
    public static let versions = ["2025-11-25", "2025-06-18"]
    /// The most a message may be (the HTTP transport's cap too).
    public static let messageLimit = 4 << 20

    public enum ErrorCode {
        public static let parse = -32700
        public static let invalidRequest = -32600
        public static let methodNotFound = -32601
        public static let invalidParams = -32602
    }

    /// One incoming message.
    public enum Message: Equatable, Sendable {
        /// A request: it gets exactly one answer with its id.
        case request(id: JSONValue, method: String, params: JSONValue)
        /// A notification: no answer.
        case notification(method: String, params: JSONValue)
        /// A response to something termind asked (termind's server asks nothing yet: ignored).
        case response
        /// Not a JSON-RPC 2.0 message: the error to answer with (id null when unknown).
        case invalid(id: JSONValue, code: Int, message: String)
    }

    public static func parse(_ line: Data) -> Message {
        guard let value = try? JSONCoding.parse(line, source: "an MCP message") else {
            return .invalid(id: .null, code: ErrorCode.parse, message: "Parse error: the line is not JSON.")
        }
        guard case .object(let fields) = value else {
            return .invalid(id: .null, code: ErrorCode.invalidRequest, message: "Invalid Request: a message is one JSON object (batches are not part of MCP since 2025-06-18).")
        }
        let id = fields["id"]
        if let id, !Self.validID(id) { return .invalid(id: .null, code: ErrorCode.invalidRequest, message: "Invalid Request: an id is a string or a number.") }
        guard fields["jsonrpc"] == .string("2.0") else {
            return .invalid(id: id ?? .null, code: ErrorCode.invalidRequest, message: "Invalid Request: jsonrpc must be \"2.0\".")
        }
        guard let method = fields["method"] else {
            return fields["result"] != nil || fields["error"] != nil ? .response
                : .invalid(id: id ?? .null, code: ErrorCode.invalidRequest, message: "Invalid Request: no method.")
        }
        guard let name = method.stringValue else { return .invalid(id: id ?? .null, code: ErrorCode.invalidRequest, message: "Invalid Request: method is a string.") }
        let params = fields["params"] ?? .object([:])
        if case .object = params {} else { return .invalid(id: id ?? .null, code: ErrorCode.invalidParams, message: "Invalid params: params is an object.") }
        guard let id else { return .notification(method: name, params: params) }
        return .request(id: id, method: name, params: params)
    }

    private static func validID(_ id: JSONValue) -> Bool {
        switch id {
        case .string, .integer, .unsignedInteger: true
        default: false
        }
    }

    /// The version a session speaks: the client's when termind speaks it, else termind's newest
    /// (the client then decides whether it can go on).
    public static func negotiate(_ requested: String?) -> String {
        if let requested, versions.contains(requested) { return requested }
        return versions[0]
    }

    public static func result(_ id: JSONValue, _ result: JSONValue) -> Data {
        line(.object(["jsonrpc": .string("2.0"), "id": id, "result": result]))
    }

    public static func error(_ id: JSONValue, code: Int, message: String, data: JSONValue? = nil) -> Data {
        var error: [String: JSONValue] = ["code": .integer(Int64(code)), "message": .string(message)]
        error["data"] = data
        return line(.object(["jsonrpc": .string("2.0"), "id": id, "error": .object(error)]))
    }

    /// A message as one line (JSON has no raw newline inside), newline-terminated.
    static func line(_ value: JSONValue) -> Data {
        var data = (try? JSONCoding.encode(value)) ?? Data("{}".utf8)
        data.append(0x0A)
        return data
    }

    /// What a tool may do, as MCP's hints say it (never more permissive than termind's rules,
    /// which decide regardless).
    public struct Hints: Sendable, Equatable {
        public var readOnly: Bool
        public var destructive: Bool
        public var idempotent: Bool
        public var openWorld: Bool
        public init(readOnly: Bool, destructive: Bool, idempotent: Bool, openWorld: Bool) {
            self.readOnly = readOnly
            self.destructive = destructive
            self.idempotent = idempotent
            self.openWorld = openWorld
        }

        public var json: JSONValue {
            .object(["readOnlyHint": .bool(readOnly), "destructiveHint": .bool(destructive), "idempotentHint": .bool(idempotent), "openWorldHint": .bool(openWorld)])
        }
    }

    /// A tool as `tools/list` lists it.
    public static func tool(name: String, description: String, inputSchema: JSONValue, hints: Hints, outputSchema: JSONValue? = nil) -> JSONValue {
        var tool: [String: JSONValue] = ["name": .string(name), "title": .string(name.replacingOccurrences(of: "_", with: " ")), "description": .string(description),
                                         "inputSchema": inputSchema, "annotations": hints.json]
        tool["outputSchema"] = outputSchema
        return .object(tool)
    }

    /// A `tools/call` result: the text, whether it is an error the model should see, and the
    /// result as data for a tool with an output schema (the text then carries the same).
    public static func callResult(text: String, isError: Bool, structured: JSONValue? = nil) -> JSONValue {
        var result: [String: JSONValue] = ["content": .array([.object(["type": .string("text"), "text": .string(text)])]), "isError": .bool(isError)]
        result["structuredContent"] = structured
        return .object(result)
    }
}
