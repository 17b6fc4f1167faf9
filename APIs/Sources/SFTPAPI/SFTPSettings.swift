import FoundationEssentials
import SettingsAPI
import TermindCore

/// The SFTP scheduler's settings (seed, "Settings replication"). The SFTP feature
/// registers them; they sync.
public enum SFTPSettings {
    /// How many files move at once: `active` in the whole process (1–100), `perHost` on one
    /// host (1 up to min(50, `active`)). New and missing records get 30 / 10; a saved value
    /// is never changed behind the user's back.
    public struct Limits: SettingsRecord {
        public static let key = "sftp.limits"
        public static let scope = SettingsScope.synced
        public static let summary = "Concurrent SFTP files: active in the process (1-100) and per host (1 to min(50, active))."
        public static var defaults: Limits { Limits(active: 30, perHost: 10) }

        public var active: Int
        public var perHost: Int

        public init(active: Int, perHost: Int) {
            self.active = active
            self.perHost = perHost
        }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            if !(1...100).contains(active) { problems.append(SettingsProblem("\(Self.key).active", "must be from 1 to 100, not \(active)")) }
            let ceiling = min(50, max(active, 1))
            if !(1...ceiling).contains(perHost) {
                problems.append(SettingsProblem("\(Self.key).perHost", "must be from 1 to \(ceiling) (at most 50 and at most active, \(active)), not \(perHost)"))
            }
            return problems
        }
    }

    /// Whether extra files ride sibling SFTP channels or extra connections.
    public struct Topology: SettingsRecord {
        public enum Strategy: String, Codable, Sendable, Equatable, SchemaEnum {
            case channelsOnly = "channels-only"
            case connectionsPreferred = "connections-preferred"
            /// Channels up to 64,000,000 bytes (unknown sizes included), then connections.
            case smart
        }
        public static let key = "sftp.topology"
        public static let scope = SettingsScope.synced
        public static let summary = "How concurrent SFTP files travel: channels-only, connections-preferred or smart (a missing strategy reads as smart)."
        public static var defaults: Topology { Topology(strategy: .smart) }

        public var strategy: Strategy

        public init(strategy: Strategy) { self.strategy = strategy }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            strategy = try container.decodeIfPresent(Strategy.self, forKey: .strategy) ?? .smart
        }
    }
}
