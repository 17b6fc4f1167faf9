import Dispatch
import Foundation
import TerminalScreen
import WorkspacesRules

/// A durable session's screen (`TerminalScreen`), fed on a serial queue of its own so that
/// the terminal's output reaches an attached client at full speed: libvterm draws about
/// 20 MiB/s, far less than a channel carries. Operations run in the order they were queued
/// (output, resizes, redraws), so a redraw shows exactly the output queued before it.
///
/// Bounded: when more than `highWater` bytes of output wait, the oldest are dropped down to
/// `lowWater` (their memory at once), and the screen carries on from the modes the session's
/// own scanner saw at that point (`TerminalScreen.resynchronize`), noting the gap. Output
/// that fast scrolls past a person anyway; the screen after it comes from what follows.
final class ScreenModel: @unchecked Sendable {
    static let highWater = 8 << 20
    static let lowWater = 1 << 20

    private let queue = DispatchQueue(label: "termind.workspaces.screen", qos: .utility)
    /// Touched only on `queue`.
    private let screen: TerminalScreen
    /// Dropped output not yet noted on the screen (touched only on `queue`).
    private var skipped = 0

    private let lock = NSLock()
    private var waiting: [Pending] = []
    private var waitingBytes = 0

    /// Output queued for the screen; emptied when dropped.
    private final class Pending: @unchecked Sendable {
        var data: Data?
        let count: Int
        /// The modes before this output, as the session's scanner saw them.
        let modes: TerminalModes
        init(data: Data, modes: TerminalModes) {
            self.data = data
            self.count = data.count
            self.modes = modes
        }
    }

    init(rows: Int, columns: Int, scrollbackLines: Int) {
        screen = TerminalScreen(rows: rows, columns: columns, scrollbackLimit: scrollbackLines)
    }

    /// Queues output; `modes` are the terminal's modes just before it.
    func feed(_ data: Data, modesBefore modes: TerminalModes) {
        let pending = Pending(data: data, modes: modes)
        lock.withLock {
            waiting.append(pending)
            waitingBytes += pending.count
            guard waitingBytes > Self.highWater else { return }
            // Too far behind: the oldest go (the newest chunk always stays).
            var drop = 0
            while waitingBytes > Self.lowWater, drop < waiting.count - 1 {
                waiting[drop].data = nil
                waitingBytes -= waiting[drop].count
                drop += 1
            }
            waiting.removeFirst(drop)
        }
        queue.async { [self] in
            let data: Data? = lock.withLock {
                guard let data = pending.data else { return nil }
                pending.data = nil
                if waiting.first === pending { waiting.removeFirst() }
                waitingBytes -= pending.count
                return data
            }
            guard let data else {
                skipped += pending.count
                return
            }
            if skipped > 0 {
                screen.resynchronize(modes: pending.modes, skippedBytes: skipped)
                skipped = 0
            }
            screen.feed(data)
        }
    }

    func resize(rows: Int, columns: Int) {
        queue.async { [self] in screen.resize(rows: rows, columns: columns) }
    }

    /// The bytes that paint the screen as the output queued so far left it (queued now,
    /// in order with the output: what is fed later is not in it).
    func redraw(scrollbackLines: Int?) -> Promise<[UInt8]> {
        let promise = Promise<[UInt8]>()
        queue.async { [self] in promise.fulfill(screen.redraw(scrollbackLines: scrollbackLines)) }
        return promise
    }

    /// What resets a client's terminal from the modes the screen is in (it leaves the session).
    func resetSequences() -> Promise<String> {
        let promise = Promise<String>()
        queue.async { [self] in promise.fulfill(screen.modes.resetSequences) }
        return promise
    }

    /// The screen's rows as text, once the output queued so far is drawn.
    func lines() -> Promise<[String]> {
        let promise = Promise<[String]>()
        queue.async { [self] in promise.fulfill(screen.lines()) }
        return promise
    }
}
