import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// Contract endpoints and port providers of the running features. Mutated only during
/// boot, then frozen; lookups take a short lock and never hop onto the kernel actor, so
/// contract calls from many clients proceed in parallel.
final class RoutingTable: Sendable {
    private struct Table {
        var endpoints: [ContractID: ContractEndpoint] = [:]
        var streams: [ContractID: StreamEndpoint] = [:]
        var ports: [String: (owner: String, value: any Sendable)] = [:]
        var frozen = false
    }
    private let table = Mutex(Table())

    func add(_ endpoint: ContractEndpoint) throws {
        try table.withLock { table in
            precondition(!table.frozen, "the registry is frozen after boot")
            if let existing = table.endpoints[endpoint.id] {
                throw TermindError(.registryContractConflict, "feature '\(endpoint.owner)': contract '\(endpoint.id)' is already handled by '\(existing.owner)'.")
            }
            table.endpoints[endpoint.id] = endpoint
        }
    }

    func add(_ stream: StreamEndpoint) throws {
        try table.withLock { table in
            precondition(!table.frozen, "the registry is frozen after boot")
            if let existing = table.streams[stream.id] {
                throw TermindError(.registryStreamConflict, "feature '\(stream.owner)': stream '\(stream.id)' is already served by '\(existing.owner)'.")
            }
            table.streams[stream.id] = stream
        }
    }

    func addPort(_ id: String, owner: String, value: any Sendable) throws {
        try table.withLock { table in
            precondition(!table.frozen, "the registry is frozen after boot")
            if let existing = table.ports[id] {
                throw TermindError(.registryPortConflict, "feature '\(owner)': port '\(id)' is already provided by '\(existing.owner)'.")
            }
            table.ports[id] = (owner, value)
        }
    }

    /// Withdraws everything a feature published (it failed to start, or a dependency did).
    func remove(owner: String) {
        table.withLock { table in
            precondition(!table.frozen, "the registry is frozen after boot")
            table.endpoints = table.endpoints.filter { $0.value.owner != owner }
            table.streams = table.streams.filter { $0.value.owner != owner }
            table.ports = table.ports.filter { $0.value.owner != owner }
        }
    }

    func freeze() { table.withLock { $0.frozen = true } }

    func endpoint(_ id: ContractID) -> ContractEndpoint? { table.withLock { $0.endpoints[id] } }
    func port(_ id: String) -> (any Sendable)? { table.withLock { $0.ports[id]?.value } }
    func allEndpoints() -> [ContractEndpoint] { table.withLock { $0.endpoints.values.sorted { $0.id < $1.id } } }
    func stream(_ id: ContractID) -> StreamEndpoint? { table.withLock { $0.streams[id] } }
    func allStreams() -> [StreamEndpoint] { table.withLock { $0.streams.values.sorted { $0.id < $1.id } } }
}
