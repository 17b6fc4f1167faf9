import Dispatch
import AssistantAPI
import AssistantRules
import CurlHTTP
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import Synchronization
import TermindCore

/// An MCP server's answer that is an error (a JSON-RPC error, or what the transport made of
/// an HTTP failure): its code and message, never a credential.
struct MCPRemoteError: Error, CustomStringConvertible {
    let code: Int
    let message: String
    var description: String { "\(message) (\(code))" }
}

/// How termind reaches one configured server: requests answered by id, notifications.
protocol MCPClientTransport: Sendable {
    func request(_ method: String, params: JSONValue, era: MCPProtocol.Era?, timeout: Double) async throws -> JSONValue
    func notify(_ method: String, params: JSONValue, era: MCPProtocol.Era?) async
    func close()
}

/// A stdio server: its program started by termind (the record's command), one JSON-RPC
/// message a line each way. It gets a minimal environment (PATH, HOME, USER, LANG, TMPDIR):
/// nothing of termind's own (its socket, its store, a passphrase file) reaches it. Its
/// standard error is dropped.
final class MCPStdioTransport: MCPClientTransport {
    /// The server's process id until it is reaped (then nil): only a child that has not been
    /// reaped is signalled, so a signal never reaches a process that took its id later.
    private final class Child: Sendable {
        let pid: Mutex<pid_t?>
        init(_ pid: pid_t) { self.pid = Mutex(pid) }
    }
    private let child: Child
    /// Our end of the server's standard input: a socket, so a write to a server that died is
    /// an error (MSG_NOSIGNAL), never SIGPIPE for termind.
    private let input: Int32
    private let writes = DispatchQueue(label: "termind.mcp.client.stdin")
    private let state = Mutex<(next: Int, waiting: [Int: CheckedContinuation<JSONValue, any Error>], ended: Bool)>((1, [:], false))

