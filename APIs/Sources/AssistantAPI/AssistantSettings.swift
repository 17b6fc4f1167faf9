import FoundationEssentials
import SettingsAPI
import TermindCore

/// The assistant's settings records (seed, "Settings replication"), registered by the
/// Assistant feature once it lands. Providers hold secret *references* only: the key
/// itself lives in the encrypted secret store on each device and never syncs.
public enum AssistantSettings {
    public struct Providers: SettingsRecord {
        /// The wire protocol a provider speaks (see docs/assistant.md).
        public enum ProviderProtocol: String, Codable, Sendable, Equatable, SchemaEnum, CaseIterable {
            /// OpenAI's Responses API at its full URL (`…/v1/responses`): "Automatic".
            case responses
            /// OpenAI-compatible Chat Completions at a base URL (OpenAI, Ollama, llama.cpp, vLLM).
            case chat
            /// Anthropic Messages at a base URL.
            case anthropic
            /// Gemini `streamGenerateContent` with an API key.
            case gemini
            /// Gemini on Vertex AI: a service account (its JSON in the secret store), a
            /// project and a location.
            case vertex
        }
        public struct Provider: Codable, Sendable, Equatable, SchemaDescribable {
            /// Both shapes validate: `protocol` with `url`, or the first one's `kind` with
            /// `baseURL` (read as above, written back in the new shape).
            public static var schema: JSONSchema {
                .object([
                    .init(name: "protocol", schema: ProviderProtocol.schema, required: false),
                    .init(name: "url", schema: .string(), required: false),
                    .init(name: "secretRef", schema: .string(), required: false),
                    .init(name: "serviceAccountRef", schema: .string(), required: false),
                    .init(name: "project", schema: .string(), required: false),
                    .init(name: "location", schema: .string(), required: false),
                    .init(name: "kind", schema: .enumeration(["anthropic", "openai", "ollama", "openai-compatible"]), required: false),
                    .init(name: "baseURL", schema: .string(), required: false),
                ])
            }

            public var `protocol`: ProviderProtocol
            /// Responses: the full URL; the others: their base URL. Filled in when a provider
            /// is added without one; nil only in a record written before URLs were required
            /// (such a provider is not used until one is set: no public endpoint is guessed).
            public var url: String?
            /// A handle into the secret store (`termind settings secret`); empty: anonymous
            /// (no auth header is sent).
            public var secretRef: String
            /// Vertex: the service account's JSON, in the secret store.
            public var serviceAccountRef: String
            public var project: String?
            public var location: String?
            /// The first shape's `kind` and `baseURL`, kept as they came and written back, so a
            /// record that went through this termind still reads where only they are known.
            public var legacyKind: String?
            public var legacyBaseURL: String?

            public init(protocol: ProviderProtocol, url: String? = nil, secretRef: String = "", serviceAccountRef: String = "",
                        project: String? = nil, location: String? = nil) {
                self.protocol = `protocol`
                self.url = url
                self.secretRef = secretRef
                self.serviceAccountRef = serviceAccountRef
                self.project = project
                self.location = location
            }

            private enum CodingKeys: String, CodingKey { case `protocol`, url, secretRef, serviceAccountRef, project, location, kind, baseURL }

            /// Reads the record's first shape too (`kind` anthropic, openai, ollama or
            /// openai-compatible, with `baseURL`): never guessing a public endpoint for a row
            /// that had none.
            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                secretRef = try container.decodeIfPresent(String.self, forKey: .secretRef) ?? ""
                serviceAccountRef = try container.decodeIfPresent(String.self, forKey: .serviceAccountRef) ?? ""
                project = try container.decodeIfPresent(String.self, forKey: .project)
                location = try container.decodeIfPresent(String.self, forKey: .location)
                legacyKind = try container.decodeIfPresent(String.self, forKey: .kind)
                legacyBaseURL = try container.decodeIfPresent(String.self, forKey: .baseURL)
                if let value = try container.decodeIfPresent(ProviderProtocol.self, forKey: .protocol) {
                    `protocol` = value
                    url = try container.decodeIfPresent(String.self, forKey: .url)
                    return
                }
                let base = try container.decodeIfPresent(String.self, forKey: .baseURL)
                switch try container.decode(String.self, forKey: .kind) {
                case "anthropic": `protocol` = .anthropic; url = base
                case "openai": `protocol` = .responses; url = base.map { ($0.hasSuffix("/") ? String($0.dropLast()) : $0) + "/responses" }
                case "ollama", "openai-compatible": `protocol` = .chat; url = base
                case let other:
                    throw DecodingError.dataCorruptedError(forKey: .kind, in: container, debugDescription: "'\(other)' is not a provider kind")
                }
            }

