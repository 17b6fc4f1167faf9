import AssistantAPI
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// A run inside `termind serve` that outlives the client that started it: its events go to
/// every attached client and into a bounded log of the run so far, so a client that attaches
/// later (`termind assistant attach ID`) sees what it missed, then the rest as it comes. A
/// client that goes away detaches; Ctrl-C (a cancel with a signal) ends the run.
final class LiveRun: Sendable {
    typealias Outcome = Result<AssistantStreams.Run.Result, TermindError>

    /// The most of a run's events kept for a client that attaches later.
    static let logLimit = 1 << 20

    let conversation: String
    private struct State {
        /// `pending`: events held back while the client is shown the run so far.
        var attached: [(id: ObjectIdentifier, session: StreamSession, json: Bool, pending: [RunEvent]?)] = []
        var log: [RunEvent] = []
        var logBytes = 0
        var dropped = false
        var outcome: Outcome?
        var waiters: [(id: ObjectIdentifier, continuation: CheckedContinuation<Outcome?, Never>)] = []
    }
    private let state = Mutex(State())

    init(conversation: String) {
        self.conversation = conversation
    }

    /// Records `event` and sends it to every attached client.
    func deliver(_ event: RunEvent) async {
        let targets = state.withLock { state -> [(StreamSession, Bool)] in
            let size = (event.stdout?.utf8.count ?? 0) + (event.notice?.utf8.count ?? 0) + 64
            state.log.append(event)
            state.logBytes += size
            // The latest part is kept: the start goes first.
            while state.logBytes > Self.logLimit, let first = state.log.first {
                state.log.removeFirst()
                state.logBytes -= (first.stdout?.utf8.count ?? 0) + (first.notice?.utf8.count ?? 0) + 64
                state.dropped = true
            }
            var live: [(StreamSession, Bool)] = []
            for index in state.attached.indices {
                if state.attached[index].pending != nil { state.attached[index].pending!.append(event) } else {
                    live.append((state.attached[index].session, state.attached[index].json))
                }
            }
            return live
        }
        for (session, json) in targets { await event.send(to: session, json: json) }
    }

    /// Asks the client attached last (the one a person most likely looks at); nil when none
    /// is attached or it did not answer — a refusal, never a guess.
    func ask(_ question: JSONValue) async -> JSONValue? {
        guard let session = state.withLock({ $0.attached.last?.session }) else { return nil }
        return await session.ask(question)
    }

    /// The client that starts the run: attached before anything happens.
    func attachFirst(_ session: StreamSession, json: Bool) {
        state.withLock { $0.attached.append((ObjectIdentifier(session), session, json, nil)) }
    }

    /// Attaches `session`: it gets the run so far, then what comes; returns the run's outcome,
    /// or nil when the session detached first.
    func follow(_ session: StreamSession, json: Bool) async -> Outcome? {
        await replay(to: session, json: json)
        return await outcome(for: session)
    }

    private func replay(to session: StreamSession, json: Bool) async {
        let id = ObjectIdentifier(session)
        let (history, dropped) = state.withLock { state -> ([RunEvent], Bool) in
            state.attached.append((id, session, json, []))
            return (state.log, state.dropped)
        }
        if dropped { await RunEvent(notice: "(this run said more than termind keeps for attaching; its start is left out)").send(to: session, json: json) }
        var next = history
        // The run so far, then what came meanwhile, in order; then live.
        while !next.isEmpty {
            for event in next { await event.send(to: session, json: json) }
            next = state.withLock { state in
                guard let index = state.attached.firstIndex(where: { $0.id == id }) else { return [] }
                let held = state.attached[index].pending ?? []
                state.attached[index].pending = held.isEmpty ? nil : []
                return held
            }
        }
        state.withLock { state in
            if let index = state.attached.firstIndex(where: { $0.id == id }) { state.attached[index].pending = nil }
        }
    }

    /// The run's outcome once it ended, or nil when `session` detached first.
    func outcome(for session: StreamSession) async -> Outcome? {
        let id = ObjectIdentifier(session)
        return await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Outcome? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append((id, continuation))
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }

    /// The client of `session` left: the run goes on without it.
    func detach(_ session: StreamSession) {
        let id = ObjectIdentifier(session)
        let waiting = state.withLock { state -> [CheckedContinuation<Outcome?, Never>] in
            state.attached.removeAll { $0.id == id }
            let leaving = state.waiters.filter { $0.id == id }.map(\.continuation)
            state.waiters.removeAll { $0.id == id }
            return leaving
        }
        for continuation in waiting { continuation.resume(returning: nil) }
    }

    func finish(_ outcome: Outcome) {
        let waiting = state.withLock { state -> [CheckedContinuation<Outcome?, Never>] in
            state.outcome = outcome
            defer { state.waiters.removeAll(); state.attached.removeAll() }
            return state.waiters.map(\.continuation)
        }
        for continuation in waiting { continuation.resume(returning: outcome) }
    }
}

/// The runs going on inside `termind serve`, by conversation: one at a time per conversation.
final class LiveRuns: Sendable {
    private let runs = Mutex<[String: (run: LiveRun, task: Task<Void, Never>?)]>([:])

    func start(_ conversation: String, first session: StreamSession, json: Bool, _ body: @escaping @Sendable (LiveRun) async -> LiveRun.Outcome) throws -> LiveRun {
        let live = LiveRun(conversation: conversation)
        live.attachFirst(session, json: json)
        try runs.withLock { runs in
            guard runs[conversation] == nil else {
                throw TermindError(.assistantInvalid, "Conversation \(conversation) has a run going; follow it with termind assistant attach \(conversation).")
            }
            runs[conversation] = (live, nil)
        }
        // Not a child of the request that started it: the run outlives its client (the chain
        // it serves is kept: an unstructured task inherits it).
        let task = Task { [self] in
            live.finish(await body(live))
            _ = runs.withLock { $0.removeValue(forKey: conversation) }
        }
        runs.withLock { runs in if runs[conversation]?.run === live { runs[conversation]?.task = task } }
        return live
    }

    func find(_ conversation: String) -> (run: LiveRun, task: Task<Void, Never>?)? { runs.withLock { $0[conversation] } }

    func cancel(_ conversation: String) { runs.withLock { $0[conversation]?.task?.cancel() } }

    func cancelAll() { runs.withLock { $0.values.forEach { $0.task?.cancel() } } }
}
