import Dispatch
import Foundation
import TerminalScreen
import WorkspacesRules

/// A durable session's screen (`TerminalScreen`), drawn on a queue of its own so that the
/// terminal's output reaches an attached client at full speed: libvterm draws about
/// 20 MiB/s, far less than a channel carries. Operations run in the order they were asked
/// for (output, resizes, redraws), so a redraw shows exactly the output queued before it.
///
/// Bounded: operations wait in one list (output appended to output waiting right before it,
/// so tiny chunks do not pile up as many entries), drained by one block at a time. When more
/// than `highWater` bytes of output wait, the oldest output goes down to `lowWater`, and the
/// screen carries on from the modes the session's own scanner saw at that point
/// (`TerminalScreen.resynchronize`), noting the gap. Output that fast scrolls past a person
/// anyway; the screen after it comes from what follows.
final class ScreenModel: @unchecked Sendable {
    static let highWater = 8 << 20
    static let lowWater = 1 << 20

    private enum Operation {
        /// Output, with the modes before it (for a resynchronization after a gap).
        case output(Data, modesBefore: TerminalModes)
        /// Output dropped: its size, and the modes after it.
        case gap(Int, modesAfter: TerminalModes)
        case resize(rows: Int, columns: Int)
        case run(@Sendable (TerminalScreen) -> Void)
    }

    private let queue = DispatchQueue(label: "termind.workspaces.screen", qos: .utility)
    /// Touched only on `queue`.
    private let screen: TerminalScreen

    private let lock = NSLock()
    private var waiting: [Operation] = []
    private var waitingBytes = 0
    private var draining = false

    init(rows: Int, columns: Int, scrollbackLines: Int) {
        screen = TerminalScreen(rows: rows, columns: columns, scrollbackLimit: scrollbackLines)
    }

    /// Queues output; `modes` are the terminal's modes just before it. Drawing starts at once,
    /// or with `kick()` when `drawLater` (the SSH engine, which writes the client's screen first).
    func feed(_ data: Data, modesBefore modes: TerminalModes, drawLater: Bool = false) {
        lock.withLock {
            if case .output? = waiting.last, case .output(var earlier, let before) = waiting.removeLast() {
                earlier.append(data)  // in place: taken out of the list, it has no other owner
                waiting.append(.output(earlier, modesBefore: before))
            } else {
                waiting.append(.output(data, modesBefore: modes))
            }
            waitingBytes += data.count
            if waitingBytes > Self.highWater { dropOldestOutput() }
        }
        if !drawLater { schedule() }
    }

    /// Starts drawing what `feed(drawLater:)` queued.
    func kick() { schedule() }

    /// Too far behind: the oldest output goes (under `lock`), the newest always stays.
    private func dropOldestOutput() {
        for index in waiting.indices.dropLast() where waitingBytes > Self.lowWater {
            guard case .output(let data, _) = waiting[index] else { continue }
            // The modes after it are the ones before the next output (or the newest's).
            let after = waiting[(index + 1)...].lazy.compactMap { operation -> TerminalModes? in
                if case .output(_, let modes) = operation { return modes } else { return nil }
            }.first ?? TerminalModes()
            waiting[index] = .gap(data.count, modesAfter: after)
            waitingBytes -= data.count
        }
    }

    func resize(rows: Int, columns: Int) {
        lock.withLock { waiting.append(.resize(rows: rows, columns: columns)) }
        schedule()
    }

    /// The bytes that paint the screen as the output queued so far left it (queued now,
    /// in order with the output: what is fed later is not in it).
    func redraw(scrollbackLines: Int?) -> Promise<[UInt8]> {
        let promise = Promise<[UInt8]>()
        lock.withLock { waiting.append(.run { promise.fulfill($0.redraw(scrollbackLines: scrollbackLines)) }) }
        schedule()
        return promise
    }

    /// The screen's rows as text, once the output queued so far is drawn.
    func lines() -> Promise<[String]> {
        let promise = Promise<[String]>()
        lock.withLock { waiting.append(.run { promise.fulfill($0.lines()) }) }
        schedule()
        return promise
    }

    /// One drain at a time, on the queue.
    private func schedule() {
        let start: Bool = lock.withLock {
            guard !draining, !waiting.isEmpty else { return false }
            draining = true
            return true
        }
        if start { queue.async { [self] in drain() } }
    }

    private func drain() {
        var skipped = 0
        while true {
            let next: Operation? = lock.withLock {
                guard !waiting.isEmpty else {
                    draining = false
                    return nil
                }
                let operation = waiting.removeFirst()
                if case .output(let data, _) = operation { waitingBytes -= data.count }
                return operation
            }
            guard let next else { return }
            switch next {
            case .output(let data, let modes):
                if skipped > 0 {
                    screen.resynchronize(modes: modes, skippedBytes: skipped)
                    skipped = 0
                }
                screen.feed(data)
            case .gap(let count, let modes):
                skipped += count
                // A gap with nothing after it yet: the screen takes the modes at its end now.
                if lock.withLock({ waiting.isEmpty }) {
                    screen.resynchronize(modes: modes, skippedBytes: skipped)
                    skipped = 0
                }
            case .resize(let rows, let columns):
                screen.resize(rows: rows, columns: columns)
            case .run(let body):
                body(screen)
            }
        }
    }
}