    init(command: [String]) throws {
        guard let program = command.first, !program.isEmpty else { throw TermindError(.assistantInvalid, "A stdio MCP server needs its program.") }
        let inherited = ProcessInfo.processInfo.environment
        let environment = inherited.filter { ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR"].contains($0.key) }
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw TermindError(.assistantInvalid, "The MCP server \(program) could not start: no socket pair.")
        }
        let pipeEnds: [Int32]
        do { pipeEnds = try ChildProcess.pipe(for: program) } catch {
            Glibc.close(pair[0])
            Glibc.close(pair[1])
            throw TermindError(.assistantInvalid, "The MCP server \(program) could not start: no pipe.")
        }
        let pid: pid_t
        do {
            // Through env(1), as a shell would find the program on PATH; standard error to /dev/null.
            pid = try ChildProcess.spawn(["/usr/bin/env", "--"] + command, environment: environment, stdin: pair[1], stdout: pipeEnds[1])
        } catch {
            for fd in [pair[0], pair[1], pipeEnds[0], pipeEnds[1]] { Glibc.close(fd) }
            throw TermindError(.assistantInvalid, "The MCP server \(program) could not start: \((error as? TermindError)?.message ?? "\(error)")")
        }
        Glibc.close(pair[1])
        Glibc.close(pipeEnds[1])
        let child = Child(pid)
        self.child = child
        input = pair[0]
        let output = pipeEnds[0]
        // Its answers are read on a thread of their own (a blocking read), never the pool's.
        let thread = SystemThread.named("termind-mcp-client") { [weak self] in
            var buffer = Data()
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = chunk.withUnsafeMutableBytes { Glibc.read(output, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                buffer.append(contentsOf: chunk[..<n])
                while let newline = buffer.firstIndex(of: 0x0A) {
                    let line = Data(buffer[buffer.startIndex..<newline])
                    buffer.removeSubrange(buffer.startIndex...newline)
                    self?.deliver(line)
                }
                if buffer.count > MCPProtocol.messageLimit { buffer.removeAll() }
            }
            Glibc.close(output)
            self?.end()
            // Its output ended: the server exited or is about to. It is reaped here, on this
            // thread: first waited for without reaping (its id stays its own meanwhile), then
            // its id forgotten, then reaped, so that a late SIGTERM reaches it or nothing.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
            child.pid.withLock { $0 = nil }
            _ = ChildProcess.wait(pid)
        }
        thread.start()
    }

    private func deliver(_ line: Data) {
        guard let message = try? JSONCoding.parse(line, source: "an MCP message"), let id = JSONRead.int(message["id"]) else { return }
        guard message["method"] == nil else { return }  // a request of the server's: termind offers nothing back
        guard let waiting = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        if let error = message["error"] {
            waiting.resume(throwing: MCPRemoteError(code: JSONRead.int(error["code"]) ?? 0, message: String((error["message"]?.stringValue ?? "an error").prefix(500))))
        } else {
            waiting.resume(returning: message["result"] ?? .object([:]))
        }
    }

    private func end() {
        let waiting = state.withLock { state -> [CheckedContinuation<JSONValue, any Error>] in
            state.ended = true
            defer { state.waiting.removeAll() }
            return Array(state.waiting.values)
        }
        for continuation in waiting { continuation.resume(throwing: MCPRemoteError(code: -32000, message: "The MCP server ended")) }
    }

    private func write(_ message: JSONValue) {
        guard var data = try? JSONCoding.encode(message) else { return }
        data.append(0x0A)
        let line = data
        writes.async { [input] in
            line.withUnsafeBytes { bytes in
                var sent = 0
                while sent < bytes.count {
                    let n = send(input, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { return }
                    sent += n
                }
            }
        }
    }

    func request(_ method: String, params: JSONValue, era: MCPProtocol.Era?, timeout: Double) async throws -> JSONValue {
        let id = state.withLock { state -> Int in defer { state.next += 1 }; return state.next }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: .seconds(timeout))
            guard !Task.isCancelled, let waiting = self?.state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
            waiting.resume(throwing: MCPRemoteError(code: -32001, message: "The MCP server did not answer \(method) within \(Int(timeout)) s"))
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<JSONValue, any Error>) in
                let ended = state.withLock { state -> Bool in
                    if !state.ended { state.waiting[id] = continuation }
                    return state.ended
                }
                if ended { continuation.resume(throwing: MCPRemoteError(code: -32000, message: "The MCP server ended")); return }
                write(.object(["jsonrpc": .string("2.0"), "id": .integer(Int64(id)), "method": .string(method), "params": params]))
            }
        } onCancel: {
            if let waiting = state.withLock({ $0.waiting.removeValue(forKey: id) }) { waiting.resume(throwing: CancellationError()) }
            write(.object(["jsonrpc": .string("2.0"), "method": .string("notifications/cancelled"), "params": .object(["requestId": .integer(Int64(id))])]))
        }
    }

    func notify(_ method: String, params: JSONValue, era: MCPProtocol.Era?) async {
        write(.object(["jsonrpc": .string("2.0"), "method": .string(method), "params": params]))
    }

    func close() {
        writes.async { [input] in Glibc.close(input) }
        // A server that does not end once its input closes is asked to (SIGTERM) after 2 s.
        DispatchQueue.global().asyncAfter(deadline: .now() + 2) { [child] in
            child.pid.withLock { pid in if let pid { kill(pid, SIGTERM) } }
        }
    }
}

/// An HTTP server (Streamable HTTP): each message a POST, the answer JSON or an SSE stream
/// until the message with the request's id. The record's token goes in `Authorization`, its
/// headers as they are; redirects are not followed; errors name the origin only.
final class MCPHTTPTransport: MCPClientTransport {
    private let url: String
    private let headers: [HTTPHeader]
    private let http: HTTPClient
    private let state = Mutex<(next: Int, session: String?)>((1, nil))

