/// When a monitor samples next: on a grid of its interval shared by every monitor of the
/// process (instants that are multiples of the period on one monotonic clock), so monitors
/// with the same interval wake together and one wake-up serves them all (MonitorClock).
public enum SamplingGrid {
    /// The grid instant nearest to `started + period` (nanoseconds): the same instants for
    /// every monitor on this period, never sooner than half a period after `started`, never
    /// later than one and a half periods after it.
    public static func next(after started: UInt64, period: UInt64) -> UInt64 {
        guard period > 0 else { return started }
        let (target, overflow) = started.addingReportingOverflow(period)
        guard !overflow else { return UInt64.max }
        return target / period * period + (target % period >= period - period / 2 ? period : 0)
    }
}
