import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import PortForwardingAPI
import SettingsAPI
import TermindCore
import TermindSSH
import WorkspacesAPI
import WorkspacesRules

/// One `workspaces.terminal@1` run: a shell or command with the client's terminal bridged
/// (raw bytes both ways, window changes as controls). Inside `termind serve`, with a
/// terminal, the session is durable: it is handed to the server's registry and this run is
/// only the first client's time on it.
struct TerminalRunner {
    let ports: WorkspacesFeature.Ports
    let request: WorkspacesStreams.Terminal.Request
    let session: StreamSession
    let sessions: SessionRegistry

    func run() async throws -> WorkspacesStreams.Terminal.Result {
        // Shell integration is decided once, before connecting; later edits of the setting
        // reach only later sessions.
        let saved = (try? await ports.hosts.host(named: request.target)) ?? nil
        let preferences = (try? await ports.settings?.read(TerminalSettings.Preferences.self)) ?? TerminalSettings.Preferences.defaults
        let bootstrap = request.terminal != nil && request.command == nil
            && (saved?.shellIntegration == .enabled || (saved?.shellIntegration ?? .default) == .default && preferences.shellIntegration)

        // A workspace pane whose session is open already goes back to it: nothing connects
        // or authenticates again.
        var tag: PaneTag?
        if ports.resident, request.terminal != nil, let workspace = request.workspace, let pane = request.pane {
            let host = saved?.id ?? request.target
            if let live = await sessions.session(workspace: workspace, pane: pane, host: host) {
                return try await live.attach(session, terminal: request.terminal, scrollback: nil, first: false)
            }
            // A saved workspace is shown by its name; a batch of --hosts by its tag.
            let name = (try? await WorkspaceTemplates(ports: ports).get(workspace).name) ?? workspace
            tag = PaneTag(workspace: workspace, name: name, pane: pane, host: host)
        }
        // Agent forwarding (-A, or the saved host's setting): OpenSSH's sshd gives the agent to
        // every session of a connection once one asked, so these sessions get connections of
        // their own, never shared with sessions that did not ask.
        let wantsAgent = request.forwardAgent ?? saved?.forwardAgent ?? false
        let agent = wantsAgent ? ProcessInfo.processInfo.environment["SSH_AUTH_SOCK"].flatMap { $0.isEmpty ? nil : $0 } : nil
        if wantsAgent, agent == nil {
            await session.emit("notice", ["text": .string("No agent to forward: SSH_AUTH_SOCK is not set\(ports.resident ? " where termind serve runs" : "").")])
        }
        let session = self.session
        let connection = try await WorkspacesFeature.connection(ports, request, session: session, purpose: agent == nil ? nil : "agent-forwarding") { await session.ask($0) }
        let pty = request.terminal.map { PTYRequest(term: $0.term.isEmpty ? "xterm-256color" : $0.term, columns: max(1, $0.columns), rows: max(1, $0.rows)) }
        let environment = (request.terminal?.environment ?? [:]).filter { $0.key == "LANG" || $0.key.hasPrefix("LC_") }
        // -L/-R/-D for the session's lifetime, by the PortForwarding feature; said before the
        // terminal goes raw, and a spec that does not parse starts nothing (no shell either).
        let forwards = try await startForwards()
        // History starts here, once authenticated: by saved host, else where the line went.
        let history = ports.history.map { HistoryRecorder(store: $0, host: saved?.id ?? connection.target.display, logger: ports.logger.child("history")) }
        let integration = ShellIntegration(bootstrap: bootstrap, history: history)
        let kind: SSHConnection.ChannelKind = request.command.map { .exec($0) } ?? .shell
        if ports.resident, let pty {
            let durable = DurableSession(id: await sessions.reserveID(), host: saved?.label ?? connection.target.display, command: request.command,
                                         columns: pty.columns, rows: pty.rows, scrollbackLines: preferences.scrollbackLines,
                                         logger: ports.logger.child("session"), integration: integration, forwards: forwards, pane: tag)
            let channel: SSHChannel
            do {
                channel = try await open(connection, kind, pty: pty, environment: environment, agent: agent, terminal: durable.tap, integration: integration)
            } catch {
                await forwards?.stop()
                throw error
            }
            durable.bind(channel)
            await sessions.add(durable)
            do {
                return try await durable.attach(session, terminal: request.terminal, scrollback: nil, first: true)
            } catch {
                // Its first client never got it: nobody would know it is there.
                durable.close()
                throw error
            }
        }
        // The client's terminal moved by the engine itself, when it handed it over.
        let link = pty == nil ? nil : terminalLink(of: session, detachable: false)
        let marks = link.map { _ in OutputMarks(integration: integration) }
        // Without a terminal, handed-over pipes are moved as exec moves them.
        let pipes = pty == nil ? session.descriptors.map { ChannelDescriptors(input: $0.stdin, output: $0.stdout, error: $0.stderr) } : nil
        defer { integration.cancel() }
        do {
            // The link takes the output from the first byte (the first prompt, a short command's all).
            let channel = try await open(connection, kind, pty: pty, environment: environment, agent: agent, descriptors: pipes,
                                         terminal: marks.map { marks in TerminalTap(output: { marks.visible($0) }, keysAllowed: { integration.keysAllowed }) },
                                         linking: link, integration: integration)
            let result = if let link {
                try await linked(channel, link: link, connection: connection, integration: integration)
            } else {
                try await plain(channel, connection: connection, integration: integration, readsInput: pipes?.input == nil)
            }
            await forwards?.stop()
            return result
        } catch {
            // A link never taken by the channel closes its copies when it goes.
            await forwards?.stop()
            throw error
        }
    }

