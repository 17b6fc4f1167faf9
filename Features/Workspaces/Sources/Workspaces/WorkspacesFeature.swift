import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindSSH
import TermindStore
import PortForwardingAPI
import SettingsAPI
import VaultAPI
import WorkspacesAPI
import WorkspacesRules

/// Workspaces: SSH sessions on the Vault's hosts, over the kernel's one connection pool
/// (`kernel.ssh`), so exec, the terminal, and later SFTP and forwarding, share connections
/// to a route. Its streams: `workspaces.exec@1` (`termind exec`), `workspaces.terminal@1` (`termind ssh`).
final class WorkspacesFeature: Feature {
    struct Ports: Sendable {
        let routes: any RouteResolver
        let trust: any HostKeyTrust
        let pool: any SSHConnections
        let hosts: any HostDirectory
        let settings: (any SettingsValues)?
        /// The commands shells reported (device-local).
        let history: HistoryStore?
        let logger: Logger
        /// Inside `termind serve`: a session with a terminal is durable.
        let resident: Bool
        /// Where this server's clients reach it (a workspace's panes are its clients).
        let clientCommand: [String]?
        /// Calls another feature's contract (declared in the manifest's `calls`).
        let call: @Sendable (ContractID, Data) async throws -> Data
        /// A session's -L/-R/-D, when the PortForwarding feature runs.
        let forwarding: (any SessionForwarding)?
    }

    private let ports = Mutex<Ports?>(nil)
    private let sessions = SessionRegistry()

