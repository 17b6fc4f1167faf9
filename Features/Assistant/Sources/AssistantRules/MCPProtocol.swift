import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// MCP's JSON-RPC framing and the handshake era's rules (docs/mcp.md), pure: what a line
/// is, which protocol version a session speaks, how a tool is listed and a result shaped.
/// The transport (a stream's input and output lines) and the tools are the feature's.
public enum MCPProtocol {
    /// The handshake-era revisions termind speaks, newest first.
    public static let versions = ["2025-11-25", "2025-06-18"]
    /// The stateless revisions (no handshake: a `_meta` envelope on every request).
    public static let modernVersions = ["2026-07-28"]

    /// The per-request envelope's keys (2026-07-28).
    public enum Meta {
        public static let protocolVersion = "io.modelcontextprotocol/protocolVersion"
        public static let clientCapabilities = "io.modelcontextprotocol/clientCapabilities"
        public static let clientInfo = "io.modelcontextprotocol/clientInfo"
        public static let serverInfo = "io.modelcontextprotocol/serverInfo"
    }

    /// Which revision a connection or a request speaks.
    public enum Era: Equatable, Sendable {
        /// `initialize` chose this version for the session.
        case handshake(String)
        /// Every request says its version in `_meta`.
        case modern(String)

        public var isModern: Bool { if case .modern = self { true } else { false } }
    }

    /// What the stateless era's checks found for one request: its version and who sent it.
    public struct ModernRoute: Equatable, Sendable {
        public var version: String
        public var clientName: String?
    }

    /// A request refused before any method runs: the JSON-RPC error to answer with.
    public struct Rejection: Equatable, Sendable, Error {
        public var code: Int
        public var message: String
        public var data: JSONValue?
        public init(code: Int, message: String, data: JSONValue? = nil) {
            self.code = code
            self.message = message
            self.data = data
        }
    }

    /// Whether a request opens (or belongs to) the stateless era: it is not `initialize` and
    /// carries the envelope's protocol version in `params._meta`.
    public static func hasModernEnvelope(method: String, params: JSONValue) -> Bool {
        method != "initialize" && params["_meta"]?[Meta.protocolVersion] != nil
    }

    /// The stateless era's checks on one request, in the specification's order (the first
    /// failure wins): the envelope (`_meta` with the protocol version and the client's
    /// capabilities) → -32602; over HTTP, `MCP-Protocol-Version`, `Mcp-Method` and (for
    /// `tools/call`) `Mcp-Name` must say what the body says → -32020; the version must be
    /// one termind speaks → -32022 with the supported list.
    public static func classifyModern(method: String, params: JSONValue, headers: ((String) -> String?)? = nil) -> Result<ModernRoute, Rejection> {
        guard case .object(let meta)? = params["_meta"] else {
            return .failure(Rejection(code: ErrorCode.invalidParams,
                                      message: "params._meta must be an object carrying \(Meta.protocolVersion) and \(Meta.clientCapabilities)."))
        }
        let missing = [Meta.protocolVersion, Meta.clientCapabilities].filter { meta[$0] == nil }
        guard missing.isEmpty else {
            return .failure(Rejection(code: ErrorCode.invalidParams, message: "params._meta lacks \(missing.joined(separator: " and "))."))
        }
        if let headers {
            guard let header = headers("mcp-protocol-version"), .string(header) == meta[Meta.protocolVersion] else {
                return .failure(Rejection(code: ErrorCode.headerMismatch, message: "The MCP-Protocol-Version header does not match the body's \(Meta.protocolVersion)."))
            }
            guard headers("mcp-method") == method else {
                return .failure(Rejection(code: ErrorCode.headerMismatch, message: "The Mcp-Method header does not match the body's method."))
            }
            if method == "tools/call", let name = params["name"]?.stringValue, decodeHeaderValue(headers("mcp-name")) != name {
                return .failure(Rejection(code: ErrorCode.headerMismatch, message: "The Mcp-Name header does not match the body's params.name."))
            }
        }
        guard case .string(let version)? = meta[Meta.protocolVersion] else {
            return .failure(Rejection(code: ErrorCode.invalidParams, message: "\(Meta.protocolVersion) is a string."))
        }
        guard modernVersions.contains(version) else { return .failure(unsupported(version)) }
        return .success(ModernRoute(version: version, clientName: meta[Meta.clientInfo]?["name"]?.stringValue))
    }

    /// -32022: the version asked for is not one termind speaks in the stateless era.
    public static func unsupported(_ requested: String) -> Rejection {
        Rejection(code: ErrorCode.unsupportedProtocolVersion, message: "Unsupported protocol version",
                  data: .object(["supported": .array(modernVersions.map { .string($0) }), "requested": .string(requested)]))
    }

    /// A header value as the client wrote it: verbatim, or `=?base64?…?=` for one that would
    /// not survive as a header (nil when that is malformed: it then matches nothing).
    public static func decodeHeaderValue(_ value: String?) -> String? {
        guard let value else { return nil }
        guard value.hasPrefix("=?base64?"), value.hasSuffix("?="), value.count >= 11 else { return value }
        let payload = String(value.dropFirst(9).dropLast(2))
        guard let data = Data(base64Encoded: payload), data.base64EncodedString() == payload else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// A stateless-era result: `resultType` on every one, the server named in `_meta`.
    public static func modernResult(_ result: JSONValue, serverInfo: JSONValue) -> JSONValue {
        guard case .object(var fields) = result else { return result }
        if fields["resultType"] == nil { fields["resultType"] = .string("complete") }
        var meta: [String: JSONValue] = [:]
        if case .object(let existing)? = fields["_meta"] { meta = existing }
        meta[Meta.serverInfo] = serverInfo
        fields["_meta"] = .object(meta)
        return .object(fields)
    }

    /// The HTTP status for a JSON-RPC error answered over HTTP (the specification's table;
    /// anything else 200).
    public static func httpStatus(forError code: Int) -> Int {
        switch code {
        case ErrorCode.parse, ErrorCode.invalidRequest, ErrorCode.invalidParams, ErrorCode.headerMismatch,
             ErrorCode.missingClientCapability, ErrorCode.unsupportedProtocolVersion: 400
        case ErrorCode.methodNotFound: 404
        default: 200
        }
    }
    /// The most a message may be (the HTTP transport's cap too).
    public static let messageLimit = 4 << 20

    public enum ErrorCode {
        public static let parse = -32700
        public static let invalidRequest = -32600
        public static let methodNotFound = -32601
        public static let invalidParams = -32602
        /// 2026-07-28: an HTTP header says something else than the body.
        public static let headerMismatch = -32020
        public static let missingClientCapability = -32021
        /// 2026-07-28: a version termind does not speak (data: the supported ones).
        public static let unsupportedProtocolVersion = -32022
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
        var tool: [String: JSONValue] = ["name": .string(name), "title": .string(name.replacingUTF8("_", with: " ")), "description": .string(description),
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
