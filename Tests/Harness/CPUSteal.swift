import Foundation

/// The machine's CPU time counters (/proc/stat), for benchmarks: on a virtual machine the
/// hypervisor's "steal" — time this machine wanted to run and was not let — makes figures
/// noisy, so a benchmark says how much there was while it measured.
public struct CPUSteal: Sendable {
    public var steal = 0, total = 0

    public static func now() -> CPUSteal {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return CPUSteal() }
        let fields = line.split(separator: " ").dropFirst().compactMap { Int($0) }
        return CPUSteal(steal: fields.count > 7 ? fields[7] : 0, total: fields.reduce(0, +))
    }

    /// The share stolen since `earlier`, as "N%" ("?" without counters).
    public func share(since earlier: CPUSteal) -> String {
        let total = self.total - earlier.total
        return total > 0 ? String(format: "%.0f%%", 100 * Double(steal - earlier.steal) / Double(total)) : "?"
    }
}
