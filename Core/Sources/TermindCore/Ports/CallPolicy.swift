import FoundationEssentials

/// The kernel's policy hook (`kernel.policy`): provided by at most one feature of the
/// registry (the Assistant), consulted by the kernel before it dispatches any call or stream
/// whose chain holds an agent, never for the others. With an agent in the chain and no
/// provider, or one that throws or does not answer within `CallPolicyLimits.seconds`, the
/// call is refused (`policy.unavailable`).
public protocol CallPolicy: Sendable {
    func decide(_ request: PolicyRequest) async throws -> PolicyDecision
}

/// What the policy decides on: the operation, what it does, for whom, with what arguments.
public struct PolicyRequest: Sendable, Equatable {
    /// `workspaces.exec@1`.
    public let operation: String
    public let stream: Bool
    /// The operation's effect (the worst, `Effect.undeclared`, when its owner said none).
    public let effect: Effect
    public let effectDeclared: Bool
    public let origin: CallOrigin
    /// The hosts the request reaches as it names them (`Contract.hosts(in:)`: a saved host's
    /// label or id, a quick-connect line, `tag:NAME`), for the policy to resolve to the
    /// Vault's records; empty when the operation reaches none or its owner cannot tell (a C
    /// plugin): a policy that keys on hosts treats that as unknown, never as "no host".
    public let hosts: [String]
    /// The request's body as sent.
    public let arguments: JSONValue

    public init(operation: String, stream: Bool, effect: Effect, effectDeclared: Bool, origin: CallOrigin, hosts: [String] = [], arguments: JSONValue) {
        self.operation = operation
        self.stream = stream
        self.effect = effect
        self.effectDeclared = effectDeclared
        self.origin = origin
        self.hosts = hosts
        self.arguments = arguments
    }
}

public enum PolicyDecision: Sendable, Equatable {
    case allow
    /// Refused; `reason` is what the caller is told.
    case deny(reason: String)
    /// A person decides: `question` (a yes/no text) goes to the client at the start of the
    /// chain; no, no answer, or no client to ask is a refusal.
    case ask(question: String)
}

public enum CallPolicyLimits {
    /// How long the kernel waits for the policy's decision (not for a person's answer).
    public static let seconds: Double = 10
}

extension PortKey where P == any CallPolicy {
    public static var policy: Self { PortKey("kernel.policy") }
}
