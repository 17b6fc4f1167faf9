import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import WorkspacesAPI
import WorkspacesRules

/// Turns one session's shell marks into history rows: a command's line from its start
/// (OSC 133 C), its status and duration from its end (D), the folder it ran in from the
/// last OSC 7 before it. A command the shell gave no line for is not kept. Rows are written
/// in order off the session's data path, by one writer, those waiting together in one
/// transaction; at most `pendingLimit` wait (a host printing marks faster than they can be
/// written loses the newest beyond that, said once in the log). A failed write is logged by
/// its code only (never the command) and the session goes on.
final class HistoryRecorder: Sendable {
    private let store: HistoryStore
    private let host: String
    private let logger: Logger
    static let pendingLimit = 1000

    private struct State {
        var directory: String?
        /// The running command: its line (nil: the shell gave none) and its folder.
        var running: (line: String?, directory: String?)?
        var pending: [WorkspacesContracts.HistoryEntry] = []
        var writer: Task<Void, Never>?
        var droppedSaid = false
    }
    private let state = Mutex(State())

    init(store: HistoryStore, host: String, logger: Logger) {
        self.store = store
        self.host = host
        self.logger = logger
    }

    func take(_ marks: [TerminalMark]) {
        for mark in marks {
            switch mark {
            case .workingDirectory(let path):
                state.withLock { $0.directory = path }
            case .commandExecuted(let line):
                state.withLock { $0.running = (line, $0.directory) }
            case .commandFinished(let status, let duration):
                let finished: (line: String?, directory: String?)? = state.withLock { state in
                    defer { state.running = nil }
                    return state.running
                }
                guard let finished, let line = finished.line.map(HistoryText.normalized), !line.trimmedWhitespace.isEmpty else { continue }
                let entry = WorkspacesContracts.HistoryEntry(command: line, exitStatus: status.map { Int32(truncatingIfNeeded: $0) },
                                                             durationMilliseconds: duration, directory: finished.directory,
                                                             finished: DurableSession.timestamp(Date()))
                write(entry)
            default:
                break
            }
        }
    }

    private func write(_ entry: WorkspacesContracts.HistoryEntry) {
        let sayDropped: Bool = state.withLock { state in
            guard state.pending.count < Self.pendingLimit else {
                defer { state.droppedSaid = true }
                return !state.droppedSaid
            }
            state.pending.append(entry)
            // The writer is started and recorded in one step: it clears itself only once it
            // found nothing waiting, under this lock.
            if state.writer == nil { state.writer = Task { await self.drain() } }
            return false
        }
        if sayDropped { logger.warning("workspaces.history.dropped", ["waiting": .int(Self.pendingLimit)]) }
    }

    /// Writes what waits, a batch per transaction, until nothing does.
    private func drain() async {
        while true {
            let batch: [WorkspacesContracts.HistoryEntry] = state.withLock { state in
                defer { state.pending.removeAll() }
                if state.pending.isEmpty { state.writer = nil }
                return state.pending
            }
            guard !batch.isEmpty else { return }
            do { try await store.record(host: host, batch) } catch {
                logger.warning("workspaces.history.write_failed", ["code": .identifier(TermindError.from(error).code)])
            }
        }
    }

    /// Waits until every row taken so far is written.
    func flush() async {
        while let writer = state.withLock({ $0.writer }) { await writer.value }
    }
}
