import FoundationEssentials
import TermindCore
import TermindSSH

/// What an SSH feature asks the Vault to reach a host: a saved host's id or label, or a
/// quick-connect line (`user@host:port`, `ssh -p 2222 -J bastion -i ./key box`).
public struct RouteRequest: Sendable, Equatable {
    public var target: String
    /// Typed for this connection (`--user`), for the target only.
    public var user: String?
    /// An identity (id or label) chosen for this connection, for the target only.
    public var identity: String?
    /// The client's working folder: relative `-i` key files resolve against it (never
    /// against the server's).
    public var workingDirectory: String?

    public init(target: String, user: String? = nil, identity: String? = nil, workingDirectory: String? = nil) {
        self.target = target
        self.user = user
        self.identity = identity
        self.workingDirectory = workingDirectory
    }
}

/// A route and the credentials of each of its hops.
public struct ResolvedRoute: Sendable {
    public var route: SSHRoute
    /// Whether the target names a saved host, even with another port or user (not a name
    /// taken as a host name).
    public var targetIsSaved: Bool
    private var byHop: [String: SSHCredentials]

    public init(route: SSHRoute, credentials: [String: SSHCredentials], targetIsSaved: Bool = false) {
        self.route = route
        self.targetIsSaved = targetIsSaved
        byHop = credentials
    }

    /// What to authenticate with at `hop` (nothing saved: ssh-agent keys only).
    public func credentials(for hop: SSHTarget) -> SSHCredentials { byHop[Self.key(hop)] ?? SSHCredentials() }

    public static func key(_ hop: SSHTarget) -> String { "\(hop.host.lowercased()):\(hop.port)" }
}

/// How a saved host or a quick-connect line becomes a route with per-hop credentials: the
/// one way every SSH feature reaches a host. A saved host brings its own jump route and each
/// saved hop its credentials; on a quick-connect line `-i` key files, `user` and `identity`
/// apply to the target only (as OpenSSH's -J), and unsaved jump hosts use ssh-agent keys.
/// A passphrase-protected `-i` key is unlocked with `askPassphrase(path)` (nil: nobody can
/// be asked, and the error names the remedies).
public protocol RouteResolver: Sendable {
    func route(for request: RouteRequest, askPassphrase: @escaping @Sendable (String) async -> Secret?) async throws -> ResolvedRoute
}

extension PortKey where P == any RouteResolver {
    public static var routes: Self { PortKey("vault.routes") }
}
