import Foundation
import TermindCore

/// Contract endpoints and port providers of the running features. Mutated only during
/// boot, then frozen; lookups take a short lock and never hop onto the kernel actor, so
/// contract calls from many clients proceed in parallel.
final class RoutingTable: @unchecked Sendable {
    private let lock = NSLock()
    private var endpoints: [ContractID: ContractEndpoint] = [:]
    private var streams: [ContractID: StreamEndpoint] = [:]
    private var ports: [String: (owner: String, value: any Sendable)] = [:]
    private var frozen = false

    func add(_ endpoint: ContractEndpoint) throws {
        try lock.withLock {
            precondition(!frozen, "the registry is frozen after boot")
            if let existing = endpoints[endpoint.id] {
                throw TermindError(.registryContractConflict, "feature '\(endpoint.owner)': contract '\(endpoint.id)' is already handled by '\(existing.owner)'.")
            }
            endpoints[endpoint.id] = endpoint
        }
    }

    func add(_ stream: StreamEndpoint) throws {
        try lock.withLock {
            precondition(!frozen, "the registry is frozen after boot")
            if let existing = streams[stream.id] {
                throw TermindError(.registryStreamConflict, "feature '\(stream.owner)': stream '\(stream.id)' is already served by '\(existing.owner)'.")
            }
            streams[stream.id] = stream
        }
    }

    func addPort(_ id: String, owner: String, value: any Sendable) throws {
        try lock.withLock {
            precondition(!frozen, "the registry is frozen after boot")
            if let existing = ports[id] {
                throw TermindError(.registryPortConflict, "feature '\(owner)': port '\(id)' is already provided by '\(existing.owner)'.")
            }
            ports[id] = (owner, value)
        }
    }

    /// Withdraws everything a feature published (it failed to start, or a dependency did).
    func remove(owner: String) {
        lock.withLock {
            precondition(!frozen, "the registry is frozen after boot")
            endpoints = endpoints.filter { $0.value.owner != owner }
            streams = streams.filter { $0.value.owner != owner }
            ports = ports.filter { $0.value.owner != owner }
        }
    }

    func freeze() { lock.withLock { frozen = true } }

    func endpoint(_ id: ContractID) -> ContractEndpoint? { lock.withLock { endpoints[id] } }
    func port(_ id: String) -> (any Sendable)? { lock.withLock { ports[id]?.value } }
    func allEndpoints() -> [ContractEndpoint] { lock.withLock { endpoints.values.sorted { $0.id < $1.id } } }
    func stream(_ id: ContractID) -> StreamEndpoint? { lock.withLock { streams[id] } }
    func allStreams() -> [StreamEndpoint] { lock.withLock { streams.values.sorted { $0.id < $1.id } } }
}
