import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import SettingsAPI
import SFTPAPI
import Synchronization
import TermindCore
import TermindCrypto
import VaultAPI
import WorkspacesAPI

/// What the policy found out about one action: the saved host it reaches, what it does, and
/// the verdict (PolicyRules) for it now.
struct Assessment: Sendable {
    let tool: String
    let host: HostSummary?
    let tier: PolicyRules.Tier?
    let action: PolicyRules.Action
    /// `ssh_exec`: the classifier's verdict.
    let classifier: CommandClassifier.Verdict?
    let verdict: PolicyRules.Verdict
}

/// The kernel's policy hook as the Assistant provides it (`kernel.policy`), and the book of
/// what each conversation may do: its mode and the approvals given in it.
///
/// Every call an agent's chain makes is decided here from termind's own facts — the
/// operation, its declared effect, the saved host it reaches and that host's tier (the
/// `assistant.policy` record), the command classifier's verdict, the approvals a person or
/// the Guardian gave — never from text a model or a host wrote. An agent may reach only the
/// operations behind the assistant's tools; anything else is refused, as is any way of
/// connecting the tool does not choose itself (another user, key, port, jump route or
/// host-key answer). The tools ask their questions before they call (HostTools): by the time
/// the kernel asks here, an action that needed an approval has one, or it is refused.
final class AssistantPolicy: CallPolicy {
    struct Facts: Sendable {
        let settings: any SettingsValues
        let hosts: any HostDirectory
        /// The folder of every conversation's scratch folder: the only local files an agent's
        /// transfer may read.
        let scratchRoot: String
    }

    private struct Book {
        var facts: Facts?
        var modes: [String: PolicyRules.Mode] = [:]
        var approvals: [String: Approvals] = [:]
        /// Commands a tool sends with secrets read from input, by the call's chain detail:
        /// what is sent, and the command as the model wrote it (handles in place of secrets),
        /// which is what the policy decides on.
        var rewritten: [String: (sent: String, written: [String])] = [:]
    }
    private let book = Mutex(Book())

    func configure(_ facts: Facts?) {
        book.withLock { $0.facts = facts }
    }

    /// The mode a conversation's run goes in (until the next run sets another).
    func setMode(_ mode: PolicyRules.Mode, conversation: String) {
        book.withLock { $0.modes[conversation] = mode }
    }

    /// An approval for `tool`'s `command` (its words) on `host`: a command-scope approval is for
    /// that tool only.
    func grant(_ scope: Approvals.Scope, conversation: String, call: String, tool: String, host: String?, command: String?, by decider: PolicyRules.Decider) {
        book.withLock { $0.approvals[conversation, default: Approvals()].grant(scope, call: call, host: host, command: command.map { "\(tool)\u{1F}\($0)" }, by: decider) }
    }

    /// `sent` (a command carrying secret handles, rewritten to read them from its input) is
    /// decided on as `written`, for the call with chain detail `detail` only.
    func expect(_ detail: String, sent: String, written: String) {
        book.withLock { $0.rewritten[detail] = (sent, [written]) }
    }

    /// `sent` runs a read-only batch of `commands` (the script on its input): decided on as
    /// each of them, for the call with chain detail `detail` only.
    func expect(_ detail: String, sent: String, batch commands: [String]) {
        book.withLock { $0.rewritten[detail] = (sent, commands) }
    }

    func forget(_ detail: String) {
        _ = book.withLock { $0.rewritten.removeValue(forKey: detail) }
    }

    private func facts() throws -> Facts {
        guard let facts = book.withLock({ $0.facts }) else { throw TermindError(.policyUnavailable, "The assistant's policy is not started.") }
        return facts
    }

    /// The conversation and tool call an agent link names (`conversation 7/tool-call call_a`).
    static func parse(detail: String?) -> (conversation: String, call: String)? {
        guard let detail, detail.hasPrefix("conversation ") else { return nil }
        let parts = detail.dropFirst("conversation ".count).split(separator: "/", maxSplits: 1)
        guard parts.count == 2, parts[1].hasPrefix("tool-call ") else { return nil }
        return (String(parts[0]), String(parts[1].dropFirst("tool-call ".count)))
    }

    static func detail(conversation: String, call: String) -> String { "conversation \(conversation)/tool-call \(call)" }

