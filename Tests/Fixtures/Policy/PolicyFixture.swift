import Foundation
import Synchronization
import TermindCore

/// Test fixture: the kernel's policy hook (`kernel.policy`), deciding as a test scripts it
/// and keeping every request it saw.
/// Scripts the policy hook: a decision per operation (`allow`, `deny`, `ask`, `fail`,
/// `hang`), `fallback` for the rest; returns what it was asked so far.
public enum AgentPolicy: Contract {
    public struct Request: Codable, Sendable {
        public var decisions: [String: String]?
        public var fallback: String?
    }
    public struct Seen: Codable, Sendable, Equatable {
        public var operation: String
        public var effect: String
        public var chain: [Caller]
        public var hosts: [String]
        public var arguments: JSONValue
    }
    public struct Response: Codable, Sendable { public var seen: [Seen] }
    public static let name = "fixture-policy.script"
    public static let version = 1
    public static let summary = "Script the policy hook and read what it was asked (test fixture)."
    public static let effect: Effect = .write
}

final class ScriptedPolicy: CallPolicy {
    let state = Mutex<(decisions: [String: String], fallback: String, seen: [AgentPolicy.Seen])>(([:], "deny", []))

    func decide(_ request: PolicyRequest) async throws -> PolicyDecision {
        let rule = state.withLock { state -> String in
            state.seen.append(.init(operation: request.operation, effect: request.effect.description, chain: request.origin.chain, hosts: request.hosts, arguments: request.arguments))
            return state.decisions[request.operation] ?? state.fallback
        }
        switch rule {
        case "allow": return .allow
        case "ask": return .ask(question: "Let the agent run \(request.operation)?")
        case "fail": throw TermindError(code: "fixture.policy_failed", message: "the scripted policy failed")
        case "hang": try await Task.sleep(for: .seconds(3600)); return .allow
        default: return .deny(reason: "The scripted policy refuses \(request.operation).")
        }
    }
}

final class PolicyFeature: Feature {
    private let policy = ScriptedPolicy()

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.policy, policy as any CallPolicy)
        registrar.handle(AgentPolicy.self) { [policy] request, _ in
            policy.state.withLock { state in
                if let decisions = request.decisions { state.decisions = decisions }
                if let fallback = request.fallback { state.fallback = fallback }
                return .init(seen: state.seen)
            }
        }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-policy", version: "1.0.0", signature: TermindLibrary.signature) { PolicyFeature() }
}
