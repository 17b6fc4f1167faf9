import FoundationEssentials
import TermindCore
import TermindSSH

/// How an unknown host key is answered without asking (`--accept-host-key`).
public enum HostKeyPreset: String, Codable, Sendable, SchemaEnum {
    /// Trust it for this connection only.
    case once
    /// Trust it and save it among the known hosts.
    case save
}

/// Where a connection's questions go: a stream's client (`StreamSession.ask`), or nobody
/// (nil answers: the question is unanswered and the connection fails closed).
public typealias ConnectionAsker = @Sendable (JSONValue) async -> JSONValue?

/// What a stream's request says about where to connect and how.
public struct ConnectionTarget: Sendable, Equatable {
    /// A saved host (id or label) or a quick-connect line.
    public var target: String
    public var user: String?
    public var identity: String?
    /// The client's working folder (for a relative `-i` key file).
    public var workingDirectory: String?
    public var acceptHostKey: HostKeyPreset?
    /// Seconds for name resolution, TCP connect and the handshake, per hop.
    public var connectTimeout: Double?
    /// Connections are shared only between users with the same purpose (nil: any session on the same target).
    public var purpose: String?
    /// How soon a silent server counts as gone (nil: every 15 s, lost after 3 unanswered);
    /// work that must notice a dead link quickly (a forward's supervisor) asks for less.
    public var keepalive: SSHKeepalive?

    public init(target: String, user: String? = nil, identity: String? = nil, workingDirectory: String? = nil, acceptHostKey: HostKeyPreset? = nil,
                connectTimeout: Double? = nil, purpose: String? = nil, keepalive: SSHKeepalive? = nil) {
        self.target = target
        self.user = user
        self.identity = identity
        self.workingDirectory = workingDirectory
        self.acceptHostKey = acceptHostKey
        self.connectTimeout = connectTimeout
        self.purpose = purpose
        self.keepalive = keepalive
    }
}

/// The one way an SSH feature gets a connection for a run: the route from the Vault, the
/// connection from the process's pool, and what only a person can answer (an unknown host
/// key, keyboard-interactive prompts, a key's passphrase) asked through `ask`.
public struct ConnectionOpener: Sendable {
    public let routes: any RouteResolver
    public let trust: any HostKeyTrust
    public let pool: any SSHConnections
    public let logger: Logger

    public init(routes: any RouteResolver, trust: any HostKeyTrust, pool: any SSHConnections, logger: Logger) {
        self.routes = routes
        self.trust = trust
        self.pool = pool
        self.logger = logger
    }

    /// What the stream's questions may be (declared by each stream that connects).
    public static let questions = ["ssh.hostKey": "choice", "ssh.passphrase": "prompts", "ssh.keyboardInteractive": "prompts"]

    /// - Parameter hostKey: consulted before asking about an unknown host key (a monitor's
    ///   key trusted once earlier); nil: ask. `answered` hears each answer given.
    public func connection(_ request: ConnectionTarget, ask: @escaping ConnectionAsker,
                           hostKey: (@Sendable (HostKeyQuestion) -> HostKeyAnswer?)? = nil,
                           answered: (@Sendable (HostKeyQuestion, HostKeyAnswer) -> Void)? = nil) async throws -> SSHConnection {
        let (route, policy, saved) = try await plan(request, ask: ask, hostKey: hostKey, answered: answered)
        do { return try await pool.connection(for: route, policy: policy) } catch { throw Self.named(error, request, saved: saved) }
    }

    /// As `connection`, held by a lease: the pool's idle sweep leaves it open while work that
    /// outlives its channels (a forward's listener) holds it.
    public func lease(_ request: ConnectionTarget, ask: @escaping ConnectionAsker,
                      hostKey: (@Sendable (HostKeyQuestion) -> HostKeyAnswer?)? = nil,
                      answered: (@Sendable (HostKeyQuestion, HostKeyAnswer) -> Void)? = nil) async throws -> SSHConnectionLease {
        let (route, policy, saved) = try await plan(request, ask: ask, hostKey: hostKey, answered: answered)
        do { return try await pool.lease(for: route, policy: policy) } catch { throw Self.named(error, request, saved: saved) }
    }

    /// A name that is no saved host was taken as a host name; when that does not resolve either,
    /// the error says both (`termind ssh prdo` for the saved host prod is the likelier mistake).
    /// A bare name (no user@, no quick-connect options) is a route of one hop: the name that
    /// failed to resolve is the target's.
    static func named(_ error: Error, _ request: ConnectionTarget, saved: Bool) -> Error {
        guard let failure = error as? TermindError, failure.is(.sshResolveFailed), !saved,
              !request.target.contains("@"), !request.target.contains(" ") else { return error }
        return TermindError(code: failure.code, message: failure.message
            + " No saved host is named \(request.target) either (termind vault host list shows them).")
    }

