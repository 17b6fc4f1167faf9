import Foundation
import Synchronization

/// One clock for every monitor of the process. Monitors wait for its instants instead of
/// timers of their own, and those that sample at the same interval wait for the same
/// instants (`SamplingGrid`): one wake-up then serves them all. With a timer each, 100 monitors at
/// 1 Hz woke the server at 100 scattered moments a second, and each wake was a thread
/// switch — most of a monitor's cost. The channel watchdogs are checked on its ticks too,
/// every `watchdogPeriod`, instead of by a task per channel.
///
/// It runs on a thread of its own; what fires is only a continuation's resume or a
/// watchdog's check, never a monitor's work.
///
/// `@unchecked Sendable`: every stored `var` (`timers`, `nextToken`, `watchdogs`,
/// `nextWatchdogCheck`, `running`) is read and written only under `condition`'s lock.
final class MonitorClock: @unchecked Sendable {
    static let shared = MonitorClock()
    static let watchdogPeriod: UInt64 = 2_000_000_000

    private let condition = NSCondition()
    private var timers: [UInt64: (deadline: UInt64, fire: @Sendable () -> Void)] = [:]
    private var nextToken: UInt64 = 0
    private var watchdogs: [ObjectIdentifier: WeakWatchdog] = [:]
    private var nextWatchdogCheck: UInt64 = 0
    private var running = false

    private struct WeakWatchdog { weak var watchdog: Watchdog? }

    /// Nanoseconds on the monotonic clock the deadlines are given in.
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }


    /// Calls `fire` on the clock's thread at `deadline`, unless `cancel` takes it first.
    func schedule(at deadline: UInt64, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        condition.withLock {
            nextToken += 1
            timers[nextToken] = (deadline, fire)
            startLocked()
            condition.signal()
            return nextToken
        }
    }

    /// Withdraws a timer; false when it has fired (or is firing) already.
    @discardableResult
    func cancel(_ token: UInt64) -> Bool {
        condition.withLock { timers.removeValue(forKey: token) != nil }
    }

    func watch(_ watchdog: Watchdog) {
        condition.withLock {
            watchdogs[ObjectIdentifier(watchdog)] = WeakWatchdog(watchdog: watchdog)
            if nextWatchdogCheck == 0 { nextWatchdogCheck = Self.now() + Self.watchdogPeriod }
            startLocked()
            condition.signal()
        }
    }

    func unwatch(_ watchdog: Watchdog) {
        condition.withLock { _ = watchdogs.removeValue(forKey: ObjectIdentifier(watchdog)) }
    }

    private func startLocked() {
        guard !running else { return }
        running = true
        let thread = Thread { [self] in loop() }
        thread.name = "termind.metrics.clock"
        thread.start()
    }

    private func loop() {
        while true {
            condition.lock()
            var due: [@Sendable () -> Void] = []
            var checks: [Watchdog] = []
            while due.isEmpty && checks.isEmpty {
                let now = Self.now()
                for (token, timer) in timers where timer.deadline <= now {
                    due.append(timer.fire)
                    timers[token] = nil
                }
                if !watchdogs.isEmpty, nextWatchdogCheck <= now {
                    checks = watchdogs.values.compactMap(\.watchdog)
                    watchdogs = watchdogs.filter { $0.value.watchdog != nil }
                    nextWatchdogCheck = now + Self.watchdogPeriod
                }
                guard due.isEmpty && checks.isEmpty else { break }
                let next = ([watchdogs.isEmpty ? nil : nextWatchdogCheck] + timers.values.map(\.deadline)).compactMap { $0 }.min()
                if let next {
                    let seconds = Double(next - min(next, now)) / 1e9
                    _ = condition.wait(until: Date().addingTimeInterval(seconds))
                } else {
                    condition.wait()
                }
            }
            condition.unlock()
            for fire in due { fire() }
            for watchdog in checks { watchdog.check() }
        }
    }
}
