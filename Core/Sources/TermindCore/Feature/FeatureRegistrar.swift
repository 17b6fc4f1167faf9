/// Collects what one feature publishes during `register`. The kernel checks it against
/// the manifest: a feature may publish only the ports and contracts it declared, and must
/// publish all of them.
public final class FeatureRegistrar {
    public let featureID: String
    private(set) var ports: [String: any Sendable] = [:]
    private(set) var endpoints: [ContractEndpoint] = []
    private(set) var streams: [StreamEndpoint] = []

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

    /// Publishes the handler of a stream declared under `streams`: work that sends events,
    /// asks the client questions and reads its input while it runs (see StreamSession).
    public func stream<S: StreamContract>(_ stream: S.Type,
                                          _ handler: @escaping @Sendable (S.Request, StreamSession) async throws -> S.Result) {
        streams.append(.typed(stream, owner: featureID, handler: handler))
    }

    /// Publishes an already type-erased endpoint (used by the kernel for C plugins).
    public func handle(_ endpoint: ContractEndpoint) {
        endpoints.append(endpoint)
    }

    /// Publishes an already type-erased stream (used by the kernel for C plugins).
    public func stream(_ endpoint: StreamEndpoint) {
        streams.append(endpoint)
    }

    public var publishedPorts: [String: any Sendable] { ports }
    public var publishedEndpoints: [ContractEndpoint] { endpoints }
    public var publishedStreams: [StreamEndpoint] { streams }
}
