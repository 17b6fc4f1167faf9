import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import WorkspacesAPI

/// The durable sessions of one `termind serve`, by number (1, 2, …, never reused while the
/// server runs). Ended sessions stay listed for `keepEnded` seconds (at most 16 of them), so
/// that `termind sessions` and `termind attach` can say how a session ended.
actor SessionRegistry {
    static let keepEnded: TimeInterval = 600
    static let endedLimit = 16

    private var nextID = 1
    private var sessions: [Int: DurableSession] = [:]
    private var endedAt: [Int: Date] = [:]

    /// The number the next session gets.
    func reserveID() -> Int {
        defer { nextID += 1 }
        return nextID
    }

    func add(_ session: DurableSession) {
        sessions[session.id] = session
        Task { [weak self] in
            await session.ended.value
            await self?.noteEnded(session.id)
        }
    }

    private func noteEnded(_ id: Int) {
        endedAt[id] = Date()
        prune()
    }

    private func prune(now: Date = Date()) {
        for (id, date) in endedAt where now.timeIntervalSince(date) > Self.keepEnded {
            sessions[id] = nil
            endedAt[id] = nil
        }
        let surplus = endedAt.count - Self.endedLimit
        if surplus > 0 {
            for (id, _) in endedAt.sorted(by: { $0.value < $1.value }).prefix(surplus) {
                sessions[id] = nil
                endedAt[id] = nil
            }
        }
    }

    func session(_ id: Int) throws -> DurableSession {
        prune()
        guard let session = sessions[id] else {
            let open = sessions.values.filter { !$0.isEnded }.map(\.id).sorted()
            throw TermindError(.workspacesNoSession, "There is no session \(id)"
                + (open.isEmpty ? "; no session is open (termind ssh HOST opens one)." : " (open: \(open.map(String.init).joined(separator: ", ")); termind sessions lists them)."))
        }
        return session
    }

    /// The live session of a workspace pane, on the same host: the one `workspace open`
    /// attaches to instead of opening another.
    func session(workspace: String, pane: Int, host: String) -> DurableSession? {
        sessions.values.filter { !$0.isEnded && $0.pane.map { $0.workspace == workspace && $0.pane == pane && $0.host == host } == true }
            .min { $0.id < $1.id }
    }

    /// The running sessions of a workspace's panes (by name), in pane order.
    func sessions(ofWorkspace name: String) -> [DurableSession] {
        sessions.values.filter { !$0.isEnded && $0.pane?.name.lowercased() == name.lowercased() }
            .sorted { ($0.pane?.pane ?? 0, $0.id) < ($1.pane?.pane ?? 0, $1.id) }
    }

    func list() -> [WorkspacesContracts.SessionInfo] {
        prune()
        let now = Date()
        return sessions.values.sorted { $0.id < $1.id }.map { $0.info(now: now) }
    }

    /// Ends every session (the server stops): each remote shell is hung up, and this waits
    /// until their channels have closed (`seconds` at most).
    func closeAll(seconds: Double = 3) async {
        let open = sessions.values.filter { !$0.isEnded }
        for session in open { session.close(because: "termind serve is stopping") }
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !open.allSatisfy(\.isEnded) {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// Which workspace pane a durable session belongs to.
struct PaneTag: Sendable, Equatable {
    /// The workspace record's id (a batch of `--hosts` gets one of its own).
    let workspace: String
    /// Its name, for `termind sessions` and broadcast.
    let name: String
    /// From 1.
    let pane: Int
    /// The saved host's id, or the target as given.
    let host: String
}
