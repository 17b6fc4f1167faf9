import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import TransferRules

/// The one scheduler of the process for file data (seed, "One process scheduler"): every
/// file of every transfer — each `termind get`/`put`/`cp` run is a source — waits here for a
/// slot by `FairQueue`'s rule, with the limits of the `sftp.limits` settings record read at
/// each admission. It also keeps the rows `termind transfers` lists and passes their
/// pause/resume/cancel to the run that moves the file. Listing, stat and the other metadata
/// never come here. Memory only: nothing of it outlives the process.
actor TransferScheduler {
    typealias Row = SFTPContracts.TransferRow
    enum Control: Sendable { case pause, cancel }

    private struct Slot {
        var row: Row
        /// The saved hosts (ids) it reaches: deleting one cancels it.
        var savedHosts: Set<String> = []
        /// The run's file task waits here for admission (or for a resume).
        var waiter: CheckedContinuation<Void, Error>?
        /// Tells the file's task to stop (pause keeps the partial; cancel removes it).
        var control: (@Sendable (Control) -> Void)?
        /// Resumed, and its run has not yet said whether its checks passed (`checked`) or
        /// stopped it: `termind transfers resume` waits for that, to report it.
        var checking = false
        var checkWaiters: [CheckedContinuation<Row, Never>] = []
    }

    private var queue = FairQueue<UInt64>()
    private var slots: [UInt64: Slot] = [:]
    private var nextID: UInt64 = 0
    private let limits: @Sendable () async -> FairQueue<UInt64>.Limits
    /// Finished rows stay listed a while (the last 200), then go.
    private var finished: [UInt64] = []

    init(limits: @escaping @Sendable () async -> FairQueue<UInt64>.Limits) {
        self.limits = limits
    }

    /// A new row, queued for admission under `hosts` (the first rotates) from `source`.
    func submit(source: String, hosts: [String], savedHosts: Set<String> = [], from: String, to: String, size: UInt64?) -> UInt64 {
        nextID += 1
        let row = Row(id: "t\(nextID)", state: .queued, source: source, from: from, to: to, size: size, done: 0, hosts: hosts)
        slots[nextID] = Slot(row: row, savedHosts: savedHosts)
        queue.enqueue(nextID, hosts: hosts, source: source)
        return nextID
    }

    /// Waits until `id` may move data (now, or after a resume). Throws CancellationError when
    /// it is cancelled meanwhile — by `termind transfers cancel` or its run's task.
    func admission(_ id: UInt64, control: @escaping @Sendable (Control) -> Void) async throws {
        slots[id]?.control = control
        await admit()
        guard let slot = slots[id], slot.row.state == .queued || slot.row.state == .paused else {
            if slots[id]?.row.state == .cancelled { throw CancellationError() }
            return
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                if Task.isCancelled || slots[id] == nil || slots[id]?.row.state == .cancelled {
                    continuation.resume(throwing: CancellationError())
                } else if slots[id]?.row.state == .active {
                    continuation.resume()
                } else {
                    slots[id]?.waiter = continuation
                }
            }
        } onCancel: {
            Task { await self.cancelled(id) }
        }
    }

    private func cancelled(_ id: UInt64) {
        guard var slot = slots[id], slot.row.state == .queued || slot.row.state == .paused else { return }
        queue.remove(id)
        slot.row.state = .cancelled
        let waiter = slot.waiter
        slot.waiter = nil
        slots[id] = slot
        waiter?.resume(throwing: CancellationError())
    }

    private func admit() async {
        let limits = await self.limits()
        for id in queue.admit(limits) {
            guard var slot = slots[id] else { queue.finish(id); continue }
            slot.row.state = .active
            if slot.row.started == nil { slot.row.started = Date().timeIntervalSince1970 }
            let waiter = slot.waiter
            slot.waiter = nil
            slots[id] = slot
            waiter?.resume()
        }
    }

    /// Bytes done by active rows (from their runs' progress boards).
    func progress(_ rows: [UInt64: UInt64]) {
        for (id, done) in rows where slots[id]?.row.state == .active { slots[id]?.row.done = done }
    }

    /// The file stopped moving data: paused (its slot frees; it waits for a resume), or
    /// ended in `state` (done, skipped, failed, cancelled). `kept`: the bytes a paused file
    /// keeps (its row says them, however long ago its progress was last looked at).
    func stopped(_ id: UInt64, _ state: Row.State, error: String? = nil, kept: UInt64? = nil) async {
        guard var slot = slots[id] else { return }
        if state == .paused {
            queue.remove(id)
        } else {
            queue.finish(id)
            finished.append(id)
            if finished.count > 200 { slots[finished.removeFirst()] = nil }
            slot.control = nil
        }
        slot.row.state = state
        slot.row.error = error
        if state == .done, let size = slot.row.size { slot.row.done = size }
        if state == .paused, let kept { slot.row.done = kept }
        // A resume waiting for the checks hears how the file stopped instead.
        let waiters = slot.checkWaiters
        slot.checking = false
        slot.checkWaiters = []
        slots[id] = slot
        for waiter in waiters { waiter.resume(returning: slot.row) }
        await admit()
    }

    /// The run's checks before moving more bytes passed (or there were none): the file moves.
    func checked(_ id: UInt64) {
        guard var slot = slots[id], slot.checking else { return }
        let waiters = slot.checkWaiters
        slot.checking = false
        slot.checkWaiters = []
        slots[id] = slot
        for waiter in waiters { waiter.resume(returning: slot.row) }
    }

    // MARK: - termind transfers

    func list() -> [Row] {
        slots.keys.sorted().compactMap { slots[$0]?.row }
    }

    private func find(_ text: String) throws -> UInt64 {
        let digits = text.hasPrefix("t") ? String(text.dropFirst()) : text
        guard let id = UInt64(digits), slots[id] != nil else {
            throw TransferFailure("No transfer \(text) in this process (termind transfers lists them; finished ones go after a while).")
        }
        return id
    }

    func pause(_ text: String) async throws -> Row {
        let id = try find(text)
        guard let slot = slots[id] else { throw TransferFailure("No transfer \(text).") }
        switch slot.row.state {
        case .active:
            slot.control?(.pause)  // the file's task stops, keeps its partial and reports `paused`
        case .queued:
            queue.remove(id)
            slots[id]?.row.state = .paused
        case .paused:
            break
        default:
            throw TransferFailure("\(slot.row.id) has ended (\(slot.row.state.rawValue)); only queued or active transfers pause.")
        }
        return slots[id]!.row
    }

    /// Queues a paused file again. When it is admitted at once, waits for its run's checks
    /// (source unchanged, partial there, the same SHA-256 of the prefix on both sides) and
    /// returns the row as they left it: active (moving), or failed with the reason, so the
    /// resume can report a refusal. A file that must wait for a slot is returned queued (its
    /// checks run when it starts; the get/put that owns it reports them).
    func resume(_ text: String) async throws -> Row {
        let id = try find(text)
        guard let slot = slots[id], slot.row.state == .paused else {
            throw TransferFailure("\(text) is \(slots[id]?.row.state.rawValue ?? "gone"), not paused; only a paused transfer resumes.")
        }
        slots[id]?.row.state = .queued
        slots[id]?.row.error = nil
        slots[id]?.checking = true
        queue.enqueue(id, hosts: slot.row.hosts, source: slot.row.source)
        await admit()
        let row = slots[id]?.row ?? slot.row
        guard row.state == .active else { return row }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Row, Never>) in
            if let now = slots[id], now.checking, now.row.state == .active {
                slots[id]?.checkWaiters.append(continuation)
            } else {
                continuation.resume(returning: slots[id]?.row ?? row)
            }
        }
    }

    /// A saved host was deleted (or a host its route runs through): every file that reaches
    /// it is cancelled, its partial removed by its run. Returns the rows cancelled.
    @discardableResult
    func cancel(savedHosts gone: Set<String>) async -> [String] {
        let hit = slots.filter { !$0.value.savedHosts.isDisjoint(with: gone) && [.queued, .active, .paused].contains($0.value.row.state) }.map(\.value.row.id)
        for id in hit { _ = try? await cancel(id) }
        return hit
    }

    func cancel(_ text: String) async throws -> Row {
        let id = try find(text)
        guard let slot = slots[id] else { throw TransferFailure("No transfer \(text).") }
        switch slot.row.state {
        case .active:
            slot.control?(.cancel)
        case .queued, .paused:
            if slot.waiter != nil {
                cancelled(id)
            } else {
                // A paused file whose task waits for its resume hears it there.
                queue.remove(id)
                slots[id]?.row.state = .cancelled
                slot.control?(.cancel)
            }
        default:
            throw TransferFailure("\(slot.row.id) has ended (\(slot.row.state.rawValue)).")
        }
        return slots[id]!.row
    }
}

/// A transfer control that could not be done (an unknown id, a row in the wrong state).
struct TransferFailure: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