            public func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(`protocol`, forKey: .protocol)
                try container.encodeIfPresent(url, forKey: .url)
                try container.encode(secretRef, forKey: .secretRef)
                if !serviceAccountRef.isEmpty { try container.encode(serviceAccountRef, forKey: .serviceAccountRef) }
                try container.encodeIfPresent(project, forKey: .project)
                try container.encodeIfPresent(location, forKey: .location)
                try container.encodeIfPresent(legacyKind, forKey: .kind)
                try container.encodeIfPresent(legacyBaseURL, forKey: .baseURL)
            }
        }

        public static let key = "assistant.providers"
        public static let scope = SettingsScope.synced
        public static let summary = "Assistant model providers by name: protocol (responses, chat, anthropic, gemini, vertex), URL, references to the key (or Vertex service account) kept in the secret store."
        public static var defaults: Providers { Providers(providers: [:]) }
        public static var secretReferences: [String] { ["providers.*.secretRef", "providers.*.serviceAccountRef"] }

        public var providers: [String: Provider]

        public init(providers: [String: Provider]) { self.providers = providers }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            for (id, provider) in providers.sorted(by: { $0.key < $1.key }) {
                let path = "\(Self.key).providers.\(id)"
                if id.isEmpty || id.count > 40 || !id.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }) {
                    problems.append(SettingsProblem(path, "a provider name is 1 to 40 lowercase letters, digits or '-'"))
                }
                if let url = provider.url, let problem = AssistantSettings.urlProblem(url) {
                    problems.append(SettingsProblem(path + ".url", problem))
                }
                if provider.protocol == .vertex {
                    if provider.project?.isEmpty != false { problems.append(SettingsProblem(path + ".project", "is required for a vertex provider")) }
                    if let location = provider.location, !location.isEmpty, location.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }) {} else {
                        problems.append(SettingsProblem(path + ".location", "is required for a vertex provider (a region such as us-central1, or global)"))
                    }
                }
            }
            return problems
        }
    }
}

extension AssistantSettings {
    /// Models by id, each served by a provider of `assistant.providers` (a provider that is
    /// not there yet — a record still syncing — is allowed: it resolves once it arrives).
    public struct Models: SettingsRecord {
        public struct Model: Codable, Sendable, Equatable {
            public var provider: String
            /// The provider's own model name (`claude-sonnet-4`, `gpt-4.1`, `llama3.1:70b`).
            public var model: String
            public var contextTokens: Int?
            public var maxOutputTokens: Int?
            /// Whether the model can call tools (absent: it can); one that cannot is offered none.
            public var tools: Bool?
            public init(provider: String, model: String, contextTokens: Int? = nil, maxOutputTokens: Int? = nil, tools: Bool? = nil) {
                self.provider = provider
                self.model = model
                self.contextTokens = contextTokens
                self.maxOutputTokens = maxOutputTokens
                self.tools = tools
            }
        }
        public static let key = "assistant.models"
        public static let scope = SettingsScope.synced
        public static let summary = "Assistant models by id: provider id, the provider's model name, context and output token limits."
        public static var defaults: Models { Models(models: [:]) }

