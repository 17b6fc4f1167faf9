import AssistantAPI
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The assistant's approval policy as a pure function of termind's own facts: the tool's
/// rule, what the action does (its declared effect, or the command classifier's verdict for
/// `ssh_exec`), the host's tier, the run's mode and the approvals already given. Nothing a
/// model or a host wrote is an input: the arguments only ever make an action *more* likely
/// to need an approval (the classifier fails closed).
public enum PolicyRules {
    /// What the action does, as termind reads it.
    public enum Action: String, Sendable, Equatable, Codable {
        /// Only reads (a declared read effect without secrets, a read-only command).
        case read
        /// Changes something, or could: anything else.
        case change
    }

    /// Who decided.
    public enum Decider: String, Sendable, Equatable, Codable {
        /// The policy's own rules (a tier, a tool rule, a read).
        case policy
        /// A person's answer (now, or an approval given earlier in the conversation).
        case person
        /// The Guardian's review (approve-for-me).
        case guardian
        /// The run's mode (full-access pre-approves).
        case mode
    }

    public enum Verdict: Sendable, Equatable {
        case allow(Decider)
        case refuse(String)
        /// A person must approve it (mode ask).
        case askPerson
        /// The Guardian must approve it (mode approve-for-me).
        case askGuardian

        public var allowed: Bool { if case .allow = self { true } else { false } }
    }

    public typealias Tier = AssistantSettings.Policy.Tier
    public typealias Mode = AssistantSettings.Policy.Mode
    public typealias ToolRule = AssistantSettings.Policy.ToolRule

    /// The decision, in this order: a denied tool refuses; a read-only host refuses what
    /// would change it (in every mode); reading runs; an `auto` host or an `approve` tool
    /// runs; an approval already given runs (by whoever gave it); then the mode: full
    /// access runs, approve-for-me asks the Guardian, ask asks the person.
    /// - Parameters:
    ///   - host: the host's label, for the reason given (nil: the action reaches no host).
    ///   - tier: the host's tier (nil: no host).
    ///   - approvedBy: who approved this very action earlier (nil: nobody).
    ///   - carriesSecret: the action carries a secret the person gave (a handle): only the
    ///     person approves it, each time — never a tier, a rule, the mode or the Guardian (a
    ///     "read-only" command could still print the secret in another form).
    public static func decide(tool: String, rule: ToolRule, action: Action, host: String?, tier: Tier?, mode: Mode, approvedBy: Decider?,
                              carriesSecret: Bool = false) -> Verdict {
        if rule == .deny { return .refuse("The policy denies the tool \(tool) to the assistant.") }
        if tier == .readOnly && action == .change {
            return .refuse("\(host ?? "The host") is read-only for the assistant: only what reads may run there, and this would change something. Nothing ran.")
        }
        if carriesSecret { return approvedBy == .person ? .allow(.person) : .askPerson }
        if action == .read { return .allow(.policy) }
        if tier == .auto || rule == .approve { return .allow(.policy) }
        if let approvedBy { return .allow(approvedBy) }
        switch mode {
        case .fullAccess: return .allow(.mode)
        case .approveForMe: return .askGuardian
        case .ask: return .askPerson
        }
    }
}

/// Approvals given in a conversation: for one call (used once), for a host, or for one exact
/// command on a host. Never for a tool everywhere.
public struct Approvals: Sendable, Equatable {
    public enum Scope: String, Sendable, Equatable, Codable, CaseIterable {
        /// This call only.
        case once
        /// Whatever changes this host, for the rest of the conversation.
        case host
        /// This exact command on this host, for the rest of the conversation.
        case command
    }

    private struct Grant: Hashable {
        var host: String
        var command: String?
    }
    private var grants: [Grant: PolicyRules.Decider] = [:]
    /// Once-approvals by the tool call they were given for.
    private var once: [String: (host: String?, command: String?, by: PolicyRules.Decider)] = [:]

    public init() {}

    public static func == (lhs: Approvals, rhs: Approvals) -> Bool { lhs.grants == rhs.grants && lhs.once.keys == rhs.once.keys }

    public mutating func grant(_ scope: Scope, call: String, host: String?, command: String?, by decider: PolicyRules.Decider) {
        switch scope {
        case .once: once[call] = (host, command, decider)
        case .host: if let host { grants[Grant(host: host, command: nil)] = decider } else { once[call] = (host, command, decider) }
        case .command:
            if let host, let command { grants[Grant(host: host, command: command)] = decider } else { once[call] = (host, command, decider) }
        }
    }

    /// Who approved this action, if anybody did: a once-approval counts for its own call and
    /// the very host and command it was given for.
    public func approval(call: String, host: String?, command: String?) -> PolicyRules.Decider? {
        if let given = once[call], given.host == host, given.command == command { return given.by }
        guard let host else { return nil }
        if let command, let by = grants[Grant(host: host, command: command)] { return by }
        return grants[Grant(host: host, command: nil)]
    }

    /// A once-approval is spent by the call it was given for.
    public mutating func spend(call: String) {
        once[call] = nil
    }
}
