import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI

/// A host's recent history: the headline figures of each sample (a few dozen bytes each),
/// in a ring that holds five minutes at the sampling interval, in memory only. The full
/// latest sample is kept beside it by the monitor; older full samples are never kept.
public struct History: Sendable {
    public struct Point: Sendable, Equatable {
        public var takenAt: Double
        /// Percent, or nil when unknown.
        public var cpu: Float?
        public var memory: Float?
        /// Bytes per second over the shown interfaces, and the busiest disk's busy percent.
        public var network: Float?
        public var disk: Float?
        /// Each GPU's utilization, in the sample's GPU order (at most 16).
        public var gpus: [Float?]
    }

    public static let window: Double = 300
    public private(set) var capacity: Int
    private var points: [Point] = []
    private var next = 0

    /// - Parameter interval: seconds between samples (1 to 60).
    public init(interval: Double) {
        capacity = Self.capacity(interval)
        points.reserveCapacity(capacity)
    }

    static func capacity(_ interval: Double) -> Int {
        let seconds = interval.isFinite ? min(60, max(1, interval)) : 2
        return Int((Self.window / seconds).rounded(.up)) + 1
    }

    public var count: Int { points.count }

    /// Oldest first.
    public var all: [Point] {
        points.count < capacity ? points : Array(points[next...] + points[..<next])
    }

    /// The newest `n` points, oldest first (what a sparkline shows), without copying the ring.
    public func recent(_ n: Int) -> [Point] {
        let n = min(max(0, n), points.count)
        guard points.count == capacity else { return Array(points.suffix(n)) }
        return (0..<n).map { points[(next - n + $0 + capacity) % capacity] }
    }

    public mutating func append(_ sample: MetricsSample) {
        let rates = sample.network.map { i in i.receive.flatMap { rx in i.transmit.map { rx + $0 } } }
        let point = Point(takenAt: sample.takenAt, cpu: sample.cpu?.total.busy.map { Float($0) },
                          memory: sample.memory.flatMap { m in m.used.map { m.total > 0 ? Float(Double($0) / Double(m.total) * 100) : 0 } },
                          network: rates.isEmpty || rates.contains(nil) ? nil : Float(rates.compactMap { $0 }.reduce(0, +)),
                          disk: sample.disks.compactMap(\.busy).max().map { Float($0) },
                          gpus: (sample.gpus ?? []).prefix(16).map { $0.utilization.map { Float($0) } })
        if points.count < capacity {
            points.append(point)
        } else {
            points[next] = point
            next = (next + 1) % capacity
        }
    }

    /// A changed interval keeps the newest points that fit the new capacity.
    public mutating func resize(interval: Double) {
        let newCapacity = Self.capacity(interval)
        guard newCapacity != capacity else { return }
        let kept = Array(all.suffix(newCapacity))
        capacity = newCapacity
        points = kept
        points.reserveCapacity(capacity)
        next = 0
    }

    public mutating func removeAll() {
        points.removeAll(keepingCapacity: true)
        next = 0
    }

    /// A sparkline of the last `width` values: one block character per point, scaled to
    /// `maximum` (nil: the largest value shown); unknown values are a space.
    public static func sparkline(_ values: [Float?], width: Int, maximum: Float? = nil) -> String {
        let blocks: [Character] = ["▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]
        let shown = values.suffix(width)
        let top = maximum ?? shown.compactMap { $0 }.max() ?? 0
        return String(shown.map { value -> Character in
            guard let value, value.isFinite else { return " " }
            guard top > 0 else { return blocks[0] }
            let index = Int((min(max(value / top, 0), 1) * Float(blocks.count - 1)).rounded())
            return blocks[index]
        })
    }
}
