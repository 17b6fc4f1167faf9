import FoundationEssentials

/// What an operation does, declared beside every contract and stream (and in a C plugin's
/// manifest), so that a policy can be decided and enforced by the kernel before it
/// dispatches a call made on someone's behalf (docs/contracts.md, "Effects"):
///
/// * `read`: observes only (a listing, a sample, a key's public half);
/// * `write`: changes state in a way that is expected or can be undone (a saved record, an
///   upload to a new file, a started forward);
/// * `destructive`: deletes or overwrites data, ends sessions, or runs arbitrary commands;
///
/// and the flags `network` (reaches outside this machine: a host, a port) and `secrets`
/// (touches credentials: passwords, private keys, the secret store). An operation whose
/// effect depends on its arguments (an exec of any command) declares the worst case.
public struct Effect: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Level: String, Sendable, Codable, Comparable, CaseIterable, SchemaEnum {
        case read, write, destructive

        public static func < (lhs: Level, rhs: Level) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    public var level: Level
    public var network: Bool
    public var secrets: Bool

    public init(_ level: Level, network: Bool = false, secrets: Bool = false) {
        self.level = level
        self.network = network
        self.secrets = secrets
    }

    /// What an operation whose owner did not declare its effect is taken to do: the worst.
    public static let undeclared = Effect(.destructive, network: true, secrets: true)

    public static let read = Effect(.read)
    public static let write = Effect(.write)
    public static let destructive = Effect(.destructive)

    /// The worst of both: what an operation that may do either does.
    public func union(_ other: Effect) -> Effect {
        Effect(max(level, other.level), network: network || other.network, secrets: secrets || other.secrets)
    }

    /// `read`, `write+network`, `destructive+network+secrets`: the form manifests use.
    public var description: String {
        ([level.rawValue] + (network ? ["network"] : []) + (secrets ? ["secrets"] : [])).joined(separator: "+")
    }

    /// Reads the manifest form (`description`); nil with what is wrong.
    public static func parse(_ text: String) -> Result<Effect, TermindError> {
        let words = text.split(separator: "+", omittingEmptySubsequences: false).map(String.init)
        guard let first = words.first, let level = Level(rawValue: first) else {
            return .failure(.badRequest("'\(text)' is not an effect: it starts with read, write or destructive, then +network and/or +secrets (e.g. write+network)."))
        }
        var effect = Effect(level)
        for flag in words.dropFirst() {
            switch flag {
            case "network" where !effect.network: effect.network = true
            case "secrets" where !effect.secrets: effect.secrets = true
            default:
                return .failure(.badRequest("'\(text)' is not an effect: '\(flag)' is not a flag (network or secrets, each once)."))
            }
        }
        return .success(effect)
    }
}
