import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LoopbackHTTP
import SettingsAPI
import Synchronization
import TermindCore

/// MCP over Streamable HTTP on loopback (docs/mcp.md, "HTTP"): `termind serve --mcp-listen
/// 127.0.0.1:PORT` (or `assistant.local`'s listener). Every request needs the Bearer token
/// (checked with Host, Origin and the path before its body is read); bodies are at most 4 MiB.
/// The era is chosen per request as the specification says: an `MCP-Protocol-Version`
/// header naming a stateless revision (2026-07-28) makes the request self-contained — its
/// `_meta` envelope checked against the headers, no session — and anything else is the
/// handshake era's (`initialize` gives an `Mcp-Session-Id` the later requests carry). Each
/// session, and each client of the stateless era, is a conversation of the policy as a
/// stdio session is.
final class MCPHTTPEndpoint: Sendable {
    private let feature: AssistantFeature
    private let ports: AssistantFeature.Ports
    private let token: MCPToken
    private let server: Mutex<LoopbackHTTPServer?> = Mutex(nil)
    /// Handshake-era sessions by their `Mcp-Session-Id`.
    private let sessions = Mutex<[String: MCPSession]>([:])
    /// Stateless-era conversations by client name.
    private let clients = Mutex<[String: MCPSession]>([:])
    private let refresher = Mutex<Task<Void, Never>?>(nil)
    /// The byte channels served beside MCP (nil without the SFTP feature).
    let channels: ByteChannels?
    static let sessionLimit = 64
    static let idleSeconds: Double = 1800

    init(feature: AssistantFeature, ports: AssistantFeature.Ports, token: MCPToken, channels: ByteChannels?) {
        self.feature = feature
        self.ports = ports
        self.token = token
        self.channels = channels
    }

    var port: Int? { server.withLock { $0?.port } }
    var url: String? {
        server.withLock { server in server.map { "http://\($0.address.contains(":") ? "[\($0.address)]" : $0.address):\($0.port)\(MCPHTTPRules.path)" } }
    }
    var counts: (sessions: Int, clients: Int) { (sessions.withLock { $0.count }, clients.withLock { $0.count }) }

