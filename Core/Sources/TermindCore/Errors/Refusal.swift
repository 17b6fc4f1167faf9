import FoundationEssentials

/// A call or stream the kernel refused before it ran, as one typed error: what was refused
/// (`contract`), what it does (`effect`), for whom (`chain`) and why. Its codes:
/// `capability.denied` (the caller's manifest does not declare it), `policy.denied` (the
/// policy hook said no), `policy.unavailable` (an agent is in the chain and no policy could
/// decide: none is loaded, it failed or it did not answer in time — fail closed).
/// It reaches clients as a `TermindError` whose `details` hold these fields.
public struct Refusal: Error, Sendable, Equatable, TermindErrorConvertible, CustomStringConvertible {
    public let code: ErrorCode
    public let contract: String
    public let effect: Effect?
    public let chain: CallOrigin
    public let reason: String

    public init(_ code: ErrorCode, contract: String, effect: Effect?, chain: CallOrigin, reason: String) {
        self.code = code
        self.contract = contract
        self.effect = effect
        self.chain = chain
        self.reason = reason
    }

    public var description: String { reason }

    public var termindError: TermindError {
        var details: [String: JSONValue] = ["contract": .string(contract), "reason": .string(reason),
                                            "chain": .array(chain.chain.map { link in
                                                var fields: [String: JSONValue] = ["kind": .string(link.kind.rawValue), "id": .string(link.id)]
                                                if let detail = link.detail { fields["detail"] = .string(detail) }
                                                return .object(fields)
                                            })]
        if let effect { details["effect"] = .string(effect.description) }
        return TermindError(code: code.rawValue, message: reason, details: .object(details))
    }

    /// A feature called what its manifest's `calls` does not list.
    public static func capabilityDenied(feature: String, contract: String, declared: Set<String>, origin: CallOrigin, effect: Effect? = nil) -> Refusal {
        Refusal(.capabilityDenied, contract: contract, effect: effect, chain: origin,
                reason: "Feature '\(feature)' may not call \(contract): it is not among the calls its manifest declares (\(declared.isEmpty ? "none" : declared.sorted().joined(separator: ", "))).")
    }
}

extension Refusal {
    /// A call the feature's manifest allows only while it serves some of its own contracts
    /// (`callsFrom`), made from elsewhere.
    public static func capabilityDenied(feature: String, contract: String, from: Set<String>, serving: ContractID?, origin: CallOrigin,
                                        effect: Effect? = nil) -> Refusal {
        Refusal(.capabilityDenied, contract: contract, effect: effect, chain: origin,
                reason: "Feature '\(feature)' may call \(contract) only while serving \(from.sorted().joined(separator: ", ")) (its manifest's callsFrom), "
                    + "and this call came from \(serving.map { "\($0)" } ?? "none of its contracts").")
    }
}

extension ErrorCode {
    /// The policy hook refused a call made on an agent's behalf.
    public static let policyDenied: ErrorCode = "policy.denied"
    /// An agent is in the chain and no policy could decide (none loaded, it failed, or it did
    /// not answer in time): refused.
    public static let policyUnavailable: ErrorCode = "policy.unavailable"
}
