import FoundationEssentials

/// A feature library's runtime object. The kernel calls `register` once (publish ports
/// and contract handlers), then `start` in dependency order, and `stop` in reverse order
/// at shutdown. A feature that throws from `register` or `start` is disabled with the
/// error's message, together with the features that require it.
public protocol Feature: AnyObject, Sendable {
    func register(_ registrar: FeatureRegistrar) throws
    func start(_ context: FeatureContext) async throws
    func stop() async
}

extension Feature {
    public func start(_ context: FeatureContext) async throws {}
    public func stop() async {}
}

/// Everything a started feature gets from the kernel. No globals: the logger, the ports it
/// declared and contract calls all arrive here.
public struct FeatureContext: Sendable {
    public let featureID: String
    public let logger: Logger
    public let ports: PortDirectory
    /// Calls any loaded contract (JSON in, JSON out), as this feature.
    public let call: @Sendable (ContractID, Data) async throws -> Data
    /// The process serves clients until it is stopped (`termind serve`): work meant to
    /// outlive one command (a host's monitor, a forward) may start at boot. In a one-shot
    /// command it starts only when that command asks for it.
    public let resident: Bool
    /// The words that start a termind client of this resident process (its executable and
    /// `--socket PATH`), for work that opens a person's client in a window (a workspace's
    /// panes); nil in a one-shot command. Such a client has its person's rights, as any
    /// command they type: it is not a way to call what this feature's manifest does not list
    /// on its own behalf.
    public let clientCommand: [String]?
    /// The `termind serve` options this feature's manifest declares (`serveOptions`) that
    /// were given, by name without dashes; empty in a one-shot command.
    public let options: [String: String]

    /// Runs another feature's stream (declared under `calls`), as this feature, on behalf of
    /// whoever it serves: the body, the input to send (then its end), and what to do with
    /// each event; its questions go to the client of the stream this feature serves (never
    /// answered by anyone else), and cancelling the calling task cancels the stream. Returns
    /// the result body.
    public let runStream: @Sendable (ContractID, Data, Data?, @escaping @Sendable (StreamEvent) -> Void) async throws -> Data

    /// A session for a port that reports through one (the SFTP scheduler's `transfer`): its
    /// events go to the closure, its questions up the chain as `runStream`'s do. Used by
    /// `withSession`, which ends it.
    let makeSession: @Sendable (@escaping @Sendable (StreamEvent) -> Void) -> (StreamSession, drained: @Sendable () async -> Void)

    /// The kernel's typed calls for this feature (the same checks as `call`); nil: typed calls
    /// go through JSON.
    let typedCall: (any TypedContractCall)?

    /// Made by the kernel only: what a feature reaches is what the kernel hands it.
    package init(featureID: String, logger: Logger, ports: PortDirectory, resident: Bool = false, clientCommand: [String]? = nil,
                 options: [String: String] = [:],
                 call: @escaping @Sendable (ContractID, Data) async throws -> Data,
                 runStream: @escaping @Sendable (ContractID, Data, Data?, @escaping @Sendable (StreamEvent) -> Void) async throws -> Data,
                 makeSession: @escaping @Sendable (@escaping @Sendable (StreamEvent) -> Void) -> (StreamSession, drained: @Sendable () async -> Void),
                 typedCall: (any TypedContractCall)? = nil) {
        self.makeSession = makeSession
        self.typedCall = typedCall
        self.clientCommand = clientCommand
        self.options = options
        self.featureID = featureID
        self.logger = logger
        self.ports = ports
        self.resident = resident
        self.call = call
        self.runStream = runStream
    }

    /// A typed call, as `call` with its checks: to a Swift endpoint of these very types the
    /// value crosses without JSON (the kernel's typed path); otherwise it is encoded and decoded.
    public func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
        if let typedCall { return try await typedCall.call(C.self, request) }
        let reply = try await call(C.id, try JSONCoding.encode(request))
        return try JSONDecoder().decode(C.Response.self, from: reply)
    }

    /// Typed convenience over `runStream`.
    public func stream<S: StreamContract>(_ stream: S.Type, _ request: S.Request, input: Data? = nil,
                                          onEvent: @escaping @Sendable (StreamEvent) -> Void = { _ in }) async throws -> S.Result {
        let reply = try await runStream(S.id, try JSONCoding.encode(request), input, onEvent)
        return try JSONDecoder().decode(S.Result.self, from: reply)
    }

    /// Runs `body` with a session for a port that reports through one (the SFTP scheduler's
    /// `transfer`): the session's events go to `onEvent`, its questions to the client of the
    /// stream this feature serves (refused when it serves none), and it ends with `body`.
    /// A port is a direct call that no policy sees: work done for an agent goes through
    /// contracts and streams (`call`, `runStream`), never through ports.
    public func withSession<T>(onEvent: @escaping @Sendable (StreamEvent) -> Void, _ body: (StreamSession) async throws -> T) async rethrows -> T {
        let (session, drained) = makeSession(onEvent)
        do {
            let result = try await body(session)
            // Every event the work sent is handled before its result is.
            await drained()
            session.finish()
            return result
        } catch {
            session.finish()
            throw error
        }
    }

    /// Runs `body` on an agent's behalf (an assistant's conversation and tool call, in
    /// `detail`): every call and stream it makes carries an `agent` link after this feature,
    /// so the kernel asks its policy hook before dispatching each one.
    public func actingForAgent<T>(_ detail: String, _ body: () async throws -> T) async rethrows -> T {
        let origin = (CallOrigin.current ?? .inProcess).appending(Caller(.agent, featureID, detail: detail))
        return try await CallOrigin.$current.withValue(origin) { try await body() }
    }
}

/// A feature's typed contract calls, made by the kernel with the checks of
/// `FeatureContext.call` (what the feature's manifest lets it call, the policy for an
/// agent's chain).
package protocol TypedContractCall: Sendable {
    func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response
}