        public var models: [String: Model]
        public init(models: [String: Model]) { self.models = models }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            for (id, model) in models.sorted(by: { $0.key < $1.key }) {
                let path = "\(Self.key).models.\(id)"
                if !AssistantSettings.isIdentifier(id) { problems.append(SettingsProblem(path, "a model id is 1 to 40 lowercase letters, digits, '-' or '.'")) }
                if model.provider.isEmpty { problems.append(SettingsProblem(path + ".provider", "must name a provider")) }
                if model.model.isEmpty || model.model.count > 200 { problems.append(SettingsProblem(path + ".model", "must be 1 to 200 characters")) }
                if let tokens = model.contextTokens, !(1_000...10_000_000).contains(tokens) {
                    problems.append(SettingsProblem(path + ".contextTokens", "must be from 1000 to 10000000, not \(tokens)"))
                }
                if let tokens = model.maxOutputTokens, !(1...1_000_000).contains(tokens) {
                    problems.append(SettingsProblem(path + ".maxOutputTokens", "must be from 1 to 1000000, not \(tokens)"))
                }
            }
            return problems
        }
    }

    /// Which model plays which role. Only explicit choices are stored (seed): no generator
    /// means "the same as chat", no guardian means "automatic" — a fallback is resolved when
    /// read, never written. A record from before the guardian was named (`securityReview`)
    /// reads as its guardian and stays stored as it was.
    public struct Roles: SettingsRecord {
        public static let key = "assistant.roles"
        public static let scope = SettingsScope.synced
        public static let summary = "Assistant roles: the chat model; title, compact and generator (absent: the chat model); the guardian reviewing actions (absent: automatic)."
        public static var defaults: Roles { Roles() }

        public var chat: String?
        /// Names conversations (absent: the chat model).
        public var title: String?
        /// Summarizes a long conversation to fit its model (absent: the chat model).
        public var compact: String?
        public var generator: String?
        public var guardian: String?

        public init(chat: String? = nil, title: String? = nil, compact: String? = nil, generator: String? = nil, guardian: String? = nil) {
            self.chat = chat
            self.title = title
            self.compact = compact
            self.generator = generator
            self.guardian = guardian
        }

        private enum CodingKeys: String, CodingKey { case chat, title, compact, generator, guardian, securityReview }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            chat = try container.decodeIfPresent(String.self, forKey: .chat)
            title = try container.decodeIfPresent(String.self, forKey: .title)
            compact = try container.decodeIfPresent(String.self, forKey: .compact)
            generator = try container.decodeIfPresent(String.self, forKey: .generator)
            let legacy = try container.decodeIfPresent(String.self, forKey: .securityReview)
            guardian = try container.decodeIfPresent(String.self, forKey: .guardian) ?? legacy
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(chat, forKey: .chat)
            try container.encodeIfPresent(title, forKey: .title)
            try container.encodeIfPresent(compact, forKey: .compact)
            try container.encodeIfPresent(generator, forKey: .generator)
            try container.encodeIfPresent(guardian, forKey: .guardian)
        }

        /// The generator in effect: the chosen one, else the chat model.
        public var effectiveGenerator: String? { generator ?? chat }

        public func problems() -> [SettingsProblem] {
            [("chat", chat), ("title", title), ("compact", compact), ("generator", generator), ("guardian", guardian)].compactMap { field, value in
                guard let value, !AssistantSettings.isIdentifier(value) else { return nil }
                return SettingsProblem("\(Self.key).\(field)", "must be a model id of assistant.models (1 to 40 lowercase letters, digits, '-' or '.')")
            }
        }
    }

    /// MCP servers the assistant may use, by name. Custom headers are ordinary synced
    /// settings (seed); a credential goes in a header only through a secret reference.
    public struct MCPServers: SettingsRecord {
        public enum Transport: String, Codable, Sendable, Equatable, SchemaEnum { case stdio, http }
        public struct Server: Codable, Sendable, Equatable {
            public var transport: Transport
            /// stdio: the program and its arguments.
            public var command: [String]?
            /// http: the endpoint.
            public var url: String?
            public var headers: [String: String]?
            /// A secret reference sent as `Authorization: Bearer …` (empty: none).
            public var tokenRef: String
            public var enabled: Bool

            public init(transport: Transport, command: [String]? = nil, url: String? = nil, headers: [String: String]? = nil,
                        tokenRef: String = "", enabled: Bool = true) {
                self.transport = transport
                self.command = command
                self.url = url
                self.headers = headers
                self.tokenRef = tokenRef
                self.enabled = enabled
            }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                transport = try container.decode(Transport.self, forKey: .transport)
                command = try container.decodeIfPresent([String].self, forKey: .command)
                url = try container.decodeIfPresent(String.self, forKey: .url)
                headers = try container.decodeIfPresent([String: String].self, forKey: .headers)
                tokenRef = try container.decodeIfPresent(String.self, forKey: .tokenRef) ?? ""
                enabled = try container.decodeIfPresent(Bool.self, forKey: .enabled) ?? true
            }
        }
        public static let key = "assistant.mcpServers"
        public static let scope = SettingsScope.synced
        public static let summary = "MCP servers the assistant may use, by name: stdio command or http URL, headers, a token reference, enabled."
        public static var defaults: MCPServers { MCPServers(servers: [:]) }
        public static var secretReferences: [String] { ["servers.*.tokenRef"] }

        public var servers: [String: Server]
        public init(servers: [String: Server]) { self.servers = servers }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            for (name, server) in servers.sorted(by: { $0.key < $1.key }) {
                let path = "\(Self.key).servers.\(name)"
                if !AssistantSettings.isIdentifier(name) { problems.append(SettingsProblem(path, "a server name is 1 to 40 lowercase letters, digits, '-' or '.'")) }
                switch server.transport {
                case .stdio:
                    if server.command?.first?.isEmpty != false { problems.append(SettingsProblem(path + ".command", "a stdio server needs its program")) }
                    if server.url != nil { problems.append(SettingsProblem(path + ".url", "is for an http server, not stdio")) }
                case .http:
                    if let url = server.url, (url.hasPrefix("https://") || url.hasPrefix("http://")), URL(string: url)?.host != nil {} else {
                        problems.append(SettingsProblem(path + ".url", "an http server needs an http(s) URL with a host"))
                    }
                    if server.command != nil { problems.append(SettingsProblem(path + ".command", "is for a stdio server, not http")) }
                }
                for header in (server.headers ?? [:]).keys.sorted() where header.isEmpty || header.contains(where: { $0 == ":" || $0.isWhitespace || $0.isNewline }) {
                    problems.append(SettingsProblem(path + ".headers.\(header)", "is not a header name"))
                }
                for (header, value) in (server.headers ?? [:]).sorted(by: { $0.key < $1.key }) where value.contains(where: \.isNewline) {
                    problems.append(SettingsProblem(path + ".headers.\(header)", "a header value has no line breaks"))
                }
            }
            return problems
        }
    }

    /// What stays on this device (seed): the approval mode, the last model used, and the MCP
    /// listener (its token a secret reference, never synced).
    public struct Local: SettingsRecord {
        public enum Approval: String, Codable, Sendable, Equatable, SchemaEnum {
            /// Every action waits for a person.
            case ask
            /// Read-only actions run; anything that changes a host waits.
            case readOnly = "read-only"
        }
        public static let key = "assistant.local"
        public static let scope = SettingsScope.deviceLocal
        public static let summary = "Assistant on this device: approval mode, last model used, the MCP listener (port, enabled) and its token reference."
        public static var defaults: Local { Local() }
        public static var secretReferences: [String] { ["listenerTokenRef"] }

        public var approval: Approval
        public var lastModel: String?
        public var listenerEnabled: Bool
        public var listenerPort: Int
        public var listenerTokenRef: String
        /// The token was shown (`termind mcp token show` shows it once).
        public var listenerTokenShown: Bool

        public init(approval: Approval = .ask, lastModel: String? = nil, listenerEnabled: Bool = false, listenerPort: Int = 7391, listenerTokenRef: String = "",
                    listenerTokenShown: Bool = false) {
            self.listenerTokenShown = listenerTokenShown
            self.approval = approval
            self.lastModel = lastModel
            self.listenerEnabled = listenerEnabled
            self.listenerPort = listenerPort
            self.listenerTokenRef = listenerTokenRef
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Local()
            approval = try container.decodeIfPresent(Approval.self, forKey: .approval) ?? defaults.approval
            lastModel = try container.decodeIfPresent(String.self, forKey: .lastModel)
            listenerEnabled = try container.decodeIfPresent(Bool.self, forKey: .listenerEnabled) ?? defaults.listenerEnabled
            listenerPort = try container.decodeIfPresent(Int.self, forKey: .listenerPort) ?? defaults.listenerPort
            listenerTokenRef = try container.decodeIfPresent(String.self, forKey: .listenerTokenRef) ?? ""
            listenerTokenShown = try container.decodeIfPresent(Bool.self, forKey: .listenerTokenShown) ?? false
        }

        public func problems() -> [SettingsProblem] {
            (1024...65535).contains(listenerPort) ? [] : [SettingsProblem("\(Self.key).listenerPort", "must be from 1024 to 65535, not \(listenerPort)")]
        }
    }

    /// Why `url` cannot be a provider's URL (nil: it can): http(s) with a host, no
    /// credentials or fragment in it (a key goes in the secret store, never the URL).
    public static func urlProblem(_ url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
              let host = components.host, !host.isEmpty else { return "must be an http(s) URL with a host" }
        if components.user != nil || components.password != nil { return "must not hold a user or password (keep a key in the secret store)" }
        if components.fragment != nil { return "must not have a #fragment" }
        return nil
    }

    /// 1 to 40 lowercase letters, digits or '-'.
    public static func isProviderName(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 40 && text.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "-" }
    }

    public static func isIdentifier(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 40 && text.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "-" || $0 == "." }
    }
}

