/// Names a port: a Sendable, async Swift protocol declared in a feature's API module (or in
/// Core for the kernel's own), provided by exactly one feature and looked up by others
/// through the kernel. `P` is the existential (`any Thermometer`), so lookups are typed
/// without features importing each other's implementation:
///
///     extension PortKey where P == any Thermometer {
///         public static var thermometer: Self { PortKey("weather.thermometer") }
///     }
public struct PortKey<P>: Sendable, Hashable, CustomStringConvertible {
    public let id: String
    public init(_ id: String) { self.id = id }
    public var description: String { id }
}

/// How a feature reaches the ports it declared in its manifest.
public struct PortDirectory: Sendable {
    private let lookup: @Sendable (String) -> (any Sendable)?

    public init(lookup: @escaping @Sendable (String) -> (any Sendable)?) {
        self.lookup = lookup
    }

    /// The provider of a port the feature requires; throws if none is loaded.
    public func require<P>(_ key: PortKey<P>) throws -> P {
        guard let value = lookup(key.id) else { throw TermindError.portUnavailable(key.id) }
        guard let typed = value as? P else {
            throw TermindError.internalFailure("Port '\(key.id)' is provided with a type that does not conform to \(P.self); the provider was built against other contracts.")
        }
        return typed
    }

    /// The provider of an optional port, or nil.
    public func optional<P>(_ key: PortKey<P>) -> P? {
        lookup(key.id) as? P
    }
}
