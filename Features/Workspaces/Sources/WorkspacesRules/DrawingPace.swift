/// When a durable session's screen model draws the output that waits for it: once the output
/// paused (nothing new for `quiet`), or when nothing was drawn for `stale` — not while a flood
/// pours in. Drawing (libvterm, on a thread of its own at idle priority) costs far more per
/// byte than moving the bytes, and on a small machine even an idle-priority thread takes
/// the moments the data path waits for a wake-up: 100 MiB through a durable session ran at
/// 60-100 MiB/s with the screen drawn along, 79-106 without (3 runs of 3 each). What waits
/// meanwhile is bounded
/// (`ScreenBacklog` drops the oldest output), and an operation that needs the screen (a
/// redraw, the lines, a resize) is drawn up to at once whatever the pace says.
///
/// Times are a monotonic clock's nanoseconds.
public struct DrawingPace: Sendable, Equatable {
    public let quiet: UInt64
    public let stale: UInt64
    private var lastFeed: UInt64?
    private var lastDraw: UInt64?

    public init(quietNanoseconds: UInt64 = 20_000_000, staleNanoseconds: UInt64 = 1_000_000_000) {
        quiet = quietNanoseconds
        stale = staleNanoseconds
    }

    /// Output was queued at `now`.
    public mutating func fed(at now: UInt64) {
        lastFeed = now
        if lastDraw == nil { lastDraw = now }  // the first output starts the stale clock
    }

    /// Output was taken to be drawn at `now`.
    public mutating func drew(at now: UInt64) { lastDraw = now }

    /// Whether waiting output may be drawn at `now` (an operation waiting behind it always
    /// lets it: `operationWaiting`).
    public func mayDraw(at now: UInt64, operationWaiting: Bool) -> Bool {
        if operationWaiting { return true }
        guard let lastFeed else { return true }
        if now &- lastFeed >= quiet { return true }
        return now &- (lastDraw ?? lastFeed) >= stale
    }
}