    init(url: String, headers: [String: String], token: Secret?, http: HTTPClient) {
        self.url = url
        var all = headers.sorted { $0.key < $1.key }.map { HTTPHeader($0.key, $0.value) }
        if let token, !token.isEmpty { all.append(HTTPHeader("Authorization", token.withPlaintext { "Bearer \($0)" })) }
        self.headers = all
        self.http = http
    }

    private func post(_ message: JSONValue, method: String, params: JSONValue, era: MCPProtocol.Era?, timeout: Double) async throws -> HTTPResponse {
        var request = HTTPRequest(method: "POST", url: url, headers: headers, body: try JSONCoding.encode(message), connectTimeout: 10, idleTimeout: timeout)
        request.headers.append(HTTPHeader("Content-Type", "application/json"))
        request.headers.append(HTTPHeader("Accept", "application/json, text/event-stream"))
        switch era {
        case .modern(let version)?:
            request.headers.append(HTTPHeader("MCP-Protocol-Version", version))
            request.headers.append(HTTPHeader("Mcp-Method", method))
            if method == "tools/call", let name = params["name"]?.stringValue { request.headers.append(HTTPHeader("Mcp-Name", name)) }
        case .handshake(let version)?:
            if method != "initialize" { request.headers.append(HTTPHeader("MCP-Protocol-Version", version)) }
            if let session = state.withLock({ $0.session }) { request.headers.append(HTTPHeader("Mcp-Session-Id", session)) }
        case nil:
            break
        }
        let origin = request.origin
        do {
            return try await http.send(request, rule: { _, _ in throw TermindError(.assistantInvalid, "The MCP server at \(origin) redirected; termind does not follow it.") })
        } catch let error as TermindError {
            throw MCPRemoteError(code: -32000, message: error.message)
        }
    }

    func request(_ method: String, params: JSONValue, era: MCPProtocol.Era?, timeout: Double) async throws -> JSONValue {
        let id = state.withLock { state -> Int in defer { state.next += 1 }; return state.next }
        let message: JSONValue = .object(["jsonrpc": .string("2.0"), "id": .integer(Int64(id)), "method": .string(method), "params": params])
        let response = try await post(message, method: method, params: params, era: era, timeout: timeout)
        defer { response.cancel() }
        if method == "initialize", let session = response.head.value("mcp-session-id") { state.withLock { $0.session = session } }
        let type = response.head.value("content-type")?.lowercased() ?? ""
        var answer: JSONValue?
        if type.hasPrefix("text/event-stream") {
            var reader = SSEReader()
            reading: while let chunk = try await response.next() {
                for event in try reader.feed(chunk) {
                    guard let value = try? JSONCoding.parse(Data(event.data.utf8), source: "an MCP event"), JSONRead.int(value["id"]) == id,
                          value["method"] == nil else { continue }
                    answer = value
                    break reading
                }
            }
        } else {
            let body = try await response.body(limit: MCPProtocol.messageLimit)
            answer = try? JSONCoding.parse(body, source: "an MCP answer")
        }
        if let error = answer?["error"] {
            throw MCPRemoteError(code: JSONRead.int(error["code"]) ?? 0, message: String((error["message"]?.stringValue ?? "an error").prefix(500)))
        }
        guard response.head.status == 200, let result = answer?["result"] else {
            throw MCPRemoteError(code: response.head.status == 404 ? -32601 : -32000, message: "The MCP server at \(HTTPURL(url)?.origin ?? "its URL") answered HTTP \(response.head.status)")
        }
        return result
    }

    func notify(_ method: String, params: JSONValue, era: MCPProtocol.Era?) async {
        let message: JSONValue = .object(["jsonrpc": .string("2.0"), "method": .string(method), "params": params])
        if let response = try? await post(message, method: method, params: params, era: era, timeout: 10) { response.cancel() }
    }

    func close() {}
}

/// One configured server, connected: its era (probed once with `server/discover`, the
/// handshake when that fails, then remembered per server), its tools.
final class MCPServerConnection: Sendable {
    let name: String
    let fingerprint: String
    let transport: any MCPClientTransport
    let era: MCPProtocol.Era
    static let timeout: Double = 60