    /// Opens the session's channel and starts its shell integration; -A's refusal is said.
    private func open(_ connection: SSHConnection, _ kind: SSHConnection.ChannelKind, pty: PTYRequest?, environment: [String: String], agent: String?,
                      descriptors: ChannelDescriptors? = nil, terminal: TerminalTap?, linking: TerminalLink? = nil,
                      integration: ShellIntegration) async throws -> SSHChannel {
        let channel = try await connection.openChannel(kind, pty: pty, environment: environment, descriptors: descriptors, forwardAgent: agent,
                                                       terminal: terminal, linking: linking)
        integration.whenKeysAllowed { channel.wake() }
        integration.start { line in try? await channel.write(line) }
        if agent != nil, !channel.agentForwarded {
            await session.emit("notice", ["text": .string("\(connection.target.display) refused agent forwarding (sshd's AllowAgentForwarding).")])
        }
        return channel
    }

    /// The session's forwards, started and described; nil when none were asked for.
    private func startForwards() async throws -> (any SessionForwards)? {
        let specs = (request.localForward ?? []).map { (kind: ForwardKind.local, spec: $0) } + (request.remoteForward ?? []).map { (kind: ForwardKind.remote, spec: $0) }
            + (request.dynamicForward ?? []).map { (kind: ForwardKind.dynamic, spec: $0) }
        guard !specs.isEmpty else { return nil }
        guard let forwarding = ports.forwarding else {
            throw TermindError(.workspacesForwardingUnavailable, "-L, -R and -D are the PortForwarding feature's, and it is not running here (termind features says why).")
        }
        let session = self.session
        let forwards = try await forwarding.start(specs, on: request.target, acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout) {
            await session.ask($0)
        }
        for status in await forwards.statuses() {
            let text: String = switch status.state {
            case .running: "\(status.rule.name): \(status.bound ?? "?")\(status.rule.kind == .remote ? " on the server" : "") for this session"
            default: "\(status.rule.name) did not start: \(status.lastError ?? status.state.rawValue)"
            }
            await session.emit("notice", ["text": .string(text)])
        }
        return forwards
    }

    /// A session whose client's terminal the engine moves itself (in-process): keys and
    /// output never pass through this task; it relays window sizes, the client's ready and
    /// pause, and the escapes the engine read.
    private func linked(_ channel: SSHChannel, link: TerminalLink, connection: SSHConnection, integration: ShellIntegration) async throws -> WorkspacesStreams.Terminal.Result {
        let session = self.session
        // The client's terminal goes raw now, after every question of the connection, and
        // says so; until then nothing is read or written.
        await session.emit("started", ["linked": .bool(true)])
        let escapes = Task {
            for await event in link.events {
                switch event {
                case .disconnect, .suspend, .detach:
                    await session.emit("escape", ["action": .string(Self.name(event))])
                case .hungUp where link.outputFailure != nil:
                    // A piped stdout's reader went away, or its file cannot be written: the
                    // command ends as exec's does (141, or the error, below).
                    channel.close()
                case .hungUp:
                    // The terminal is gone: as a closed window, the shell is hung up.
                    channel.close(signal: "HUP")
                }
            }
        }
        let controls = Task {
            for await control in session.controls {
                switch control["terminal"]?.stringValue {
                case "ready"?: link.resume()
                case "pause"?: link.pause()
                default: await resize(channel, control)
                }
            }
        }
        defer { escapes.cancel(); controls.cancel() }
        try await untilEnded(channel, connection: connection)
        await integration.finish()
        if let failure = link.outputFailure {
            let exit = try ChannelExit.afterLocalOutputFailure(failure, of: "the session on \(connection.target.display)")
            return .init(exitStatus: exit.status, exitSignal: exit.signal)
        }
        return .init(exitStatus: channel.exit?.status, exitSignal: channel.exit?.signal)
    }

