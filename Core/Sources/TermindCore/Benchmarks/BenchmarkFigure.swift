import FoundationEssentials

/// One measured figure of a benchmark (`make bench`), with the same figure of the named peer
/// when there is one: printed as a table row, or encoded for `--json`.
public struct BenchmarkFigure: Encodable, Sendable {
    public let name: String
    public let value: Double
    public let unit: String
    public var baseline: Double?
    /// Peak resident memory (MiB) of termind's side and of the peer's while the figure was
    /// measured (the largest process of each side), where the figure has a side of its own.
    public var resident: Double?
    public var peerResident: Double?
    /// value / baseline: above 1 means slower (for times) or more (for rates) than the peer.
    public var ratio: Double? { baseline.map { value / $0 } }

    public init(name: String, value: Double, unit: String, baseline: Double? = nil, resident: Double? = nil, peerResident: Double? = nil) {
        self.name = name
        self.value = value
        self.unit = unit
        self.baseline = baseline
        // No process has 0 bytes: 0 is a figure that could not be measured (GNU time missing,
        // a process already gone), left empty rather than printed as 0.0 MiB.
        self.resident = resident.flatMap { $0 > 0 ? $0 : nil }
        self.peerResident = peerResident.flatMap { $0 > 0 ? $0 : nil }
    }

    enum CodingKeys: String, CodingKey { case name, value, unit, baseline, ratio, resident = "residentMiB", peerResident = "peerResidentMiB" }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(value, forKey: .value)
        try c.encode(unit, forKey: .unit)
        try c.encodeIfPresent(baseline, forKey: .baseline)
        try c.encodeIfPresent(ratio, forKey: .ratio)
        try c.encodeIfPresent(resident, forKey: .resident)
        try c.encodeIfPresent(peerResident, forKey: .peerResident)
    }

    public static let header = ["FIGURE", "VALUE", "PEER", "RATIO", "PEAK RSS", "PEER RSS"]

    /// The table row: name, value, the peer's value, the ratio, and each side's peak memory.
    public var row: [String] {
        [name, Self.format(value) + " " + unit, baseline.map { Self.format($0) + " " + unit } ?? "", ratio.map { String(printf: "%.3f×", $0) } ?? "",
         resident.map(Self.mebibytes) ?? "", peerResident.map(Self.mebibytes) ?? ""]
    }

    /// A memory figure as the tables print it (nothing for 0: not measured).
    public static func mebibytes(_ value: Double) -> String { value > 0 ? String(printf: "%.1f MiB", value) : "" }

    /// Figures as an aligned table under `header`, one line each.
    public static func table(_ figures: [BenchmarkFigure]) -> [String] {
        let rows = [header] + figures.map(\.row)
        let widths = (0..<header.count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { $0.offset == header.count - 1 ? $0.element : $0.element.padded(to: widths[$0.offset]) }
                .joined(separator: "  ").trimmedWhitespace
        }
    }

    public static func format(_ value: Double) -> String {
        value >= 100 ? String(printf: "%.0f", value) : String(printf: "%.2f", value)
    }
}
