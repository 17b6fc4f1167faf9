/// Collects what one feature publishes during `register`. The kernel checks it against
/// the manifest: a feature may publish only the ports and contracts it declared, and must
/// publish all of them.
public final class FeatureRegistrar {
    public let featureID: String
    private(set) var ports: [String: any Sendable] = [:]
    private(set) var endpoints: [ContractEndpoint] = []

    public init(featureID: String) { self.featureID = featureID }

    /// Publishes the implementation of a port declared under `ports.provides`.
    public func provide<P: Sendable>(_ key: PortKey<P>, _ implementation: P) {
        ports[key.id] = implementation
    }

    /// Publishes a port implementation by id (the harness's scripted fakes).
    public func provideErased(_ id: String, _ implementation: any Sendable) {
        ports[id] = implementation
    }

    /// Publishes a handler for a contract declared under `contracts`.
    public func handle<C: Contract>(_ contract: C.Type,
                                    _ handler: @escaping @Sendable (C.Request, CallOrigin) async throws -> C.Response) {
        endpoints.append(.typed(contract, owner: featureID, handler: handler))
    }

    /// As `handle`, for a handler that blocks (SQLite, key derivation, file reads): it runs
    /// on Core's blocking executor (`BlockingExecutor.core`), never on the cooperative pool.
    public func handleBlocking<C: Contract>(_ contract: C.Type,
                                            _ handler: @escaping @Sendable (C.Request, CallOrigin) throws -> C.Response) where C.Response: Sendable {
        handle(contract) { request, origin in
            try await BlockingExecutor.run { try handler(request, origin) }
        }
    }

    /// Publishes an already type-erased endpoint (used by the kernel for C plugins).
    public func handle(_ endpoint: ContractEndpoint) {
        endpoints.append(endpoint)
    }

    public var publishedPorts: [String: any Sendable] { ports }
    public var publishedEndpoints: [ContractEndpoint] { endpoints }
}