    /// The verdict on a tool's action now. `host`: the saved host, already resolved (nil: the
    /// action reaches none); `command`: `ssh_exec`'s command line.
    func assess(tool: String, conversation: String?, call: String, host: HostSummary?, command: String?, declared: Effect) async throws -> Assessment {
        let policy = try await facts().settings.read(AssistantSettings.Policy.self)
        let classifier = command.map { CommandClassifier.classify($0) }
        let action: PolicyRules.Action = if let classifier {
            classifier.isReadOnly ? .read : .change
        } else {
            declared.level == .read && !declared.secrets ? .read : .change
        }
        let tier = host.map { policy.tier(host: $0.id, tags: $0.tags) }
        let (mode, approvedBy) = book.withLock { book -> (PolicyRules.Mode?, PolicyRules.Decider?) in
            guard let conversation else { return (nil, nil) }
            return (book.modes[conversation], book.approvals[conversation]?.approval(call: call, host: host?.id, command: command.map { "\(tool)\u{1F}\($0)" }))
        }
        let verdict = PolicyRules.decide(tool: tool, rule: policy.rule(tool: tool), action: action, host: host?.label, tier: tier,
                                         mode: mode ?? policy.mode, approvedBy: approvedBy,
                                         carriesSecret: tool == "ssh_exec" && command.map { !SecretHandle.handles(in: $0).isEmpty } == true)
        return Assessment(tool: tool, host: host, tier: tier, action: action, classifier: classifier, verdict: verdict)
    }

    /// A configured MCP server's tool: what it may do is its server's word, so it counts as a
    /// change whatever it says; its rule decides (the person's, else what MCPClientRules
    /// derives from its hints).
    func assessRemote(tool: MCPClientRules.Tool, conversation: String, call: String) async throws -> Assessment {
        let policy = try await facts().settings.read(AssistantSettings.Policy.self)
        let (mode, approvedBy) = book.withLock { book -> (PolicyRules.Mode?, PolicyRules.Decider?) in
            (book.modes[conversation], book.approvals[conversation]?.approval(call: call, host: nil, command: nil))
        }
        let rule = MCPClientRules.rule(explicit: policy.tools[tool.name], tool: tool)
        let verdict = PolicyRules.decide(tool: tool.name, rule: rule, action: .change, host: nil, tier: nil, mode: mode ?? policy.mode, approvedBy: approvedBy)
        return Assessment(tool: tool.name, host: nil, tier: nil, action: .change, classifier: nil, verdict: verdict)
    }

    struct Refusal: Error {
        let reason: String
    }

    /// What an agent's transfer reaches: its destination, a saved host, and the words its
    /// approvals are keyed by; refused when it names anything else (a local destination, a
    /// local file outside this conversation's scratch folder, an unsaved host, its own way of
    /// connecting).
    func transferFacts(_ request: PolicyRequest, conversation: String?) async throws -> Result<(HostSummary, String), Refusal> {
        // Only what the tools set: anything else (how to connect, recursion, links, …) is refused.
        let allowed: Set<String> = ["sources", "destination", "conflict", "verb"]
        let fields: [String: JSONValue] = if case .object(let object) = request.arguments { object } else { [:] }
        let chosen = fields.filter { !allowed.contains($0.key) && $0.value != .null }.keys.sorted()
        guard chosen.isEmpty else { return .failure(Refusal(reason: "An agent's transfer may not set \(chosen.joined(separator: ", ")).")) }
        let sources = JSONRead.items(request.arguments["sources"]).compactMap(\.stringValue)
        guard sources.count == 1, let destination = request.arguments["destination"]?.stringValue,
              case .remote(let target, nil, _)? = try? TransferEndpoint.parse(destination) else {
            return .failure(Refusal(reason: "An agent's transfer copies one file to a saved host."))
        }
        let facts = try facts()
        guard let host = try await facts.hosts.host(named: target) else { return .failure(Refusal(reason: "\(target) is not a saved host.")) }
        var digest: String?
        switch try? TransferEndpoint.parse(sources[0]) {
        case .local(let path)?:
            guard let conversation, let real = Self.realpath(path),
                  real.hasPrefix(facts.scratchRoot + "/" + conversation + "/") else {
                return .failure(Refusal(reason: "An agent's transfer reads local files only from its conversation's scratch folder."))
            }
            // What is approved is these bytes: a file changed since is another action.
            digest = Self.digest(ofFile: real)
        case .remote(let from, nil, _)?:
            guard try await facts.hosts.host(named: from) != nil else { return .failure(Refusal(reason: "\(from) is not a saved host.")) }
        default:
            return .failure(Refusal(reason: "An agent's transfer names saved hosts, not addresses or ports."))
        }
        return .success((host, Self.transferDescription(sources[0], destination, replace: request.arguments["conflict"]?.stringValue == "replace", digest: digest)))
    }

    /// The words a transfer's approval is keyed by (and the person is shown): a local file's
    /// bytes by their SHA-256, so what is approved is what is sent.
    static func transferDescription(_ source: String, _ destination: String, replace: Bool, digest: String? = nil) -> String {
        "copy \(source)\(digest.map { " (sha256 \($0))" } ?? "") to \(destination)\(replace ? ", replacing what is there" : "")"
    }

