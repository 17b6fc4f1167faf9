import FoundationEssentials
import SettingsAPI
import TermindCore

/// The metrics monitors' preferences, registered by the Metrics feature once it lands.
/// Samples never persist and UI preferences do not sync (seed): this record stays on the
/// device — the order of the monitored hosts, which are paused, the sampling interval and
/// the network interfaces chosen per host.
public enum MetricsSettings {
    public struct Preferences: SettingsRecord {
        public static let key = "metrics.preferences"
        public static let scope = SettingsScope.deviceLocal
        public static let summary = "Metrics on this device: sampling interval (1-60 s), host order, paused hosts, chosen network interfaces per host."
        public static var defaults: Preferences { Preferences() }

        public var intervalSeconds: Double
        /// Saved host ids, in the order monitors show.
        public var order: [String]
        public var paused: [String]
        /// Host id → interfaces chosen (virtual ones included only when listed here); each key
        /// a monitored host's id (in `order`), as each of `paused` is.
        public var interfaces: [String: [String]]

        public init(intervalSeconds: Double = 2, order: [String] = [], paused: [String] = [], interfaces: [String: [String]] = [:]) {
            self.intervalSeconds = intervalSeconds
            self.order = order
            self.paused = paused
            self.interfaces = interfaces
        }

        static func notMonitored(_ host: String) -> String {
            "'\(host.prefix(64))' is not the id of a monitored host (one in order); hosts are named by id, not label "
                + "(termind metrics list --json shows each one's), and are monitored with termind metrics add HOST first"
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            intervalSeconds = try container.decodeIfPresent(Double.self, forKey: .intervalSeconds) ?? 2
            order = try container.decodeIfPresent([String].self, forKey: .order) ?? []
            paused = try container.decodeIfPresent([String].self, forKey: .paused) ?? []
            interfaces = try container.decodeIfPresent([String: [String]].self, forKey: .interfaces) ?? [:]
        }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            if !(1...60).contains(intervalSeconds) { problems.append(SettingsProblem("\(Self.key).intervalSeconds", "must be from 1 to 60, not \(intervalSeconds)")) }
            if Set(order).count != order.count { problems.append(SettingsProblem("\(Self.key).order", "lists a host twice")) }
            if order.count > 10_000 || paused.count > 10_000 || interfaces.count > 10_000 {
                problems.append(SettingsProblem(Self.key, "holds more than 10000 hosts"))
            }
            for (host, names) in interfaces.sorted(by: { $0.key < $1.key }) where names.count > 256 || names.contains(where: { $0.isEmpty || $0.count > 15 }) {
                problems.append(SettingsProblem("\(Self.key).interfaces.\(host)", "interface names are 1 to 15 characters, at most 256 of them"))
            }
            // Hosts are named by their ids, as in order: a label or an unknown key would be kept
            // and never used, so it is refused, named.
            let monitored = Set(order)
            for host in interfaces.keys.sorted() where !monitored.contains(host) {
                problems.append(SettingsProblem("\(Self.key).interfaces.\(host)", Self.notMonitored(host)))
            }
            for host in paused where !monitored.contains(host) {
                problems.append(SettingsProblem("\(Self.key).paused", Self.notMonitored(host)))
            }
            return problems
        }
    }
}
