import Foundation
import Synchronization
import TermindCore
import TermindSSH
import SettingsAPI
import VaultAPI
import WorkspacesAPI

/// Workspaces: SSH sessions on the Vault's hosts, over the kernel's one connection pool
/// (`kernel.ssh`), so exec, the terminal, and later SFTP and forwarding, share connections
/// to a route. Its streams: `workspaces.exec@1` (`termind exec`), `workspaces.terminal@1` (`termind ssh`).
final class WorkspacesFeature: Feature {
    private struct Ports: Sendable {
        let routes: any RouteResolver
        let trust: any HostKeyTrust
        let pool: SSHConnectionPool
        let logger: Logger
    }

    private let ports = Mutex<Ports?>(nil)

    private func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("Workspaces is not started.") }
        return ports
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.stream(WorkspacesStreams.Exec.self) { [self] request, session in
            try await ExecRunner(ports: try current(), request: request, session: session).run()
        }
        registrar.stream(WorkspacesStreams.Terminal.self) { [self] request, session in
            try await TerminalRunner(ports: try current(), request: request, session: session).run()
        }
    }

    func start(_ context: FeatureContext) async throws {
        // The terminal's settings live with Settings when it runs.
        if let settings = context.ports.optional(.settingsValues) {
            try settings.register(TerminalSettings.Preferences.self, owner: context.featureID)
            try settings.register(TerminalSettings.Device.self, owner: context.featureID)
        }
        let value = Ports(routes: try context.ports.require(.routes), trust: try context.ports.require(.hostKeyTrust),
                          pool: try context.ports.require(.sshConnections), logger: context.logger)
        ports.withLock { $0 = value }
    }

    func stop() async {
        ports.withLock { $0 = nil }
    }

    /// A connection for one stream run: the route from the Vault, the connection from the
    /// pool, asking the stream's client what only a person can answer.
    private struct Opener {
        let ports: Ports
        let session: StreamSession
        let request: any SessionTarget
        var target: String { request.target }
        var user: String? { request.user }
        var identity: String? { request.identity }
        var workingDirectory: String? { request.workingDirectory }
        var acceptHostKey: WorkspacesStreams.Exec.HostKeyPreset? { request.acceptHostKey }
        var connectTimeout: Double? { request.connectTimeout }

        func connection() async throws -> SSHConnection {
            let session = self.session
            let resolved = try await ports.routes.route(
                for: RouteRequest(target: target, user: user, identity: identity, workingDirectory: workingDirectory)
            ) { path in
                let answer = await session.ask(StreamQuestion.prompts(topic: "ssh.passphrase", header: [], [("Enter passphrase for key '\(path)': ", false)]))
                return StreamQuestion.answers(answer)?.first
            }
            // Connections are shared only between runs that asked for the same thing.
            let route = SSHRoute(resolved.route.hops, context: "\(target)\u{1F}\(user ?? "")\u{1F}\(identity ?? "")")
            let preset = acceptHostKey
            let policy = SSHOpenPolicy(trust: ports.trust, deadlines: deadlines(), logger: ports.logger.child("ssh"), credentials: { hop in
                resolved.credentials(for: hop)
            }, keyboardInteractive: { challenge in
                var header = ["(\(challenge.host))"]
                if !challenge.name.isEmpty { header.append(challenge.name) }
                if !challenge.instruction.isEmpty { header.append(challenge.instruction) }
                let answer = await session.ask(StreamQuestion.prompts(topic: "ssh.keyboardInteractive", header: header, challenge.prompts.map { ($0.text, $0.echo) }))
                return StreamQuestion.answers(answer)
            }) { question in
                switch preset {
                case .once?: return .acceptOnce
                case .save?: return .acceptAndSave
                case nil: return await Self.askAboutHostKey(question, session: session)
                }
            }
            return try await ports.pool.connection(for: route, policy: policy)
        }

        /// As OpenSSH's ConnectTimeout: name resolution, TCP connect and the handshake, per hop.
        private func deadlines() -> SSHDeadlines {
            var deadlines = SSHDeadlines()
            if let limit = connectTimeout {
                deadlines.resolve = limit
                deadlines.connect = limit
                deadlines.handshake = limit
            }
            return deadlines
        }

        /// Asks the client whether to trust an unknown host key; nobody to ask fails closed
        /// with what to do instead.
        static func askAboutHostKey(_ question: HostKeyQuestion, session: StreamSession) async -> HostKeyAnswer {
            let target = question.port == 22 ? question.host : "[\(question.host)]:\(question.port)"
            let text = "The authenticity of host \(target) can't be established.\n\(question.algorithm) key fingerprint is \(question.fingerprint).\n"
                + "Trust it? [s]ave / [o]nce / [N]o: "
            // The details let a program (not a person) decide: what the question is about.
            let details: JSONValue = .object(["hostKey": .object(["host": .string(question.host), "port": .integer(Int64(question.port)),
                                                                 "algorithm": .string(question.algorithm), "fingerprint": .string(question.fingerprint),
                                                                 "key": .string(question.key)])])
            let answer = await session.ask(StreamQuestion.choice(topic: "ssh.hostKey", text, ["s": "save", "save": "save", "yes": "save", "y": "save", "o": "once", "once": "once"],
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

    /// One `workspaces.exec@1` run: the command, its output as events.
    private struct ExecRunner {
        let ports: Ports
        let request: WorkspacesStreams.Exec.Request
        let session: StreamSession

        func run() async throws -> WorkspacesStreams.Exec.Result {
            let connection = try await Opener(ports: ports, session: session, request: request).connection()
            let session = self.session
            do {
                // Handed-over descriptors: the channel moves those streams itself (on copies of
                // its own, so the session may close its descriptors once this returns).
                let descriptors = session.descriptors.map { ChannelDescriptors(input: $0.stdin, output: $0.stdout, error: $0.stderr) }
                let result = try await connection.exec(request.command, input: session.input, timeout: request.timeout, output: { stream, data in
                    await session.emit(stream == .stdout ? "stdout" : "stderr", data: data)
                }, cancelSignal: { session.cancelSignal }, descriptors: descriptors)
                return .init(exitStatus: result.exitStatus, exitSignal: result.exitSignal)
            } catch {
                // Cancelled with a signal: the channel closes with it; let that reach the
                // server before the caller (a CLI about to exit) ends the connection.
                if session.cancelSignal != nil { await connection.waitUntilIdle(timeout: 2) }
                throw error
            }
        }
    }

    /// One `workspaces.terminal@1` run: a shell or command with the client's terminal bridged
    /// (raw bytes both ways, window changes as controls).
    private struct TerminalRunner {
        let ports: Ports
        let request: WorkspacesStreams.Terminal.Request
        let session: StreamSession

        func run() async throws -> WorkspacesStreams.Terminal.Result {
            let connection = try await Opener(ports: ports, session: session, request: request).connection()
            let pty = request.terminal.map { PTYRequest(term: $0.term.isEmpty ? "xterm-256color" : $0.term, columns: max(1, $0.columns), rows: max(1, $0.rows)) }
            let environment = (request.terminal?.environment ?? [:]).filter { $0.key == "LANG" || $0.key.hasPrefix("LC_") }
            let channel = try await connection.openChannel(request.command.map { .exec($0) } ?? .shell, pty: pty, environment: environment)
            let session = self.session
            // The client's terminal goes raw now, after every question of the connection.
            await session.emit("started")
            let input = Task {
                for await chunk in session.input { try await channel.write(chunk) }
                channel.closeInput()
            }
            // The latest size wins; a resize that fails is only a diagnostic.
            let resizes = Task {
                for await control in session.controls {
                    guard case .integer(let columns)? = control["resize"]?["columns"], case .integer(let rows)? = control["resize"]?["rows"] else { continue }
                    do { try await channel.resize(columns: Int(columns), rows: Int(rows)) } catch {
                        ports.logger.debug("workspaces.terminal.resize_failed")
                    }
                }
            }
            defer { input.cancel(); resizes.cancel() }
            do {
                try await withTaskCancellationHandler {
                    while let (stream, data) = try await channel.next() {
                        await session.emit(stream == .stdout ? "stdout" : "stderr", data: data)
                    }
                } onCancel: {
                    if let signal = session.cancelSignal { channel.close(signal: signal) } else { channel.close() }
                }
                try Task.checkCancellation()
            } catch {
                if session.cancelSignal != nil { await connection.waitUntilIdle(timeout: 2) }
                throw error
            }
            return .init(exitStatus: channel.exit?.status, exitSignal: channel.exit?.signal)
        }
    }
}

/// What every session stream's request says about where to connect and how.
private protocol SessionTarget: Sendable {
    var target: String { get }
    var user: String? { get }
    var identity: String? { get }
    var workingDirectory: String? { get }
    var acceptHostKey: WorkspacesStreams.Exec.HostKeyPreset? { get }
    var connectTimeout: Double? { get }
}

extension WorkspacesStreams.Exec.Request: SessionTarget {}
extension WorkspacesStreams.Terminal.Request: SessionTarget {}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "workspaces", version: "0.1.0", signature: TermindLibrary.signature) { WorkspacesFeature() }
}
