import Foundation

/// A feature library's runtime object. The kernel calls `register` once (publish ports
/// and contract handlers), then `start` in dependency order, and `stop` in reverse order
/// at shutdown. A feature that throws from `register` or `start` is disabled with the
/// error's message, together with the features that require it.
public protocol Feature: AnyObject, Sendable {
    func register(_ registrar: FeatureRegistrar) throws
    func start(_ context: FeatureContext) async throws
    func stop() async
}

extension Feature {
    public func start(_ context: FeatureContext) async throws {}
    public func stop() async {}
}

/// Everything a started feature gets from the kernel. No globals: the logger, the ports it
/// declared and contract calls all arrive here.
public struct FeatureContext: Sendable {
    public let featureID: String
    public let logger: Logger
    public let ports: PortDirectory
    /// Calls any loaded contract (JSON in, JSON out), as this feature.
    public let call: @Sendable (ContractID, Data) async throws -> Data
    /// The process serves clients until it is stopped (`termind serve`): work meant to
    /// outlive one command (a host's monitor, a forward) may start at boot. In a one-shot
    /// command it starts only when that command asks for it.
    public let resident: Bool
    /// Where clients reach this resident process (`termind --socket PATH …`); nil in a
    /// one-shot command.
    public let controlSocket: String?

    public init(featureID: String, logger: Logger, ports: PortDirectory, resident: Bool = false, controlSocket: String? = nil,
                call: @escaping @Sendable (ContractID, Data) async throws -> Data) {
        self.controlSocket = controlSocket
        self.featureID = featureID
        self.logger = logger
        self.ports = ports
        self.resident = resident
        self.call = call
    }

    /// Typed convenience over `call`.
    public func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
        let reply = try await call(C.id, try JSONCoding.encode(request))
        return try JSONDecoder().decode(C.Response.self, from: reply)
    }
}


