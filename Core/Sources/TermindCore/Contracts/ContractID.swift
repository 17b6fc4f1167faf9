/// A contract's name and version, written `name@version` (`vault.host.list@1`).
public struct ContractID: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public let name: String
    public let version: Int

    public init(name: String, version: Int) {
        self.name = name
        self.version = version
    }

    /// Parses `name@version`; nil unless the name is dotted lowercase words and version ≥ 1.
    public init?(parsing text: String) {
        // '@' is ASCII: where it is found in the bytes, a character ends.
        guard let at = text.utf8.firstIndex(of: UInt8(ascii: "@")) else { return nil }
        let name = String(text[..<at]), rest = text[text.utf8.index(after: at)...]
        guard !rest.utf8.contains(UInt8(ascii: "@")), let version = Int(rest), version >= 1, RegistryValidator.isValidPortID(name) else { return nil }
        self.init(name: name, version: version)
    }

    public var description: String { "\(name)@\(version)" }

    public static func < (lhs: ContractID, rhs: ContractID) -> Bool {
        (lhs.name, lhs.version) < (rhs.name, rhs.version)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = ContractID(parsing: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(text)' is not name@version"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

extension ContractID: SchemaDescribable {
    public static var schema: JSONSchema { .string(format: "contract-id") }
}
