/// A hybrid logical clock stamp (Kulkarni et al., "Logical Physical Clocks"): the wall time in
/// milliseconds a device saw, a counter for events within one millisecond or while the wall
/// clock is behind a stamp already seen, and the device that made it. The order is total —
/// wall, then counter, then device — so every device ranks two stamps the same way and the
/// device id breaks what would otherwise be a tie.
public struct HLC: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var wall: Int64
    public var counter: Int32
    public var device: String

    public init(wall: Int64, counter: Int32, device: String) {
        self.wall = wall
        self.counter = counter
        self.device = device
    }

    public static func < (a: HLC, b: HLC) -> Bool {
        (a.wall, a.counter, a.device) < (b.wall, b.counter, b.device)
    }

    /// `WALL-COUNTER-DEVICE`, wall and counter fixed-width so the text sorts as the stamp does.
    public var description: String { "\(Self.padded(wall, 15))-\(Self.padded(Int64(counter), 6))-\(device)" }

    public init?(_ text: String) {
        let parts = text.split(separator: "-", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let wall = Int64(parts[0]), let counter = Int32(parts[1]), wall >= 0, counter >= 0,
              !parts[2].isEmpty else { return nil }
        self.init(wall: wall, counter: counter, device: String(parts[2]))
    }

    private static func padded(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}

extension HLC: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let stamp = HLC(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(text)' is not a clock stamp (WALL-COUNTER-DEVICE)"))
        }
        self = stamp
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// One device's clock: every stamp it makes is later than every stamp it made or saw before,
/// and close to its wall clock when that clock is sane.
public struct HybridClock: Sendable, Equatable {
    public private(set) var last: HLC

    public init(device: String, last: HLC? = nil) {
        self.last = last.map { HLC(wall: $0.wall, counter: $0.counter, device: device) } ?? HLC(wall: 0, counter: 0, device: device)
    }

    /// A stamp for a change made here at wall time `now` (milliseconds).
    public mutating func tick(now: Int64) -> HLC {
        if now > last.wall {
            last = HLC(wall: now, counter: 0, device: last.device)
        } else {
            last = HLC(wall: last.wall, counter: last.counter + 1, device: last.device)
        }
        return last
    }

    /// Takes in a stamp another device made, so that what this device stamps next is later.
    public mutating func observe(_ remote: HLC, now: Int64) {
        let wall = max(last.wall, remote.wall, now)
        let counter: Int32
        if wall == last.wall && wall == remote.wall { counter = max(last.counter, remote.counter) }
        else if wall == last.wall { counter = last.counter }
        else if wall == remote.wall { counter = remote.counter }
        else { counter = 0 }
        last = HLC(wall: wall, counter: counter, device: last.device)
    }
}
