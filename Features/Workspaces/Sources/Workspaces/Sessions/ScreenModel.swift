import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TerminalScreen
import WorkspacesRules

/// A durable session's screen (`TerminalScreen`), drawn on a thread of its own at a lower
/// priority than the data path (`DrawingThread`) so that the terminal's output reaches an
/// attached client at full speed: libvterm draws about 20 MiB/s, far less than a channel
/// carries, and on a busy machine its core would otherwise be taken from the data path.
/// Output is drawn once it pauses (`DrawingPace`), not while a flood pours in. Operations run
/// in the order they were asked for (output, resizes, redraws), so a redraw shows exactly the
/// output queued before it.
///
/// Bounded (`ScreenBacklog`): when more than 8 MiB of output wait, the oldest output goes
/// down to 1 MiB, and the screen carries on from the modes the session's own scanner saw at
/// that point (`TerminalScreen.resynchronize`), noting the gap. Output that fast scrolls past
/// a person anyway; the screen after it comes from what follows. Once the session ended
/// (`stop`), nothing more is drawn.
///
/// `@unchecked Sendable`: `waiting`, `pace`, `draining` and `stopped` are touched only under
/// `lock`; `screen` only on `drawer`'s thread, by `drain`, of which one runs at a time.
final class ScreenModel: @unchecked Sendable {
    private enum Operation: Sendable {
        case resize(rows: Int, columns: Int)
        case run(@Sendable (TerminalScreen) -> Void)
    }

    private let drawer = DrawingThread()
    /// Touched only on `drawer`.
    private let screen: TerminalScreen

    private let lock = PlainLock()
    private var waiting = ScreenBacklog<Operation>()
    /// Output is drawn once it pauses, not while a flood pours in (`DrawingPace`).
    private var pace = DrawingPace()
    private var draining = false
    private var stopped = false

    init(rows: Int, columns: Int, scrollbackLines: Int) {
        screen = TerminalScreen(rows: rows, columns: columns, scrollbackLimit: scrollbackLines)
    }

    deinit { drawer.stop() }

    /// Queues output; `modes` are the terminal's modes just before it. It is drawn once
    /// `kick()` says so (the SSH engine writes the client's screen first).
    func feed(_ data: Data, modesBefore modes: TerminalModes) {
        let now = DispatchTime.now().uptimeNanoseconds
        lock.withLock {
            guard !stopped else { return }
            waiting.feed(data, modesBefore: modes)
            pace.fed(at: now)
        }
    }

    /// Starts drawing what `feed` queued (when no drain runs). A drain that lingers is not
    /// woken for it: it draws once the output pauses (`DrawingPace`), so that a person's
    /// typing asks no wake-up per key between writing their echo and going back to poll(),
    /// and a flood none per chunk.
    func kick() { schedule(urgent: false) }

    /// How long the drawing thread waits for more output after it drew everything, and
    /// between looks while output pours in.
    static let lingerSeconds = 0.25

    /// The session ended: output that waits is not drawn, nor any that comes (nobody can
    /// attach to see it); redraws and line requests still answer.
    func stop() {
        lock.withLock {
            stopped = true
            waiting.discardOutput()
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

    /// Starts the drawing thread on what waits (one drain at a time); an `urgent` operation (a
    /// redraw, the lines, a resize) also ends its lingering at once.
    private func schedule(urgent: Bool = true) {
        let start: Bool? = lock.withLock {
            guard !waiting.isEmpty else { return false }
            if draining { return urgent ? nil : false }
            draining = true
            return true
        }
        switch start {
        case true?: drawer.async { [self] in drain() }
        case nil: drawer.poke()
        default: break
        }
    }

    private func drain() {
        var skipped = 0
        var lingered = false
        while true {
            enum Step { case entry(ScreenBacklog<Operation>.Entry), paced, empty, done }
            let now = DispatchTime.now().uptimeNanoseconds
            let step: Step = lock.withLock {
                if !waiting.isEmpty {
                    // Output waits until it pauses (or went undrawn too long), unless an
                    // operation waits behind it.
                    guard pace.mayDraw(at: now, operationWaiting: waiting.operationsWaiting > 0) else { return .paced }
                    guard let entry = waiting.next() else {
                        draining = false
                        return .done
                    }
                    if case .output = entry { pace.drew(at: now) }
                    return .entry(entry)
                }
                if lingered || stopped {
                    draining = false
                    return .done
                }
                return .empty
            }
            let next: ScreenBacklog<Operation>.Entry
            switch step {
            case .done: return
            case .empty:
                // Nothing now: wait a moment for more.
                lingered = true
                drawer.linger(Self.lingerSeconds)
                continue
            case .paced:
                lingered = false
                drawer.linger(Self.lingerSeconds)
                continue
            case .entry(let entry): next = entry
            }
            lingered = false
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
            case .other(.resize(let rows, let columns)):
                screen.resize(rows: rows, columns: columns)
            case .other(.run(let body)):
                body(screen)
            }
        }
    }
}

/// One durable session's drawing thread: work runs in order, on CPU time nothing else wants
/// (SCHED_IDLE), so that on a busy machine the screen model falls behind (and drops output,
/// bounded: `ScreenBacklog`) rather than the data path. Ends once stopped and drained.
final class DrawingThread: Sendable {
    /// The work queued in order, whether the thread is to end once it is done, and whether
    /// a `poke` came.
    private let queue = ConditionLock(Queue())
    private struct Queue {
        var work: [@Sendable () -> Void] = []
        var stopped = false
        var poked = false
    }

    init() {
        let thread = SystemThread.named("termind.screen") { [self] in run() }
        thread.start()
    }

    func async(_ body: @escaping @Sendable () -> Void) {
        queue.withLock { $0.work.append(body) }
        queue.signal()
    }

    func stop() {
        queue.withLock { $0.stopped = true }
        queue.signal()
    }

    /// From the work running on this thread: waits up to `seconds`, or until `poke` or `stop`.
    func linger(_ seconds: Double) {
        var waited = false
        queue.wait { q, _ -> ConditionLock<Queue>.Step<Void> in
            if !q.poked && !q.stopped && !waited {
                waited = true
                return .waitAtMost(seconds: seconds)
            }
            q.poked = false
            return .done(())
        }
    }

    /// Ends a `linger` now (or the next one, if none waits yet).
    func poke() {
        queue.withLock { $0.poked = true }
        queue.signal()
    }

    private func run() {
        // SCHED_IDLE: this thread runs on CPU time nothing else wants (no privilege needed to
        // lower a thread's own class); nice 19 where that is refused.
        var parameters = sched_param()
        let schedIdle: Int32 = 5  // SCHED_IDLE (linux/sched.h), which Glibc's module leaves out
        if pthread_setschedparam(pthread_self(), schedIdle, &parameters) != 0 {
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)  // who 0: this thread only, on Linux
        }
        while true {
            let next = queue.withLock(whenever: { !$0.work.isEmpty || $0.stopped }) { q in
                q.work.isEmpty ? nil : q.work.removeFirst()
            }
            guard let next else { return }
            next()
        }
    }
}
