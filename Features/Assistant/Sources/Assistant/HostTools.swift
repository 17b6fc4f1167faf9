import AssistantAPI
import AssistantRules
import Foundation
import TermindCore
import VaultAPI

/// The tools a run offers today: reading the saved hosts. Every call is checked against
/// its schema before anything runs, then made through the kernel on the conversation's
/// behalf (`actingForAgent`), so the policy decides on it as on any agent's call. The host
/// tools that act (exec, files, metrics) come with the approval policy (issue 37).
struct HostTools: ToolBox {
    let context: FeatureContext

    private static let listHostsSchema: JSONSchema = .object([JSONSchema.Property(name: "tag", schema: .string(), required: false)])

    var specs: [ToolSpec] {
        [ToolSpec(name: "list_hosts", description: "List the operator's saved SSH hosts (label, address, port, user, tags), optionally those with a tag.",
                  parameters: Self.listHostsSchema.json)]
    }

    func run(_ call: ToolCall, conversation: String, run: String) async -> ToolOutcome {
        switch call.name {
        case "list_hosts":
            let problems = Self.listHostsSchema.problems(in: call.arguments)
            guard problems.isEmpty else { return ToolOutcome(state: .failed, text: "The arguments do not fit list_hosts: \(problems.joined(separator: "; ")).") }
            do {
                let hosts = try await context.actingForAgent("conversation \(conversation)/tool-call \(call.id)") {
                    try await context.call(VaultContracts.HostList.self, .init(tag: call.arguments["tag"]?.stringValue))
                }
                let rows: [JSONValue] = hosts.hosts.map { host in
                    .object(["label": .string(host.label), "address": .string(host.address), "port": .integer(Int64(host.port)),
                             "user": host.user.map { .string($0) } ?? .null, "tags": .array(host.tags.map { .string($0) })])
                }
                return ToolOutcome(state: .succeeded, text: String(decoding: (try? JSONCoding.encode(JSONValue.array(rows))) ?? Data("[]".utf8), as: UTF8.self))
            } catch {
                let failure = TermindError.from(error)
                let refused = failure.code == ErrorCode.policyDenied.rawValue || failure.code == ErrorCode.policyUnavailable.rawValue
                return ToolOutcome(state: refused ? .refused : .failed, text: failure.message)
            }
        default:
            return ToolOutcome(state: .failed, text: "There is no tool named \(call.name); the tools are: \(specs.map(\.name).joined(separator: ", ")).")
        }
    }
}

/// The kernel's policy hook as the Assistant provides it today: what an agent may do
/// without a person is to read (no secrets); anything that writes, deletes, runs a command
/// or touches secrets is refused until the approval policy lands (issue 37). Decided from
/// termind's own facts (the operation's declared effect), never from what a model wrote.
final class AssistantPolicy: CallPolicy {
    func decide(_ request: PolicyRequest) async throws -> PolicyDecision {
        if request.effectDeclared && request.effect.level == .read && !request.effect.secrets { return .allow }
        return .deny(reason: "\(request.operation) (\(request.effect)) is not allowed for the assistant: it may only read for now, without secrets.")
    }
}
