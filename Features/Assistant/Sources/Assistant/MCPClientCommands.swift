import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import TermindCore

/// `termind assistant mcp add|rm|list|tools`: the MCP servers whose tools the assistant may
/// use, kept in `assistant.mcpServers` (a token in the secret store by reference).
extension AssistantFeature {
    func registerMCPClients(_ registrar: FeatureRegistrar) {
        registrar.handle(AssistantContracts.MCPServerAdd.self) { [self] request, _ in try await addMCPServer(request, ports: try current()) }
        registrar.handle(AssistantContracts.MCPServerRemove.self) { [self] request, _ in
            let ports = try current()
            let value = try await ports.settings.current(AssistantSettings.MCPServers.key)
            var record = try JSONValueDecoder.decode(AssistantSettings.MCPServers.self, from: value.value)
            guard let server = record.servers.removeValue(forKey: request.name) else {
                throw TermindError(.assistantUnknown, "No MCP server named \(request.name) (termind assistant mcp list).")
            }
            // Settings deletes the secret a record no longer references.
            try await Self.write(record, revision: value.revision, ports: ports)
            return Self.view(request.name, server)
        }
        registrar.handle(AssistantContracts.MCPServerList.self) { [self] _, _ in
            let record = try await current().settings.read(AssistantSettings.MCPServers.self)
            return .init(servers: record.servers.sorted { $0.key < $1.key }.map { Self.view($0.key, $0.value) })
        }
        registrar.handle(AssistantContracts.MCPServerTools.self) { [self] request, _ in
            let ports = try current()
            let record = try await ports.settings.read(AssistantSettings.MCPServers.self)
            if let only = request.server, record.servers[only] == nil {
                throw TermindError(.assistantUnknown, "No MCP server named \(only) (termind assistant mcp list).")
            }
            let policy = try await ports.settings.read(AssistantSettings.Policy.self)
            let discovery = await mcpClients.discover(ports, record: record, only: request.server)
            let tools = discovery.tools.map { tool in
                AssistantContracts.MCPToolView(name: tool.name, server: tool.server, readOnlyHint: tool.readOnly, destructiveHint: tool.destructive,
                                               rule: MCPClientRules.rule(explicit: policy.tools[tool.name], tool: tool),
                                               ruleFrom: policy.tools[tool.name] == nil ? "hints" : "person", description: String(tool.description.prefix(200)))
            }
            return .init(tools: tools, problems: discovery.problems, versions: discovery.versions)
        }
    }

    private func addMCPServer(_ request: AssistantContracts.MCPServerAdd.Request, ports: Ports) async throws -> AssistantContracts.MCPServerView {
        guard AssistantSettings.isIdentifier(request.name) else {
            throw TermindError(.assistantInvalid, "'\(request.name)' cannot be an MCP server's name: 1 to 40 lowercase letters, digits, '-' or '.'.")
        }
        let server: AssistantSettings.MCPServers.Server
        switch (request.command.flatMap { $0.isEmpty ? nil : $0 }, request.url) {
        case (let command?, nil):
            guard request.token == nil else { throw TermindError(.assistantInvalid, "--token is for an HTTP server (--url); a stdio server gets none.") }
            server = .init(transport: .stdio, command: command)
        case (nil, let url?):
            if let problem = AssistantSettings.urlProblem(url) { throw TermindError(.assistantInvalid, "--url \(url.prefix(200)) \(problem).") }
            server = .init(transport: .http, url: url)
        case (.some, .some):
            throw TermindError(.assistantInvalid, "An MCP server is a command (after --) or a URL (--url), not both.")
        case (nil, nil):
            throw TermindError(.assistantInvalid, "Give the server's command after -- (termind assistant mcp add files -- mcp-files --root /srv) or its --url.")
        }
        let value = try await ports.settings.current(AssistantSettings.MCPServers.key)
        var record = try JSONValueDecoder.decode(AssistantSettings.MCPServers.self, from: value.value)
        if record.servers[request.name] != nil && request.replace != true {
            throw TermindError(.assistantInvalid, "An MCP server named \(request.name) exists; --replace true replaces it.")
        }
        record.servers[request.name] = server
        try await Self.write(record, revision: value.revision, ports: ports)
        if let token = request.token, !token.isEmpty {
            do {
                _ = try await ports.context.call(SettingsContracts.SetSecret.self, .init(key: AssistantSettings.MCPServers.key, field: "servers.\(request.name).tokenRef", secret: token))
            } catch {
                // All or nothing: the server goes again when its token could not be kept.
                record.servers.removeValue(forKey: request.name)
                try? await Self.write(record, revision: nil, ports: ports)
                throw error
            }
        }
        let saved = try await ports.settings.read(AssistantSettings.MCPServers.self).servers[request.name] ?? server
        return Self.view(request.name, saved)
    }

    static func view(_ name: String, _ server: AssistantSettings.MCPServers.Server) -> AssistantContracts.MCPServerView {
        AssistantContracts.MCPServerView(name: name, transport: server.transport,
                                         target: server.transport == .stdio ? (server.command ?? []).joined(separator: " ") : (server.url ?? ""),
                                         enabled: server.enabled, token: !server.tokenRef.isEmpty)
    }
}
