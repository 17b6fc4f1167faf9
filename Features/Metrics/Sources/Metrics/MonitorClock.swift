import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// One clock for every monitor of the process. Monitors wait for its instants instead of
/// timers of their own, and those that sample at the same interval wait for the same
/// instants (`SamplingGrid`): one wake-up then serves them all. With a timer each, 100 monitors at
/// 1 Hz woke the server at 100 scattered moments a second, and each wake was a thread
/// switch — most of a monitor's cost. The channel watchdogs are checked on its ticks too,
/// every `watchdogPeriod`, instead of by a task per channel.
///
/// It runs on a thread of its own; what fires is only a continuation's resume or a
/// watchdog's check, never a monitor's work.
final class MonitorClock: Sendable {
    static let shared = MonitorClock()
    static let watchdogPeriod: UInt64 = 2_000_000_000

    private let clock = ConditionLock(Timers())

    /// The timers and watchdogs waiting, and whether the clock's thread runs.
    private struct Timers {
        var timers: [UInt64: (deadline: UInt64, fire: @Sendable () -> Void)] = [:]
        var nextToken: UInt64 = 0
        var watchdogs: [ObjectIdentifier: WeakWatchdog] = [:]
        var nextWatchdogCheck: UInt64 = 0
        var running = false
    }

    private struct WeakWatchdog: Sendable { weak var watchdog: Watchdog? }

    /// Nanoseconds on the monotonic clock the deadlines are given in.
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }


    /// Calls `fire` on the clock's thread at `deadline`, unless `cancel` takes it first.
    func schedule(at deadline: UInt64, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        let token = clock.withLock { c in
            c.nextToken += 1
            c.timers[c.nextToken] = (deadline, fire)
            startIfStopped(&c)
            return c.nextToken
        }
        clock.signal()
        return token
    }

    /// Withdraws a timer; false when it has fired (or is firing) already.
    @discardableResult
    func cancel(_ token: UInt64) -> Bool {
        clock.withLock { $0.timers.removeValue(forKey: token) != nil }
    }

    func watch(_ watchdog: Watchdog) {
        clock.withLock { c in
            c.watchdogs[ObjectIdentifier(watchdog)] = WeakWatchdog(watchdog: watchdog)
            if c.nextWatchdogCheck == 0 { c.nextWatchdogCheck = Self.now() + Self.watchdogPeriod }
            startIfStopped(&c)
        }
        clock.signal()
    }

    func unwatch(_ watchdog: Watchdog) {
        clock.withLock { _ = $0.watchdogs.removeValue(forKey: ObjectIdentifier(watchdog)) }
    }

    private func startIfStopped(_ c: inout Timers) {
        guard !c.running else { return }
        c.running = true
        let thread = SystemThread.named("termind.metrics.clock") { [self] in loop() }
        thread.start()
    }

    private func loop() {
        while true {
            let (due, checks) = clock.wait { c, _ -> ConditionLock<Timers>.Step<([@Sendable () -> Void], [Watchdog])> in
                let now = Self.now()
                var due: [@Sendable () -> Void] = []
                var checks: [Watchdog] = []
                for (token, timer) in c.timers where timer.deadline <= now {
                    due.append(timer.fire)
                    c.timers[token] = nil
                }
                if !c.watchdogs.isEmpty, c.nextWatchdogCheck <= now {
                    checks = c.watchdogs.values.compactMap(\.watchdog)
                    c.watchdogs = c.watchdogs.filter { $0.value.watchdog != nil }
                    c.nextWatchdogCheck = now + Self.watchdogPeriod
                }
                guard due.isEmpty && checks.isEmpty else { return .done((due, checks)) }
                let next = ([c.watchdogs.isEmpty ? nil : c.nextWatchdogCheck] + c.timers.values.map(\.deadline)).compactMap { $0 }.min()
                guard let next else { return .wait }
                return .waitAtMost(seconds: Double(next - min(next, now)) / 1e9)
            }
            for fire in due { fire() }
            for watchdog in checks { watchdog.check() }
        }
    }
}
