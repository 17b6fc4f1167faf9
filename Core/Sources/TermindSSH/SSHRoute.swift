import Foundation
import TermindCore

/// A route: jump hosts in order, then the target. Each hop runs its own SSH session over a
/// direct-tcpip channel of the previous one, and is verified and authenticated on its own.
public struct SSHRoute: Sendable, Hashable, CustomStringConvertible {
    /// At most this many hosts, the target included (as the Vault stores routes).
    public static let maxHosts = RouteLimits.maxHosts
    public var hops: [SSHTarget]
    /// Tells apart connections to the same endpoints made with different credentials (the
    /// pool shares a connection only within one context): e.g. the identity chosen.
    public var context: String

    public init(_ hops: [SSHTarget], context: String = "") {
        self.hops = hops
        self.context = context
    }
    public init(jumps: [SSHTarget], target: SSHTarget, context: String = "") {
        hops = jumps + [target]
        self.context = context
    }

    public var target: SSHTarget? { hops.last }
    public var description: String { hops.map(\.display).joined(separator: " -> ") }

    /// Rejects an empty route, a longer one than `maxHosts`, and one that visits an endpoint
    /// twice — before anything connects.
    public func validate() throws {
        guard !hops.isEmpty else { throw SSHError.make("ssh.route_empty", "The route has no host to connect to.") }
        if hops.count > Self.maxHosts {
            throw SSHError.make("ssh.route_too_long", "The route \(description) has \(hops.count) hosts; at most \(Self.maxHosts) are allowed, including the target.")
        }
        var seen: [String: Int] = [:]
        for (index, hop) in hops.enumerated() {
            guard (1...65_535).contains(hop.port) else {
                throw SSHError.make("ssh.bad_port", "Hop \(index + 1) of the route (\(hop.display)) has port \(hop.port); ports run from 1 to 65535.")
            }
            guard !hop.host.isEmpty else { throw SSHError.make("ssh.route_bad_host", "Hop \(index + 1) of the route has no host name.") }
            let key = "\(hop.host.lowercased()):\(hop.port)"
            if let first = seen[key] {
                throw SSHError.make("ssh.route_cycle", "The route \(description) visits \(hop.host):\(hop.port) twice (hops \(first + 1) and \(index + 1)); a route cannot loop.")
            }
            seen[key] = index
        }
    }
}

/// How to open each hop of a route.
public struct SSHOpenPolicy: Sendable {
    public var trust: any HostKeyTrust
    public var deadlines: SSHDeadlines
    public var keepalive: SSHKeepalive
    /// Credentials for one hop; asked each time a hop connects, never cached here.
    public var credentials: @Sendable (SSHTarget) async throws -> SSHCredentials
    public var askUnknownHostKey: @Sendable (HostKeyQuestion) async -> HostKeyAnswer
    public var keyboardInteractive: KeyboardInteractiveResponder?
    /// Where connection events go (connect, handshake, trust verdict, each authentication
    /// method and its outcome): codes and non-secret metadata only, never host names,
    /// credentials, prompts or answers.
    public var logger: Logger?

    public init(trust: any HostKeyTrust, deadlines: SSHDeadlines = SSHDeadlines(), keepalive: SSHKeepalive = SSHKeepalive(),
                logger: Logger? = nil,
                credentials: @escaping @Sendable (SSHTarget) async throws -> SSHCredentials,
                keyboardInteractive: KeyboardInteractiveResponder? = nil,
                askUnknownHostKey: @escaping @Sendable (HostKeyQuestion) async -> HostKeyAnswer) {
        self.logger = logger
        self.trust = trust
        self.deadlines = deadlines
        self.keepalive = keepalive
        self.credentials = credentials
        self.keyboardInteractive = keyboardInteractive
        self.askUnknownHostKey = askUnknownHostKey
    }
}

extension SSHConnection {
    /// Opens every hop of `route` in turn (no sharing); the returned connection keeps the
    /// jump connections alive and closing it ends them.
    public static func open(route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        try route.validate()
        var previous: SSHConnection?
        for (index, hop) in route.hops.enumerated() {
            do {
                previous = try await open(hop, credentials: try await policy.credentials(hop), trust: policy.trust,
                                          deadlines: policy.deadlines, keepalive: policy.keepalive, logger: policy.logger?.child("hop\(index + 1)"), via: previous,
                                          keyboardInteractive: policy.keyboardInteractive, askUnknownHostKey: policy.askUnknownHostKey)
            } catch let error as TermindError where route.hops.count > 1 {
                await previous?.closeRoute()
                throw TermindError(code: error.code, message: "Hop \(index + 1) of \(route.hops.count) (\(hop.display)): \(error.message)")
            } catch {
                await previous?.closeRoute()
                throw error
            }
        }
        return previous!
    }

    /// Closes this connection and every jump connection under it.
    public func closeRoute() async {
        await close()
        await via?.closeRoute()
    }
}

