import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The Guardian of approve-for-me (docs/assistant.md, "The Guardian"): one reviewer per
/// conversation, in memory, its reviews one at a time. The first review sends everything
/// the operator wrote; later ones go on from the reviewer's own transcript with what the
/// operator wrote since (full, then delta). It has no tools and sees no assistant text, tool
/// output or file. Unavailable, timed out, incomplete, malformed, asking for a tool: refused,
/// before anything runs.
actor GuardianReviewer {
    private var transcript: [TranscriptItem] = []
    private var seen = 0
    private var tail: Task<Void, Never>?

    struct Outcome: Sendable {
        let approved: Bool
        let reason: String
    }

    func review(operatorSaid texts: [String], action: String, client: ModelClient, model: ResolvedModel, seconds: Double) async -> Outcome {
        let previous = tail
        let task = Task { () -> Outcome in
            await previous?.value
            return await self.perform(texts, action: action, client: client, model: model, seconds: seconds)
        }
        tail = Task { _ = await task.value }
        return await task.value
    }

    private func perform(_ texts: [String], action: String, client: ModelClient, model: ResolvedModel, seconds: Double) async -> Outcome {
        let prompt = GuardianRules.prompt(operatorSaid: Array(texts.dropFirst(seen)), action: action, first: transcript.isEmpty)
        let items = transcript + [.user(prompt)]
        let request = ModelRequest(model: model.model, system: GuardianRules.system, items: items, tools: [], maxOutputTokens: 300)
        let answer: TurnOutcome?
        do {
            answer = try await Self.within(seconds) { try await client.stream(request, with: model) { _ in } }
        } catch let failure as ModelFailure {
            return Outcome(approved: false, reason: "The Guardian could not be asked (\(failure.error.message)); refused, nothing ran.")
        } catch {
            return Outcome(approved: false, reason: "The Guardian could not be asked (\(TermindError.from(error).message)); refused, nothing ran.")
        }
        guard let answer else {
            return Outcome(approved: false, reason: "The Guardian did not answer within \(RunEmitter.seconds(seconds)); refused, nothing ran.")
        }
        guard answer.complete, answer.error == nil else {
            return Outcome(approved: false, reason: "The Guardian's answer was incomplete; refused, nothing ran.")
        }
        guard answer.calls.isEmpty else {
            return Outcome(approved: false, reason: "The Guardian asked for a tool, which it has none of; refused, nothing ran.")
        }
        // Kept only after a complete answer: the next review goes on from here.
        transcript = items + [.assistant(text: answer.text, calls: [], echo: nil)]
        seen = texts.count
        switch GuardianRules.verdict(answer.text) {
        case .approve(let reason): return Outcome(approved: true, reason: reason)
        case .refuse(let reason): return Outcome(approved: false, reason: reason + " Nothing ran.")
        }
    }

    /// `body`'s value, or nil when `seconds` passed first (the body is cancelled).
    private static func within<T: Sendable>(_ seconds: Double, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }
}

/// The Guardians of the conversations, by conversation.
final class Guardians: Sendable {
    private let reviewers = Mutex<[String: GuardianReviewer]>([:])

    func reviewer(_ conversation: String) -> GuardianReviewer {
        reviewers.withLock { reviewers in
            if let reviewer = reviewers[conversation] { return reviewer }
            let reviewer = GuardianReviewer()
            reviewers[conversation] = reviewer
            return reviewer
        }
    }
}

extension AssistantFeature {
    /// The Guardian's review of `action` in `conversation`: the guardian role's model (else the
    /// chat model), shown what the operator typed in the conversation.
    func guardianReview(_ conversation: String, action: String, ports: Ports) async -> GuardianReviewer.Outcome {
        let roles = (try? await ports.settings.read(AssistantSettings.Roles.self)) ?? .defaults
        let policy = (try? await ports.settings.read(AssistantSettings.Policy.self)) ?? .defaults
        let model: ResolvedModel
        do {
            model = try await resolve(model: roles.guardian ?? roles.chat, provider: nil, ports: ports)
        } catch {
            return .init(approved: false, reason: "No model can act as the Guardian (\(TermindError.from(error).message)); refused, nothing ran.")
        }
        let said: [String]
        do {
            said = try await ports.store.entries(conversation).filter { $0.role == .user }.map(\.text)
        } catch {
            return .init(approved: false, reason: "The conversation could not be read for the Guardian; refused, nothing ran.")
        }
        return await guardians.reviewer(conversation).review(operatorSaid: said, action: action, client: ports.client, model: model,
                                                             seconds: Double(policy.guardianTimeoutSeconds))
    }
}