extension AssistantSettings {
    /// The approval policy every agent-originated call is decided by (docs/assistant.md,
    /// "Policy"): host tiers by host id or tag, a rule per tool, the default permission mode.
    /// Written by a person (`termind assistant tier`, `settings set`), never by a model: the
    /// policy refuses every agent call to anything but the assistant's tools.
    public struct Policy: SettingsRecord {
        /// What may run on a host. `read-only`: only what reads, in every mode; `ask`: what
        /// changes the host needs an approval (the default); `auto`: it runs.
        public enum Tier: String, Codable, Sendable, Equatable, SchemaEnum, CaseIterable {
            case readOnly = "read-only"
            case ask
            case auto
            /// Most restrictive first.
            public var rank: Int {
                switch self {
                case .readOnly: 0
                case .ask: 1
                case .auto: 2
                }
            }
        }
        /// Who answers what needs an approval: the person (`ask`, the default), the Guardian
        /// (`approve-for-me`), nobody (`full-access`: pre-approved). No mode passes a tier,
        /// a denied tool, host-key trust, secrets, schemas, paths or the fetch rules.
        public enum Mode: String, Codable, Sendable, Equatable, SchemaEnum, CaseIterable {
            case ask
            case approveForMe = "approve-for-me"
            case fullAccess = "full-access"
        }
        /// A tool's rule: `deny` always refuses, `approve` runs (within the host's tier),
        /// `ask` needs an approval for what changes something (reading runs).
        public enum ToolRule: String, Codable, Sendable, Equatable, SchemaEnum, CaseIterable {
            case deny
            case approve
            case ask
        }

