import AssistantAPI
import AssistantRules
import CurlHTTP
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import SFTPAPI
import Synchronization
import TermindCore
import VaultAPI
import WorkspacesAPI

/// The tools a run offers. Every call is checked against its schema first; an action is then
/// assessed by the policy (AssistantPolicy: the host's tier, the command classifier, the
/// tool's rule, the mode, approvals given), asked of the person when it needs an approval
/// (mode ask, at a terminal only), audited, and made through the kernel on the
/// conversation's behalf (`actingForAgent`), where the same policy decides again.
struct HostTools: ToolBox {
    let context: FeatureContext
    let policy: AssistantPolicy
    let audit: AuditLog
    let scratch: Scratch
    let hosts: any HostDirectory
    /// Asks the person (nil: nobody answered).
    let ask: @Sendable (JSONValue) async -> JSONValue?
    /// For `fetch`.
    let http: HTTPClient
    /// The Guardian's review of an action (approve-for-me).
    let guardian: @Sendable (_ conversation: String, _ action: String) async -> GuardianReviewer.Outcome
    /// The secrets the person gave this run, by handle.
    let secrets = SecretBook()
    /// Tools of the configured MCP servers (`mcp__SERVER__TOOL`) this run offers, and the
    /// connections that call them (docs/mcp.md, "Other MCP servers").
    var external: [MCPClientRules.Tool] = []
    var clients: MCPClients?
    /// MCP sessions of a serve listening on HTTP: the byte channels and where they are served.
    var channels: ByteChannels?
    var linkBase: String?

    /// The tools that only ever read (`ssh_exec` may, by its command): what a batch may run at
    /// once and what MCP hints as read-only.
    static let readingTools: Set<String> = ["list_hosts", "sftp_list", "sftp_stat", "sftp_read", "get_metrics", "scratch_read"]

    /// What a command's output shows the model of each stream; the whole is in the scratch folder.
    static let previewBytes = 8192
    static let defaultTimeout = 60
    static let readLimit = 65536