    private init(name: String, fingerprint: String, transport: any MCPClientTransport, era: MCPProtocol.Era) {
        self.name = name
        self.fingerprint = fingerprint
        self.transport = transport
        self.era = era
    }

    static func connect(name: String, fingerprint: String, transport: any MCPClientTransport, known: MCPProtocol.Era?) async throws -> MCPServerConnection {
        if case .modern? = known {
            return MCPServerConnection(name: name, fingerprint: fingerprint, transport: transport, era: known!)
        }
        if known == nil {
            let modern = MCPProtocol.modernVersions[0]
            let discovered = try? await transport.request("server/discover", params: .object(["_meta": MCPClientRules.envelope(version: modern)]),
                                                          era: .modern(modern), timeout: 30)
            if let era = MCPClientRules.era(fromDiscover: discovered) {
                return MCPServerConnection(name: name, fingerprint: fingerprint, transport: transport, era: era)
            }
        }
        let hello = try await transport.request("initialize", params: .object([
            "protocolVersion": .string(MCPProtocol.versions[0]), "capabilities": .object([:]),
            "clientInfo": .object(["name": .string("termind"), "version": .string("0.1.0")]),
        ]), era: nil, timeout: 30)
        let version = hello["protocolVersion"]?.stringValue ?? MCPProtocol.versions[0]
        guard MCPProtocol.versions.contains(version) else {
            throw MCPRemoteError(code: -32022, message: "The MCP server \(name) speaks \(version.prefix(40)), which termind does not")
        }
        await transport.notify("notifications/initialized", params: .object([:]), era: .handshake(version))
        return MCPServerConnection(name: name, fingerprint: fingerprint, transport: transport, era: .handshake(version))
    }

    /// A request of this connection's era (the stateless one carries the envelope).
    func request(_ method: String, params: [String: JSONValue]) async throws -> JSONValue {
        var params = params
        if case .modern(let version) = era { params["_meta"] = MCPClientRules.envelope(version: version) }
        return try await transport.request(method, params: .object(params), era: era, timeout: Self.timeout)
    }

    func tools() async throws -> (tools: [MCPClientRules.Tool], skipped: [String]) {
        var all: [MCPClientRules.Tool] = []
        var skipped: [String] = []
        var cursor: String?
        for _ in 0..<20 {
            var params: [String: JSONValue] = [:]
            if let cursor { params["cursor"] = .string(cursor) }
            let page = try await request("tools/list", params: params)
            let found = MCPClientRules.tools(server: name, listed: page)
            all += found.tools.filter { tool in !all.contains { $0.name == tool.name } }
            skipped += found.skipped
            guard let next = page["nextCursor"]?.stringValue, next != cursor else { break }
            cursor = next
        }
        return (all, skipped)
    }
}

/// The configured MCP servers (`assistant.mcpServers`) this process is connected to, by name:
/// connected when a run first offers their tools, kept while the record stays the same (a
/// changed record reconnects), their eras remembered.
final class MCPClients: Sendable {
    private let connections = Mutex<[String: MCPServerConnection]>([:])
    private let eras = Mutex<[String: MCPProtocol.Era]>([:])
    /// Calls that may change something run one at a time.
    let lane = SerialLane()

    struct Discovery: Sendable {
        var tools: [MCPClientRules.Tool]
        /// Per server: what went wrong, or the tools that could not be offered.
        var problems: [String: String]
        /// Per server reached: the version spoken.
        var versions: [String: String] = [:]
    }