        /// The tools a rule may name.
        public static let toolNames = ["list_hosts", "ssh_exec", "sftp_list", "sftp_stat", "sftp_read", "get_metrics", "fetch", "sftp_write", "sftp_copy", "request_user_secret", "scratch_read", "scratch_write",
                                        "sftp_download_link", "sftp_upload_link", "sftp_link_status"]

        public static let key = "assistant.policy"
        public static let scope = SettingsScope.synced
        public static let summary = "Assistant policy: host tiers by host id or tag (read-only, ask, auto), a rule per tool (deny, approve, ask), the default mode (ask, approve-for-me, full-access)."
        public static var defaults: Policy { Policy() }

        /// Tiers by saved host id.
        public var hosts: [String: Tier]
        /// Tiers by tag: a host with several takes the most restrictive.
        public var tags: [String: Tier]
        /// Rules by tool name (absent: ssh_exec, fetch, sftp_write and sftp_copy ask, the others run).
        public var tools: [String: ToolRule]
        /// A run's mode when it names none.
        public var mode: Mode
        /// How long a Guardian review may take before it counts as a refusal (1-300 s).
        public var guardianTimeoutSeconds: Int
        /// How long what an MCP session asks waits for `termind mcp approvals` (1-3600 s).
        public var approvalTimeoutSeconds: Int

