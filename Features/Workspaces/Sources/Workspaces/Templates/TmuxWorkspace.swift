import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import WorkspacesAPI
import WorkspacesRules

/// `termind workspace open`: the workspace built in tmux — a new window of the tmux the
/// client runs in, else a new tmux session — its panes split as the layout says (tmux's
/// `split-window -l N%`, children carved off in order), each running a termind client of
/// this server: an SSH pane on its durable session (the live one when the pane has one
/// already: no second authentication), an SFTP pane the host's home listed then a local
/// shell, an empty pane (or a deleted host's) a local shell.
struct TmuxWorkspace {
    let ports: WorkspacesFeature.Ports
    let request: WorkspacesStreams.OpenWorkspace.Request
    let session: StreamSession
    let sessions: SessionRegistry
    /// The words that start a client of this server (`FeatureContext.clientCommand`).
    let clientCommand: [String]

    func run() async throws -> WorkspacesStreams.OpenWorkspace.Result {
        let templates = WorkspaceTemplates(ports: ports)
        let labels = try await templates.labels()
        // What to build: a saved workspace, or one SSH pane per host (saved or quick-connect).
        let (workspaceID, name, tree): (String, String, PaneTree)
        switch (request.workspace, request.hosts) {
        case (let reference?, nil):
            let record = try await templates.get(reference)
            (workspaceID, name, tree) = (record.id, record.name, WorkspaceTemplates.tree(record.layout))
        case (nil, let hosts?):
            guard !hosts.isEmpty, hosts.count <= WorkspaceLayout.paneLimit else {
                throw TermindError.badRequest("--hosts takes 1 to \(WorkspaceLayout.paneLimit) hosts, not \(hosts.count).")
            }
            var panes: [WorkspacePane] = []
            for host in hosts {
                let saved = try await ports.hosts.host(named: host)
                panes.append(WorkspacePane(kind: .ssh, host: saved?.id ?? host))
            }
            // A batch is a workspace of its own: its panes never reattach to another's.
            let tag = "hosts-" + String(UUID().uuidString.prefix(8)).lowercased()
            (workspaceID, name, tree) = (tag, tag, WorkspaceTemplates.tree(.grid(panes)))
        default:
            throw TermindError.badRequest("Name a saved workspace (termind workspace list) or give --hosts a,b,c, not both.")
        }
        let tmux = try Self.tmuxPath()
        let leaves = tree.leaves
        var panes: [WorkspacesStreams.OpenWorkspace.PaneOpened] = []
        var commands: [[String]] = []
        // Sessions of its panes that a window shows now: opening the workspace again would
        // take them from it (its panes close), so that is done only when asked.
        var attachedElsewhere: [Int] = []
        for (index, leaf) in leaves.enumerated() {
            let number = index + 1
            var opened = WorkspacesStreams.OpenWorkspace.PaneOpened(pane: number, kind: leaf.kind.rawValue, host: leaf.host.map { labels[$0] ?? $0 }, tmuxPane: "")
            switch (leaf.kind, leaf.host) {
            case (.ssh, let host?) where labels[host] != nil || request.hosts != nil:
                let live = await sessions.session(workspace: workspaceID, pane: number, host: host)
                opened.session = live?.id
                if let live, live.info().state == "attached" { attachedElsewhere.append(live.id) }
                commands.append(Self.held(clientCommand + ["ssh", host, "--workspace", workspaceID, "--pane", String(number)]))
            case (.sftp, let host?) where labels[host] != nil:
                // The prompt names the host as its label when that is one word (get and put
                // there write HOST:PATH), else by its id.
                let name = labels[host].flatMap { $0.contains(where: { $0.isWhitespace || $0 == ":" }) ? nil : $0 } ?? host
                commands.append(Self.sftp(clientCommand + ["sftp", name], host: labels[host] ?? host))
            case (_, let host?):
                let note = "The host of this pane (\(host)) no longer exists; this is a local shell."
                opened.note = note
                commands.append(Self.shell(banner: note))
            case (_, nil):
                commands.append([])
            }
            panes.append(opened)
        }
        if !attachedElsewhere.isEmpty && request.takeOver != true {
            let list = attachedElsewhere.map(String.init).joined(separator: ", ")
            throw TermindError(.workspacesAlreadyOpen, "Workspace \(name) is open already: its session\(attachedElsewhere.count == 1 ? "" : "s") \(list) "
                + "\(attachedElsewhere.count == 1 ? "is" : "are") attached in another window. Go to that window, or open it here with --take-over true "
                + "(the other window's panes then close).")
        }
        // The client's own tmux server (its $TMUX names the socket, a non-default one too),
        // for a new window or, with --new-session, a new session; else tmux's default server.
        let socket = request.tmux?.split(separator: ",").first.map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        let base = [tmux] + (socket.map { ["-S", $0] } ?? [])
        let format = ["-P", "-F", "#{session_name}\t#{window_id}\t#{pane_id}"]
        var first: [String]
        let newSession = socket == nil || request.newSession == true
        // The layout must fit the window it is built in (a new window takes the client's
        // window's size; a new detached session tmux's default 80×24): checked before tmux
        // makes anything.
        let need = tree.minimumSize
        var room = (columns: 80, rows: 24)
        if !newSession, let pane = request.tmuxPane,
           let size = try? await Self.tmux(base + ["display-message", "-p", "-t", pane, "#{window_width}\t#{window_height}"]),
           size.count == 2, let columns = Int(size[0]), let rows = Int(size[1]) {
            room = (columns, rows)
        }
        if need.columns > room.columns || need.rows > room.rows {
            throw TermindError(.workspacesTmuxFailed, "Workspace \(name) needs at least \(need.columns)×\(need.rows) cells for its \(leaves.count) panes and the window "
                + "is \(room.columns)×\(room.rows): enlarge the window, or split the layout into smaller workspaces. Nothing was opened.")
        }
        let before = Set(await sessions.sessions(ofWorkspace: name).map(\.id))
        if newSession {
            let sessionName = try await Self.freeSessionName(name, tmux: base)
            first = try await Self.tmux(base + ["new-session", "-d"] + format + ["-s", sessionName, "-n", name] + commands[0])
        } else {
            // After the client's own window (tmux takes a window there, not a pane).
            var target: [String] = []
            if let pane = request.tmuxPane, let window = try? await Self.tmux(base + ["display-message", "-p", "-t", pane, "#{window_id}"]).first, window.hasPrefix("@") {
                target = ["-a", "-t", window]
            }
            first = try await Self.tmux(base + ["new-window"] + format + target + ["-n", name] + commands[0])
        }
        guard first.count == 3 else { throw TermindError(.workspacesTmuxFailed, "tmux did not say which pane it made (it printed \(first)).") }
        panes[0].tmuxPane = first[2]
        // A split's target always exists already: its leaf was made by an earlier split. One
        // that fails (no room left) takes back what was made: never a half-built window.
        do {
            for split in PaneLayout.splits(tree) {
                let made = try await Self.tmux(base + ["split-window", "-t", panes[split.target].tmuxPane, split.horizontal ? "-h" : "-v", "-l", "\(split.percent)%",
                                                       "-P", "-F", "#{pane_id}"] + commands[split.leaf])
                guard let id = made.first, id.hasPrefix("%") else { throw TermindError(.workspacesTmuxFailed, "tmux did not say which pane it made.") }
                panes[split.leaf].tmuxPane = id
            }
        } catch {
            _ = try? await Self.tmux(base + (newSession ? ["kill-session", "-t", first[0]] : ["kill-window", "-t", first[1]]))
            // Sessions its panes opened meanwhile end with them (they would stay detached).
            for made in await sessions.sessions(ofWorkspace: name) where !before.contains(made.id) {
                made.close(because: "its workspace could not be built")
            }
            let reason = (error as? TermindError)?.message ?? "\(error)"
            throw TermindError(.workspacesTmuxFailed, "Workspace \(name) could not be built in tmux (\(reason)); what was made of it was closed again.")
        }
        _ = try? await Self.tmux(base + ["select-pane", "-t", panes[0].tmuxPane])
        let result = WorkspacesStreams.OpenWorkspace.Result(workspace: name, tmuxSession: first[0], tmuxWindow: first[1], newSession: newSession, panes: panes)
        let rows: [JSONValue] = panes.map { pane in
            .object(["pane": .integer(Int64(pane.pane)), "kind": .string(pane.kind), "host": pane.host.map(JSONValue.string) ?? .string("-"),
                     "tmux": .string(pane.tmuxPane),
                     "session": pane.session.map { .string("\($0), reattached") } ?? .string(pane.kind == "ssh" && pane.note == nil ? "new" : "-")])
        }
        let title = !newSession
            ? "Workspace \(name) opened in a new tmux window."
            : socket != nil
            ? "Workspace \(name) opened in tmux session '\(first[0])' of your tmux server: tmux switch-client -t '\(first[0])' shows it."
            : "Workspace \(name) opened in tmux session '\(first[0])': tmux attach -t '\(first[0])' shows it."
        await session.emit("view", ["title": .string(title), "rows": .array(rows), "result": .bool(true)])
        return result
    }