    /// Every enabled server's tools of `record` (`only`: one server's), connecting where needed.
    func discover(_ ports: AssistantFeature.Ports, record: AssistantSettings.MCPServers, only: String? = nil) async -> Discovery {
        var discovery = Discovery(tools: [], problems: [:])
        let configured = record.servers.filter { $0.value.enabled && (only == nil || $0.key == only) }.sorted { $0.key < $1.key }
        // Servers gone from the record are closed.
        let stale = connections.withLock { all -> [MCPServerConnection] in
            let gone = all.filter { record.servers[$0.key]?.enabled != true }
            for key in gone.keys { all.removeValue(forKey: key) }
            return Array(gone.values)
        }
        stale.forEach { $0.transport.close() }
        await withTaskGroup(of: (String, Result<(tools: [MCPClientRules.Tool], skipped: [String]), any Error>).self) { group in
            for (name, server) in configured {
                group.addTask { [self] in
                    do {
                        let connection = try await connection(name, server, ports: ports)
                        return (name, .success(try await connection.tools()))
                    } catch {
                        drop(name)
                        return (name, .failure(error))
                    }
                }
            }
            for await (name, outcome) in group {
                switch outcome {
                case .success(let found):
                    discovery.tools += found.tools
                    if let era = eras.withLock({ $0[name] }) {
                        switch era {
                        case .modern(let version), .handshake(let version): discovery.versions[name] = version
                        }
                    }
                    if !found.skipped.isEmpty { discovery.problems[name] = "tools not offered (their names cannot be a model's function name): \(found.skipped.prefix(10).joined(separator: ", "))" }
                case .failure(let error):
                    discovery.problems[name] = (error as? MCPRemoteError)?.description ?? TermindError.from(error).message
                }
            }
        }
        discovery.tools.sort { $0.name < $1.name }
        return discovery
    }

    private func connection(_ name: String, _ server: AssistantSettings.MCPServers.Server, ports: AssistantFeature.Ports) async throws -> MCPServerConnection {
        let fingerprint = (try? String(decoding: JSONCoding.encode(server), as: UTF8.self)) ?? name
        if let known = connections.withLock({ $0[name] }), known.fingerprint == fingerprint { return known }
        let transport: any MCPClientTransport
        switch server.transport {
        case .stdio:
            transport = try MCPStdioTransport(command: server.command ?? [])
        case .http:
            var token: Secret?
            if !server.tokenRef.isEmpty {
                token = try await ports.settings.secret(server.tokenRef, key: AssistantSettings.MCPServers.key, field: "servers.\(name).tokenRef")
                guard token != nil else { throw TermindError(.assistantInvalid, "The token of MCP server \(name) is missing from this device's secret store.") }
            }
            transport = MCPHTTPTransport(url: server.url ?? "", headers: server.headers ?? [:], token: token, http: ports.client.http)
        }
        do {
            let connection = try await MCPServerConnection.connect(name: name, fingerprint: fingerprint, transport: transport, known: eras.withLock { $0[name] })
            eras.withLock { $0[name] = connection.era }
            let replaced = connections.withLock { all -> MCPServerConnection? in defer { all[name] = connection }; return all[name] }
            replaced?.transport.close()
            return connection
        } catch {
            transport.close()
            throw error
        }
    }

    private func drop(_ name: String) {
        connections.withLock { $0.removeValue(forKey: name) }?.transport.close()
        eras.withLock { _ = $0.removeValue(forKey: name) }
    }

    /// Calls `tool` with `arguments`: the result's text and whether the server called it an error.
    func call(_ tool: MCPClientRules.Tool, arguments: JSONValue) async throws -> (text: String, isError: Bool) {
        guard let connection = connections.withLock({ $0[tool.server] }) else {
            throw MCPRemoteError(code: -32000, message: "The MCP server \(tool.server) is not connected")
        }
        let work: @Sendable () async throws -> JSONValue = { try await connection.request("tools/call", params: ["name": .string(tool.remote), "arguments": arguments]) }
        let result = MCPClientRules.serialized(tool) ? try await lane.run(work) : try await work()
        return MCPClientRules.resultText(result)
    }

    func closeAll() {
        for connection in connections.withLock({ all -> [MCPServerConnection] in defer { all.removeAll() }; return Array(all.values) }) {
            connection.transport.close()
        }
    }
}

