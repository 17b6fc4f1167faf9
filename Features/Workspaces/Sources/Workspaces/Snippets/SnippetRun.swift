import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import TermindSSH
import VaultAPI
import WorkspacesAPI

/// One `workspaces.snippet.run@1`: the command on each host, at most `parallel` at once, each
/// on the process's shared connection to that host (one exec channel); a host that cannot be
/// reached or refuses is an outcome like any other, never the end of the run. Questions
/// (an unknown host key, a passphrase) go to the client one at a time, naming the host.
struct SnippetRun {
    static let defaultParallel = 8
    /// Output kept per stream and host: 1 MiB, less when many hosts run (128 MiB in all, at
    /// least 64 KiB each), so a run over a thousand hosts holds a bounded amount.
    static func outputLimit(hosts: Int) -> Int { max(64 << 10, min(1 << 20, (128 << 20) / max(hosts, 1))) }

    let ports: WorkspacesFeature.Ports
    let request: WorkspacesStreams.RunSnippet.Request
    let session: StreamSession

    func run() async throws -> WorkspacesStreams.RunSnippet.Result {
        let command = try await resolveCommand()
        let targets = try await resolveHosts()
        let parallel = request.parallel ?? Self.defaultParallel
        guard (1...64).contains(parallel) else { throw TermindError.badRequest("--parallel must be from 1 to 64, not \(parallel).") }
        if let timeout = request.timeout, !(timeout > 0) { throw TermindError.badRequest("--timeout must be more than 0 seconds, not \(timeout).") }

        let limit = Self.outputLimit(hosts: targets.count)
        let board = Board(hosts: targets.map(\.label))
        await report(board)
        // Questions one at a time (two hosts' host keys asked at once would interleave).
        let asking = AsyncGate()
        var outcomes = [WorkspacesStreams.RunSnippet.HostOutcome?](repeating: nil, count: targets.count)
        await withTaskGroup(of: (Int, WorkspacesStreams.RunSnippet.HostOutcome).self) { group in
            var next = 0
            func launch() {
                let index = next
                next += 1
                let target = targets[index]
                group.addTask {
                    board.set(index, "running")
                    let outcome = await runOne(command, on: target, limit: limit, asking: asking)
                    board.set(index, outcome.state)
                    return (index, outcome)
                }
            }
            while next < min(parallel, targets.count) { launch() }
            for await (index, outcome) in group {
                outcomes[index] = outcome
                await report(board)
                await show(outcome, limit: limit)
                if next < targets.count { launch() }
            }
        }
        let results = outcomes.compactMap { $0 }
        let succeeded = results.filter { $0.state == "succeeded" }.count
        let failed = results.count - succeeded
        await session.emit("view", ["title": .string("\(command.split(separator: "\n").first.map(String.init) ?? command): \(succeeded) of \(results.count) host\(results.count == 1 ? "" : "s") succeeded"),
                                    "rows": .array(results.map(Self.row)), "result": .bool(true)])
        return .init(command: command, hosts: results, succeeded: succeeded, failed: failed, exitStatus: failed == 0 ? 0 : succeeded == 0 ? 1 : 3)
    }

    // MARK: - Inputs

    private func resolveCommand() async throws -> String {
        switch (request.snippet, request.command) {
        case (let name?, nil):
            let reply = try await ports.call(VaultContracts.SnippetList.id, JSONCoding.encode(Empty()))
            let snippets = try JSONDecoder().decode(VaultContracts.SnippetList.Response.self, from: reply).snippets
            guard let snippet = snippets.first(where: { $0.id == name }) ?? snippets.first(where: { $0.label == name })
                ?? snippets.first(where: { $0.label.lowercased() == name.lowercased() }) else {
                throw TermindError(.vaultSnippetNotFound, "There is no snippet '\(name)'" + (snippets.isEmpty ? "; save one with termind vault snippet add." : " (termind vault snippet list shows them)."))
            }
            return snippet.body
        case (nil, let command?) where !command.trimmedWhitespace.isEmpty:
            return command
        case (nil, _):
            throw TermindError.badRequest("Name a saved snippet (termind snippet run NAME --hosts …) or give the command after -- (termind snippet run --hosts … -- uptime).")
        default:
            throw TermindError.badRequest("Give a snippet or a command after --, not both.")
        }
    }

    struct Target: Sendable {
        /// What the request named (a saved host's id or label, or a quick-connect target).
        let reference: String
        /// What the output calls it: the saved host's label, or the target.
        let label: String
    }

    private func resolveHosts() async throws -> [Target] {
        var targets: [Target] = []
        if let tag = request.tag {
            let tagged = try await ports.hosts.allHosts().filter { $0.tags.contains(tag) }.sorted { $0.label < $1.label }
            guard !tagged.isEmpty else { throw TermindError.badRequest("No saved host has the tag '\(tag)' (termind vault host list shows hosts and their tags).") }
            targets += tagged.map { Target(reference: $0.id, label: $0.label) }
        }
        for name in request.hosts ?? [] where !name.isEmpty {
            let saved = try await ports.hosts.host(named: name)
            targets.append(Target(reference: saved?.id ?? name, label: saved?.label ?? name))
        }
        // A host named twice (by --hosts and --tag) runs once.
        var seen = Set<String>()
        targets = targets.filter { seen.insert($0.reference).inserted }
        guard !targets.isEmpty else {
            // `snippet run -- uptime --hosts a,b`: everything after -- is the command.
            let words = request.command?.split(separator: " ") ?? []
            let misplaced = words.first { $0 == "--hosts" || $0 == "--tag" }.map {
                " The \($0) after -- went into the command: everything after -- is the command, so put \($0) before it (termind snippet run \($0) … -- COMMAND)."
            } ?? ""
            throw TermindError.badRequest("Say where to run it: --hosts a,b,c (saved hosts or user@host[:port]) or --tag TAG.\(misplaced)")
        }
        guard targets.count <= 1000 else { throw TermindError.badRequest("At most 1000 hosts in one run, not \(targets.count).") }
        return targets
    }