    private static let listHostsSchema: JSONSchema = .object([JSONSchema.Property(name: "tag", schema: .string(), required: false)])
    private static let execSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "command", schema: .string(), required: true),
        JSONSchema.Property(name: "timeoutSeconds", schema: .integer, required: false),
    ])
    private static let pathSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "path", schema: .string(), required: true),
    ])
    private static let readSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "path", schema: .string(), required: true),
        JSONSchema.Property(name: "offset", schema: .integer, required: false),
        JSONSchema.Property(name: "length", schema: .integer, required: false),
    ])
    private static let writeSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "path", schema: .string(), required: true),
        JSONSchema.Property(name: "from", schema: .string(), required: true),
        JSONSchema.Property(name: "replace", schema: .boolean, required: false),
    ])
    private static let copySchema: JSONSchema = .object([
        JSONSchema.Property(name: "fromHost", schema: .string(), required: true),
        JSONSchema.Property(name: "fromPath", schema: .string(), required: true),
        JSONSchema.Property(name: "toHost", schema: .string(), required: true),
        JSONSchema.Property(name: "toPath", schema: .string(), required: true),
        JSONSchema.Property(name: "replace", schema: .boolean, required: false),
    ])
    private static let scratchWriteSchema: JSONSchema = .object([
        JSONSchema.Property(name: "path", schema: .string(), required: true),
        JSONSchema.Property(name: "content", schema: .string(), required: true),
    ])
    private static let metricsSchema: JSONSchema = .object([JSONSchema.Property(name: "hosts", schema: .array(.string()), required: false)])
    /// The most of a listing or a metrics answer the model is sent at once; the whole goes to the scratch folder.
    static let answerBytes = 32768
    private static let secretSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "purpose", schema: .string(), required: true),
    ])
    private static let scratchReadSchema: JSONSchema = .object([
        JSONSchema.Property(name: "path", schema: .string(), required: true),
        JSONSchema.Property(name: "offset", schema: .integer, required: false),
        JSONSchema.Property(name: "length", schema: .integer, required: false),
    ])

    var specs: [ToolSpec] {
        [ToolSpec(name: "list_hosts", description: "List the operator's saved SSH hosts (label, address, port, user, tags), optionally those with a tag.",
                  parameters: Self.listHostsSchema.json),
         ToolSpec(name: "ssh_exec", description: """
            Run one shell command on a saved host (its label or id) over SSH, without a terminal, and get its exit status and output. \
            Read-only commands run; anything that may change the host needs the operator's approval or is refused by the host's tier. \
            Output beyond \(Self.previewBytes) bytes a stream is kept whole in the scratch folder: read it with scratch_read.
            """, parameters: Self.execSchema.json),
         ToolSpec(name: "sftp_list", description: "List a folder on a saved host over SFTP (names, kinds, sizes, permissions, times); relative paths start at the remote home.",
                  parameters: Self.pathSchema.json),
         ToolSpec(name: "sftp_stat", description: "A remote path's metadata over SFTP (kind, size, permissions, owner, times; a link shown as itself).",
                  parameters: Self.pathSchema.json),
         ToolSpec(name: "sftp_read", description: "Read a remote file over SFTP: up to \(Self.readLimit) bytes from an offset (default 0), with the file's size and where the next page starts.",
                  parameters: Self.readSchema.json),
         ToolSpec(name: "sftp_write", description: """
            Copy a file of this conversation's scratch folder (from, a path relative to it: write it first with scratch_write) to a path on a saved host, \
            through termind's transfer scheduler. An existing file is kept unless replace is true. It changes the host: it needs an approval or the host's tier.
            """, parameters: Self.writeSchema.json),
         ToolSpec(name: "sftp_copy", description: """
            Copy a file from one saved host to another (or to another path on the same host) through termind, the bytes never passing through this conversation. \
            An existing file is kept unless replace is true. It changes the destination: it needs an approval or the host's tier.
            """, parameters: Self.copySchema.json),
         ToolSpec(name: "get_metrics", description: """
            The latest CPU, memory, disk, network and GPU sample termind already holds for monitored hosts (all, or those named), with its age \
            and whether it is stale. It never starts monitoring; a host not monitored is said so (termind metrics add HOST starts it).
            """, parameters: Self.metricsSchema.json),
         ToolSpec(name: "request_user_secret", description: """
            Ask the operator for a secret (a password, a token) needed by a command on a saved host. You get a handle, never the secret: \
            write the handle inside double quotes where the secret goes in one ssh_exec command on that host (e.g. printf '%s\\n' "HANDLE" | sudo -S …); \
            termind passes the secret to that command on its standard input. A handle works once, on its host, in this run.
            """, parameters: Self.secretSchema.json),
         Self.fetchSpec,
         ToolSpec(name: "scratch_write", description: "Write text to a file of this conversation's scratch folder (a path relative to it; replaced if it exists; 16 MiB a file, 64 MiB in all).",
                  parameters: Self.scratchWriteSchema.json),
         ToolSpec(name: "scratch_read", description: "Read a file of this conversation's scratch folder (a path relative to it), \(Self.readLimit) bytes at most from an offset.",
                  parameters: Self.scratchReadSchema.json)]
            + linkSpecs
            + external.map { ToolSpec(name: $0.name, description: "[MCP server \($0.server)] \($0.description)", parameters: $0.inputSchema) }
    }

    func run(_ call: ToolCall, conversation: String, run: String) async -> ToolOutcome {
        switch call.name {
        case "list_hosts": return await listHosts(call, conversation: conversation)
        case "ssh_exec": return await exec(call, conversation: conversation)
        case "request_user_secret": return await requestSecret(call, conversation: conversation)
        case "sftp_list": return await sftp(call, action: .ls, conversation: conversation)
        case "sftp_stat": return await sftp(call, action: .stat, conversation: conversation)
        case "sftp_read": return await sftp(call, action: .read, conversation: conversation)
        case "get_metrics": return await metrics(call, conversation: conversation)
        case "fetch": return await fetch(call, conversation: conversation)
        case "sftp_write", "sftp_copy": return await transfer(call, conversation: conversation)
        case "scratch_write": return scratchWrite(call, conversation: conversation)
        case "scratch_read": return scratchRead(call, conversation: conversation)
        default:
            if let tool = external.first(where: { $0.name == call.name }) { return await remote(call, tool: tool, conversation: conversation) }
            if Self.linkTools.contains(call.name), channels != nil { return await link(call, conversation: conversation) }
            return ToolOutcome(state: .failed, text: "There is no tool named \(call.name); the tools are: \(specs.map(\.name).joined(separator: ", ")).")
        }
    }

    /// A configured MCP server's tool, under the same policy: its rule (the person's, else
    /// approve only for what its server says is read-only and not destructive, else ask), the
    /// mode, the Guardian or the person, the audit. What may change something runs one call
    /// at a time across termind.
    private func remote(_ call: ToolCall, tool: MCPClientRules.Tool, conversation: String) async -> ToolOutcome {
        guard case .object = call.arguments, let clients else { return ToolOutcome(state: .failed, text: "The arguments of \(call.name) are a JSON object.") }
        let assessment: Assessment
        do {
            assessment = try await policy.assessRemote(tool: tool, conversation: conversation, call: call.id)
        } catch {
            return Self.refusal(error)
        }
        let shown = (try? JSONCoding.encode(call.arguments)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        let says = tool.saysReadOnly ? "its server says it only reads" : tool.destructive == true ? "its server says it may destroy something" : "it may change something"
        let question = "The assistant wants the tool \(tool.remote) of the MCP server \(tool.server) (\(says)), with:\n  \(shown.prefix(2000))\nAllow it? [o]nce, or [n]o: "
        if let refused = await settle(assessment, call: call, conversation: conversation, grant: nil,
                                      guardianAction: "Call the tool \(tool.remote) of the MCP server \(tool.server) (\(says)) with the arguments \(shown.prefix(4000))",
                                      notApproved: "The operator did not approve \(call.name); nothing was called.", ask: {
            let reply = await ask(StreamQuestion.choice(topic: AssistantStreams.Run.approvalTopic, question, ["o": "once", "once": "once", "n": "no", "no": "no"],
                                                        default: "no", details: .object(["tool": .string(call.name)]), personOnly: true))
            return reply?["answer"]?.stringValue == "once" ? .once : nil
        }) { return refused }
        do {
            let (text, isError) = try await clients.call(tool, arguments: call.arguments)
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: isError ? "failed" : "succeeded",
                                       exitStatus: nil, exitSignal: nil, stdoutBytes: text.utf8.count, stderrBytes: nil)
            return ToolOutcome(state: isError ? .failed : .succeeded, text: bounded(text, call: call.id, conversation: conversation, name: "mcp"))
        } catch {
            let cancelled = error is CancellationError || Task.isCancelled
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: cancelled ? "unknown" : "failed",
                                       exitStatus: nil, exitSignal: nil, stdoutBytes: nil, stderrBytes: nil)
            return ToolOutcome(state: .failed, text: "\(call.name): \((error as? MCPRemoteError)?.description ?? TermindError.from(error).message)")
        }
    }

    func readsOnly(_ call: ToolCall, conversation: String) async -> Bool {
        switch call.name {
        case _ where Self.readingTools.contains(call.name):
            return true
        case "ssh_exec":
            // Proven: a command the classifier reads as read-only, on a saved host, carrying no
            // secret handle, that the policy lets run without asking.
            guard misfit(call, Self.execSchema) == nil, let command = call.arguments["command"]?.stringValue,
                  !command.trimmedWhitespaceAndNewlines.isEmpty, command.utf8.count <= 16384,
                  (1...3600).contains(JSONRead.int(call.arguments["timeoutSeconds"]) ?? Self.defaultTimeout),
                  SecretHandle.handles(in: command).isEmpty, let name = call.arguments["host"]?.stringValue,
                  let host = try? await hosts.host(named: name),
                  let assessment = try? await policy.assess(tool: "ssh_exec", conversation: conversation, call: call.id, host: host, command: command,
                                                            declared: WorkspacesStreams.Exec.effect) else { return false }
            return assessment.action == .read && assessment.verdict == .allow(.policy)
        default:
            return false
        }
    }

    /// Read-only `ssh_exec` calls for one host run in one session (BatchScript: sshd's cost
    /// is mostly a session's start); the others each on their own, at once.
    func runBatch(_ calls: [ToolCall], conversation: String, run: String) async -> [ToolOutcome] {
        var byHost: [String: (host: HostSummary, indexes: [Int])] = [:]
        for (index, call) in calls.enumerated() where call.name == "ssh_exec" {
            guard let name = call.arguments["host"]?.stringValue, let host = try? await hosts.host(named: name) else { continue }
            byHost[host.id, default: (host, [])].indexes.append(index)
        }
        let shared = byHost.values.filter { $0.indexes.count >= 2 }
        let together = Set(shared.flatMap(\.indexes))
        let alone = calls.indices.filter { !together.contains($0) }
        var results = [ToolOutcome?](repeating: nil, count: calls.count)
        await withTaskGroup(of: [(Int, ToolOutcome)].self) { group in
            for (host, indexes) in shared {
                group.addTask { Array(zip(indexes, await execTogether(indexes.map { calls[$0] }, on: host, conversation: conversation))) }
            }
            if !alone.isEmpty {
                group.addTask { Array(zip(alone, await eachAtOnce(alone.map { calls[$0] }, conversation: conversation, run: run))) }
            }
            for await pairs in group { for (index, outcome) in pairs { results[index] = outcome } }
        }
        return results.map { $0 ?? ToolOutcome(state: .unknown, text: "The call's outcome is not known.") }
    }

    /// `calls` (read-only ssh_exec, proven by `readsOnly`) in one session on `host`.
    private func execTogether(_ calls: [ToolCall], on host: HostSummary, conversation: String) async -> [ToolOutcome] {
        let commands = calls.map { $0.arguments["command"]?.stringValue ?? "" }
        var assessments: [Assessment] = []
        for (call, command) in zip(calls, commands) {
            guard let assessment = try? await policy.assess(tool: "ssh_exec", conversation: conversation, call: call.id, host: host, command: command,
                                                            declared: WorkspacesStreams.Exec.effect),
                  assessment.action == .read, assessment.verdict == .allow(.policy) else {
                // Not provable now: each on its own, as any call.
                return await eachAtOnce(calls, conversation: conversation, run: "")
            }
            assessments.append(assessment)
        }
        for (call, assessment) in zip(calls, assessments) {
            try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: true, decider: .policy, reason: nil)
        }
        let timeout = calls.map { JSONRead.int($0.arguments["timeoutSeconds"]) ?? Self.defaultTimeout }.max() ?? Self.defaultTimeout
        let detail = AssistantPolicy.detail(conversation: conversation, call: calls[0].id)
        policy.expect(detail, sent: BatchScript.command, batch: commands)
        defer { policy.forget(detail) }
        let output = Output()
        let failure: String
        do {
            let result = try await context.actingForAgent(detail) {
                try await context.stream(WorkspacesStreams.Exec.self, .init(target: host.id, command: BatchScript.command, timeout: Double(timeout)),
                                         input: Data(BatchScript.script(commands).utf8)) { event in
                    if let data = event.data, let kind = event.kind { output.add(kind, data) }
                }
            }
            if let outcomes = BatchScript.parse(output.stream("stdout").0, count: calls.count) {
                var answers: [ToolOutcome] = []
                for ((call, assessment), outcome) in zip(zip(calls, assessments), outcomes) {
                    let one = Output()
                    one.add("stdout", outcome.stdout)
                    one.add("stderr", outcome.stderr)
                    try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: outcome.status == 0 ? "succeeded" : "failed",
                                               exitStatus: outcome.status, exitSignal: nil, stdoutBytes: outcome.stdout.count, stderrBytes: outcome.stderr.count)
                    answers.append(ToolOutcome(state: outcome.status == 0 ? .succeeded : .failed,
                                               text: "\(host.label): exit status \(outcome.status).\n" + report(one, call: call.id, conversation: conversation)))
                }
                return answers
            }
            let said = String(decoding: output.stream("stderr").0.prefix(500), as: UTF8.self)
            failure = "The batch's session on \(host.label) ended (exit status \(result.exitStatus.map(String.init) ?? result.exitSignal ?? "unknown")) without every command's outcome"
                + (said.isEmpty ? "." : ": \(said)")
        } catch {
            failure = TermindError.from(error).message
        }
        for (call, assessment) in zip(calls, assessments) {
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: "unknown", exitStatus: nil, exitSignal: nil,
                                       stdoutBytes: nil, stderrBytes: nil)
        }
        return calls.map { _ in ToolOutcome(state: .failed, text: failure) }
    }

    /// A host name that names no saved host: said, with the saved hosts whose label holds it
    /// (the model asks the operator which one, rather than guessing).
    func unknownHost(_ name: String) async -> ToolOutcome {
        let near = ((try? await hosts.allHosts()) ?? []).map(\.label).filter { !name.isEmpty && $0.lowercased().contains(name.lowercased()) }.sorted()
        let hint = near.isEmpty ? "list_hosts lists them" : "it may mean \(near.prefix(5).joined(separator: ", ")); ask the operator which"
        return ToolOutcome(state: .failed, text: "There is no saved host named \(name) (\(hint)). Nothing ran.")
    }

    func misfit(_ call: ToolCall, _ schema: JSONSchema) -> ToolOutcome? {
        let problems = schema.problems(in: call.arguments)
        guard !problems.isEmpty else { return nil }
        return ToolOutcome(state: .failed, text: "The arguments do not fit \(call.name): \(problems.joined(separator: "; ")).")
    }

    private static func refusal(_ error: any Error) -> ToolOutcome {
        let failure = TermindError.from(error)
        let refused = failure.code == ErrorCode.policyDenied.rawValue || failure.code == ErrorCode.policyUnavailable.rawValue
        return ToolOutcome(state: refused ? .refused : .failed, text: failure.message)
    }

    // MARK: - list_hosts

    private func listHosts(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        if let misfit = misfit(call, Self.listHostsSchema) { return misfit }
        do {
            let hosts = try await context.actingForAgent(AssistantPolicy.detail(conversation: conversation, call: call.id)) {
                try await context.call(VaultContracts.HostList.self, .init(tag: call.arguments["tag"]?.stringValue))
            }
            let rows: [JSONValue] = hosts.hosts.map { host in
                .object(["label": .string(host.label), "address": .string(host.address), "port": .integer(Int64(host.port)),
                         "user": host.user.map { .string($0) } ?? .null, "tags": .array(host.tags.map { .string($0) })])
            }
            return ToolOutcome(state: .succeeded, text: String(decoding: (try? JSONCoding.encode(JSONValue.array(rows))) ?? Data("[]".utf8), as: UTF8.self),
                               structured: .object(["hosts": .array(rows)]))
        } catch {
            return Self.refusal(error)
        }
    }

    // MARK: - ssh_exec

    private func exec(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        if let misfit = misfit(call, Self.execSchema) { return misfit }
        let name = call.arguments["host"]?.stringValue ?? ""
        let command = call.arguments["command"]?.stringValue ?? ""
        let timeout = JSONRead.int(call.arguments["timeoutSeconds"]) ?? Self.defaultTimeout
        guard !command.trimmedWhitespaceAndNewlines.isEmpty else { return ToolOutcome(state: .failed, text: "The command is empty.") }
        guard command.utf8.count <= 16384 else { return ToolOutcome(state: .failed, text: "The command is longer than 16384 bytes.") }
        guard (1...3600).contains(timeout) else { return ToolOutcome(state: .failed, text: "timeoutSeconds must be from 1 to 3600, not \(timeout).") }
        let host: HostSummary
        do {
            guard let found = try await hosts.host(named: name) else {
                return await unknownHost(name)
            }
            host = found
        } catch {
            return ToolOutcome(state: .failed, text: TermindError.from(error).message)
        }
        let handles = SecretHandle.handles(in: command)
        let assessment: Assessment
        do {
            assessment = try await policy.assess(tool: "ssh_exec", conversation: conversation, call: call.id, host: host, command: command,
                                                 declared: WorkspacesStreams.Exec.effect)
        } catch {
            return ToolOutcome(state: .refused, text: "The policy could not decide (\(TermindError.from(error).message)); nothing ran.")
        }
        // A handle is this run's, for this host, unused: checked before anything is asked.
        if let problem = secrets.problem(handles, host: host) {
            try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .policy, reason: problem)
            return ToolOutcome(state: .refused, text: problem)
        }
        // Decided before anything runs: the policy, the Guardian, the person, or a refusal.
        let action = """
            ssh_exec on \(host.label) (\(host.user.map { "\($0)@" } ?? "")\(host.address):\(host.port)), whose tier is \(assessment.tier?.rawValue ?? "ask"):
            \(command)
            termind's command classifier: state-changing (\(assessment.classifier?.reason ?? "not read-only")).
            """
        // A command carrying a secret is asked each time, for this call only.
        let why = handles.isEmpty ? "it may change the host (\(assessment.classifier?.reason ?? "not read-only"))"
            : "it is given the secret\(handles.count == 1 ? "" : "s") you entered (\(secrets.purposes(handles).joined(separator: "; "))), which a command could also print or send"
        if let refused = await settle(assessment, call: call, conversation: conversation, grant: (host.id, command), guardianAction: action,
                                                      notApproved: "The operator did not approve running this on \(host.label); nothing ran.",
                                                      ask: { await approval(tool: "ssh_exec", for: command, on: host, why: why, onceOnly: !handles.isEmpty) }) {
            return refused
        }
        // The secrets go on the command's input, read into variables where the handles were;
        // each handle is spent now, whatever happens next.
        let plaintexts = secrets.spend(handles)
        let sent = SecretHandle.rewrite(command, handles: handles)
        let detail = AssistantPolicy.detail(conversation: conversation, call: call.id)
        let input: Data? = plaintexts.isEmpty ? nil : Data(plaintexts.map { $0.withPlaintext { $0 + "\n" } }.joined().utf8)
        if !handles.isEmpty { policy.expect(detail, sent: sent, written: command) }
        defer { policy.forget(detail) }
        let output = Output(hiding: plaintexts)
        do {
            let result = try await context.actingForAgent(detail) {
                try await context.stream(WorkspacesStreams.Exec.self, .init(target: host.id, command: sent, timeout: Double(timeout)), input: input) { event in
                    if let data = event.data, let kind = event.kind { output.add(kind, data) }
                }
            }
            let (stdout, stderr) = output.totals()
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: result.exitStatus == 0 ? "succeeded" : "failed",
                                       exitStatus: result.exitStatus, exitSignal: result.exitSignal, stdoutBytes: stdout, stderrBytes: stderr)
            let status = result.exitSignal.map { "killed by SIG\($0)" } ?? "exit status \(result.exitStatus.map(String.init) ?? "unknown")"
            let text = "\(host.label): \(status).\n" + report(output, call: call.id, conversation: conversation)
            return ToolOutcome(state: result.exitStatus == 0 ? .succeeded : .failed, text: text)
        } catch {
            let failure = TermindError.from(error)
            let (stdout, stderr) = output.totals()
            let refused = failure.code == ErrorCode.policyDenied.rawValue || failure.code == ErrorCode.policyUnavailable.rawValue
            let cancelled = error is CancellationError || Task.isCancelled
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: refused ? "refused" : cancelled ? "unknown" : "failed",
                                       exitStatus: nil, exitSignal: nil, stdoutBytes: stdout, stderrBytes: stderr)
            let seen = stdout + stderr > 0 ? "\n" + report(output, call: call.id, conversation: conversation) : ""
            return ToolOutcome(state: refused ? .refused : .failed, text: failure.message + seen)
        }
    }

    /// Settles an assessed action before anything runs: allowed by the policy or the mode; or
    /// reviewed by the Guardian, or asked of the person (`ask`: their scope, nil for no), whose
    /// approval is granted for `grant` (host id, the action's words) so the kernel's hook finds
    /// it. Every decision is audited. Returns the refusal the model is told, or nil: go on.
    func settle(_ assessment: Assessment, call: ToolCall, conversation: String, grant: (host: String, command: String)?, guardianAction: String,
                notApproved: String, ask: () async -> Approvals.Scope?) async -> ToolOutcome? {
        let decider: PolicyRules.Decider
        switch assessment.verdict {
        case .allow(let by):
            decider = by
        case .refuse(let reason):
            try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .policy, reason: reason)
            return ToolOutcome(state: .refused, text: reason)
        case .askGuardian:
            let review = await guardian(conversation, guardianAction)
            guard review.approved else {
                try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .guardian, reason: review.reason)
                return ToolOutcome(state: .refused, text: review.reason)
            }
            if let grant { policy.grant(.once, conversation: conversation, call: call.id, tool: call.name, host: grant.host, command: grant.command, by: .guardian) }
            decider = .guardian
        case .askPerson:
            guard let scope = await ask() else {
                try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .person, reason: notApproved)
                return ToolOutcome(state: .refused, text: notApproved)
            }
            if let grant { policy.grant(scope, conversation: conversation, call: call.id, tool: call.name, host: grant.host, command: grant.command, by: .person) }
            decider = .person
        }
        try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: true, decider: decider, reason: nil)
        return nil
    }

    /// Asks the person whether `command` may run on `host`: once, for the host, for this
    /// exact command on the host, or no (the default). Nil: no, or nobody could answer.
    func approval(tool: String, for command: String, on host: HostSummary, why: String, onceOnly: Bool = false, preview: String? = nil) async -> Approvals.Scope? {
        let options = onceOnly ? "[o]nce, or [n]o" : "[o]nce, this [h]ost for the rest of the conversation, this exact [c]ommand on \(host.label), or [n]o"
        let text = """
            The assistant wants \(tool) on \(host.label) (\(host.user.map { "\($0)@" } ?? "")\(host.address)):
              \(command)\(preview.map { "\n\($0)" } ?? "")
            \(why.prefix(1).uppercased() + why.dropFirst()). Allow it? \(options): 
            """
        var choices = ["o": "once", "once": "once", "n": "no", "no": "no"]
        if !onceOnly { choices.merge(["h": "host", "host": "host", "c": "command", "command": "command"]) { $1 } }
        let reply = await ask(StreamQuestion.choice(topic: AssistantStreams.Run.approvalTopic, text, choices, default: "no",
                                                    details: .object(["host": .string(host.id), "tool": .string("ssh_exec")]), personOnly: true))
        guard let answer = reply?["answer"]?.stringValue else { return nil }
        return Approvals.Scope(rawValue: answer)
    }

    /// A command's output as the model sees it: each stream's size, its first bytes, and where
    /// the whole is (the scratch folder), with truthful offsets.
    private func report(_ output: Output, call: String, conversation: String) -> String {
        var lines: [String] = []
        let safe = String(call.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") ? $0 : "_" }.prefix(64))
        for kind in ["stdout", "stderr"] {
            let (kept, total) = output.stream(kind)
            guard total > 0 else { lines.append("\(kind): empty."); continue }
            let shown = kept.prefix(Self.previewBytes)
            var where_ = ""
            if total > shown.count {
                let path = "exec/\(safe).\(kind)"
                do {
                    try scratch.write(conversation, path, kept)
                    where_ = kept.count < total
                        ? "; bytes 0–\(kept.count - 1) are in scratch file \(path) (the rest was not kept)"
                        : "; all \(total) bytes are in scratch file \(path)"
                } catch {
                    where_ = "; the rest could not be kept (\((error as? Scratch.Refusal)?.message ?? "\(error)"))"
                }
            }
            lines.append("\(kind): \(total) bytes, bytes 0–\(shown.count - 1) below\(where_):")
            lines.append(String(decoding: shown, as: UTF8.self))
        }
        return lines.joined(separator: "\n")
    }

    /// A command's output as it arrives: each stream kept up to a scratch file's limit, and
    /// counted; a secret the command was given is cut out wherever it shows (an echo).
    final class Output: Sendable {
        private let state = Mutex<[String: (data: Data, total: Int)]>([:])
        private let hidden: [Data]

        init(hiding secrets: [Secret] = []) {
            hidden = secrets.compactMap { $0.withPlaintext { $0.isEmpty ? nil : Data($0.utf8) } }
        }

        /// Kept past the limit by a secret's length, so one that straddles the cut is masked whole.
        private var keep: Int { Scratch.fileLimit + (hidden.map(\.count).max() ?? 0) }

        func add(_ kind: String, _ data: Data) {
            guard kind == "stdout" || kind == "stderr" else { return }
            let keep = keep
            state.withLock { state in
                var entry = state[kind] ?? (Data(), 0)
                entry.total += data.count
                if entry.data.count < keep { entry.data.append(data.prefix(keep - entry.data.count)) }
                state[kind] = entry
            }
        }

        func stream(_ kind: String) -> (Data, Int) {
            var (data, total) = state.withLock { ($0[kind]?.data ?? Data(), $0[kind]?.total ?? 0) }
            for secret in hidden {
                while let range = data.firstRange(of: secret) { data.replaceSubrange(range, with: Data("[secret]".utf8)) }
            }
            return (Data(data.prefix(Scratch.fileLimit)), total)
        }
        func totals() -> (Int, Int) { state.withLock { ($0["stdout"]?.total ?? 0, $0["stderr"]?.total ?? 0) } }
    }

    // MARK: - sftp_list, sftp_stat, get_metrics

    /// `text` as the model gets it: whole up to `answerBytes`, else its start and where the
    /// whole is in the scratch folder.
    func bounded(_ text: String, call: String, conversation: String, name: String) -> String {
        let bytes = Data(text.utf8)
        guard bytes.count > Self.answerBytes else { return text }
        let safe = String(call.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") ? $0 : "_" }.prefix(64))
        let path = "\(name)/\(safe).json"
        let kept: String
        do {
            try scratch.write(conversation, path, bytes)
            kept = "all \(bytes.count) bytes are in scratch file \(path) (scratch_read pages through it)"
        } catch {
            kept = "the rest could not be kept (\((error as? Scratch.Refusal)?.message ?? "\(error)"))"
        }
        return "\(bytes.count) bytes; bytes 0–\(Self.answerBytes - 1) below, \(kept):\n" + String(decoding: bytes.prefix(Self.answerBytes), as: UTF8.self)
    }

    static func json<T: Encodable>(_ value: T) -> String {
        String(decoding: (try? JSONCoding.encode(value)) ?? Data("null".utf8), as: UTF8.self)
    }

    private func sftp(_ call: ToolCall, action: SFTPStreams.Run.Action, conversation: String) async -> ToolOutcome {
        if let misfit = misfit(call, action == .read ? Self.readSchema : Self.pathSchema) { return misfit }
        let name = call.arguments["host"]?.stringValue ?? ""
        let path = call.arguments["path"]?.stringValue ?? ""
        let offset = JSONRead.int(call.arguments["offset"]) ?? 0
        let length = JSONRead.int(call.arguments["length"]) ?? Self.readLimit
        guard offset >= 0, (1...Self.readLimit).contains(length) else {
            return ToolOutcome(state: .failed, text: "offset must be 0 or more and length from 1 to \(Self.readLimit).")
        }
        guard let host = try? await hosts.host(named: name) else {
            return await unknownHost(name)
        }
        let request = SFTPStreams.Run.Request(target: host.id, action: action, paths: [path], offset: action == .read ? UInt64(offset) : nil,
                                              length: action == .read ? length : nil)
        let effect = SFTPStreams.Run.effect(of: request)
        let assessment: Assessment
        do {
            assessment = try await policy.assess(tool: call.name, conversation: conversation, call: call.id, host: host, command: nil, declared: effect)
        } catch {
            return ToolOutcome(state: .refused, text: "The policy could not decide (\(TermindError.from(error).message)); nothing ran.")
        }
        guard case .allow(let decider) = assessment.verdict else {
            let reason: String = if case .refuse(let why) = assessment.verdict { why } else { "\(call.name) needs an approval it cannot be given." }
            try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .policy, reason: reason)
            return ToolOutcome(state: .refused, text: reason)
        }
        try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: true, decider: decider, reason: nil)
        do {
            let result = try await context.actingForAgent(AssistantPolicy.detail(conversation: conversation, call: call.id)) {
                try await context.stream(SFTPStreams.Run.self, request)
            }
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: result.failures.isEmpty ? "succeeded" : "failed",
                                       exitStatus: Int32(result.exitStatus), exitSignal: nil, stdoutBytes: nil, stderrBytes: nil)
            if let failure = result.failures.first { return ToolOutcome(state: .failed, text: "\(host.label):\(failure.path): \(failure.error)") }
            if action == .read, let content = result.content {
                let end = Int(content.offset) + content.bytes
                let next = UInt64(end) < content.size ? "more from offset \(end)" : "to the end"
                let body = content.text ?? "(not UTF-8 text; base64) \(content.base64 ?? "")"
                return ToolOutcome(state: .succeeded, text: "\(host.label):\(path): \(content.size) bytes; bytes \(content.offset)–\(max(Int(content.offset), end - 1)) below, \(next):\n\(body)")
            }
            let text = action == .ls ? Self.json(result.listings ?? []) : Self.json(result.entries ?? [])
            let data = (try? JSONCoding.parse(Data(text.utf8), source: "sftp")) ?? .array([])
            return ToolOutcome(state: .succeeded, text: bounded(text, call: call.id, conversation: conversation, name: "sftp"),
                               structured: .object([action == .ls ? "listings" : "entries": data]))
        } catch {
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: "failed", exitStatus: nil, exitSignal: nil,
                                       stdoutBytes: nil, stderrBytes: nil)
            return Self.refusal(error)
        }
    }

    private func metrics(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        if let misfit = misfit(call, Self.metricsSchema) { return misfit }
        let names = JSONRead.items(call.arguments["hosts"]).compactMap(\.stringValue)
        var ids: [String] = []
        for name in names {
            guard let host = try? await hosts.host(named: name) else {
                return await unknownHost(name)
            }
            ids.append(host.id)
        }
        do {
            let answer = try await context.actingForAgent(AssistantPolicy.detail(conversation: conversation, call: call.id)) {
                // Every monitored host, then those asked for: one not monitored is said, not an error.
                try await context.call(MetricsContracts.Get.self, .init(hosts: nil))
            }
            let wanted = Set(ids)
            let shown = names.isEmpty ? answer.hosts : answer.hosts.filter { wanted.contains($0.host) }
            let monitored = Set(answer.hosts.map(\.host))
            let missing = zip(names, ids).filter { !monitored.contains($0.1) }.map(\.0)
            var text = Self.json(shown)
            if shown.isEmpty { text = "None of these hosts is monitored; termind metrics add HOST starts monitoring one (the operator decides)." }
            if !missing.isEmpty { text += "\nNot monitored: \(missing.joined(separator: ", ")) (termind metrics add HOST starts it; the operator decides)." }
            let data = (try? JSONCoding.parse(Data(Self.json(shown).utf8), source: "metrics")) ?? .array([])
            return ToolOutcome(state: .succeeded, text: bounded(text, call: call.id, conversation: conversation, name: "metrics"),
                               structured: .object(["hosts": data, "notMonitored": .array(missing.map { .string($0) })]))
        } catch {
            return Self.refusal(error)
        }
    }

    // MARK: - sftp_write, sftp_copy, scratch_write

    private func transfer(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        let writing = call.name == "sftp_write"
        if let misfit = misfit(call, writing ? Self.writeSchema : Self.copySchema) { return misfit }
        let string: (String) -> String = { call.arguments[$0]?.stringValue ?? "" }
        let replace = call.arguments["replace"] == .bool(true)
        let toName = writing ? string("host") : string("toHost"), toPath = writing ? string("path") : string("toPath")
        guard let host = try? await hosts.host(named: toName) else {
            return await unknownHost(toName)
        }
        let source: String
        if writing {
            do {
                source = try scratch.existing(conversation, string("from"))
            } catch let refusal as Scratch.Refusal {
                return ToolOutcome(state: .refused, text: refusal.message)
            } catch {
                return ToolOutcome(state: .failed, text: TermindError.from(error).message)
            }
        } else {
            guard let from = try? await hosts.host(named: string("fromHost")) else {
                return await unknownHost(string("fromHost"))
            }
            source = "\(from.id):\(string("fromPath"))"
        }
        guard !toPath.isEmpty, !string(writing ? "from" : "fromPath").isEmpty else { return ToolOutcome(state: .failed, text: "A path is empty.") }
        let request = SFTPStreams.Transfer.Request(sources: [source], destination: "\(host.id):\(toPath)", conflict: replace ? .replace : .skip,
                                                   verb: writing ? "put" : "cp")
        let description = AssistantPolicy.transferDescription(source, request.destination, replace: replace,
                                                              digest: writing ? AssistantPolicy.digest(ofFile: source) : nil)
        let effect = SFTPStreams.Transfer.effect(of: request)
        let assessment: Assessment
        do {
            assessment = try await policy.assess(tool: call.name, conversation: conversation, call: call.id, host: host, command: description, declared: effect)
        } catch {
            return ToolOutcome(state: .refused, text: "The policy could not decide (\(TermindError.from(error).message)); nothing was copied.")
        }
        if let refused = await settle(assessment, call: call, conversation: conversation, grant: (host.id, description),
                                                      guardianAction: "\(call.name) onto \(host.label) (\(host.address)), whose tier is \(assessment.tier?.rawValue ?? "ask"): \(description)",
                                                      notApproved: "The operator did not approve copying this onto \(host.label); nothing was copied.",
                                                      ask: { await approval(tool: call.name, for: description, on: host, why: "it writes a file there",
                                                                            preview: writing ? Self.preview(ofFile: source) : nil) }) {
            return refused
        }
        do {
            let result = try await context.actingForAgent(AssistantPolicy.detail(conversation: conversation, call: call.id)) {
                try await context.stream(SFTPStreams.Transfer.self, request)
            }
            let file = result.files.first
            let outcome = file?.outcome.rawValue ?? "failed"
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: outcome == "copied" ? "succeeded" : outcome,
                                       exitStatus: Int32(result.exitStatus), exitSignal: nil, stdoutBytes: Int(result.bytes), stderrBytes: nil)
            switch file?.outcome {
            case .copied?: return ToolOutcome(state: .succeeded, text: "Copied \(result.bytes) bytes to \(host.label):\(toPath).")
            case .skipped?: return ToolOutcome(state: .failed, text: "\(host.label):\(toPath) exists, and replace was not asked for; nothing was copied.")
            default: return ToolOutcome(state: .failed, text: file?.error ?? "Nothing was copied.")
            }
        } catch {
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: "failed", exitStatus: nil, exitSignal: nil,
                                       stdoutBytes: nil, stderrBytes: nil)
            return Self.refusal(error)
        }
    }

    /// The start of a file a person is asked to send: its size and first lines.
    static func preview(ofFile path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let head = String(decoding: data.prefix(400), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).prefix(8)
        return "  (\(data.count) bytes, starting:)\n" + head.map { "  | " + TerminalText.escaped(String($0)) }.joined(separator: "\n")
    }

    private func scratchWrite(_ call: ToolCall, conversation: String) -> ToolOutcome {
        if let misfit = misfit(call, Self.scratchWriteSchema) { return misfit }
        let path = call.arguments["path"]?.stringValue ?? ""
        let content = Data((call.arguments["content"]?.stringValue ?? "").utf8)
        do {
            try scratch.write(conversation, path, content)
            return ToolOutcome(state: .succeeded, text: "Wrote \(content.count) bytes to scratch file \(path).")
        } catch let refusal as Scratch.Refusal {
            return ToolOutcome(state: .refused, text: refusal.message)
        } catch {
            return ToolOutcome(state: .failed, text: TermindError.from(error).message)
        }
    }

    // MARK: - request_user_secret

    private func requestSecret(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        if let misfit = misfit(call, Self.secretSchema) { return misfit }
        let name = call.arguments["host"]?.stringValue ?? ""
        let purpose = String((call.arguments["purpose"]?.stringValue ?? "").prefix(200))
        guard let host = try? await hosts.host(named: name) else {
            return await unknownHost(name)
        }
        let assessment = Assessment(tool: "request_user_secret", host: host, tier: nil, action: .read, classifier: nil, verdict: .askPerson)
        let reply = await ask(StreamQuestion.prompts(topic: AssistantStreams.Run.secretTopic, header: [
            "The assistant asks for a secret: \(purpose)",
            "It goes only into one command on \(host.label), on that command's input; the model never sees it.",
        ], [("Secret for \(host.label) (Enter alone: refuse): ", false)], personOnly: true))
        guard let secret = StreamQuestion.answers(reply)?.first, !secret.isEmpty else {
            try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: false, decider: .person, reason: "no secret was given")
            return ToolOutcome(state: .refused, text: "The operator gave no secret; do not ask again unless they say so.")
        }
        guard secret.withPlaintext({ !$0.contains("\n") && !$0.contains("\r") }) else {
            return ToolOutcome(state: .failed, text: "A secret is one line; the operator's answer was not, so it was not kept.")
        }
        let handle = secrets.keep(secret, host: host.id, purpose: purpose)
        try? await audit.decision(assessment, conversation: conversation, call: call.id, allowed: true, decider: .person, reason: nil)
        return ToolOutcome(state: .succeeded, text: "Handle \(handle) stands for the secret (\(purpose)) in one ssh_exec command on \(host.label), in this run only. "
                           + "Put it inside double quotes where the secret goes; the command reads it from its standard input.")
    }

    // MARK: - scratch_read

    private func scratchRead(_ call: ToolCall, conversation: String) -> ToolOutcome {
        if let misfit = misfit(call, Self.scratchReadSchema) { return misfit }
        let path = call.arguments["path"]?.stringValue ?? ""
        let offset = JSONRead.int(call.arguments["offset"]) ?? 0
        let length = min(max(JSONRead.int(call.arguments["length"]) ?? Self.readLimit, 1), Self.readLimit)
        do {
            let (data, size) = try scratch.read(conversation, path, offset: offset, length: length)
            let end = offset + data.count
            return ToolOutcome(state: .succeeded, text: "\(path): \(size) bytes; bytes \(offset)–\(max(offset, end - 1)) below\(end < size ? "; more from offset \(end)" : ", to the end"):\n"
                               + String(decoding: data, as: UTF8.self))
        } catch let refusal as Scratch.Refusal {
            return ToolOutcome(state: .refused, text: refusal.message)
        } catch {
            return ToolOutcome(state: .failed, text: TermindError.from(error).message)
        }
    }
}

