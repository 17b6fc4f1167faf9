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

    /// The connection for one stream run, asking the stream's client what only a person can answer.
    private static func connection(_ ports: Ports, _ request: any SessionTarget, session: StreamSession) async throws -> SSHConnection {
        let opener = ConnectionOpener(routes: ports.routes, trust: ports.trust, pool: ports.pool, logger: ports.logger)
        let target = ConnectionTarget(target: request.target, user: request.user, identity: request.identity, workingDirectory: request.workingDirectory,
                                      acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout)
        return try await opener.connection(target) { await session.ask($0) }
    }

    /// One `workspaces.exec@1` run: the command, its output as events.
    private struct ExecRunner {
        let ports: Ports
        let request: WorkspacesStreams.Exec.Request
        let session: StreamSession

        func run() async throws -> WorkspacesStreams.Exec.Result {
            let connection = try await WorkspacesFeature.connection(ports, request, session: session)
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
            let connection = try await WorkspacesFeature.connection(ports, request, session: session)
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
    var acceptHostKey: HostKeyPreset? { get }
    var connectTimeout: Double? { get }
}

extension WorkspacesStreams.Exec.Request: SessionTarget {}
extension WorkspacesStreams.Terminal.Request: SessionTarget {}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "workspaces", version: "0.1.0", signature: TermindLibrary.signature) { WorkspacesFeature() }
}
