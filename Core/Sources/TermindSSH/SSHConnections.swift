import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// What a feature gets as `kernel.ssh`: the process's shared connections, to open and lease
/// routes — not to list the routes others use, nor to close connections it did not open
/// (those belong to the kernel: `SSHConnectionPool.closeAll`, `closeIdle`, `routes`). A
/// connection is shared only with requests that present the same credentials, hop by hop,
/// so no feature ever gets a connection another authenticated with other ones.
public protocol SSHConnections: Sendable {
    /// The shared connection for `route`, opened if needed.
    func connection(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection
    /// As `connection(for:policy:)`, held by a lease the idle sweep leaves alone until it is released.
    func lease(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnectionLease
}

/// The kernel's view of its pool for one feature (see `SSHConnections`): a value that holds
/// the pool privately and offers only opening and leasing.
public struct SSHConnectionsView: SSHConnections {
    private let pool: SSHConnectionPool

    public init(pool: SSHConnectionPool) { self.pool = pool }

    public func connection(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        try await pool.connection(for: try await Self.bound(route, policy), policy: policy)
    }

    public func lease(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnectionLease {
        try await pool.lease(for: try await Self.bound(route, policy), policy: policy)
    }

    /// `route` whose key also names the credentials each hop authenticates with (a keyed
    /// digest, never the secrets): requests with other credentials get other connections.
    static func bound(_ route: SSHRoute, _ policy: SSHOpenPolicy) async throws -> SSHRoute {
        var prints: [String] = []
        for hop in route.hops { prints.append(try await policy.credentials(hop).fingerprint) }
        return SSHRoute(route.hops, context: route.context + "\u{1F}" + prints.joined(separator: ","))
    }
}

extension SSHCredentials {
    /// Equal for equal credentials, computed with a key of this process's own (so it tells
    /// nothing outside it): what connection sharing compares.
    var fingerprint: String {
        var material = Data()
        for part in [password, privateKey, passphrase] {
            let text = part?.withPlaintext { $0 } ?? ""
            material.append(Data("\(text.utf8.count):".utf8))
            material.append(Data(text.utf8))
        }
        material.append(Data((agentSocket ?? "-").utf8))
        return Digest.hmac(.sha256, key: Self.processKey, data: material).prefix(12).hexEncoded
    }

    private static let processKey: Data = {
        var key = Data(count: 32)
        _ = key.withUnsafeMutableBytes { getentropy($0.baseAddress, 32) }
        return key
    }()
}

extension PortKey where P == any SSHConnections {
    /// The process's one connection pool as a feature sees it (`SSHConnections`), provided by
    /// the kernel to features that list `kernel.ssh`: terminals, SFTP, forwarding, metrics
    /// and the assistant share live connections (one per route and credentials) and open
    /// their own channels on them.
    public static var sshConnections: Self { PortKey("kernel.ssh") }
}