/// The secrets a person gave one run, by handle: each for one host, spent by the first
/// command that uses it. Plaintext stays in this memory and the command's input only.
final class SecretBook: Sendable {
    private struct Kept {
        let secret: Secret
        let host: String
        let purpose: String
        var used = false
    }
    private let kept = Mutex<[String: Kept]>([:])

    func keep(_ secret: Secret, host: String, purpose: String) -> String {
        let handle = SecretHandle.make()
        kept.withLock { $0[handle] = Kept(secret: secret, host: host, purpose: purpose) }
        return handle
    }

    /// Why `handles` cannot be used on `host` (nil: they can).
    func problem(_ handles: [String], host: HostSummary) -> String? {
        kept.withLock { kept in
            for handle in handles {
                guard let entry = kept[handle] else {
                    return "\(handle) is not a secret handle of this run (a handle works only in the run that asked for it); nothing ran."
                }
                guard entry.host == host.id else { return "\(handle) was given for another host, not \(host.label); nothing ran." }
                guard !entry.used else { return "\(handle) was used already (a handle works once); nothing ran." }
            }
            return nil
        }
    }

    /// What each handle was asked for (as the model said it).
    func purposes(_ handles: [String]) -> [String] {
        kept.withLock { kept in handles.compactMap { kept[$0].map { "\"\($0.purpose)\"" } } }
    }

    /// The secrets of `handles`, in order; each is spent.
    func spend(_ handles: [String]) -> [Secret] {
        kept.withLock { kept in
            handles.compactMap { handle in
                kept[handle]?.used = true
                return kept[handle]?.secret
            }
        }
    }
}