    /// An escape's name in `escape` events.
    static func name(_ event: TerminalLink.Event) -> String {
        switch event {
        case .disconnect: "disconnect"
        case .suspend: "suspend"
        case .detach: "detach"
        case .hungUp: "hung-up"
        }
    }

    /// A `resize` control: the latest size wins; a resize that fails is only a diagnostic.
    private func resize(_ channel: SSHChannel, _ control: JSONValue) async {
        guard case .integer(let columns)? = control["resize"]?["columns"], case .integer(let rows)? = control["resize"]?["rows"] else { return }
        do { try await channel.resize(columns: Int(columns), rows: Int(rows)) } catch {
            ports.logger.debug("workspaces.terminal.resize_failed")
        }
    }

    /// Reads the channel to its end, each chunk to `output` (a linked terminal's channel has
    /// none: it only ends); cancelling closes it with the client's signal.
    private func untilEnded(_ channel: SSHChannel, connection: SSHConnection,
                            output: (ExecStream, Data) async -> Void = { _, _ in }) async throws {
        let session = self.session
        do {
            try await withTaskCancellationHandler {
                while let (stream, data) = try await channel.next() { await output(stream, data) }
            } onCancel: {
                if let signal = session.cancelSignal { channel.close(signal: signal) } else { channel.close() }
            }
            try Task.checkCancellation()
        } catch {
            if session.cancelSignal != nil { await connection.waitUntilIdle(timeout: 2) }
            throw error
        }
    }

    /// A session that lasts as long as its client (in-process, or without a terminal), its
    /// keys and output as input lines and events (`readsInput`: stdin was not handed over).
    private func plain(_ channel: SSHChannel, connection: SSHConnection, integration: ShellIntegration, readsInput: Bool) async throws -> WorkspacesStreams.Terminal.Result {
        let session = self.session
        // The client's terminal goes raw now, after every question of the connection.
        await session.emit("started")
        let input = Task {
            guard readsInput else { return }
            for await chunk in session.input {
                await integration.inputAllowed()
                try await channel.write(chunk)
            }
            channel.closeInput()
        }
        let resizes = Task {
            for await control in session.controls { await resize(channel, control) }
        }
        defer { input.cancel(); resizes.cancel() }
        var scanner = TerminalScanner()
        try await untilEnded(channel, connection: connection) { stream, data in
            // A terminal's output is one stream; a shell without one gets no bootstrap.
            let visible = stream == .stdout ? integration.output(data, marks: scanner.scanWithOffsets(data)) : data
            if !visible.isEmpty { await session.emit(stream == .stdout ? "stdout" : "stderr", data: visible) }
        }
        await integration.finish()
        // A handed-over output that could not be written closed the channel (the command got
        // TERM), as exec's does: 141 for a reader gone, an error for a full disk.
        let exit = try channel.outcome(of: "the session on \(connection.target.display)")
        return .init(exitStatus: exit?.status, exitSignal: exit?.signal)
    }
}

/// The client's terminal (its stdin and stdout, handed over) for the engine to move; nil when
/// the client handed over none, or the terminal cannot be opened on its own. (A free function:
/// an extension of a Core type would be a Core-named symbol exported by this library.)
func terminalLink(of client: StreamSession, detachable: Bool) -> TerminalLink? {
    guard let input = client.descriptors?.stdin, let output = client.descriptors?.stdout else { return nil }
    return try? TerminalLink(input: input, output: output, detachable: detachable)
}

/// A plain session's output on the engine thread (its `TerminalTap`): OSC 133/7 marks read,
/// what the shell bootstrap's run printed hidden. Only its channel's TerminalTap calls it, on
/// the engine thread, one chunk at a time: the scanner's Mutex is never contended.
final class OutputMarks: Sendable {
    private let scanner = Mutex(TerminalScanner())
    private let integration: ShellIntegration
    init(integration: ShellIntegration) { self.integration = integration }
    func visible(_ data: Data) -> Data {
        let marks = scanner.withLock { $0.scanWithOffsets(data) }
        return integration.output(data, marks: marks)
    }
}
