import Foundation
import SettingsAPI
import TermindCore

/// The assistant's settings records (seed, "Settings replication"), registered by the
/// Assistant feature once it lands. Providers hold secret *references* only: the key
/// itself lives in the encrypted secret store on each device and never syncs.
public enum AssistantSettings {
    public struct Providers: SettingsRecord {
        public enum Kind: String, Codable, Sendable, Equatable, SchemaEnum {
            case anthropic, openai, ollama
            /// Any server speaking OpenAI's chat completions API at `baseURL`.
            case openaiCompatible = "openai-compatible"
        }
        public struct Provider: Codable, Sendable, Equatable {
            public var kind: Kind
            /// The API's base URL; the provider's own when absent.
            public var baseURL: String?
            /// A handle into the secret store (`termind settings secret`); empty: anonymous.
            public var secretRef: String

            public init(kind: Kind, baseURL: String? = nil, secretRef: String = "") {
                self.kind = kind
                self.baseURL = baseURL
                self.secretRef = secretRef
            }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                kind = try container.decode(Kind.self, forKey: .kind)
                baseURL = try container.decodeIfPresent(String.self, forKey: .baseURL)
                secretRef = try container.decodeIfPresent(String.self, forKey: .secretRef) ?? ""
            }
        }

        public static let key = "assistant.providers"
        public static let scope = SettingsScope.synced
        public static let summary = "Assistant model providers by id: kind, base URL, and a reference to the API key kept in the secret store."
        public static var defaults: Providers { Providers(providers: [:]) }
        public static var secretReferences: [String] { ["providers.*.secretRef"] }

        public var providers: [String: Provider]

        public init(providers: [String: Provider]) { self.providers = providers }

        public func problems() -> [SettingsProblem] {
            var problems: [SettingsProblem] = []
            for (id, provider) in providers.sorted(by: { $0.key < $1.key }) {
                if id.isEmpty || id.count > 40 || !id.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }) {
                    problems.append(SettingsProblem("\(Self.key).providers.\(id)", "a provider id is 1 to 40 lowercase letters, digits or '-'"))
                }
                if let url = provider.baseURL, !(url.hasPrefix("https://") || url.hasPrefix("http://")) || URL(string: url)?.host == nil {
                    problems.append(SettingsProblem("\(Self.key).providers.\(id).baseURL", "must be an http(s) URL with a host"))
                }
                if provider.kind == .openaiCompatible && provider.baseURL == nil {
                    problems.append(SettingsProblem("\(Self.key).providers.\(id).baseURL", "is required for an openai-compatible provider"))
                }
            }
            return problems
        }
    }
}