    // MARK: - Pane commands (run by tmux directly, not through a shell: no quoting)

    /// Runs `argv`; when it fails, the pane stays until Enter (so that an error can be read).
    static func held(_ argv: [String]) -> [String] {
        ["/bin/sh", "-c", "\"$@\"; s=$?; if [ \"$s\" -ne 0 ]; then printf '\\n[termind ended with status %d; Enter closes this pane] ' \"$s\"; read _; fi",
         "termind-pane"] + argv
    }

    /// An SFTP pane: termind's prompt on the host's files (`termind sftp HOST`), then, once
    /// it is left, a local shell in the pane.
    static func sftp(_ argv: [String], host: String) -> [String] {
        ["/bin/sh", "-c", "printf 'SFTP pane of %s (help lists the commands; exit leaves for a local shell).\\n' \"$0\"; \"$@\"; exec \"${SHELL:-/bin/sh}\"",
         host] + argv
    }

    static func shell(banner: String) -> [String] {
        ["/bin/sh", "-c", "printf '%s\\n' \"$0\"; exec \"${SHELL:-/bin/sh}\"", banner]
    }

    // MARK: - tmux

    static func tmuxPath() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for folder in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] where FileManager.default.isExecutableFile(atPath: "\(folder)/tmux") {
            return "\(folder)/tmux"
        }
        throw TermindError(.workspacesTmuxFailed, "termind workspace open builds the workspace in tmux, which is not installed here (apt install tmux).")
    }

    /// `name`, or `name-2`, `name-3`… when a tmux session has it already.
    static func freeSessionName(_ name: String, tmux: [String]) async throws -> String {
        for attempt in 1...100 {
            let candidate = attempt == 1 ? name : "\(name)-\(attempt)"
            if (try? await Self.tmux(tmux + ["has-session", "-t", "=\(candidate)"])) == nil { return candidate }
        }
        throw TermindError(.workspacesTmuxFailed, "tmux has sessions \(name) to \(name)-100 already; close some.")
    }

    /// Runs tmux; its output's first line split at tabs. A failure says what tmux said.
    /// tmux starts as every child of termind does (`ChildProcess`): default signals and only
    /// its standard descriptors, so the tmux server a first command starts ends on SIGTERM
    /// and `kill-server`, reaps its panes, and holds none of the server's descriptors — nor
    /// the pipe this command reads, which is why the command returns.
    static func tmux(_ argv: [String]) async throws -> [String] {
        let outcome: ChildProcess.Outcome
        do {
            outcome = try await ChildProcess.run(argv, limit: 64 << 10)
        } catch let error as TermindError {
            throw TermindError(.workspacesTmuxFailed, "tmux did not start: \(error.message)")
        }
        guard outcome.termination.succeeded else {
            let said = String(decoding: outcome.stderr.prefix(500), as: UTF8.self).trimmedWhitespaceAndNewlines
            let how = outcome.termination.signal.map { "killed by signal \($0)" } ?? "status \(outcome.termination.status ?? -1)"
            throw TermindError(.workspacesTmuxFailed, "tmux \(argv.dropFirst().first(where: { !$0.hasPrefix("-") && !$0.hasPrefix("/") }) ?? "") failed: \(said.isEmpty ? how : said)")
        }
        let line = String(decoding: outcome.stdout, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        return line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
    }
}