    private func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("Workspaces is not started.") }
        return ports
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.stream(WorkspacesStreams.Exec.self) { [self] request, session in
            var request = request
            request.target = try Self.target(request)
            return try await ExecRunner(ports: try current(), request: request, session: session).run()
        }
        registrar.stream(WorkspacesStreams.Terminal.self) { [self] request, session in
            if request.noCommand == true {
                throw TermindError.badRequest("ssh -N (no remote command, forwards only) is termind forward run \(request.target) -L|-R|-D SPEC …: "
                    + "it forwards for as long as it runs, with no shell.")
            }
            var request = request
            request.target = try Self.target(request)
            return try await TerminalRunner(ports: try current(), request: request, session: session, sessions: sessions).run()
        }
        registrar.stream(WorkspacesStreams.Attach.self) { [self] request, session in
            let ports = try current()
            try Self.requireServer(ports)
            let durable = try await sessions.session(request.session)
            try durable.requireRunning()
            guard request.terminal != nil else {
                throw TermindError.badRequest("termind attach needs a terminal: run it from one (its standard input is not a terminal).")
            }
            return try await durable.attach(session, terminal: request.terminal, scrollback: request.scrollback, first: false)
        }
        registrar.stream(WorkspacesStreams.RunSnippet.self) { [self] request, session in
            try await SnippetRun(ports: try current(), request: request, session: session).run()
        }
        registrar.stream(WorkspacesStreams.History.self) { [self] request, session in
            try await Self.history(request, session: session, ports: try current())
        }
        registrar.stream(WorkspacesStreams.Serial.self) { request, session in
            try await SerialRunner(request: request, session: session).run()
        }
        registrar.stream(WorkspacesStreams.Broadcast.self) { [self] request, session in
            let ports = try current()
            try Self.requireServer(ports)
            return try await Self.broadcast(request, session: session, sessions: sessions, templates: WorkspaceTemplates(ports: ports))
        }
        registrar.handle(WorkspacesContracts.SaveWorkspace.self) { [self] request, _ in
            try await WorkspaceTemplates(ports: try current()).save(request)
        }
        registrar.handle(WorkspacesContracts.ListWorkspaces.self) { [self] _, _ in
            .init(workspaces: try await WorkspaceTemplates(ports: try current()).list())
        }
        registrar.handle(WorkspacesContracts.ShowWorkspace.self) { [self] request, _ in
            let templates = WorkspaceTemplates(ports: try current())
            return try await templates.summary(try await templates.get(request.workspace))
        }
        registrar.handle(WorkspacesContracts.DeleteWorkspace.self) { [self] request, _ in
            let record = try await WorkspaceTemplates(ports: try current()).delete(request.workspace)
            return .init(deleted: record.id, name: record.name)
        }
        registrar.stream(WorkspacesStreams.OpenWorkspace.self) { [self] request, session in
            let ports = try current()
            guard ports.resident, let client = ports.clientCommand else {
                throw TermindError(.workspacesNeedsServer, "A workspace's panes are durable sessions of termind serve: start it (termind serve), then termind workspace open again.")
            }
            return try await TmuxWorkspace(ports: ports, request: request, session: session, sessions: sessions, clientCommand: client).run()
        }
        registrar.handle(WorkspacesContracts.ListSessions.self) { [self] _, _ in
            try Self.requireServer(try current())
            return .init(sessions: await sessions.list())
        }
        registrar.handle(WorkspacesContracts.CloseSession.self) { [self] request, _ in
            try Self.requireServer(try current())
            let session = try await sessions.session(request.session)
            session.close(because: "termind sessions close \(request.session)")
            // Its end (the channel closed) is what the reply shows; when the server does not
            // confirm the close within 5 s, the reply shows it still running (it ends on its own).
            _ = await session.ended.value(within: 5)
            return session.info()
        }
    }

    func start(_ context: FeatureContext) async throws {
        let db = try context.ports.require(.store)
        do {
            let report = try await db.migrate(WorkspacesSchema.schema)
            if !report.applied.isEmpty { context.logger.info("workspaces.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        // The terminal's settings live with Settings when it runs.
        if let settings = context.ports.optional(.settingsValues) {
            try settings.register(TerminalSettings.Preferences.self, owner: context.featureID)
            try settings.register(TerminalSettings.Device.self, owner: context.featureID)
        }
        let value = Ports(routes: try context.ports.require(.routes), trust: try context.ports.require(.hostKeyTrust),
                          pool: try context.ports.require(.sshConnections), hosts: try context.ports.require(.hostDirectory), settings: context.ports.optional(.settingsValues),
                          history: HistoryStore(db: db),
                          logger: context.logger, resident: context.resident, clientCommand: context.clientCommand, call: context.call,
                          forwarding: context.ports.optional(.sessionForwarding))
        ports.withLock { $0 = value }
    }

    func stop() async {
        // The server stops: every durable session's shell is hung up, cleanly.
        await sessions.closeAll()
        ports.withLock { $0 = nil }
    }

    /// `termind history HOST`: the host's rows, filtered, as a table of first lines; whole in the result.
    private static func history(_ request: WorkspacesStreams.History.Request, session: StreamSession, ports: Ports) async throws -> WorkspacesStreams.History.Result {
        guard let store = ports.history else { throw TermindError.internalFailure("The history store is not open.") }
        let saved = try await ports.hosts.host(named: request.host)
        var entries = try await store.entries(host: saved?.id ?? request.host)
        if let pattern = request.grep {
            let regex: Regex<AnyRegexOutput>
            do { regex = try Regex(pattern) } catch {
                // (The error itself says only "The value is invalid.")
                throw TermindError.badRequest("--grep '\(pattern)' is not a valid regular expression (Swift Regex syntax, as grep -E mostly): "
                                              + "an unclosed bracket or parenthesis, or a quantifier with nothing before it? Put \\ before a character meant literally (\\[ for [).")
            }
            entries = entries.filter { $0.command.contains(regex) }
        }
        if let limit = request.limit {
            guard limit > 0 else { throw TermindError.badRequest("--limit must be 1 or more, not \(limit).") }
            entries = Array(entries.suffix(limit))
        }
        let host = saved?.label ?? request.host
        let rows: [JSONValue] = entries.map { entry in
            .object(["finished": .string(entry.finished), "status": entry.exitStatus.map { .integer(Int64($0)) } ?? .null,
                     "duration": entry.durationMilliseconds.map { .string(Self.duration($0)) } ?? .null,
                     "directory": entry.directory.map(JSONValue.string) ?? .null, "command": .string(HistoryText.firstLine(entry.command))])
        }
        // The hint for an empty history fits what HOST is: a saved host can have shell
        // integration enabled; any other name is a quick-connect target, or a typo.
        let why = saved != nil
            ? "shells report their commands with shell integration: termind vault host edit \(host) --shellIntegration enabled"
            : "no saved host is named \(host) (termind vault host list shows them), and no quick-connect session to it reported a command"
        let title = entries.isEmpty
            ? "No history for \(host)\(request.grep == nil ? "" : " matching that pattern") (\(why))."
            : "History of \(host): \(entries.count) command\(entries.count == 1 ? "" : "s"), oldest first"
        await session.emit("view", ["title": .string(title), "rows": .array(rows), "result": .bool(true)])
        return .init(host: host, entries: entries)
    }

    /// `termind broadcast`: the same keys into each session named, in order; each delivery said.
    private static func broadcast(_ request: WorkspacesStreams.Broadcast.Request, session: StreamSession,
                                  sessions: SessionRegistry, templates: WorkspaceTemplates) async throws -> WorkspacesStreams.Broadcast.Result {
        var text = request.text ?? ""
        if request.text == nil {
            // Standard input, when the client has no terminal there (decoded once: a character
            // may be split between two reads).
            var bytes = Data()
            for await chunk in session.input {
                bytes += chunk
                guard bytes.count <= 64 << 10 else { throw TermindError.badRequest("The text to broadcast is over 64 KiB; send less at a time.") }
            }
            text = String(decoding: bytes, as: UTF8.self)
        }
        // Enter alone in every session (it may confirm a question) only when asked for.
        guard !text.isEmpty || request.enter == true else {
            throw TermindError.badRequest("Say what to type: termind broadcast --sessions 1,2 -- TEXT, or pipe it on standard input (Enter alone: --enter true).")
        }
        var ids = request.sessions ?? []
        if request.all == true { ids += await sessions.list().filter { $0.state != "ended" }.map(\.id) }
        if let workspace = request.workspace {
            let members = await sessions.sessions(ofWorkspace: workspace).map(\.id)
            guard !members.isEmpty else {
                // A name that is no workspace at all is said as such (a typo), before "none is running".
                _ = try await templates.get(workspace)
                throw TermindError(.workspacesNoSession, "No session of workspace '\(workspace)' is running (termind workspace open \(workspace) opens them; termind sessions lists sessions).")
            }
            ids += members
        }
        var seen = Set<Int>()
        ids = ids.filter { seen.insert($0).inserted }
        guard !ids.isEmpty else {
            throw TermindError.badRequest(request.all == true ? "No session is running (termind ssh HOST opens one)." : "Name a workspace or the sessions: termind broadcast WORKSPACE, --sessions 1,2,3 (termind sessions lists them) or --all true.")
        }
        var deliveries: [WorkspacesStreams.Broadcast.Delivery] = []
        for id in ids {
            do {
                let target = try await sessions.session(id)
                let (bytes, bracketed) = try await target.type(text, enter: request.enter ?? true)
                deliveries.append(.init(session: id, host: target.host, delivered: true, bytes: bytes, bracketedPaste: bracketed))
            } catch {
                let host = (try? await sessions.session(id))?.host ?? "-"
                deliveries.append(.init(session: id, host: host, delivered: false, bytes: 0, bracketedPaste: false, error: TermindError.from(error).message))
            }
        }
        let delivered = deliveries.filter(\.delivered).count
        let rows: [JSONValue] = deliveries.map { delivery in
            .object(["session": .integer(Int64(delivery.session)), "host": .string(delivery.host), "delivered": .string(delivery.delivered ? "yes" : "no"),
                     "as": .string(delivery.delivered ? (delivery.bracketedPaste ? "bracketed paste" : "keys") : "-"),
                     "error": delivery.error.map(JSONValue.string) ?? .null])
        }
        await session.emit("view", ["title": .string("Typed into \(delivered) of \(deliveries.count) session\(deliveries.count == 1 ? "" : "s")"),
                                    "rows": .array(rows), "result": .bool(true)])
        return .init(deliveries: deliveries, exitStatus: delivered == deliveries.count ? 0 : delivered == 0 ? 1 : 3)
    }

    /// 850 ms, 12.3 s, 4m05s.
    static func duration(_ milliseconds: Int) -> String {
        if milliseconds < 1000 { return "\(milliseconds) ms" }
        if milliseconds < 60_000 { return String(printf: "%.1f s", Double(milliseconds) / 1000) }
        let seconds = milliseconds / 1000
        return seconds < 3600 ? String(printf: "%ldm%02lds", seconds / 60, seconds % 60) : String(printf: "%ldh%02ldm", seconds / 3600, seconds / 60 % 60)
    }

    /// Durable sessions live inside `termind serve`.
    private static func requireServer(_ ports: Ports) throws {
        guard ports.resident else {
            throw TermindError(.workspacesNeedsServer, "Durable sessions live inside termind serve, and none is running here: start it (termind serve), "
                + "then termind ssh HOST opens a session that termind sessions lists and termind attach returns to.")
        }
    }

    /// The connection for one stream run, asking the stream's client what only a person can answer.
    static func connection(_ ports: Ports, _ request: any SessionTarget, session: StreamSession) async throws -> SSHConnection {
        try await connection(ports, request, session: session) { await session.ask($0) }
    }

    /// As above, asking through `ask` (several connections opening at once take turns).
    static func connection(_ ports: Ports, _ request: any SessionTarget, session: StreamSession, purpose: String? = nil,
                           ask: @escaping @Sendable (JSONValue) async -> JSONValue?) async throws -> SSHConnection {
        let opener = ConnectionOpener(routes: ports.routes, trust: ports.trust, pool: ports.pool, logger: ports.logger)
        let target = ConnectionTarget(target: request.target, user: request.user, identity: request.identity, workingDirectory: request.workingDirectory,
                                      acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout, purpose: purpose)
        return try await opener.connection(target, ask: ask)
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
}

/// What every session stream's request says about where to connect and how.
extension WorkspacesFeature {
    /// The target with ssh's `-p PORT`, `-J HOSTS` and `-i FILE` folded in, as the
    /// quick-connect line `ssh -p PORT -J HOSTS -i FILE TARGET` (a saved host's label still
    /// supplies what it has).
    static func target(_ request: any SessionTarget) throws -> String {
        guard request.port != nil || request.jump != nil || request.identityFile != nil else { return request.target }
        if let port = request.port, !(1...65535).contains(port) {
            throw TermindError.badRequest("-p \(port): a port is a number from 1 to 65535.")
        }
        var words: [String] = []
        if let port = request.port { words += ["-p", String(port)] }
        if let jump = request.jump { words += ["-J", quoted(jump)] }
        if let file = request.identityFile { words += ["-i", quoted(file)] }
        var target = request.target.trimmedWhitespace
        if target == "ssh" || target.hasPrefix("ssh ") { target = String(target.dropFirst(3)).trimmedWhitespace } else { target = quoted(target) }
        return (["ssh"] + words + [target]).joined(separator: " ")
    }

    /// A word for the quick-connect grammar: as it is when plain, else single-quoted.
    private static func quoted(_ word: String) -> String {
        let plain = !word.isEmpty && word.unicodeScalars.allSatisfy { $0.isAlphanumericScalar || "@%+=:,./_-[]".unicodeScalars.contains($0) }
        return plain ? word : ShellText.singleQuoted(word)
    }
}

protocol SessionTarget: Sendable {
    var port: Int? { get }
    var jump: String? { get }
    var identityFile: String? { get }
    var target: String { get }
    var user: String? { get }
    var identity: String? { get }
    var workingDirectory: String? { get }
    var acceptHostKey: HostKeyPreset? { get }
    var connectTimeout: Double? { get }
}

extension SessionTarget {
    var port: Int? { nil }
    var jump: String? { nil }
    var identityFile: String? { nil }
}

extension WorkspacesStreams.Exec.Request: SessionTarget {}
extension WorkspacesStreams.Terminal.Request: SessionTarget {}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "workspaces", version: "0.1.0", signature: TermindLibrary.signature) { WorkspacesFeature() }
}
