import FoundationEssentials
import SettingsAPI

/// The terminal's settings, registered by Workspaces. What shows the same everywhere syncs
/// (the theme, scrollback kept for a durable session); what depends on this device's screen
/// stays here (seed: font family and size are device-local, themes sync).
public enum TerminalSettings {
    public struct Preferences: SettingsRecord {
        public static let key = "terminal.preferences"
        public static let scope = SettingsScope.synced
        public static let summary = "Terminal: theme name, the scrollback lines a durable session keeps (100-100000), shell integration for hosts left at default."
        public static var defaults: Preferences { Preferences(theme: "default", scrollbackLines: 10_000, shellIntegration: false) }

        public var theme: String
        public var scrollbackLines: Int
        /// Whether termind's shell bootstrap (prompt and command marks, history) goes to the
        /// interactive bash and zsh shells of hosts whose own choice is `default`.
        public var shellIntegration: Bool

        public init(theme: String, scrollbackLines: Int, shellIntegration: Bool = false) {
            self.theme = theme
            self.scrollbackLines = scrollbackLines
            self.shellIntegration = shellIntegration
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            theme = try container.decodeIfPresent(String.self, forKey: .theme) ?? Self.defaults.theme
            scrollbackLines = try container.decodeIfPresent(Int.self, forKey: .scrollbackLines) ?? Self.defaults.scrollbackLines
            shellIntegration = try container.decodeIfPresent(Bool.self, forKey: .shellIntegration) ?? Self.defaults.shellIntegration
        }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            if theme.isEmpty || theme.count > 64 { problems.append(SettingsProblem("\(Self.key).theme", "must be a name of 1 to 64 characters")) }
            if !(100...100_000).contains(scrollbackLines) {
                problems.append(SettingsProblem("\(Self.key).scrollbackLines", "must be from 100 to 100000, not \(scrollbackLines)"))
            }
            return problems
        }
    }

    public struct Device: SettingsRecord {
        public static let key = "terminal.device"
        public static let scope = SettingsScope.deviceLocal
        public static let summary = "Terminal on this device: font family and size (6-72 points)."
        public static var defaults: Device { Device(fontFamily: "monospace", fontSize: 13) }

        public var fontFamily: String
        public var fontSize: Double

        public init(fontFamily: String, fontSize: Double) {
            self.fontFamily = fontFamily
            self.fontSize = fontSize
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            fontFamily = try container.decodeIfPresent(String.self, forKey: .fontFamily) ?? Self.defaults.fontFamily
            fontSize = try container.decodeIfPresent(Double.self, forKey: .fontSize) ?? Self.defaults.fontSize
        }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            if fontFamily.isEmpty { problems.append(SettingsProblem("\(Self.key).fontFamily", "must not be empty")) }
            if !(6...72).contains(fontSize) { problems.append(SettingsProblem("\(Self.key).fontSize", "must be from 6 to 72, not \(fontSize)")) }
            return problems
        }
    }
}