/// One live connection per route, shared by everyone who asks for it: each user opens its
/// own channels, and closing a channel never disturbs another's. Jump prefixes are shared
/// too (routes A→B→T and A→C share the connection to A). Concurrent requests for a route
/// wait for the same opening. A connection that ends leaves the pool (by generation, so a
/// late notice from a retired connection never removes its replacement); the next request
/// opens a new one, asking about trust again — once-only trust never authorizes that.
public actor SSHConnectionPool {
    private enum Entry {
        case opening(Task<SSHConnection, Error>, UInt64)
        case open(SSHConnection)
    }
    private var entries: [SSHRoute: Entry] = [:]
    private var tickets: UInt64 = 0
    /// A connection nobody has used for this long is closed (nil: kept until closed).
    public let idleTimeout: Double?
    private var sweeper: Task<Void, Never>?

    /// `idleTimeout`: seconds a connection may sit unused before the pool closes it
    /// (180 by default, as the assistant's idle pool; nil keeps connections until closed).
    public init(idleTimeout: Double? = 180) {
        self.idleTimeout = idleTimeout
    }

    deinit { sweeper?.cancel() }

    /// The shared connection for `route`, opened (hop by hop, reusing live prefixes) if needed.
    public func connection(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        let connection = try await share(route, policy: policy)
        connection.touch()
        return connection
    }

    private func share(_ route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        try route.validate()
        if let entry = entries[route] {
            switch entry {
            case .open(let connection) where connection.isAlive: return connection
            case .open: entries[route] = nil
            case .opening(let task, _): return try await task.value
            }
        }
        let via: SSHConnection? = route.hops.count > 1 ? try await share(SSHRoute(Array(route.hops.dropLast()), context: route.context), policy: policy) : nil
        if let entry = entries[route] {  // someone else finished meanwhile
            switch entry {
            case .open(let connection) where connection.isAlive: return connection
            case .open: entries[route] = nil
            case .opening(let task, _): return try await task.value
            }
        }
        tickets += 1
        let ticket = tickets
        let hop = route.hops[route.hops.count - 1]
        let task = Task {
            try await SSHConnection.open(hop, credentials: try await policy.credentials(hop), trust: policy.trust,
                                         deadlines: policy.deadlines, keepalive: policy.keepalive,
                                         logger: policy.logger?.child("hop\(route.hops.count)"), via: via,
                                         keyboardInteractive: policy.keyboardInteractive, askUnknownHostKey: policy.askUnknownHostKey)
        }
        entries[route] = .opening(task, ticket)
        do {
            let connection = try await task.value
            if case .opening(_, ticket)? = entries[route] { entries[route] = .open(connection) }
            startSweeping()
            let generation = connection.generation
            connection.onClose { [weak self] _ in
                Task { await self?.retire(route, generation: generation) }
            }
            return connection
        } catch {
            if case .opening(_, ticket)? = entries[route] { entries[route] = nil }
            throw error
        }
    }

    /// The live connections, by route.
    public var routes: [SSHRoute] {
        entries.compactMap { route, entry in
            if case .open(let connection) = entry, connection.isAlive { return route }
            return nil
        }
    }

    /// Closes every connection (targets before the jumps they run through).
    public func closeAll() async {
        let open = entries.compactMap { _, entry -> SSHConnection? in
            if case .open(let connection) = entry { return connection }
            return nil
        }
        entries.removeAll()
        sweeper?.cancel()
        sweeper = nil
        for connection in open.sorted(by: { depth($0) > depth($1) }) { await connection.close() }
    }

    private func depth(_ connection: SSHConnection) -> Int {
        var count = 0
        var cursor = connection.via
        while let next = cursor { count += 1; cursor = next.via }
        return count
    }

    /// Closes connections idle for `idleTimeout` (a jump host is busy while a route runs
    /// through it, so targets go first and their jumps follow on a later sweep).
    public func closeIdle() async {
        guard let idleTimeout else { return }
        var idle: [(SSHRoute, SSHConnection)] = []
        for (route, entry) in entries {
            if case .open(let connection) = entry, let seconds = connection.idleSeconds, seconds >= idleTimeout {
                idle.append((route, connection))
            }
        }
        for (route, connection) in idle {
            if case .open(let current)? = entries[route], current === connection { entries[route] = nil }
            await connection.close()
        }
    }

    private func startSweeping() {
        guard sweeper == nil, let idleTimeout else { return }
        let interval = UInt64(max(0.05, min(30, idleTimeout / 2)) * 1_000_000_000)
        sweeper = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: interval)
                guard let self else { return }
                await self.closeIdle()
            }
        }
    }

    private func retire(_ route: SSHRoute, generation: UInt64) {
        if case .open(let connection)? = entries[route], connection.generation == generation { entries[route] = nil }
    }
}

extension PortKey where P == SSHConnectionPool {
    /// The process's one connection pool, provided by the kernel to features that list
    /// `kernel.ssh`: terminals, SFTP, forwarding, metrics and the assistant share live
    /// connections (one per route) and open their own channels on them.
    public static var sshConnections: Self { PortKey("kernel.ssh") }
}