    // MARK: - One host

    private func runOne(_ command: String, on target: Target, limit: Int, asking: AsyncGate) async -> WorkspacesStreams.RunSnippet.HostOutcome {
        let started = Date()
        let session = self.session
        let label = target.label
        do {
            let connection = try await WorkspacesFeature.connection(ports, Request(target: target.reference, request: request), session: session) { question in
                await asking.run {
                    // Which host asks (several may be connecting).
                    await session.emit("notice", ["text": .string("\(label):")])
                    return await session.ask(question)
                }
            }
            let result = try await connection.exec(command, outputLimit: limit, timeout: request.timeout)
            let state = result.exitStatus == 0 ? "succeeded" : "failed"
            return Self.outcome(label, state: state, exitStatus: result.exitStatus, exitSignal: result.exitSignal, error: nil, stdout: result.stdout,
                                stderr: result.stderr, truncated: result.truncated, started: started)
        } catch {
            let failure = TermindError.from(error)
            var outcome = Self.outcome(label, state: "error", exitStatus: nil, exitSignal: nil, error: failure.message, stdout: Data(), stderr: Data(),
                                       truncated: false, started: started)
            outcome.errorCode = failure.code
            return outcome
        }
    }

    /// The connection fields of a run's request, for one host.
    private struct Request: SessionTarget {
        let target: String
        let user: String? = nil
        let identity: String? = nil
        let workingDirectory: String?
        let acceptHostKey: HostKeyPreset?
        let connectTimeout: Double?
        init(target: String, request: WorkspacesStreams.RunSnippet.Request) {
            self.target = target
            workingDirectory = request.workingDirectory
            acceptHostKey = request.acceptHostKey
            connectTimeout = request.connectTimeout
        }
    }

    private static func outcome(_ host: String, state: String, exitStatus: Int32?, exitSignal: String?, error: String?, stdout: Data, stderr: Data,
                                truncated: Bool, started: Date) -> WorkspacesStreams.RunSnippet.HostOutcome {
        func text(_ data: Data) -> (String, String) {
            if let text = String(data: data, encoding: .utf8) { return (text, "utf-8") }
            return (data.base64EncodedString(), "base64")
        }
        let (out, outEncoding) = text(stdout), (err, errEncoding) = text(stderr)
        return .init(host: host, state: state, exitStatus: exitStatus, exitSignal: exitSignal, error: error, errorCode: nil, stdout: out, stderr: err,
                     stdoutEncoding: outEncoding, stderrEncoding: errEncoding, truncated: truncated,
                     durationMilliseconds: Int(Date().timeIntervalSince(started) * 1000))
    }

    // MARK: - Showing it

    /// Each host's output once it finished, under a line naming it and how it ended.
    private func show(_ outcome: WorkspacesStreams.RunSnippet.HostOutcome, limit: Int) async {
        let how = outcome.error.map { "could not run: \($0)" }
            ?? outcome.exitSignal.map { "killed by SIG\($0)" } ?? "exit \(outcome.exitStatus.map(String.init) ?? "?")"
        var text = "── \(outcome.host) · \(how) · \(WorkspacesFeature.duration(outcome.durationMilliseconds))\(outcome.truncated ? " · output cut at \(TerminalText.bytes(UInt64(limit)))" : "") ──\n"
        for (body, encoding) in [(outcome.stdout, outcome.stdoutEncoding), (outcome.stderr, outcome.stderrEncoding)] where !body.isEmpty {
            text += encoding == "base64" ? "(\(Data(base64Encoded: body)?.count ?? 0) bytes that are not UTF-8; see --json)\n" : body
            if !text.hasSuffix("\n") { text += "\n" }
        }
        await session.emit("stdout", data: Data(text.utf8))
    }

    private func report(_ board: Board) async {
        let (done, running) = board.summary()
        let item = running.isEmpty ? "" : "running: " + running.prefix(4).joined(separator: ", ") + (running.count > 4 ? ", …" : "")
        await session.emit("progress", ["item": .string(item), "done": .integer(Int64(done)), "total": .integer(Int64(board.count)),
                                        "unit": .string("items"), "key": .string("hosts")])
    }

    private static func row(_ outcome: WorkspacesStreams.RunSnippet.HostOutcome) -> JSONValue {
        .object(["host": .string(outcome.host), "state": .string(outcome.state),
                 "exit": outcome.exitStatus.map { .integer(Int64($0)) } ?? outcome.exitSignal.map { .string("SIG" + $0) } ?? .null,
                 "time": .string(WorkspacesFeature.duration(outcome.durationMilliseconds)),
                 "error": outcome.error.map { .string($0) } ?? .null])
    }

    /// The hosts' states as the run goes.
    final class Board: Sendable {
        private let hosts: [String]
        private let states: Mutex<[String]>
        var count: Int { hosts.count }
        init(hosts: [String]) {
            self.hosts = hosts
            states = Mutex(Array(repeating: "queued", count: hosts.count))
        }
        func set(_ index: Int, _ state: String) { states.withLock { $0[index] = state } }
        func summary() -> (done: Int, running: [String]) {
            states.withLock { states in
                (states.filter { $0 != "queued" && $0 != "running" }.count, zip(hosts, states).filter { $0.1 == "running" }.map(\.0))
            }
        }
    }
}

/// Runs one body at a time, in arrival order.
actor AsyncGate {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run<T: Sendable>(_ body: @Sendable () async -> T) async -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        }
        busy = true
        let value = await body()
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        return value
    }
}
