import AssistantAPI
import AssistantRules
import CurlHTTP
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SettingsAPI
import SFTPAPI
import Synchronization
import TermindCore
import TermindStore
import VaultAPI

/// The Assistant (docs/assistant.md): providers and models kept in Settings' records (keys
/// in the secret store by reference), conversations in its own tables, a run per prompt that
/// streams the answer and dispatches tool calls through the kernel under the policy it
/// provides (`kernel.policy`).
final class AssistantFeature: Feature {
    struct Ports: Sendable {
        let store: ConversationStore
        let settings: any SettingsValues
        let client: ModelClient
        let context: FeatureContext
        let logger: Logger
        let audit: AuditLog
        let scratch: Scratch
        let hosts: any HostDirectory
    }

    private let ports = Mutex<Ports?>(nil)
    let policy = AssistantPolicy()
    /// Runs inside `termind serve`, which outlive the clients that started them.
    private let live = LiveRuns()
    let guardians = Guardians()
    /// `termind mcp` sessions started in this process (their conversations' numbers).
    let mcpSessions = Atomic<Int>(0)
    /// What MCP sessions inside serve ask a person.
    let approvals = MCPApprovals()
    /// The MCP HTTP listener's token, and the listener inside serve when one was asked for.
    let mcpToken = MCPToken()
    /// The configured MCP servers this process is connected to (their tools offered to runs).
    let mcpClients = MCPClients()
    let http = Mutex<MCPHTTPEndpoint?>(nil)