    /// The route to open and how to answer what opening it raises.
    private func plan(_ request: ConnectionTarget, ask: @escaping ConnectionAsker,
                      hostKey: (@Sendable (HostKeyQuestion) -> HostKeyAnswer?)?,
                      answered: (@Sendable (HostKeyQuestion, HostKeyAnswer) -> Void)?) async throws -> (SSHRoute, SSHOpenPolicy, targetIsSaved: Bool) {
        let resolved = try await routes.route(
            for: RouteRequest(target: request.target, user: request.user, identity: request.identity, workingDirectory: request.workingDirectory)
        ) { path in
            let answer = await ask(StreamQuestion.prompts(topic: "ssh.passphrase", header: [], [("Enter passphrase for key '\(path)': ", false)]))
            return StreamQuestion.answers(answer)?.first
        }
        // Connections are shared only between runs that asked for the same thing.
        var context = "\(request.target)\u{1F}\(request.user ?? "")\u{1F}\(request.identity ?? "")"
        if let purpose = request.purpose { context += "\u{1F}\(purpose)" }
        let route = SSHRoute(resolved.route.hops, context: context)
        let preset = request.acceptHostKey
        let policy = SSHOpenPolicy(trust: trust, deadlines: Self.deadlines(request.connectTimeout), keepalive: request.keepalive ?? SSHKeepalive(),
                                   logger: logger.child("ssh"), credentials: { hop in
            resolved.credentials(for: hop)
        }, keyboardInteractive: { challenge in
            var header = ["(\(challenge.host))"]
            if !challenge.name.isEmpty { header.append(challenge.name) }
            if !challenge.instruction.isEmpty { header.append(challenge.instruction) }
            let answer = await ask(StreamQuestion.prompts(topic: "ssh.keyboardInteractive", header: header, challenge.prompts.map { ($0.text, $0.echo) }))
            return StreamQuestion.answers(answer)
        }) { question in
            let answer: HostKeyAnswer
            if let known = hostKey?(question) {
                answer = known
            } else {
                switch preset {
                case .once?: answer = .acceptOnce
                case .save?: answer = .acceptAndSave
                case nil: answer = await Self.askAboutHostKey(question, ask: ask)
                }
            }
            answered?(question, answer)
            return answer
        }
        return (route, policy, resolved.targetIsSaved)
    }

    /// Failures retrying cannot mend: a person must answer, trust or fix something (an unknown
    /// or changed host key, authentication, prompts nobody answered, a host or key gone).
    /// Work that reconnects by itself (a monitor, a forward) stops on these.
    public static func needsAttention(_ error: TermindError) -> Bool {
        error.isAny(of: [.sshAuthFailed, .sshAuthCancelled, .sshAuthBadAnswers, .sshHostKeyRejected, .sshHostKeyUnknown, .sshHostKeyChanged,
                         .sshHostKeyTypeChanged, .vaultHostNotFound, .vaultIdentityNotFound, .vaultKeyNotFound, .vaultKeyUnreadable])
    }

    /// As OpenSSH's ConnectTimeout: name resolution, TCP connect and the handshake, per hop.
    static func deadlines(_ limit: Double?) -> SSHDeadlines {
        var deadlines = SSHDeadlines()
        if let limit {
            deadlines.resolve = limit
            deadlines.connect = limit
            deadlines.handshake = limit
        }
        return deadlines
    }

    /// Asks whether to trust an unknown host key; nobody to ask fails closed with what to do instead.
    public static func askAboutHostKey(_ question: HostKeyQuestion, ask: ConnectionAsker) async -> HostKeyAnswer {
        let target = question.port == 22 ? question.host : "[\(question.host)]:\(question.port)"
        let text = "The authenticity of host \(target) can't be established.\n\(question.algorithm) key fingerprint is \(question.fingerprint).\n"
            + "Trust it? [s]ave / [o]nce / [N]o: "
        // The details let a program (not a person) decide: what the question is about.
        let details: JSONValue = .object(["hostKey": .object(["host": .string(question.host), "port": .integer(Int64(question.port)),
                                                             "algorithm": .string(question.algorithm), "fingerprint": .string(question.fingerprint),
                                                             "key": .string(question.key)])])
        let answer = await ask(StreamQuestion.choice(topic: "ssh.hostKey", text, ["s": "save", "save": "save", "yes": "save", "y": "save", "o": "once", "once": "once",
                                                                                 "n": "reject", "no": "reject"],
                                                     default: "reject", details: details))
        if StreamQuestion.unanswered(answer) {
            return .unanswered(reason: "there is no terminal to ask whether to trust it. Check the fingerprint with the server's administrator, then run termind "
                + "on a terminal, or pass --accept-host-key once (this connection only) or --accept-host-key save, or trust it first: "
                + "termind vault knownhost add \(question.host) '\(question.key)'\(question.port == 22 ? "" : " --port \(question.port)").")
        }
        switch answer?["answer"]?.stringValue {
        case "save"?: return .acceptAndSave
        case "once"?: return .acceptOnce
        default: return .reject
        }
    }
}
