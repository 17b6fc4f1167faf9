import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindCrypto
import TermindSSH
import TermindStore

/// The actor kernel. Lifecycle: discover (read manifests, no code runs) → validate
/// (`RegistryValidator`) → load (dlopen by absolute path, one entry symbol, descriptor
/// checked against the manifest) → register (ports and contracts) → start in order →
/// (serve) → stop in reverse order. The registry is frozen after boot and libraries are
/// never closed. A feature that fails is disabled with its reason, together with every
/// feature that requires it; boot fails only for permanent features.
public actor Kernel {
    public nonisolated let logger: Logger
    public nonisolated let configuration: KernelConfiguration
    private let sink: LogSink
    nonisolated let routes = RoutingTable()

    private var manifests: [String: FeatureManifest] = [:]
    private var order: [String] = []
    private var statuses: [String: FeatureStatus] = [:]
    private var running: [(id: String, feature: any Feature)] = []
    /// The process's one SSH connection pool: the `kernel.ssh` port of the features that list
    /// it, and the host's (`termind exec` inside `serve`). Closed at shutdown.
    public nonisolated let sshConnections = SSHConnectionPool()
    private var booted = false

    public init(configuration: KernelConfiguration, sink: LogSink) {
        self.configuration = configuration
        self.sink = sink
        self.logger = Logger(label: "kernel", sink: sink)
        installKernelContracts()
    }

    // MARK: - Boot

    /// Boots once. Returns the statuses of every declared feature in boot order (disabled
    /// ones last); throws `BootFailure` when a permanent feature cannot run.
    @discardableResult
    public func boot() async throws -> [FeatureStatus] {
        precondition(!booted, "a kernel boots once")
        booted = true
        let started = DispatchTime.now().uptimeNanoseconds

        // Discover.
        let discovery = try discover()
        // Validate.
        let inProcess = Dictionary(configuration.inProcessFeatures.map { ($0.manifest.id, $0) }, uniquingKeysWith: { first, _ in first })
        let validator = RegistryValidator(libraryExists: { $0.isEmpty || FileManager.default.isReadableFile(atPath: $0) },
                                          kernelPorts: KernelPorts.all)
        let plan: BootPlan
        do {
            let selection = configuration.selection ?? configuration.commandWords.flatMap { RegistryValidator.selection(forCommand: $0, in: discovery.manifests) }
            plan = try validator.plan(discovery.manifests, rejected: discovery.rejected, selection: selection)
        } catch let error as TermindError {
            throw BootFailure(problems: [FeatureProblem(featureID: nil, field: nil, code: error.code, message: error.message)])
        }
        guard plan.fatal.isEmpty else { throw BootFailure(problems: plan.fatal) }
        // Serve options: each one a loaded feature declares, or the boot stops naming it.
        let declaredOptions = Set(plan.ordered.flatMap { $0.serveOptions.map(\.name) })
        for name in configuration.serveOptions.keys.sorted() where !declaredOptions.contains(name) {
            let known = declaredOptions.sorted().map { "--\($0)" }
            throw BootFailure(problems: [FeatureProblem(featureID: nil, field: nil, code: .serveOptionUnknown,
                message: "termind serve has no option --\(name)" + (known.isEmpty ? "." : "; the loaded features declare \(known.joined(separator: ", ")).") + "")])
        }
        for m in discovery.manifests where manifests[m.id] == nil { manifests[m.id] = m }
        order = plan.ordered.map(\.id)
        for m in plan.ordered { setStatus(m, .stopped, nil) }
        for problem in plan.disabled {
            if let id = problem.featureID, let m = manifests[id], statuses[id] == nil {
                setStatus(m, .disabled, problem)
                order.append(id)
                logger.warning("kernel.feature.disabled", ["feature": .identifier(id), "reason": .identifier(problem.code)])
            } else {
                // Unreadable entries and ignored duplicates: not a feature of their own.
                unattributed.append(problem)
            }
        }

        // Load.
        var loaded: [(FeatureManifest, any Feature)] = []
        for m in plan.ordered where statuses[m.id]?.state != .disabled {
            do {
                if m.library.isEmpty, let feature = inProcess[m.id] {
                    loaded.append((m, feature.make()))
                } else {
                    loaded.append((m, try FeatureLoader.load(m, sink: sink, hostVersion: configuration.hostVersion, protected: configuration.protectedFiles)))
                }
                logger.debug("kernel.feature.loaded", ["feature": .identifier(m.id)])
            } catch {
                disable(m.id, Self.problem(error, feature: m.id, code: .featureLoadFailed))
            }
        }

        // Register.
        for (m, feature) in loaded where statuses[m.id]?.state != .disabled {
            do {
                try register(feature, manifest: m)
            } catch {
                routes.remove(owner: m.id)
                disable(m.id, Self.problem(error, feature: m.id, code: .featureRegisterFailed))
            }
        }

        // Kernel ports: open the stores that a surviving feature asked for.
        await openKernelPorts(for: loaded.map(\.0).filter { statuses[$0.id]?.state != .disabled })

        // Start, in order.
        for (m, feature) in loaded where statuses[m.id]?.state != .disabled {
            do {
                let context = await context(for: m)
                if m.origin == .plugin {
                    // Third-party code: a start that never returns disables the plugin instead
                    // of hanging every command (its thread is abandoned, not waited for).
                    let limit = configuration.pluginStartSeconds
                    guard try await Deadline.run(seconds: limit, { try await feature.start(context) }) != nil else {
                        throw TermindError(.featureStartTimeout, "feature '\(m.id)' did not finish starting within \(Self.seconds(limit)); it is disabled (its start() still runs and is abandoned).")
                    }
                } else {
                    try await feature.start(context)
                }
                running.append((m.id, feature))
                setStatus(m, .running, nil)
                logger.info("kernel.feature.started", ["feature": .identifier(m.id)])
            } catch {
                routes.remove(owner: m.id)
                disable(m.id, Self.problem(error, feature: m.id, code: .featureStartFailed))
            }
        }
        routes.freeze()

        if let failed = order.compactMap({ statuses[$0] }).first(where: { $0.permanent && $0.state == .disabled }) {
            await shutdown()
            throw BootFailure(problems: [FeatureProblem(featureID: failed.id, field: nil, code: .featurePermanentFailed,
                                                        message: "Permanent feature '\(failed.id)' cannot run, so termind cannot start: \(failed.reason ?? "unknown reason")")])
        }
        // A serve option names work the person asked for: its feature not running ends the boot
        // rather than serving without it.
        let asked = Set(configuration.serveOptions.keys)
        if let failed = order.compactMap({ manifests[$0] }).first(where: { m in
            statuses[m.id]?.state == .disabled && m.serveOptions.contains { asked.contains($0.name) }
        }), let status = statuses[failed.id] {
            await shutdown()
            let options = failed.serveOptions.filter { asked.contains($0.name) }.map { "--\($0.name)" }.joined(separator: ", ")
            throw BootFailure(problems: [FeatureProblem(featureID: failed.id, field: nil, code: status.reasonCode.map { ErrorCode($0) } ?? .featureStartFailed,
                                                        message: "\(options) needs feature '\(failed.id)', which cannot run: \(status.reason ?? "unknown reason")")])
        }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        logger.info("kernel.booted", ["running": .int(running.count), "disabled": .int(statuses.values.filter { $0.state == .disabled }.count), "elapsed": .seconds(elapsed)])
        return featureStatuses()
    }

    /// "10 s", "0.5 s".
    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    /// Problems that belong to no loadable feature (unreadable entries, duplicates).
    public private(set) var unattributed: [FeatureProblem] = []

    /// Stops running features in reverse start order. Idempotent.
    public func shutdown() async {
        while let (id, feature) = running.popLast() {
            if manifests[id]?.origin == .plugin {
                // A plugin's stop that never returns must not keep termind (serve on SIGTERM)
                // from stopping: it is abandoned after the bound.
                let limit = configuration.pluginStopSeconds
                if (try? await Deadline.run(seconds: limit, { await feature.stop() })) == nil {
                    logger.warning("kernel.feature.stop_timeout", ["feature": .identifier(id), "seconds": .seconds(limit)])
                }
            } else {
                await feature.stop()
            }
            if let m = manifests[id] { setStatus(m, .stopped, nil) }
            logger.info("kernel.feature.stopped", ["feature": .identifier(id)])
        }
        // Features have stopped using them: close the shared SSH connections.
        await sshConnections.closeAll()
    }

    public func featureStatuses() -> [FeatureStatus] {
        order.compactMap { id in
            guard var status = statuses[id] else { return nil }
            // A plugin in a process of its own: how that process is held, and whether
            // crashes turned it off since boot.
            if status.state == .running, let isolated = running.first(where: { $0.id == id })?.feature as? ProcessPluginFeature {
                status.isolation = isolated.description
                if let off = isolated.disabledReason {
                    status.state = .disabled
                    status.reason = "plugin '\(id)' is off: \(off); 'termind plugins enable \(id)' starts it again."
                    status.reasonCode = ErrorCode.pluginDisabled.rawValue
                }
            }
            return status
        }
    }

    /// `termind plugins enable ID`: a plugin turned off after crashes starts again.
    public func enablePlugin(_ id: String) throws -> String {
        guard let isolated = running.first(where: { $0.id == id })?.feature as? ProcessPluginFeature else {
            throw TermindError.badRequest("'\(id)' is not a plugin running in a process of its own here; only such a plugin is turned off after crashes.")
        }
        return isolated.enable()
    }

    // MARK: - Calls

    /// Routes a contract call. Safe to call from any task concurrently; never blocks on
    /// the kernel actor.
    /// `origin`: who it is for; nil: the chain of the call or stream this task serves, else
    /// this process's own client.
    public nonisolated func call(_ id: ContractID, body: Data, origin: CallOrigin? = nil) async throws -> Data {
        guard let endpoint = routes.endpoint(id) else { throw TermindError.unknownContract(id.description) }
        let served = CallOrigin.current ?? .inProcess
        let origin = origin ?? served
        if logger.isEnabled(.debug) { logger.debug("kernel.call", ["contract": .identifier(id.description), "chain": .identifier(Self.compact(origin))]) }
        do {
            if origin.hasAgent { try await authorize(id, effect: endpoint.effect, facts: endpoint.facts, stream: false, origin: origin, body: body) }
            // The handler's task serves the call's chain (no change when it goes on for it).
            if served.isSame(origin) { return try await endpoint.handler(body, origin) }
            return try await CallOrigin.$current.withValue(origin) { try await endpoint.handler(body, origin) }
        } catch {
            throw TermindError.from(error)  // a store or transport failure in user terms, never "internal"
        }
    }

    /// Routes a call given as text (`name@version`), as it arrives from a client.
    public nonisolated func call(_ text: String, body: Data, origin: CallOrigin? = nil) async throws -> Data {
        guard let id = ContractID(parsing: text) else {
            throw TermindError.badRequest("'\(text)' is not a contract id; expected name@version, e.g. kernel.features@1.")
        }
        return try await call(id, body: body, origin: origin)
    }

    /// The chain of a call feature `feature` makes, on behalf of whoever it serves now (the
    /// chain goes on, never restarts); refused unless its manifest lists the contract under
    /// `calls` or the contract is its own.
    nonisolated static func origin(ofCall contract: ContractID, by feature: String, calls: Set<String>, callsFrom: [String: Set<String>],
                                   routes: RoutingTable) throws -> CallOrigin {
        let origin = (CallOrigin.current ?? .inProcess).appending(Caller(.feature, feature))
        guard calls.contains(contract.description) || routes.endpoint(contract)?.owner == feature else {
            throw Refusal.capabilityDenied(feature: feature, contract: contract.description, declared: calls, origin: origin,
                                           effect: routes.endpoint(contract)?.effect).termindError
        }
        if !callsFrom.isEmpty, let from = callsFrom[contract.description],
           !(ServedContract.current.map { from.contains($0.description) } ?? false) {
            throw Refusal.capabilityDenied(feature: feature, contract: contract.description, from: from, serving: ServedContract.current, origin: origin,
                                           effect: routes.endpoint(contract)?.effect).termindError
        }
        return origin
    }

    /// A feature's typed calls (`FeatureContext.call`): the checks of its JSON `call`
    /// (`origin(ofCall:)`), then the kernel's typed call as that feature.
    struct FeatureTypedCall: TypedContractCall {
        weak var kernel: Kernel?
        let feature: String
        let calls: Set<String>
        let callsFrom: [String: Set<String>]

        func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
            guard let kernel else { throw TermindError.internalFailure("The kernel has shut down.") }
            return try await kernel.call(C.self, request, origin: try Kernel.origin(ofCall: C.id, by: feature, calls: calls, callsFrom: callsFrom,
                                                                                       routes: kernel.routes))
        }
    }

    /// A typed call. When the endpoint is a Swift handler of these very request and
    /// response types, the value crosses without JSON; otherwise (a C plugin, a client-side
    /// declaration of the contract) it is encoded, validated and decoded like any request.
    public nonisolated func call<C: Contract>(_ contract: C.Type, _ request: C.Request, origin: CallOrigin? = nil) async throws -> C.Response {
        guard let endpoint = routes.endpoint(C.id) else { throw TermindError.unknownContract(C.id.description) }
        let served = CallOrigin.current ?? .inProcess
        let origin = origin ?? served
        do {
            // A Swift request matches the schema derived from its own type; any other endpoint
            // (a C plugin) checks the encoded body itself (`dispatch`).
            if origin.hasAgent {
                // A Swift endpoint of this very request type reads its facts from the value.
                var reader = endpoint.facts
                if let typed = endpoint.typed, typed.requestType == ObjectIdentifier(C.Request.self) {
                    let facts = typed.facts(request)
                    reader = { @Sendable _ in facts }
                }
                try await authorize(C.id, effect: endpoint.effect, facts: reader, stream: false, origin: origin, body: try JSONCoding.encode(request))
            }
            if served.isSame(origin) { return try await Self.dispatch(C.self, request, to: endpoint, origin: origin) }
            return try await CallOrigin.$current.withValue(origin) { try await Self.dispatch(C.self, request, to: endpoint, origin: origin) }
        } catch {
            throw TermindError.from(error)
        }
    }

    private static func dispatch<C: Contract>(_ contract: C.Type, _ request: C.Request, to endpoint: ContractEndpoint, origin: CallOrigin) async throws -> C.Response {
        if let typed = endpoint.typed, typed.requestType == ObjectIdentifier(C.Request.self),
           typed.responseType == ObjectIdentifier(C.Response.self) {
            return try await typed.call(request, origin) as! C.Response
        }
        let reply = try await endpoint.handler(JSONCoding.encode(request), origin)
        return try JSONDecoder().decode(C.Response.self, from: reply)
    }

    /// Runs a stream handler with the task-locals the kernel sets for it: its chain (calls it
    /// makes go on from there) and its session (the kernel's own questions go to its client).
    package static func serving<T: Sendable>(_ session: StreamSession, _ body: () async throws -> T) async throws -> T {
        try await CallOrigin.$current.withValue(session.origin) {
            try await StreamSession.$current.withValue(session) { try await body() }
        }
    }

    // MARK: - Policy

    /// Consults the policy hook for a call or stream whose chain holds an agent; throws the
    /// refusal. Without an agent in the chain it is never called (no cost on a person's path).
    nonisolated func authorize(_ id: ContractID, effect declared: Effect?, facts reader: (@Sendable (Data) -> RequestFacts?)? = nil, stream: Bool,
                               origin: CallOrigin, body: Data) async throws {
        let operation = id.description
        // What this request does, where its owner can tell (never more than declared), and
        // the hosts it names.
        let facts = reader?(body)
        let effect = declared.map { declared in facts.map { Effect(min($0.effect.level, declared.level), network: $0.effect.network && declared.network,
                                                                  secrets: $0.effect.secrets && declared.secrets) } ?? declared }
        func refuse(_ code: ErrorCode, _ reason: String) -> Refusal {
            logger.info("kernel.policy.refused", ["contract": .identifier(operation), "code": .identifier(code.rawValue), "chain": .identifier(Self.compact(origin))])
            return Refusal(code, contract: operation, effect: effect, chain: origin, reason: reason)
        }
        guard let policy = routes.port(PortKey<any CallPolicy>.policy.id) as? any CallPolicy else {
            throw refuse(.policyUnavailable, "\(operation) was asked for on an agent's behalf (\(origin)) and no policy is loaded to decide on it, so it was refused.")
        }
        let arguments = (try? JSONCoding.parse(body.isEmpty ? Data("{}".utf8) : body, source: "the arguments")) ?? .null
        let request = PolicyRequest(operation: operation, stream: stream, effect: effect ?? .undeclared, effectDeclared: effect != nil,
                                    origin: origin, hosts: facts?.hosts ?? [], arguments: arguments)
        let decision: PolicyDecision?
        do {
            // Immediate: a policy is Swift that waits by suspending; a decision from what it
            // keeps in memory costs no hand-over to another thread.
            decision = try await Deadline.run(seconds: CallPolicyLimits.seconds, immediate: true) { try await policy.decide(request) }
        } catch {
            throw refuse(.policyUnavailable, "The policy could not decide on \(operation) (\(TermindError.from(error).message)), so it was refused.")
        }
        switch decision {
        case nil:
            throw refuse(.policyUnavailable, "The policy did not decide on \(operation) within \(Int(CallPolicyLimits.seconds)) s, so it was refused.")
        case .allow?:
            if logger.isEnabled(.debug) { logger.debug("kernel.policy.allowed", ["contract": .identifier(operation), "chain": .identifier(Self.compact(origin))]) }
        case .deny(let reason)?:
            throw refuse(.policyDenied, reason)
        case .ask(let question)?:
            // The client at the start of the chain answers, through the stream it runs.
            guard let client = StreamSession.current else {
                throw refuse(.policyDenied, "\(operation) needs a person's approval and there is nobody to ask (\(origin)), so it was refused.")
            }
            let answer = await client.ask(StreamQuestion.confirm(topic: StreamSession.policyTopic, question, default: false,
                                                                 details: .object(["operation": .string(operation), "effect": .string((effect ?? .undeclared).description)])))
            guard StreamQuestion.confirmed(answer) == true else {
                throw refuse(.policyDenied, StreamQuestion.unanswered(answer)
                    ? "\(operation) needs a person's approval and nobody answered, so it was refused."
                    : "\(operation) was not approved.")
            }
        }
    }

    /// A chain as a log identifier: `client:uid1000+feature:assistant+agent:assistant`.
    static func compact(_ origin: CallOrigin) -> String {
        origin.chain.map { "\($0.kind.rawValue):\(String($0.id.filter { $0 != " " }))" }.joined(separator: "+")
    }

    /// The provider of a port (for the host and tests; features use their context).
    public nonisolated func port<P>(_ key: PortKey<P>) -> P? {
        routes.port(key.id) as? P
    }

    public nonisolated func contractInfos(prefix: String? = nil) -> [ContractInfo] {
        // Filtered before the schemas are rendered: rendering all of them made resolving one
        // command (kernel.command@1) cost about 0.4 ms more.
        let wanted: (ContractID) -> Bool = { prefix == nil || $0.description.hasPrefix(prefix!) }
        return routes.allEndpoints().filter { wanted($0.id) }.map(Self.info) + routes.allStreams().filter { wanted($0.id) }.map(Self.info)
    }

    /// The contract or stream `id` (`name@version`) as `contracts` lists it.
    nonisolated func contractInfo(_ id: String) -> ContractInfo? {
        guard let parsed = ContractID(parsing: id) else { return nil }
        return routes.endpoint(parsed).map(Self.info) ?? routes.stream(parsed).map(Self.info)
    }

    private static func info(_ endpoint: ContractEndpoint) -> ContractInfo {
        ContractInfo(id: endpoint.id.description, owner: endpoint.owner, summary: endpoint.summary, request: endpoint.requestSchema.json,
                     response: endpoint.responseSchema.json, effect: endpoint.effect)
    }

    private static func info(_ stream: StreamEndpoint) -> ContractInfo {
        ContractInfo(id: stream.id.description, owner: stream.owner, summary: stream.summary, request: stream.requestSchema.json, response: stream.resultSchema.json,
                     stream: true, acceptsInput: stream.acceptsInput, events: stream.events.mapValues(\.json), questions: stream.questions,
                     acceptsDescriptors: stream.acceptsDescriptors ? true : nil, effect: stream.effect)
    }

    /// See `KernelContracts.Command`.
    func resolveCommand(_ words: [String]) -> KernelContracts.Command.Response {
        let features = featureStatuses()
        let running = features.filter { $0.state == .running }.flatMap(\.commands)
        if let command = running.filter({ words.starts(with: $0.words) }).max(by: { $0.words.count < $1.words.count }) {
            return .init(command: command, target: contractInfo(command.target))
        }
        let prefix = words.prefix { !$0.hasPrefix("-") }
        let partial = prefix.isEmpty ? [] : running.filter { $0.words.starts(with: prefix) }.sorted { $0.name < $1.name }
        let disabled = features.first { $0.state != .running && $0.commands.contains { words.starts(with: $0.words) } }
        var nearest: ([String], [FeatureManifest.Command])?
        if partial.isEmpty, prefix.count > 1 {
            for length in stride(from: prefix.count - 1, through: 1, by: -1) {
                let start = Array(prefix.prefix(length))
                let near = running.filter { $0.words.starts(with: start) }.sorted { $0.name < $1.name }
                if !near.isEmpty {
                    nearest = (start, near)
                    break
                }
            }
        }
        return .init(command: nil, target: nil, partial: partial, disabledFeature: disabled?.id, disabledReason: disabled.map { $0.reason ?? "unknown reason" },
                     available: Array(Set(running.compactMap(\.words.first))).sorted(), nearest: nearest?.0, nearestCommands: nearest?.1)
    }

    /// The stream named `name` (`name@version`), if a running feature serves it.
    public nonisolated func stream(_ name: String) -> StreamEndpoint? {
        ContractID(parsing: name).flatMap { routes.stream($0) }
    }

    /// Runs stream `name` in this process, exactly as the control socket runs it for a client:
    /// the same endpoint and session. `onOpen` receives the way to send the stream's messages
    /// (`inputEnd`, `cancel`) and its input (which waits for room: nothing is dropped);
    /// events arrive at `onEvent` in order, on a thread of their own (it may block, asking a
    /// person), and an answer it returns goes back to the question. Returns the result body
    /// once every event has been handled.
    ///
    /// `descriptors` (owned from now on: closed once the stream ended) go to a stream that
    /// declares `acceptsDescriptors`; another refuses them with `stream.descriptors_refused`.
    public nonisolated func runStream(_ name: String, body: Data, descriptors: StreamDescriptors? = nil, origin: CallOrigin? = nil,
                                      onOpen: (StreamControl) -> Void = { _ in },
                                      onEvent: @escaping @Sendable (StreamEvent) -> JSONValue?) async throws -> Data {
        guard let endpoint = stream(name) else {
            descriptors?.closeAll()
            throw TermindError(.streamUnknown, "No running feature serves stream '\(name)'. Run 'termind contracts' to list the available ones.")
        }
        let origin = origin ?? CallOrigin.current ?? .inProcess
        if logger.isEnabled(.debug) { logger.debug("kernel.stream", ["stream": .identifier(endpoint.id.description), "chain": .identifier(Self.compact(origin))]) }
        if origin.hasAgent {
            do {
                try await authorize(endpoint.id, effect: endpoint.effect, facts: endpoint.facts, stream: true, origin: origin, body: body)
            } catch {
                descriptors?.closeAll()
                throw TermindError.from(error)
            }
        }
        if let descriptors, !endpoint.acceptsDescriptors {
            descriptors.closeAll()
            throw TermindError(.streamDescriptorsRefused, "Stream '\(name)' does not take the client's descriptors.")
        }
        let events = DispatchQueue(label: "termind.stream.events")
        let answers = StreamAnswers()
        // Events are handled in order on a queue of their own; each one's size is credited
        // back once `onEvent` returned, so an emitter waits for a slow consumer (a full pipe)
        // instead of queuing without bound.
        let session = StreamSession(id: .integer(1), endpoint: endpoint, descriptors: descriptors, origin: origin, sink: .local({ event, size in
            events.async {
                if let answer = onEvent(event) { answers.session?.receive(["answer": answer]) }
                if size > 0 { answers.session?.credit(size) }
            }
        }))
        answers.session = session
        // The caller learns how to talk to the stream before the handler runs: an event the
        // handler sends at once (`started`, which a terminal bridge answers by going raw) must
        // not reach the caller before it can act on it.
        onOpen(StreamControl(send: { message in session.receive(message); return true },
                             input: { data in session.input.put(data, waitForRoom: true) }))
        // The session cancels this very task (a cancel message, or the caller giving up).
        let work = Task { () -> Result<Data, Error> in
            defer { session.finish() }
            do { return .success(try await Self.serving(session) { try await endpoint.handler(body, session) }) } catch { return .failure(error) }
        }
        session.start(cancelling: work)
        let result = session.outcome(await withTaskCancellationHandler { await work.value } onCancel: { session.cancel() })
        // Every event is handled before the result is (output first, then the exit status).
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in events.async { done.resume() } }
        return try result.get()
    }

    /// The C libraries Core links, with the versions loaded at run time.
    public static var linkedLibraries: [String: String] {
        ["openssl": CryptoLibrary.version, "sqlite": Database.sqliteVersion, "libssh2": SSHLibrary.version]
    }

    // MARK: - Internals

    private struct Discovery {
        var manifests: [FeatureManifest] = []
        var rejected: [FeatureProblem] = []
    }

    private func discover() throws -> Discovery {
        var result = Discovery()
        result.manifests = configuration.inProcessFeatures.map(\.manifest) + configuration.manifests
        if let path = configuration.registryPath {
            let data: Data
            do {
                data = try BoundedFile.read(path, limit: Self.maximumRegistryBytes, what: "feature registry", code: .registryMissing)
            } catch let error as TermindError {
                throw BootFailure(problems: [FeatureProblem(featureID: nil, field: nil, code: .registryMissing,
                                                            message: "\(error.message) Pass --registry PATH or set TERMIND_REGISTRY.")])
            }
            let base = configuration.libraryDirectory ?? PathText.deletingLastComponent(path)
            do {
                let read = try ManifestReader.readRegistry(data, source: PathText.lastComponent(path), baseDirectory: base)
                result.manifests += read.manifests
                result.rejected += read.rejected
            } catch let error as TermindError {
                throw BootFailure(problems: [FeatureProblem(featureID: nil, field: nil, code: error.code, message: error.message)])
            }
        }
        // Plugins: found, read and vetted (ownership, permissions, bounds) before any code runs.
        for directory in configuration.pluginDirectories {
            let found = PluginDiscovery.discover(root: directory)
            result.manifests += found.manifests.map { manifest in
                guard let forced = configuration.pluginIsolation, manifest.kind == .c else { return manifest }
                var m = manifest
                m.isolation = forced
                // Chosen inline: nothing would enforce its access and limits.
                if forced == .inline { m.access = nil; m.limits = nil }
                return m
            }
            result.rejected += found.problems
        }
        return result
    }

    /// Registry.json is read only up to this size.
    static let maximumRegistryBytes = 4 << 20

    private func register(_ feature: any Feature, manifest m: FeatureManifest) throws {
        let registrar = FeatureRegistrar(featureID: m.id)
        try feature.register(registrar)
        let published = Set(registrar.publishedEndpoints.map(\.id.description))
        let declared = Set(m.contracts + m.functions.map { "\(m.id).fn.\($0.name)@1" })
        if let extra = published.subtracting(declared).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "contracts", code: .featureUndeclaredContract,
                                 message: "feature '\(m.id)' publishes contract '\(extra)', which its manifest does not declare under \"contracts\".")
        }
        if let missing = declared.subtracting(published).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "contracts", code: .featureMissingContract,
                                 message: "feature '\(m.id)' declares contract '\(missing)' but registers no handler for it.")
        }
        let streams = Set(registrar.publishedStreams.map(\.id.description))
        if let extra = streams.subtracting(m.streams).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "streams", code: .featureUndeclaredStream,
                                 message: "feature '\(m.id)' serves stream '\(extra)', which its manifest does not declare under \"streams\".")
        }
        if let missing = Set(m.streams).subtracting(streams).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "streams", code: .featureMissingStream,
                                 message: "feature '\(m.id)' declares stream '\(missing)' but registers no handler for it.")
        }
        let ports = Set(registrar.publishedPorts.keys)
        if let extra = ports.subtracting(m.ports.provides).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "ports.provides", code: .featureUndeclaredPort,
                                 message: "feature '\(m.id)' provides port '\(extra)', which its manifest does not declare under \"ports.provides\".")
        }
        if let missing = Set(m.ports.provides).subtracting(ports).sorted().first {
            throw FeatureProblem(featureID: m.id, field: "ports.provides", code: .featureMissingPort,
                                 message: "feature '\(m.id)' declares port '\(missing)' but provides no implementation.")
        }
        // A feature with calls made only from some of its contracts (`callsFrom`): its
        // handlers keep which contract they serve, for the check and its message.
        for endpoint in registrar.publishedEndpoints { try routes.add(m.callsFrom.isEmpty ? endpoint : endpoint.markingServed()) }
        for stream in registrar.publishedStreams { try routes.add(stream) }
        for (id, value) in registrar.publishedPorts { try routes.addPort(id, owner: m.id, value: value) }
    }

    /// Opens the database and secret store if some feature lists their ports. A store that
    /// cannot be opened disables the features that require it, with the store's reason.
    private func openKernelPorts(for manifests: [FeatureManifest]) async {
        let wanted = Set(manifests.flatMap { $0.ports.requires + $0.ports.optional })
        var failures: [String: FeatureProblem] = [:]
        // The two stores open at once, each on its own thread (a one-shot command waits for
        // both before any feature starts).
        let storePath = configuration.storePath, secretsPath = configuration.secretsPath, secretsKey = configuration.secretsKey
        async let database: Result<Database, any Error>? = wanted.contains("kernel.store") ? Self.opened {
            guard let path = storePath else {
                throw TermindError(.storeUnconfigured, "No database path is configured (--store or TERMIND_STORE).")
            }
            return try await BlockingExecutor.store.run { try Database(path: path) }
        } : nil
        async let secrets: Result<SecretStore, any Error>? = wanted.contains("kernel.secrets") ? Self.opened {
            guard let path = secretsPath, let key = secretsKey else {
                throw TermindError(.secretUnconfigured, "No secret store is configured (--secrets or TERMIND_SECRETS).")
            }
            // scrypt (for a passphrase) takes its time: off the cooperative pool.
            return try await BlockingExecutor.crypto.run { try SecretStore(path: path, keySource: key) }
        } : nil
        switch await database {
        case .success(let database)?:
            do {
                try routes.addPort("kernel.store", owner: "kernel", value: database)
                logger.info("kernel.store.opened")
            } catch {
                failures["kernel.store"] = Self.storeProblem(error, port: "kernel.store")
            }
        case .failure(let error)?:
            failures["kernel.store"] = Self.storeProblem(error, port: "kernel.store")
        case nil:
            break
        }
        switch await secrets {
        case .success(let store)?:
            do {
                // Secrets stored before they had owners were the built-in feature's that keeps
                // them: the first permanent feature (never a plugin) requiring the store.
                if let keeper = manifests.first(where: { $0.isPermanent && $0.ports.requires.contains("kernel.secrets") }) {
                    let claimed = try await BlockingExecutor.store.run { try store.claimUnowned(for: keeper.id) }
                    if claimed > 0 { logger.info("kernel.secrets.claimed", ["feature": .identifier(keeper.id), "count": .int(claimed)]) }
                }
                try routes.addPort("kernel.secrets", owner: "kernel", value: store)
                logger.info("kernel.secrets.opened")
            } catch {
                failures["kernel.secrets"] = Self.storeProblem(error, port: "kernel.secrets")
            }
        case .failure(let error)?:
            failures["kernel.secrets"] = Self.storeProblem(error, port: "kernel.secrets")
        case nil:
            break
        }
        if wanted.contains("kernel.ssh") {
            // Each feature gets a view of the pool (`SSHConnectionsView`), never the pool.
            try? routes.addPort("kernel.ssh", owner: "kernel", value: SSHConnectionsView(pool: sshConnections) as any SSHConnections)
        }
        for m in manifests {
            guard let port = m.ports.requires.first(where: { failures[$0] != nil }), let failure = failures[port] else { continue }
            disable(m.id, FeatureProblem(featureID: m.id, field: "ports.requires", code: failure.code,
                                         message: "feature '\(m.id)': \(failure.message)"))
            routes.remove(owner: m.id)
        }
    }

    /// What `open` gave or threw.
    private static func opened<T: Sendable>(_ open: @Sendable () async throws -> T) async -> Result<T, any Error> {
        do { return .success(try await open()) } catch { return .failure(error) }
    }

    private static func storeProblem(_ error: any Error, port: String) -> FeatureProblem {
        switch error {
        case let e as StoreError: FeatureProblem(featureID: nil, field: nil, code: e.code, message: e.message)
        case let e as TermindError: FeatureProblem(featureID: nil, field: nil, code: e.code, message: e.message)
        default: FeatureProblem(featureID: nil, field: nil, code: .storeOpenFailed, message: "\(port) could not be opened.")
        }
    }

    /// What a started feature may reach: the ports its manifest lists (the store and the
    /// secret store scoped to the feature: its own tables and its own secrets only) and the
    /// contracts it lists under `calls` (its own need no listing). Anything else is refused.
    private func context(for m: FeatureManifest) async -> FeatureContext {
        let declared = Set(m.ports.requires + m.ports.optional)
        let routes = self.routes
        let id = m.id
        let calls = Set(m.calls)
        let callsFrom = m.callsFrom.mapValues(Set.init)
        let scoped = await scopedStores(for: m)
        return FeatureContext(
            featureID: id,
            logger: Logger(label: id, sink: sink),
            ports: PortDirectory { port in
                guard declared.contains(port) else { return nil }
                // The store ports only ever as the feature's own view: never the kernel's.
                if Self.scopedPorts.contains(port) { return scoped[port] }
                return routes.port(port)
            },
            resident: configuration.resident,
            clientCommand: configuration.controlSocket.map { socket in
                [(ExecutablePaths.executable() ?? CommandLine.arguments[0]), "--socket", socket]
            },
            options: configuration.serveOptions.filter { option in m.serveOptions.contains { $0.name == option.key } },
            call: { [weak self] contract, body in
                guard let self else { throw TermindError.internalFailure("The kernel has shut down.") }
                return try await self.call(contract, body: body, origin: try Self.origin(ofCall: contract, by: id, calls: calls, callsFrom: callsFrom, routes: routes))
            },
            runStream: { [weak self] stream, body, input, onEvent in
                guard let self else { throw TermindError.internalFailure("The kernel has shut down.") }
                let origin = (CallOrigin.current ?? .inProcess).appending(Caller(.feature, id))
                guard calls.contains(stream.description) || routes.stream(stream)?.owner == id else {
                    throw Refusal.capabilityDenied(feature: id, contract: stream.description, declared: calls, origin: origin, effect: routes.stream(stream)?.effect).termindError
                }
                // Questions go up the chain: to the client of the stream this feature serves.
                let parent = StreamSession.current
                return try await self.runStream(stream.description, body: body, origin: origin, onOpen: { control in
                    if let input, !input.isEmpty { _ = control.input(input) }
                    _ = control.send(["inputEnd": .bool(true)])
                }, onEvent: { event in
                    guard event.kind == "ask" else {
                        onEvent(event)
                        return nil
                    }
                    return Self.relay(event, to: parent)
                })
            },
            makeSession: { onEvent in
                let origin = (CallOrigin.current ?? .inProcess).appending(Caller(.feature, id))
                let parent = StreamSession.current
                let events = DispatchQueue(label: "termind.session.events")
                let answers = StreamAnswers()
                let session = StreamSession(id: .integer(1), origin: origin, sink: .local({ event, size in
                    events.async {
                        if event.kind == "ask" {
                            answers.session?.receive(["answer": Self.relay(event, to: parent)])
                        } else {
                            onEvent(event)
                        }
                        if size > 0 { answers.session?.credit(size) }
                    }
                }))
                answers.session = session
                return (session, drained: { await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in events.async { done.resume() } } })
            },
            typedCall: FeatureTypedCall(kernel: self, feature: id, calls: calls, callsFrom: callsFrom)
        )
    }

    /// The answer to a question asked by a stream a feature runs: from the client of the
    /// stream that feature serves (`parent`), or none — never made up.
    private static func relay(_ event: StreamEvent, to parent: StreamSession?) -> JSONValue {
        let askID = event["askID"] ?? .null
        guard let parent, let question = event["ask"],
              case .object(var answer)? = waitFor({ await parent.ask(question) }) else { return .object(["askID": askID, "unanswered": .bool(true)]) }
        answer["askID"] = askID
        return .object(answer)
    }

    /// Blocks the calling thread (an events queue, never the cooperative pool) until `work` is done.
    private static func waitFor<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<T?>(nil)
        Task {
            let value = await work()
            box.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return box.withLock { $0! }
    }

    /// Kernel ports a feature only ever gets a view of its own.
    static let scopedPorts: Set<String> = ["kernel.store", "kernel.secrets"]

    /// The feature's own views of the store ports it declared (a view that cannot be opened
    /// leaves the port unavailable to the feature, never the kernel's unscoped one).
    private func scopedStores(for m: FeatureManifest) async -> [String: any Sendable] {
        var scoped: [String: any Sendable] = [:]
        let declared = Set(m.ports.requires + m.ports.optional)
        if declared.contains("kernel.store"), let database = routes.port("kernel.store") as? Database {
            do {
                // Opening a connection runs statements: on the store's executor.
                scoped["kernel.store"] = try await BlockingExecutor.store.run { try database.scoped(to: m.id) }
            } catch {
                logger.error("kernel.store.scope_failed", ["feature": .identifier(m.id)])
            }
        }
        if declared.contains("kernel.secrets"), let secrets = routes.port("kernel.secrets") as? SecretStore {
            scoped["kernel.secrets"] = secrets.scoped(to: m.id)
        }
        return scoped
    }

    /// Disables a feature and, transitively, every feature that requires it or one of its ports.
    private func disable(_ id: String, _ problem: FeatureProblem) {
        guard let m = manifests[id], statuses[id]?.state != .disabled else { return }
        setStatus(m, .disabled, problem)
        logger.warning("kernel.feature.disabled", ["feature": .identifier(id), "reason": .identifier(problem.code)])
        for dependent in order where statuses[dependent]?.state != .disabled {
            guard let d = manifests[dependent] else { continue }
            let needsFeature = d.dependencies.required.contains(id)
            let needsPort = !Set(d.ports.requires).isDisjoint(with: m.ports.provides)
            guard needsFeature || needsPort else { continue }
            if !running.contains(where: { $0.id == dependent }) { routes.remove(owner: dependent) }
            disable(dependent, FeatureProblem(featureID: dependent, field: needsFeature ? "dependencies.required" : "ports.requires",
                                              code: .featureDependencyDisabled,
                                              message: "feature '\(dependent)': requires '\(id)', which is disabled: \(problem.message)"))
        }
    }

    private func setStatus(_ m: FeatureManifest, _ state: FeatureStatus.State, _ problem: FeatureProblem?) {
        statuses[m.id] = FeatureStatus(
            id: m.id, version: m.version, kind: m.kind, state: state, reason: problem?.message, reasonCode: problem?.code,
            permanent: m.isPermanent, source: m.source, contracts: m.contracts + m.functions.map { "\(m.id).fn.\($0.name)@1" },
            provides: m.ports.provides, commands: m.commands, requires: m.ports.requires, optional: m.ports.optional, calls: m.calls)
        statuses[m.id]?.help = m.help
        statuses[m.id]?.serveOptions = m.serveOptions.isEmpty ? nil : m.serveOptions
    }

    private static func problem(_ error: any Error, feature: String, code: ErrorCode) -> FeatureProblem {
        if let p = error as? FeatureProblem { return p }
        if let e = error as? TermindError {
            return FeatureProblem(featureID: feature, field: nil, code: e.code, message: e.message.hasPrefix("feature '") ? e.message : "feature '\(feature)': \(e.message)")
        }
        return FeatureProblem(featureID: feature, field: nil, code: code, message: "feature '\(feature)': \(String(describing: error))")
    }

    private nonisolated func installKernelContracts() {
        let registrar = FeatureRegistrar(featureID: "kernel")
        registrar.handle(KernelContracts.Ping.self) { request, _ in request }
        registrar.handle(KernelContracts.Features.self) { [weak self] _, _ in
            .init(features: await self?.featureStatuses() ?? [])
        }
        registrar.handle(KernelContracts.PluginEnable.self) { [weak self] request, _ in
            guard let self else { throw TermindError.unknownContract(KernelContracts.PluginEnable.id.description) }
            return .init(message: try await self.enablePlugin(request.id))
        }
        registrar.handle(KernelContracts.Contracts.self) { [weak self] request, _ in
            .init(contracts: self?.contractInfos(prefix: request.prefix) ?? [])
        }
        registrar.handle(KernelContracts.Command.self) { [weak self] request, _ in
            await self?.resolveCommand(request.words) ?? .init(command: nil, target: nil)
        }
        let configuration = self.configuration
        registrar.handle(KernelContracts.Version.self) { _, _ in
            .init(termind: configuration.hostVersion, signature: .host, pluginABI: FeatureDescriptor.abiVersion,
                  libraries: Self.linkedLibraries.merging(configuration.libraryVersions) { $1 })
        }
        let routes = self.routes
        let secretStatus: @Sendable () throws -> SecretStoreContracts.Status.Response = {
            guard let store = routes.port("kernel.secrets") as? SecretStore else {
                throw TermindError(.secretUnavailable, "The secret store is not open: no loaded feature uses it.")
            }
            return .init(protection: try store.protection(), path: store.path, secrets: try store.handles().count, keyRotatedAt: try store.keyRotatedAt())
        }
        registrar.handleBlocking(SecretStoreContracts.Status.self) { _, _ in try secretStatus() }
        // Re-sealing every secret and scrypt: blocking work, on Core's executor.
        registrar.handleBlocking(SecretStoreContracts.Protect.self) { request, _ in
            guard let store = routes.port("kernel.secrets") as? SecretStore else { return try secretStatus() }
            if let passphrase = request.passphrase, !passphrase.isEmpty {
                guard passphrase.withPlaintext({ $0.count }) >= 8 else {
                    throw TermindError.badRequest("passphrase: use at least 8 characters.")
                }
                try store.changeProtection(to: .passphrase(passphrase))
            } else {
                var keyFile = configuration.secretsKeyFilePath
                if keyFile == nil, case .keyFile(let path)? = configuration.secretsKey { keyFile = path }
                guard let keyFile else {
                    throw TermindError.badRequest("passphrase: no key file is configured to switch to (--secrets-key).")
                }
                try store.changeProtection(to: .keyFile(keyFile))
            }
            return try secretStatus()
        }
        for endpoint in registrar.publishedEndpoints { try! routes.add(endpoint) }
    }
}

/// Where an in-process stream's answers go (set once, before any event can arrive).
private final class StreamAnswers: Sendable {
    private let slot = Mutex<StreamSession?>(nil)
    var session: StreamSession? {
        get { slot.withLock { $0 } }
        set { slot.withLock { $0 = newValue } }
    }
}

/// How a client drives a running stream: its messages (`inputEnd`, `cancel` with a
/// `signal`), and its input bytes. Both return false once the stream can take no more.
public struct StreamControl: Sendable {
    public let send: @Sendable ([String: JSONValue]) -> Bool
    public let input: @Sendable (Data) -> Bool

    public init(send: @escaping @Sendable ([String: JSONValue]) -> Bool, input: @escaping @Sendable (Data) -> Bool) {
        self.send = send
        self.input = input
    }
}