    func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("The Assistant is not started.") }
        return ports
    }

    private static func now() -> Double { Date().timeIntervalSince1970 }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.policy, policy as any CallPolicy)
        registerProviders(registrar)
        registerModels(registrar)
        registerConversations(registrar)
        registrar.stream(AssistantStreams.Run.self) { [self] request, session in
            try await run(request, session: session, ports: try current())
        }
        registrar.stream(AssistantStreams.Attach.self) { [self] request, session in
            try await attach(request, session: session, ports: try current())
        }
        registrar.stream(AssistantStreams.Chat.self) { [self] request, session in
            try await chat(request, session: session, ports: try current())
        }
        registrar.stream(AssistantStreams.Suggest.self) { [self] request, session in
            try await suggest(request, session: session, ports: try current())
        }
        registerPolicy(registrar)
        registrar.stream(AssistantStreams.MCP.self) { [self] request, session in
            try await mcp(request, session: session, ports: try current())
        }
        registrar.stream(AssistantStreams.MCPApprovals.self) { [self] request, session in
            try await mcpApprovals(request, session: session, ports: try current())
        }
        registerMCPClients(registrar)
        registrar.handle(AssistantContracts.MCPTokenShow.self) { [self] _, _ in try await mcpToken.show(try current()) }
        registrar.handle(AssistantContracts.MCPStatus.self) { [self] _, _ in
            let ports = try current()
            let local = try await ports.settings.read(AssistantSettings.Local.self)
            let endpoint = http.withLock { $0 }
            return .init(url: endpoint?.url, sessions: endpoint?.counts.sessions ?? 0, clients: endpoint?.counts.clients ?? 0,
                         tokenExists: (try? await MCPToken.read(ports, local: local)) != nil, tokenShown: local.listenerTokenShown)
        }
        registrar.handle(AssistantContracts.MCPTokenRotate.self) { [self] _, _ in
            let made = try await mcpToken.make(try current(), shown: true)
            // A new token revokes every link made under the old one.
            http.withLock { $0 }?.channels?.revoke(owner: nil)
            return .init(token: made, note: MCPToken.note)
        }
    }

    func start(_ context: FeatureContext) async throws {
        let settings = try context.ports.require(.settingsValues)
        for record in [AssistantSettings.Providers.declaration, AssistantSettings.Models.declaration, AssistantSettings.Roles.declaration,
                       AssistantSettings.MCPServers.declaration, AssistantSettings.Local.declaration, AssistantSettings.Policy.declaration] {
            try settings.register(record, owner: context.featureID)
        }
        let db = try context.ports.require(.store)
        do {
            let report = try await db.migrate(AssistantSchema.schema)
            if !report.applied.isEmpty { context.logger.info("assistant.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        let store = ConversationStore(db: db)
        // A run that was going when termind stopped is interrupted, never resumed.
        let left = try await store.interruptLeftovers(now: Self.now())
        if left.runs > 0 { context.logger.info("assistant.interrupted", ["runs": .int(left.runs), "calls": .int(left.calls)]) }
        let client = ModelClient(http: HTTPClient(logger: context.logger.child("http")), tokens: VertexTokens())
        let hosts = try context.ports.require(.hostDirectory)
        let scratch = Scratch(root: URL(fileURLWithPath: db.path).deletingLastPathComponent().appendingPathComponent("assistant-scratch").path)
        mkdir(scratch.root, 0o700)
        policy.configure(.init(settings: settings, hosts: hosts, scratchRoot: AssistantPolicy.realpath(scratch.root) ?? scratch.root))
        ports.withLock {
            $0 = Ports(store: store, settings: settings, client: client, context: context, logger: context.logger, audit: AuditLog(db: db), scratch: scratch, hosts: hosts)
        }
        // MCP over HTTP inside serve: --mcp-listen, else assistant.local's listener when enabled.
        if context.resident {
            let local = try await settings.read(AssistantSettings.Local.self)
            if let address = context.options["mcp-listen"] ?? (local.listenerEnabled ? "127.0.0.1:\(local.listenerPort)" : nil) {
                // Files move through the SFTP feature's scheduler (when it runs), never through here.
                let channels = ByteChannels(scheduler: context.ports.optional(.sftpScheduler), audit: try current().audit)
                let endpoint = MCPHTTPEndpoint(feature: self, ports: try current(), token: mcpToken, channels: channels)
                try await endpoint.start(address)
                http.withLock { $0 = endpoint }
            }
        }
    }

    func stop() async {
        mcpClients.closeAll()
        await http.withLock({ state -> MCPHTTPEndpoint? in defer { state = nil }; return state })?.stop()
        policy.configure(nil)
        live.cancelAll()
        ports.withLock { $0 = nil }
    }

    // MARK: - Settings records

    private static func providers(_ ports: Ports) async throws -> (AssistantSettings.Providers, revision: Int) {
        let value = try await ports.settings.current(AssistantSettings.Providers.key)
        let providers = (try? JSONValueDecoder.decode(AssistantSettings.Providers.self, from: value.value)) ?? .defaults
        return (providers, value.revision)
    }

    static func write<R: SettingsRecord>(_ record: R, revision: Int?, ports: Ports) async throws {
        guard case .object(let fields) = try JSONCoding.parse(try JSONCoding.encode(record), source: R.key) else { return }
        _ = try await ports.context.call(SettingsContracts.Set.self, .init(key: R.key, value: fields, replace: true, revision: revision))
    }

    private static func setSecret(_ secret: Secret, field: String, ports: Ports) async throws {
        _ = try await ports.context.call(SettingsContracts.SetSecret.self, .init(key: AssistantSettings.Providers.key, field: field, secret: secret))
    }

    // MARK: - Providers

    private func registerProviders(_ registrar: FeatureRegistrar) {
        registrar.handle(AssistantContracts.AddProvider.self) { [self] request, _ in try await addProvider(request, ports: try current()) }
        registrar.handle(AssistantContracts.EditProvider.self) { [self] request, _ in try await editProvider(request, ports: try current()) }
        registrar.handle(AssistantContracts.ListProviders.self) { [self] _, _ in
            let ports = try current()
            let (providers, _) = try await Self.providers(ports)
            var views: [AssistantContracts.ProviderView] = []
            for (name, provider) in providers.providers.sorted(by: { $0.key < $1.key }) { views.append(await Self.view(name, provider, ports: ports)) }
            return .init(providers: views)
        }
        registrar.handle(AssistantContracts.RemoveProvider.self) { [self] request, _ in
            let ports = try current()
            var (providers, revision) = try await Self.providers(ports)
            guard let provider = providers.providers[request.name] else { throw Self.unknownProvider(request.name, providers) }
            let models = try await ports.settings.read(AssistantSettings.Models.self).models.filter { $0.value.provider == request.name }.keys.sorted()
            guard models.isEmpty else {
                throw TermindError(.assistantInvalid, "Provider \(request.name) serves the models \(models.joined(separator: ", ")); remove them first (termind assistant model rm ID).")
            }
            let view = await Self.view(request.name, provider, ports: ports)
            providers.providers[request.name] = nil
            // Settings deletes the secrets a record no longer references.
            try await Self.write(providers, revision: revision, ports: ports)
            return view
        }
        registrar.handle(AssistantContracts.TestProvider.self) { [self] request, _ in
            let ports = try current()
            let (providers, _) = try await Self.providers(ports)
            guard let provider = providers.providers[request.name] else { throw Self.unknownProvider(request.name, providers) }
            let model = try resolved(name: request.name, provider: provider, model: "", id: request.name, tools: false, maxOutputTokens: nil, ports: ports)
            if provider.protocol == .vertex {
                // Vertex lists no models: the token exchange is the test.
                guard case .serviceAccount(let account) = try await model.credential() else { throw Self.noServiceAccount(request.name) }
                _ = try await ports.client.tokens.token(for: account, provider: request.name, http: ports.client.http)
                return .init(name: request.name, reachable: true, models: [], note: "The service account's token was issued; Vertex models are named by hand (termind assistant model add).")
            }
            let models = try await ports.client.models(model)
            return .init(name: request.name, reachable: true, models: models)
        }
    }

    private func addProvider(_ request: AssistantContracts.AddProvider.Request, ports: Ports) async throws -> AssistantContracts.ProviderView {
        var (providers, revision) = try await Self.providers(ports)
        guard AssistantSettings.isProviderName(request.name) else {
            throw TermindError(.assistantInvalid, "'\(request.name)' cannot be a provider name: 1 to 40 lowercase letters, digits or '-'.")
        }
        let existed = providers.providers[request.name] != nil
        if existed && request.replace != true {
            throw TermindError(.assistantInvalid, "A provider named \(request.name) exists; change it with termind assistant provider edit \(request.name), or replace it with --replace true.")
        }
        let kind = request.protocol ?? .responses
        let account = try Self.serviceAccount(request.serviceAccount, protocol: kind)
        if kind == .vertex {
            guard account != nil else { throw Self.noServiceAccount(request.name) }
            guard request.project?.isEmpty == false else { throw TermindError(.assistantInvalid, "A vertex provider needs --project (the Google Cloud project id).") }
            guard request.location?.isEmpty == false else { throw TermindError(.assistantInvalid, "A vertex provider needs --location (us-central1, europe-west4, global, …).") }
        } else if request.project != nil || request.location != nil {
            throw TermindError(.assistantInvalid, "--project and --location are for a vertex provider; \(request.name) speaks \(kind.rawValue).")
        }
        let url = request.url ?? ProviderAddress.defaultURL(ModelProtocol(rawValue: kind.rawValue) ?? .responses, location: request.location)
        if let problem = AssistantSettings.urlProblem(url) { throw TermindError(.assistantInvalid, "--url '\(url)' \(problem).") }
        providers.providers[request.name] = .init(protocol: kind, url: url, project: request.project, location: request.location)
        try await Self.write(providers, revision: revision, ports: ports)
        do {
            if let key = request.key, !key.isEmpty { try await Self.setSecret(key, field: "providers.\(request.name).secretRef", ports: ports) }
            if let account { try await Self.setSecret(account, field: "providers.\(request.name).serviceAccountRef", ports: ports) }
        } catch {
            // All or nothing: the provider goes again when its secret could not be kept.
            if !existed, let (now, revision) = try? await Self.providers(ports) {
                var without = now
                without.providers[request.name] = nil
                try? await Self.write(without, revision: revision, ports: ports)
            }
            throw error
        }
        let (saved, _) = try await Self.providers(ports)
        return await Self.view(request.name, saved.providers[request.name] ?? providers.providers[request.name]!, ports: ports)
    }

    private func editProvider(_ request: AssistantContracts.EditProvider.Request, ports: Ports) async throws -> AssistantContracts.ProviderView {
        var (providers, revision) = try await Self.providers(ports)
        guard var provider = providers.providers[request.name] else { throw Self.unknownProvider(request.name, providers) }
        let account = try Self.serviceAccount(request.serviceAccount, protocol: provider.protocol)
        if let url = request.url {
            if let problem = AssistantSettings.urlProblem(url) { throw TermindError(.assistantInvalid, "--url '\(url)' \(problem).") }
            provider.url = url
            // The first shape's fields would now say something else: they go.
            provider.legacyKind = nil
            provider.legacyBaseURL = nil
        }
        if request.project != nil || request.location != nil {
            guard provider.protocol == .vertex else { throw TermindError(.assistantInvalid, "--project and --location are for a vertex provider; \(request.name) speaks \(provider.protocol.rawValue).") }
            provider.project = request.project ?? provider.project
            provider.location = request.location ?? provider.location
        }
        if provider != providers.providers[request.name] {
            providers.providers[request.name] = provider
            try await Self.write(providers, revision: revision, ports: ports)
            revision += 1
        }
        if request.anonymous == true {
            guard request.key == nil else { throw TermindError(.assistantInvalid, "--anonymous true and --key - contradict each other; give one.") }
            guard provider.protocol != .vertex else { throw TermindError(.assistantInvalid, "A vertex provider cannot be anonymous: it needs its service account.") }
            try await Self.setSecret(Secret(""), field: "providers.\(request.name).secretRef", ports: ports)
        }
        if let key = request.key { try await Self.setSecret(key, field: "providers.\(request.name).secretRef", ports: ports) }
        if let account { try await Self.setSecret(account, field: "providers.\(request.name).serviceAccountRef", ports: ports) }
        let (saved, _) = try await Self.providers(ports)
        return await Self.view(request.name, saved.providers[request.name] ?? provider, ports: ports)
    }

    /// A service account file read once and checked (its JSON, its token URL).
    private static func serviceAccount(_ path: String?, protocol kind: AssistantSettings.Providers.ProviderProtocol) throws -> Secret? {
        guard let path else { return nil }
        guard kind == .vertex else { throw TermindError(.assistantInvalid, "--service-account is for a vertex provider.") }
        guard let data = FileText.read(path, limit: 65 << 10) else { throw TermindError(.assistantInvalid, "--service-account: cannot read \(path).") }
        guard data.count <= 64 << 10 else { throw TermindError(.assistantInvalid, "--service-account: \(path) is larger than 64 KiB; it is not a service account key.") }
        let secret = Secret(String(decoding: data, as: UTF8.self))
        _ = try VertexTokens.account(secret)
        return secret
    }

    private static func view(_ name: String, _ provider: AssistantSettings.Providers.Provider, ports: Ports) async -> AssistantContracts.ProviderView {
        let vertex = provider.protocol == .vertex
        let reference = vertex ? provider.serviceAccountRef : provider.secretRef
        let field = vertex ? "serviceAccountRef" : "secretRef"
        let present = reference.isEmpty ? true : ((try? await ports.settings.secret(reference, key: AssistantSettings.Providers.key, field: "providers.\(name).\(field)")) ?? nil) != nil
        return .init(name: name, protocol: provider.protocol, url: provider.url, credential: reference.isEmpty ? "anonymous" : vertex ? "service-account" : "key",
                     credentialPresent: present, project: provider.project, location: provider.location)
    }

    static func unknownProvider(_ name: String, _ providers: AssistantSettings.Providers) -> TermindError {
        let known = providers.providers.keys.sorted().joined(separator: ", ")
        let hint = known.isEmpty ? "; add one with termind assistant provider add NAME --protocol … --key -." : " (providers: \(known))."
        return TermindError(.assistantUnknown, "There is no provider \(name)" + hint)
    }

    private static func noServiceAccount(_ name: String) -> TermindError {
        TermindError(.assistantInvalid, "A vertex provider needs its service account: termind assistant provider edit \(name) --service-account FILE (the JSON key from Google Cloud).")
    }

    // MARK: - Models and roles

    private func registerModels(_ registrar: FeatureRegistrar) {
        registrar.handle(AssistantContracts.AddModel.self) { [self] request, _ in
            let ports = try current()
            let (providers, _) = try await Self.providers(ports)
            guard providers.providers[request.provider] != nil else { throw Self.unknownProvider(request.provider, providers) }
            guard AssistantSettings.isIdentifier(request.id) else {
                throw TermindError(.assistantInvalid, "'\(request.id)' cannot be a model id: 1 to 40 lowercase letters, digits, '-' or '.'.")
            }
            let value = try await ports.settings.current(AssistantSettings.Models.key)
            var models = try await ports.settings.read(AssistantSettings.Models.self)
            models.models[request.id] = .init(provider: request.provider, model: request.model, contextTokens: request.contextTokens,
                                              maxOutputTokens: request.maxOutputTokens, tools: request.tools)
            try await Self.write(models, revision: value.revision, ports: ports)
            var roles = try await ports.settings.read(AssistantSettings.Roles.self)
            if roles.chat == nil {
                roles.chat = request.id
                try await Self.write(roles, revision: nil, ports: ports)
            }
            return Self.modelView(request.id, models.models[request.id]!, roles: roles)
        }
        registrar.handle(AssistantContracts.ListModels.self) { [self] _, _ in
            let ports = try current()
            let models = try await ports.settings.read(AssistantSettings.Models.self)
            let roles = try await ports.settings.read(AssistantSettings.Roles.self)
            return .init(models: models.models.sorted { $0.key < $1.key }.map { Self.modelView($0.key, $0.value, roles: roles) })
        }
        registrar.handle(AssistantContracts.RemoveModel.self) { [self] request, _ in
            let ports = try current()
            let value = try await ports.settings.current(AssistantSettings.Models.key)
            var models = try await ports.settings.read(AssistantSettings.Models.self)
            guard let model = models.models[request.id] else { throw Self.unknownModel(request.id, models) }
            let roles = try await ports.settings.read(AssistantSettings.Roles.self)
            let playing = Self.roles(of: request.id, roles)
            guard playing.isEmpty else {
                throw TermindError(.assistantInvalid, "Model \(request.id) is the \(playing.joined(separator: " and ")) model; choose another first (termind assistant role ROLE MODEL).")
            }
            models.models[request.id] = nil
            try await Self.write(models, revision: value.revision, ports: ports)
            return Self.modelView(request.id, model, roles: roles)
        }
        registrar.handle(AssistantContracts.SetRole.self) { [self] request, _ in
            let ports = try current()
            let models = try await ports.settings.read(AssistantSettings.Models.self)
            if !request.model.isEmpty, models.models[request.model] == nil { throw Self.unknownModel(request.model, models) }
            var roles = try await ports.settings.read(AssistantSettings.Roles.self)
            let value: String? = request.model.isEmpty ? nil : request.model
            switch request.role {
            case .chat: roles.chat = value
            case .title: roles.title = value
            case .compact: roles.compact = value
            case .generator: roles.generator = value
            case .guardian: roles.guardian = value
            }
            try await Self.write(roles, revision: nil, ports: ports)
            return roles
        }
    }

    private static func roles(of id: String, _ roles: AssistantSettings.Roles) -> [String] {
        [("chat", roles.chat), ("title", roles.title), ("compact", roles.compact), ("generator", roles.generator), ("guardian", roles.guardian)]
            .compactMap { $0.1 == id ? $0.0 : nil }
    }

    private static func modelView(_ id: String, _ model: AssistantSettings.Models.Model, roles: AssistantSettings.Roles) -> AssistantContracts.ModelView {
        .init(id: id, provider: model.provider, model: model.model, tools: model.tools ?? true, roles: Self.roles(of: id, roles))
    }

    static func unknownModel(_ id: String, _ models: AssistantSettings.Models) -> TermindError {
        let known = models.models.keys.sorted().joined(separator: ", ")
        let hint = known.isEmpty ? "; add one with termind assistant model add ID --provider NAME --model MODEL." : " (models: \(known))."
        return TermindError(.assistantUnknown, "There is no model \(id)" + hint)
    }

    /// The model a request names: a model id, a provider with its own model name, or the
    /// chat role's model.
    func resolve(model: String?, provider: String?, ports: Ports) async throws -> ResolvedModel {
        let (providers, _) = try await Self.providers(ports)
        if let provider {
            guard let record = providers.providers[provider] else { throw Self.unknownProvider(provider, providers) }
            guard let model, !model.isEmpty else { throw TermindError(.assistantInvalid, "--provider \(provider) needs --model, the provider's name of the model.") }
            return try resolved(name: provider, provider: record, model: model, id: "\(provider)/\(model)", tools: true, maxOutputTokens: nil, ports: ports)
        }
        let models = try await ports.settings.read(AssistantSettings.Models.self)
        let roles = try await ports.settings.read(AssistantSettings.Roles.self)
        guard let id = model ?? roles.chat else {
            throw TermindError(.assistantUnknown, "No model is chosen: add one with termind assistant model add ID --provider NAME --model MODEL"
                + " (or name one with --provider NAME --model MODEL).")
        }
        guard let entry = models.models[id] else { throw Self.unknownModel(id, models) }
        guard let record = providers.providers[entry.provider] else { throw Self.unknownProvider(entry.provider, providers) }
        var resolved = try resolved(name: entry.provider, provider: record, model: entry.model, id: id, tools: entry.tools ?? true, maxOutputTokens: entry.maxOutputTokens,
                                    ports: ports)
        resolved.contextTokens = entry.contextTokens
        return resolved
    }

    private func resolved(name: String, provider: AssistantSettings.Providers.Provider, model: String, id: String, tools: Bool, maxOutputTokens: Int?,
                          ports: Ports) throws -> ResolvedModel {
        guard let url = provider.url else {
            throw TermindError(.assistantInvalid, "Provider \(name) has no URL (a record from before URLs were kept; termind guesses none): termind assistant provider edit \(name) --url URL.")
        }
        let kind = ModelProtocol(rawValue: provider.protocol.rawValue) ?? .responses
        let settings = ports.settings
        let vertex = kind == .vertex
        let reference = vertex ? provider.serviceAccountRef : provider.secretRef
        let field = "providers.\(name).\(vertex ? "serviceAccountRef" : "secretRef")"
        return ResolvedModel(id: id, provider: name, address: ProviderAddress(kind, url: url, project: provider.project, location: provider.location), model: model,
                             tools: tools, maxOutputTokens: maxOutputTokens) {
            // An empty reference is anonymous; a reference whose secret is missing, empty or
            // unreadable is an error (settings.secret_missing), never an anonymous call.
            if reference.isEmpty {
                if vertex { throw Self.noServiceAccount(name) }
                return .anonymous
            }
            guard let secret = try await settings.secret(reference, key: AssistantSettings.Providers.key, field: field) else { return .anonymous }
            return vertex ? .serviceAccount(secret) : .key(secret)
        }
    }

    // MARK: - Conversations

    private func registerConversations(_ registrar: FeatureRegistrar) {
        registrar.handle(AssistantContracts.ListConversations.self) { [self] request, _ in
            .init(conversations: try await current().store.list(archived: request.archived ?? false))
        }
        registrar.handle(AssistantContracts.ShowConversation.self) { [self] request, _ in
            let store = try current().store
            guard let summary = try await store.summary(request.id) else { throw Self.unknownConversation(request.id) }
            return .init(conversation: summary, entries: try await store.entries(request.id))
        }
        registrar.handle(AssistantContracts.RemoveConversation.self) { [self] request, _ in
            let store = try current().store
            guard let summary = try await store.summary(request.id) else { throw Self.unknownConversation(request.id) }
            guard summary.lastRun != .running else { throw TermindError(.assistantInvalid, "Conversation \(request.id) is running; stop it first.") }
            try await store.remove(request.id)
            return summary
        }
        registrar.handle(AssistantContracts.ArchiveConversation.self) { [self] request, _ in
            let store = try current().store
            guard try await store.summary(request.id) != nil else { throw Self.unknownConversation(request.id) }
            try await store.setArchived(request.id, request.restore != true, now: Self.now())
            return try await store.summary(request.id)!
        }
        registrar.handle(AssistantContracts.ForkConversation.self) { [self] request, _ in
            let store = try current().store
            guard try await store.summary(request.id) != nil else { throw Self.unknownConversation(request.id) }
            let copy = try await store.fork(request.id, now: Self.now())
            return try await store.summary(copy)!
        }
    }

    static func unknownConversation(_ id: String) -> TermindError {
        TermindError(.assistantUnknown, "There is no conversation \(id) (termind assistant list shows them).")
    }

    // MARK: - Runs

    static let system = """
        You are termind's assistant, working with an operator on their SSH hosts. Be brief and exact. \
        Tools act through termind on the operator's behalf, under their approval policy: a refused call is final, do not try to get around it. \
        Never ask for or repeat passwords, keys or tokens.
        """

    private func run(_ request: AssistantStreams.Run.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.Run.Result {
        let prompt = request.prompt.trimmedWhitespaceAndNewlines
        guard !prompt.isEmpty else { throw TermindError(.assistantInvalid, "The prompt is empty: termind assistant run WHAT YOU WANT.") }
        var modelID = request.model
        if let id = request.conversation {
            guard let summary = try await ports.store.summary(id) else { throw Self.unknownConversation(id) }
            guard !summary.archived else {
                throw TermindError(.assistantArchived, "Conversation \(id) is archived (read-only); restore it with termind assistant archive \(id) --restore true.")
            }
            if modelID == nil && request.provider == nil && !summary.model.contains("/") && !summary.model.isEmpty { modelID = summary.model }
        }
        let model = try await resolve(model: modelID, provider: request.provider, ports: ports)
        let conversation: String
        if let id = request.conversation { conversation = id } else {
            let firstLine = prompt.split(separator: "\n").first.map(String.init) ?? prompt
            conversation = try await ports.store.create(model: model.id, title: firstLine.count > 60 ? String(firstLine.prefix(59)) + "…" : firstLine, now: Self.now())
        }
        let json = request.output == "json"
        let mode = try await mode(request.mode, ports: ports)
        policy.setMode(mode, conversation: conversation)
        let titled = request.conversation == nil
        guard ports.context.resident else {
            let result = try await ConversationRun(store: ports.store, client: ports.client, model: model, conversation: conversation,
                                                   tools: await runTools(ports, ask: { await session.ask($0) }, notice: { text in await session.emit("notice", ["text": .string(text)]) }),
                                                   emitter: RunEmitter(session: session, json: json), system: Self.system,
                                                   compactor: await compactor(for: model, ports: ports)).run(prompt: prompt)
            if titled { await title(conversation, prompt: prompt, answer: result.text, ports: ports) }
            return result
        }
        // Inside serve the run outlives its client: a client that goes away detaches (attach
        // again with termind assistant attach ID); Ctrl-C ends the run.
        let compactor = await compactor(for: model, ports: ports)
        let run = try live.start(conversation, first: session, json: json) { live in
            let emitter = RunEmitter { event in await live.deliver(event) }
            do {
                let result = try await ConversationRun(store: ports.store, client: ports.client, model: model, conversation: conversation,
                                                       tools: await self.runTools(ports, ask: { await live.ask($0) }),
                                                       emitter: emitter, system: Self.system, compactor: compactor).run(prompt: prompt)
                if titled { await self.title(conversation, prompt: prompt, answer: result.text, ports: ports) }
                return .success(result)
            } catch {
                return .failure(TermindError.from(error))
            }
        }
        return try await follow(run, session: session, alreadyAttached: true, json: json)
    }

    /// The tools of a run, with the configured MCP servers' (discovered now; a server that
    /// cannot be reached is reported to `notice` and left out).
    func runTools(_ ports: Ports, ask: @escaping @Sendable (JSONValue) async -> JSONValue?, notice: @Sendable (String) async -> Void = { _ in }) async -> HostTools {
        var tools = self.tools(ports, ask: ask)
        let record = (try? await ports.settings.read(AssistantSettings.MCPServers.self)) ?? .defaults
        guard record.servers.values.contains(where: \.enabled) else { return tools }
        let discovery = await mcpClients.discover(ports, record: record)
        for (server, problem) in discovery.problems.sorted(by: { $0.key < $1.key }) {
            ports.logger.warning("assistant.mcp.client", ["server": .identifier(server)])
            await notice("MCP server \(server): \(problem)")
        }
        tools.external = discovery.tools
        tools.clients = mcpClients
        return tools
    }

    /// The tools of a run whose questions go to `ask`.
    func tools(_ ports: Ports, ask: @escaping @Sendable (JSONValue) async -> JSONValue?) -> HostTools {
        HostTools(context: ports.context, policy: policy, audit: ports.audit, scratch: ports.scratch, hosts: ports.hosts, ask: ask, http: ports.client.http,
                  guardian: { [self] conversation, action in await guardianReview(conversation, action: action, ports: ports) })
    }

    /// A run's mode: the one asked for, else the policy record's.
    private func mode(_ asked: AssistantSettings.Policy.Mode?, ports: Ports) async throws -> AssistantSettings.Policy.Mode {
        if let asked { return asked }
        return try await ports.settings.read(AssistantSettings.Policy.self).mode
    }

    /// What condenses a conversation for `model` when it nears the model's context (the
    /// compact role's model, else the model itself); nil when the model's size is not known.
    private func compactor(for model: ResolvedModel, ports: Ports) async -> Compactor? {
        guard let limit = model.contextTokens else { return nil }
        var condenser = model
        if let id = try? await ports.settings.read(AssistantSettings.Roles.self).compact, let chosen = try? await resolve(model: id, provider: nil, ports: ports) {
            condenser = chosen
        }
        return Compactor(client: ports.client, model: condenser, limit: limit)
    }

    /// Names a new conversation with the title role's model, when one is chosen: a buffered
    /// request whose answer counts only complete (a failed or incomplete one leaves the title
    /// taken from the first prompt). Never shown, never part of the conversation.
    private func title(_ conversation: String, prompt: String, answer: String, ports: Ports) async {
        guard let id = try? await ports.settings.read(AssistantSettings.Roles.self).title,
              let model = try? await resolve(model: id, provider: nil, ports: ports) else { return }
        let request = ModelRequest(model: model.model, system: "Give the conversation a title of at most six words. Answer with the title alone, no quotes, no punctuation at the end.",
                                   items: [.user("Question: \(prompt.prefix(2000))\n\nAnswer: \(answer.prefix(2000))")], maxOutputTokens: model.maxOutputTokens ?? 30)
        do {
            let outcome = try await Answerer(client: ports.client, model: model, emitter: nil).answer(request)
            guard let title = Self.title(in: outcome.text) else { return }
            try await ports.store.retitle(conversation, title)
        } catch {
            ports.logger.info("assistant.title_failed", ["code": .identifier(TermindError.from(error).code)])
        }
    }

    /// A title from a model's reply: its first line, quotes and a closing period dropped, at
    /// most 80 characters; nil when nothing is left.
    static func title(in text: String) -> String? {
        var line = text.split(separator: "\n").first.map { $0.trimmedWhitespace } ?? ""
        line = line.trimming { "\"'`*#".contains($0) }
        if line.hasSuffix(".") { line.removeLast() }
        line = line.trimmedWhitespace
        guard !line.isEmpty else { return nil }
        return line.count > 80 ? String(line.prefix(79)) + "…" : line
    }

    /// Waits for a live run's end as one of its clients; a client that leaves detaches, one
    /// that cancels with a signal (Ctrl-C) ends the run.
    private func follow(_ run: LiveRun, session: StreamSession, alreadyAttached: Bool, json: Bool) async throws -> AssistantStreams.Run.Result {
        let conversation = run.conversation
        let outcome = await withTaskCancellationHandler {
            alreadyAttached ? await run.outcome(for: session) : await run.follow(session, json: json)
        } onCancel: { [live] in
            if session.cancelSignal != nil { live.cancel(conversation) } else { run.detach(session) }
        }
        switch outcome {
        case .success(let result)?: return result
        case .failure(let error)?:
            if error.code == ErrorCode.cancelled.rawValue || error.code == ErrorCode.streamCancelled.rawValue { throw CancellationError() }
            throw error
        case nil: throw CancellationError()
        }
    }

    private func attach(_ request: AssistantStreams.Attach.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.Run.Result {
        guard try await ports.store.summary(request.conversation) != nil else { throw Self.unknownConversation(request.conversation) }
        guard ports.context.resident else {
            throw TermindError(.assistantInvalid, "Runs outlive their client only inside termind serve; this termind runs none.")
        }
        guard let run = live.find(request.conversation)?.run else {
            throw TermindError(.assistantUnknown, "Conversation \(request.conversation) has no run going; termind assistant show \(request.conversation) shows how it ended.")
        }
        return try await follow(run, session: session, alreadyAttached: false, json: request.output == "json")
    }

    /// Turns until the person leaves (an empty prompt, `/exit`, end of input, Ctrl-C at the
    /// prompt). An interrupt control cancels the turn that runs (its request closed, what was
    /// complete kept); a failed turn is said and the chat goes on.
    private func chat(_ request: AssistantStreams.Chat.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.Chat.Result {
        var conversation = request.conversation
        var modelID = request.model
        if let id = conversation {
            guard let summary = try await ports.store.summary(id) else { throw Self.unknownConversation(id) }
            guard !summary.archived else {
                throw TermindError(.assistantArchived, "Conversation \(id) is archived (read-only); restore it with termind assistant archive \(id) --restore true.")
            }
            if modelID == nil && request.provider == nil && !summary.model.contains("/") && !summary.model.isEmpty { modelID = summary.model }
        }
        let model = try await resolve(model: modelID, provider: request.provider, ports: ports)
        let mode = try await mode(request.mode, ports: ports)
        let emitter = RunEmitter(session: session, json: request.output == "json")
        let running = Mutex<Task<AssistantStreams.Run.Result, any Error>?>(nil)
        let watcher = Task {
            for await control in session.controls where control["interrupt"] == .bool(true) {
                running.withLock { $0?.cancel() }
            }
        }
        defer { watcher.cancel() }
        var lines = LineReader(session.input)
        var turns = 0
        if request.interactive == true && request.output != "json" {
            await session.emit("notice", ["text": .string("Chatting with \(model.id)\(conversation.map { " in conversation \($0)" } ?? ""). Ctrl-C ends a turn; an empty line, /exit or Ctrl-C here leaves.")])
        }
        while true {
            let prompt: String?
            if request.interactive == true {
                let answer = await session.ask(StreamQuestion.prompts(topic: AssistantStreams.Chat.promptTopic, header: [], [("you> ", true)]))
                prompt = StreamQuestion.answers(answer)?.first?.withPlaintext { $0 }
            } else {
                prompt = await lines.next()
            }
            guard let text = prompt?.trimmedWhitespaceAndNewlines, !text.isEmpty, text != "/exit" else { break }
            if conversation == nil {
                let firstLine = text.split(separator: "\n").first.map(String.init) ?? text
                conversation = try await ports.store.create(model: model.id, title: firstLine.count > 60 ? String(firstLine.prefix(59)) + "…" : firstLine, now: Self.now())
            }
            policy.setMode(mode, conversation: conversation!)
            let run = ConversationRun(store: ports.store, client: ports.client, model: model, conversation: conversation!,
                                      tools: await runTools(ports, ask: { await session.ask($0) }, notice: { text in await session.emit("notice", ["text": .string(text)]) }),
                                      emitter: emitter, system: Self.system, compactor: await compactor(for: model, ports: ports))
            let task = Task { try await run.run(prompt: text) }
            running.withLock { $0 = task }
            turns += 1
            do {
                // The chat ending (a second Ctrl-C, its client gone) ends the turn with it.
                _ = try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() }
            } catch is CancellationError {
                if Task.isCancelled { throw CancellationError() }
                await emitter.endText("…")
                await emitter.notice("The turn was interrupted; what was complete is kept.")
            } catch {
                await emitter.notice(TermindError.from(error).message)
            }
            running.withLock { $0 = nil }
        }
        return .init(conversation: conversation, turns: turns)
    }

    private func suggest(_ request: AssistantStreams.Suggest.Request, session: StreamSession, ports: Ports) async throws -> AssistantStreams.Suggest.Result {
        let want = request.want.trimmedWhitespaceAndNewlines
        guard !want.isEmpty else { throw TermindError(.assistantInvalid, "Say what you want: termind assistant suggest \"free disk space on /var\".") }
        var context = ""
        if let name = request.host {
            let hosts = try await ports.context.call(VaultContracts.HostList.self, .init())
            guard let host = hosts.hosts.first(where: { $0.label == name || $0.id == name }) else {
                throw TermindError(.assistantUnknown, "'\(name)' is not a saved host (termind vault host list).")
            }
            context = " The command is for the host \(host.label)."
        }
        let model = try await resolve(model: request.model, provider: request.provider, ports: ports)
        let system = "You turn what an operator wants into one POSIX shell command. Answer with the command alone: no explanation, no Markdown, one line.\(context)"
        let outcome = try await Answerer(client: ports.client, model: model, emitter: nil, notices: session)
            .answer(ModelRequest(model: model.model, system: system, items: [.user(want)], tools: [], maxOutputTokens: model.maxOutputTokens ?? 200))
        let command = Self.command(in: outcome.text)
        guard !command.isEmpty else { throw TermindError(.assistantIncomplete, "\(model.provider) suggested nothing.") }
        if request.output != "json" { await session.emit("stdout", data: Data((command + "\n").utf8)) }
        return .init(command: command)
    }

    /// The command in a model's reply: fences and a leading `$ ` dropped, the first line.
    static func command(in text: String) -> String {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: true).map { $0.trimmedWhitespace }
        lines.removeAll { $0.hasPrefix("```") }
        var first = lines.first ?? ""
        if first.hasPrefix("$ ") { first.removeFirst(2) }
        if first.hasPrefix("`") && first.hasSuffix("`") && first.count > 1 { first = String(first.dropFirst().dropLast()) }
        return first
    }
}

/// Lines of a stream's input (a chat's piped prompts), at most 1 MiB each.
struct LineReader {
    private var iterator: StreamInput.AsyncIterator
    private var buffer = Data()
    private var ended = false

    init(_ input: StreamInput) { iterator = input.makeAsyncIterator() }

    mutating func next() async -> String? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = buffer[buffer.startIndex..<newline]
                buffer.removeSubrange(buffer.startIndex...newline)
                return String(decoding: line, as: UTF8.self)
            }
            if ended || buffer.count > 1 << 20 {
                defer { buffer.removeAll() }
                return buffer.isEmpty ? nil : String(decoding: buffer, as: UTF8.self)
            }
            if let chunk = await iterator.next() { buffer.append(chunk) } else { ended = true }
        }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "assistant", version: "0.1.0", signature: TermindLibrary.signature) { AssistantFeature() }
}