    /// The hex SHA-256 of a file's bytes (at most a scratch file's 16 MiB).
    static func digest(ofFile path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path), data.count <= Scratch.fileLimit else { return nil }
        return Digest.sha256(data).hexEncoded
    }

    static func realpath(_ path: String) -> String? {
        guard let resolved = Glibc.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    // MARK: - The kernel's hook

    /// The tool an operation an agent asks for belongs to; nil: none (refused).
    static func tool(for request: PolicyRequest) -> String? {
        switch request.operation {
        case VaultContracts.HostList.id.description: "list_hosts"
        case WorkspacesStreams.Exec.id.description: "ssh_exec"
        case MetricsContracts.Get.id.description: "get_metrics"
        case SFTPStreams.Transfer.id.description:
            JSONRead.items(request.arguments["sources"]).contains { source in
                source.stringValue.map { (try? TransferEndpoint.parse($0))?.isRemote == false } ?? true
            } ? "sftp_write" : "sftp_copy"
        case SFTPStreams.Run.id.description:
            switch request.arguments["action"]?.stringValue {
            case "ls"?: "sftp_list"
            case "stat"?: "sftp_stat"
            case "read"?: "sftp_read"
            default: nil
            }
        default: nil
        }
    }

    func decide(_ request: PolicyRequest) async throws -> PolicyDecision {
        guard let tool = Self.tool(for: request) else {
            return .deny(reason: "\(request.operation) is not an operation the assistant may use; nothing was done.")
        }
        guard request.effectDeclared else { return .deny(reason: "\(request.operation) declares no effect, so the assistant may not use it.") }
        let agent = request.origin.chain.last { $0.kind == .agent }
        let named = Self.parse(detail: agent?.detail)
        var host: HostSummary?
        var command: String?
        if let target = request.arguments["target"] {
            guard let target = target.stringValue, request.hosts == [target] else { return .deny(reason: "\(tool) names no single saved host.") }
            // The tool chooses how to connect: the saved host's own route, user, key and trust.
            let chosen = ["user", "identity", "identityFile", "port", "jump", "acceptHostKey", "workingDirectory"].filter {
                if let value = request.arguments[$0], value != .null { true } else { false }
            }
            guard chosen.isEmpty else {
                return .deny(reason: "An agent may not choose how termind connects (\(chosen.joined(separator: ", "))); the saved host's own settings apply.")
            }
            guard let found = try await facts().hosts.host(named: target) else {
                return .deny(reason: "\(target) is not a saved host; the assistant reaches saved hosts only.")
            }
            host = found
        }
        if tool == "ssh_exec" {
            guard let line = request.arguments["command"]?.stringValue else { return .deny(reason: "ssh_exec has no command.") }
            let written = book.withLock { book -> [String] in
                guard let detail = agent?.detail, let rewritten = book.rewritten[detail], rewritten.sent == line else { return [line] }
                return rewritten.written
            }
            // A batch: every command in it must be allowed on its own, and only read.
            if written.count > 1 {
                for each in written {
                    let assessment = try await assess(tool: tool, conversation: named?.conversation, call: named?.call ?? "", host: host, command: each,
                                                      declared: request.effect)
                    guard assessment.action == .read, case .allow = assessment.verdict else {
                        return .deny(reason: "A batch holds a command that is not allowed to run without asking; nothing ran.")
                    }
                }
                return .allow
            }
            command = written.first
        }
        if tool == "sftp_write" || tool == "sftp_copy" {
            switch try await transferFacts(request, conversation: named?.conversation) {
            case .failure(let refusal): return .deny(reason: refusal.reason)
            case .success(let (destination, description)):
                host = destination
                command = description
            }
        }
        if tool == "get_metrics" {
            for name in request.hosts where name != "*" {
                guard try await facts().hosts.host(named: name) != nil else { return .deny(reason: "\(name) is not a saved host.") }
            }
        }
        let assessment = try await assess(tool: tool, conversation: named?.conversation, call: named?.call ?? "", host: host, command: command,
                                          declared: request.effect)
        switch assessment.verdict {
        case .allow:
            if let named { book.withLock { $0.approvals[named.conversation]?.spend(call: named.call) } }
            return .allow
        case .refuse(let reason):
            return .deny(reason: reason)
        case .askPerson, .askGuardian:
            // The tool asks before it calls; an action that reaches here unapproved was not.
            return .deny(reason: "\(tool) on \(host?.label ?? "this host") needs an approval that was not given; nothing ran.")
        }
    }
}