    /// Listens on `address` (`127.0.0.1:PORT`, `[::1]:PORT`, `localhost:PORT`).
    func start(_ address: String) async throws {
        guard let (host, port) = Self.split(address) else {
            throw TermindError(.assistantInvalid, "--mcp-listen \(address): give ADDRESS:PORT on loopback, e.g. 127.0.0.1:8765 or [::1]:8765.")
        }
        // The token exists before the first request (made now when there is none; shown by
        // termind mcp token show), and is read again every second (a rotate elsewhere).
        try await token.ensure(ports)
        let listening: LoopbackHTTPServer
        do {
            listening = try LoopbackHTTPServer(address: host, port: port, bodyLimit: MCPProtocol.messageLimit,
                                               check: { [token, channels] request in Self.check(request, token: token, channels: channels) },
                                               streamer: { [channels] request in channels?.uploadSink(request) },
                                               handler: { [self] request in await handle(request) })
        } catch let error as LoopbackHTTPError {
            throw TermindError(.assistantInvalid, "--mcp-listen \(address): \(error.description)")
        }
        server.withLock { $0 = listening }
        let ports = self.ports
        refresher.withLock {
            $0 = Task { [token] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    await token.refresh(ports)
                }
            }
        }
        ports.logger.info("assistant.mcp.http", ["port": .int(listening.port)])
    }

    func stop() async {
        refresher.withLock { $0?.cancel() }
        let running = server.withLock { state -> LoopbackHTTPServer? in defer { state = nil }; return state }
        await running?.stop()
        for session in sessions.withLock({ Array($0.values) }) + clients.withLock({ Array($0.values) }) { session.cancelAll() }
        channels?.revoke(owner: nil)
    }

    static func split(_ address: String) -> (String, Int)? {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(address[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    // MARK: - Requests

    private static func check(_ request: HTTPServerRequest, token: MCPToken, channels: ByteChannels?) -> HTTPServerResponse? {
        let headers = request.headers
        let head = MCPHTTPRules.Head(method: request.method, path: request.path, query: request.query.map(\.name),
                                     values: { name in headers.filter { $0.name == name }.map(\.value) })
        // The byte channels: the capability instead of the token (it is what the MCP client
        // hands to whatever moves the bytes), after the same Host, Origin and query checks.
        if request.path.hasPrefix("/files/"), let channels {
            if let refusal = MCPHTTPRules.checkPlace(head, port: request.localPort) { return Self.plain(refusal) }
            return channels.head(request)
        }
        return MCPHTTPRules.check(head, port: request.localPort, token: token.current).map(Self.plain)
    }

    private func handle(_ request: HTTPServerRequest) async -> HTTPServerResponse {
        if request.path == "/files/download", let channels { return await channels.download(request) }
        switch request.method {
        case "GET":
            // termind sends nothing unasked: no stream to open.
            return HTTPServerResponse(status: 405, headers: [("Allow", "POST, DELETE"), ("Content-Type", "text/plain")],
                                      body: Data("termind's MCP endpoint sends nothing unasked: there is no GET stream.\n".utf8))
        case "DELETE":
            guard let id = request.header("mcp-session-id") else { return Self.plain(400, "DELETE needs the Mcp-Session-Id of the session to end.") }
            guard let session = sessions.withLock({ $0.removeValue(forKey: id) }) else { return Self.plain(404, "No such session (it ended or expired).") }
            session.cancelAll()
            channels?.revoke(owner: session.conversation)
            return HTTPServerResponse(status: 204)
        default:
            return await post(request)
        }
    }

    private func post(_ request: HTTPServerRequest) async -> HTTPServerResponse {
        let sse = !(request.header("accept").map { MCPHTTPRules.accepts($0, "application/json") } ?? true)
        switch MCPProtocol.parse(request.body) {
        case .invalid(let id, let code, let message):
            return Self.jsonRPC(MCPProtocol.error(id, code: code, message: message), status: 400, sse: sse)
        case .response:
            return HTTPServerResponse(status: 202)
        case .notification(let method, let params):
            if let version = request.header("mcp-protocol-version"), !MCPProtocol.versions.contains(version) {
                guard MCPProtocol.modernVersions.contains(version) else {
                    let rejection = MCPProtocol.unsupported(version)
                    return Self.jsonRPC(MCPProtocol.error(.null, code: rejection.code, message: rejection.message, data: rejection.data), status: 400, sse: sse)
                }
                return HTTPServerResponse(status: 202)
            }
            if let id = request.header("mcp-session-id") {
                guard let session = sessions.withLock({ $0[id] }) else { return Self.plain(404, "No such session (it ended or expired): initialize again.") }
                session.notify(method, params: params)
            }
            return HTTPServerResponse(status: 202)
        case .request(let id, let method, let params):
            if let version = request.header("mcp-protocol-version"), !MCPProtocol.versions.contains(version) {
                return await modern(request, id: id, method: method, params: params, sse: sse)
            }
            return await handshake(request, id: id, method: method, params: params, sse: sse)
        }
    }

    /// A stateless-era request: checked against its headers, answered by its client's
    /// conversation, no session.
    private func modern(_ request: HTTPServerRequest, id: JSONValue, method: String, params: JSONValue, sse: Bool) async -> HTTPServerResponse {
        for name in ["mcp-protocol-version", "mcp-method", "mcp-name"] where request.count(name) > 1 {
            return Self.rejected(id, MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.headerMismatch, message: "The \(name) header is sent more than once."), sse: sse)
        }
        let headers: (String) -> String? = { request.header($0) }
        let route: MCPProtocol.ModernRoute
        switch MCPProtocol.classifyModern(method: method, params: params, headers: headers) {
        case .failure(let rejection): return Self.rejected(id, rejection, sse: sse)
        case .success(let found): route = found
        }
        let client = route.clientName.map { String($0.prefix(64)) } ?? "client"
        let session: MCPSession
        if let known = clients.withLock({ $0[client] }) {
            session = known
        } else {
            guard let made = try? await feature.mcpSession(ports, origin: "http", terminal: nil) else { return Self.plain(503, "termind is stopping.") }
            session = clients.withLock { clients in
                if let raced = clients[client] { return raced }
                if clients.count >= Self.sessionLimit, let oldest = clients.min(by: { $0.value.idleSince < $1.value.idleSince }) {
                    clients.removeValue(forKey: oldest.key)
                }
                clients[client] = made
                return made
            }
        }
        let era: MCPProtocol.Era
        switch session.route(method: method, params: params, headers: headers) {
        case .failure(let rejection): return Self.rejected(id, rejection, sse: sse)
        case .success(let chosen): era = chosen
        }
        return Self.answer(id, await session.answer(method: method, params: params, era: era), session: session, era: era, sse: sse)
    }

    /// A handshake-era request: `initialize` opens a session, the others name theirs.
    private func handshake(_ request: HTTPServerRequest, id: JSONValue, method: String, params: JSONValue, sse: Bool) async -> HTTPServerResponse {
        let session: MCPSession
        var opened: String?
        if method == "initialize" {
            guard let made = try? await feature.mcpSession(ports, origin: "http", terminal: nil) else { return Self.plain(503, "termind is stopping.") }
            let sessionID = MCPHTTPRules.newToken()
            let now = Date().timeIntervalSince1970
            let (admitted, expired) = sessions.withLock { sessions -> (Bool, [MCPSession]) in
                let expired = sessions.filter { now - $0.value.idleSince > Self.idleSeconds }
                for key in expired.keys { sessions.removeValue(forKey: key) }
                guard sessions.count < Self.sessionLimit else { return (false, Array(expired.values)) }
                sessions[sessionID] = made
                return (true, Array(expired.values))
            }
            for session in expired {
                session.cancelAll()
                channels?.revoke(owner: session.conversation)
            }
            guard admitted else { return Self.plain(503, "Too many MCP sessions (\(Self.sessionLimit)): end one (DELETE) or wait for one to expire.") }
            session = made
            opened = sessionID
        } else {
            guard let sessionID = request.header("mcp-session-id") else {
                return Self.rejected(id, MCPProtocol.Rejection(code: MCPProtocol.ErrorCode.invalidRequest,
                                                               message: "Bad Request: no Mcp-Session-Id (send initialize first, or MCP-Protocol-Version: 2026-07-28 with a _meta envelope)."), sse: sse)
            }
            guard let known = sessions.withLock({ $0[sessionID] }) else { return Self.plain(404, "No such session (it ended or expired): initialize again.") }
            session = known
        }
        let era: MCPProtocol.Era
        switch session.route(method: method, params: params, headers: nil) {
        case .failure(let rejection): return Self.rejected(id, rejection, sse: sse, status: 200)
        case .success(let chosen): era = chosen
        }
        guard method == "tools/call" else {
            var response = Self.answer(id, await session.answer(method: method, params: params, era: era), session: session, era: era, sse: sse)
            if let opened { response.headers.append(("Mcp-Session-Id", opened)) }
            return response
        }
        // A call the session can cancel (notifications/cancelled naming its id, in another
        // POST): stopped, it gets no JSON-RPC answer — the POST ends with 202 and no body.
        guard let answered = await session.run(id: id, method: method, params: params, era: era, stop: request.stop) else {
            return HTTPServerResponse(status: 202)
        }
        return Self.answer(id, answered, session: session, era: era, sse: sse)
    }

    private static func answer(_ id: JSONValue, _ answer: Result<JSONValue, MCPProtocol.Rejection>, session: MCPSession, era: MCPProtocol.Era, sse: Bool) -> HTTPServerResponse {
        var status = 200
        if case .failure(let rejection) = answer, era.isModern { status = MCPProtocol.httpStatus(forError: rejection.code) }
        return jsonRPC(session.line(id, answer, era: era), status: status, sse: sse)
    }

    private static func rejected(_ id: JSONValue, _ rejection: MCPProtocol.Rejection, sse: Bool, status: Int? = nil) -> HTTPServerResponse {
        jsonRPC(MCPProtocol.error(id, code: rejection.code, message: rejection.message, data: rejection.data),
                status: status ?? MCPProtocol.httpStatus(forError: rejection.code), sse: sse)
    }

    /// One JSON-RPC message as the body: JSON, or one SSE event for a client that accepts
    /// only a stream.
    private static func jsonRPC(_ line: Data, status: Int, sse: Bool) -> HTTPServerResponse {
        var body = line
        if body.last == 0x0A { body.removeLast() }
        guard sse, status == 200 else { return HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body) }
        var event = Data("event: message\ndata: ".utf8)
        event.append(body)
        event.append(contentsOf: Array("\n\n".utf8))
        return HTTPServerResponse(status: 200, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")], body: event)
    }

    private static func plain(_ status: Int, _ message: String, headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers, body: Data((message + "\n").utf8))
    }

    private static func plain(_ refusal: MCPHTTPRules.Refusal) -> HTTPServerResponse {
        plain(refusal.status, refusal.message, headers: refusal.headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }
}

/// The HTTP listener's Bearer token (256 bits) in the secret store behind `assistant.local`'s
/// `listenerTokenRef`; held in memory for the head check, read again every second so a
/// rotation anywhere revokes the old one within a second (at once in this process).
final class MCPToken: Sendable {
    private let cached = Mutex<String?>(nil)

    var current: String? { cached.withLock { $0 } }

    /// Reads the token; makes one (not yet shown) when there is none.
    func ensure(_ ports: AssistantFeature.Ports) async throws {
        if try await Self.read(ports) == nil { _ = try await make(ports, shown: false) }
        await refresh(ports)
    }

    func refresh(_ ports: AssistantFeature.Ports) async {
        guard let value = try? await Self.read(ports) else { return }
        cached.withLock { $0 = value }
    }

    /// The token (`local`: the record, when the caller read it already).
    static func read(_ ports: AssistantFeature.Ports, local known: AssistantSettings.Local? = nil) async throws -> String? {
        let local = if let known { known } else { try await ports.settings.read(AssistantSettings.Local.self) }
        guard !local.listenerTokenRef.isEmpty,
              let secret = try await ports.settings.secret(local.listenerTokenRef, key: AssistantSettings.Local.key, field: "listenerTokenRef") else { return nil }
        return secret.withPlaintext { MCPHTTPRules.isToken($0) ? $0 : nil }
    }

    /// A new token in place of the old (which no longer works from this moment here).
    func make(_ ports: AssistantFeature.Ports, shown: Bool) async throws -> String {
        let value = MCPHTTPRules.newToken()
        _ = try await ports.context.call(SettingsContracts.SetSecret.self, .init(key: AssistantSettings.Local.key, field: "listenerTokenRef", secret: Secret(value)))
        _ = try await ports.context.call(SettingsContracts.Set.self, .init(key: AssistantSettings.Local.key, value: ["listenerTokenShown": .bool(shown)]))
        cached.withLock { $0 = value }
        return value
    }

    /// `termind mcp token show`: once.
    func show(_ ports: AssistantFeature.Ports) async throws -> AssistantContracts.MCPTokenShow.Response {
        let local = try await ports.settings.read(AssistantSettings.Local.self)
        if let existing = try await Self.read(ports, local: local) {
            guard !local.listenerTokenShown else {
                throw TermindError(.assistantInvalid, "The MCP token was shown once already and is not shown again. termind mcp token rotate makes a new one (the old one stops working).")
            }
            _ = try await ports.context.call(SettingsContracts.Set.self, .init(key: AssistantSettings.Local.key, value: ["listenerTokenShown": .bool(true)]))
            cached.withLock { $0 = existing }
            return .init(token: existing, note: Self.note)
        }
        return .init(token: try await make(ports, shown: true), note: Self.note)
    }

    static let note = "Give it to your MCP client as the header Authorization: Bearer TOKEN (never in a URL). It is not shown again; termind mcp token rotate replaces it."
}
