import Synchronization

/// A schema derived the first time it is needed. Deriving every contract's request and
/// response schemas when features register took about a third of a command's start, and a
/// command calls one or two contracts; the listing of contracts and the check of a request
/// body ask for them when they run.
public final class DeferredSchema: Sendable {
    private let derive: @Sendable () -> JSONSchema
    private let derived = Mutex<JSONSchema?>(nil)

    public init(_ derive: @escaping @Sendable () -> JSONSchema) { self.derive = derive }

    /// One already known.
    public convenience init(_ schema: JSONSchema) {
        self.init { schema }
        derived.withLock { $0 = schema }
    }

    /// `T`'s schema by `SchemaDerivation`, when first asked.
    public static func of<T: Decodable & Sendable>(_ type: T.Type) -> DeferredSchema {
        DeferredSchema { SchemaDerivation.schema(for: T.self) }
    }

    public var schema: JSONSchema {
        if let known = derived.withLock({ $0 }) { return known }
        // Derived outside the lock (it is pure; two first callers may both derive it).
        let made = derive()
        return derived.withLock { value in
            if value == nil { value = made }
            return value!
        }
    }
}