        public init(hosts: [String: Tier] = [:], tags: [String: Tier] = [:], tools: [String: ToolRule] = [:], mode: Mode = .ask, guardianTimeoutSeconds: Int = 30,
                    approvalTimeoutSeconds: Int = 120) {
            self.guardianTimeoutSeconds = guardianTimeoutSeconds
            self.approvalTimeoutSeconds = approvalTimeoutSeconds
            self.hosts = hosts
            self.tags = tags
            self.tools = tools
            self.mode = mode
        }

        private enum CodingKeys: String, CodingKey { case hosts, tags, tools, mode, guardianTimeoutSeconds, approvalTimeoutSeconds }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            hosts = try container.decodeIfPresent([String: Tier].self, forKey: .hosts) ?? [:]
            tags = try container.decodeIfPresent([String: Tier].self, forKey: .tags) ?? [:]
            tools = try container.decodeIfPresent([String: ToolRule].self, forKey: .tools) ?? [:]
            mode = try container.decodeIfPresent(Mode.self, forKey: .mode) ?? .ask
            guardianTimeoutSeconds = try container.decodeIfPresent(Int.self, forKey: .guardianTimeoutSeconds) ?? 30
            approvalTimeoutSeconds = try container.decodeIfPresent(Int.self, forKey: .approvalTimeoutSeconds) ?? 120
        }

        /// `mcp__SERVER__TOOL`: a configured MCP server's tool (termind assistant mcp tools).
        public static func isMCPToolName(_ name: String) -> Bool {
            guard name.hasPrefix("mcp__"), name.count <= 64 else { return false }
            let rest = name.dropFirst(5)
            guard let split = rest.firstRange(of: "__") else { return false }
            return !rest[..<split.lowerBound].isEmpty && !rest[split.upperBound...].isEmpty
                && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }
        }

        /// A host's tier: its own when set, else the most restrictive of its tags', else `ask`
        /// — the host's own record can only tighten what its tags say.
        public func tier(host id: String, tags hostTags: [String]) -> Tier {
            let fromTags = hostTags.compactMap { tags[$0] }.min { $0.rank < $1.rank }
            switch (hosts[id], fromTags) {
            case (let own?, let tagged?): return own.rank <= tagged.rank ? own : tagged
            case (let own?, nil): return own
            case (nil, let tagged?): return tagged
            case (nil, nil): return .ask
            }
        }

        /// A tool's rule (absent: ssh_exec asks, the others run).
        public func rule(tool: String) -> ToolRule {
            tools[tool] ?? (["ssh_exec", "fetch", "sftp_write", "sftp_copy", "sftp_upload_link"].contains(tool) ? .ask : .approve)
        }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            for name in tools.keys.sorted() where !Self.toolNames.contains(name) && !Self.isMCPToolName(name) {
                problems.append(SettingsProblem("\(Self.key).tools.\(name)", "is not a tool of the assistant (\(Self.toolNames.joined(separator: ", ")), or an MCP server's mcp__SERVER__TOOL)"))
            }
            for tag in tags.keys.sorted() where tag.isEmpty || tag.count > 100 {
                problems.append(SettingsProblem("\(Self.key).tags.\(tag)", "a tag is 1 to 100 characters"))
            }
            if !(1...300).contains(guardianTimeoutSeconds) {
                problems.append(SettingsProblem("\(Self.key).guardianTimeoutSeconds", "must be from 1 to 300, not \(guardianTimeoutSeconds)"))
            }
            if !(1...3600).contains(approvalTimeoutSeconds) {
                problems.append(SettingsProblem("\(Self.key).approvalTimeoutSeconds", "must be from 1 to 3600, not \(approvalTimeoutSeconds)"))
            }
            for id in hosts.keys.sorted() where id.isEmpty || id.count > 100 {
                problems.append(SettingsProblem("\(Self.key).hosts.\(id)", "a host id is 1 to 100 characters"))
            }
            return problems
        }
    }
}
