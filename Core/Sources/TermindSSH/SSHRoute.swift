import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
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
        guard !hops.isEmpty else { throw SSHError.make(.sshRouteEmpty, "The route has no host to connect to.") }
        if hops.count > Self.maxHosts {
            throw SSHError.make(.sshRouteTooLong, "The route \(description) has \(hops.count) hosts; at most \(Self.maxHosts) are allowed, including the target.")
        }
        var seen: [String: Int] = [:]
        for (index, hop) in hops.enumerated() {
            guard (1...65_535).contains(hop.port) else {
                throw SSHError.make(.sshBadPort, "Hop \(index + 1) of the route (\(hop.display)) has port \(hop.port); ports run from 1 to 65535.")
            }
            guard !hop.host.isEmpty else { throw SSHError.make(.sshRouteBadHost, "Hop \(index + 1) of the route has no host name.") }
            let key = "\(hop.host.lowercased()):\(hop.port)"
            if let first = seen[key] {
                throw SSHError.make(.sshRouteCycle, "The route \(description) visits \(hop.host):\(hop.port) twice (hops \(first + 1) and \(index + 1)); a route cannot loop.")
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
/// wait for the same opening; a waiter that is cancelled stops waiting at once, and an
/// opening nobody waits for any more is cancelled. When an opening fails for reasons of its
/// opener's own (a host key it could not accept, prompts nobody answered, it gave up), the
/// other waiters try again with their own policies — a non-interactive caller never makes
/// an interactive one fail. A connection that ends leaves the pool (by generation, so a late
/// notice never removes its replacement); the next request opens a new one, asking about
/// trust again — once-only trust never authorizes that.
///
/// Idle connections close after `idleTimeout` (180 s): only those with no lease, not handed
/// out for that long, and with nothing on them (a channel, an SFTP session, a listener, a
/// route through them). A route whose openings keep failing rests between attempts (0.25 s
/// doubling to 8 s; a waiting caller can be cancelled), and a closed pool opens nothing
/// more. Every decision is `SSHPoolState`'s; this actor performs them.
public actor SSHConnectionPool {
    private var state: SSHPoolState<SSHRoute, SSHConnection>
    private var waiting: [UInt64: CheckedContinuation<SSHConnection, Error>] = [:]
    private var openings: [UInt64: Task<Void, Never>] = [:]
    private var waiterIDs: UInt64 = 0
    /// A connection nobody has used for this long is closed (nil: kept until closed).
    public let idleTimeout: Double?
    private var sweeper: Task<Void, Never>?

    /// `idleTimeout`: seconds a connection may sit unused before the pool closes it
    /// (180 by default, as the assistant's idle pool; nil keeps connections until closed).
    public init(idleTimeout: Double? = 180) {
        self.idleTimeout = idleTimeout
        state = SSHPoolState(idleTimeout: idleTimeout)
    }

    deinit {
        sweeper?.cancel()
        for opening in openings.values { opening.cancel() }
    }

    /// The shared connection for `route`, opened (hop by hop, reusing live prefixes) if needed.
    public func connection(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        try route.validate()
        while true {
            do {
                return try await obtain(route, policy: policy)
            } catch is RetryOpening {
                continue  // the opening failed for its opener's own reasons: ask with ours
            } catch let rest as Resting {
                // The route's last openings failed: ask again once it has rested — in steps of
                // at most 0.1 s, so that a pool closed meanwhile answers within one.
                while !state.isClosed {
                    let left = rest.until - Self.now()
                    guard left > 0 else { break }
                    do { try await Task.sleep(nanoseconds: UInt64(min(left, 0.1) * 1e9)) } catch { throw Self.cancelled(route) }
                }
            }
        }
    }

    /// As `connection(for:policy:)`, held by a lease: the idle sweep never closes it until the
    /// lease is released (or goes away).
    public func lease(for route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnectionLease {
        while true {
            let connection = try await connection(for: route, policy: policy)
            if state.lease(route, handle: connection) { return SSHConnectionLease(pool: self, route: route, connection: connection) }
        }
    }

    /// How many leases hold the route's connection.
    public func leases(for route: SSHRoute) -> Int { state.leases(route) }

    func release(_ route: SSHRoute, connection: SSHConnection) {
        state.release(route, handle: connection, now: Self.now())
    }

    private struct RetryOpening: Error {}
    private struct Resting: Error { let until: Double }

    private func obtain(_ route: SSHRoute, policy: SSHOpenPolicy) async throws -> SSHConnection {
        waiterIDs += 1
        let id = waiterIDs
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<SSHConnection, Error>) in
                guard !Task.isCancelled else {
                    continuation.resume(throwing: Self.cancelled(route))
                    return
                }
                waiting[id] = continuation
                switch state.request(route, waiter: id, now: Self.now(), isAlive: { $0.isAlive }) {
                case .use(let connection): resume(id, with: .success(connection))
                case .wait: break
                case .open(let ticket): startOpening(route, ticket: ticket, policy: policy)
                case .backoff(let until): resume(id, with: .failure(Resting(until: until)))
                case .closed: resume(id, with: .failure(SSHError.make(.sshClosed, "The connection pool is closed (termind is stopping); \(route) was not opened.")))
                }
            }
        } onCancel: {
            Task { await self.stopWaiting(id, route: route) }
        }
    }

    private func stopWaiting(_ id: UInt64, route: SSHRoute) {
        if let ticket = state.cancel(route, waiter: id) {
            openings.removeValue(forKey: ticket)?.cancel()
        }
        resume(id, with: .failure(Self.cancelled(route)))
    }

    private func resume(_ id: UInt64, with result: Result<SSHConnection, Error>) {
        waiting.removeValue(forKey: id)?.resume(with: result)
    }

    private func startOpening(_ route: SSHRoute, ticket: UInt64, policy: SSHOpenPolicy) {
        let hop = route.hops[route.hops.count - 1]
        openings[ticket] = Task {
            do {
                let via = route.hops.count > 1 ? try await self.connection(for: SSHRoute(Array(route.hops.dropLast()), context: route.context), policy: policy) : nil
                let connection = try await SSHConnection.open(hop, credentials: try await policy.credentials(hop), trust: policy.trust,
                                                              deadlines: policy.deadlines, keepalive: policy.keepalive,
                                                              logger: policy.logger?.child("hop\(route.hops.count)"), via: via,
                                                              keyboardInteractive: policy.keyboardInteractive, askUnknownHostKey: policy.askUnknownHostKey)
                await self.finishOpening(route, ticket: ticket, .success(connection))
            } catch {
                await self.finishOpening(route, ticket: ticket, .failure(error))
            }
        }
    }

    private func finishOpening(_ route: SSHRoute, ticket: UInt64, _ result: Result<SSHConnection, Error>) async {
        openings[ticket] = nil
        switch result {
        case .success(let connection):
            guard let waiters = state.opened(route, ticket: ticket, handle: connection, generation: connection.generation, now: Self.now()) else {
                await connection.close()  // nobody wants it any more
                return
            }
            let generation = connection.generation
            connection.onClose { [weak self] _ in
                Task { await self?.retired(route, generation: generation) }
            }
            startSweeping()
            for id in waiters { resume(id, with: .success(connection)) }
        case .failure(let error):
            let (fail, retry) = state.openFailed(route, ticket: ticket, kind: Self.kind(of: error), now: Self.now())
            for id in fail { resume(id, with: .failure(error)) }
            for id in retry { resume(id, with: .failure(RetryOpening())) }
        }
    }

    /// Failures that belong to the opener's own policy, not to the route.
    static func kind(of error: any Error) -> SSHPoolState<SSHRoute, SSHConnection>.FailureKind {
        guard let error = error as? TermindError else { return .shared }
        return error.isAny(of: [.sshHostKeyRejected, .sshHostKeyUnknown, .sshAuthCancelled, .sshCancelled]) ? .openersOwn : .shared
    }

    private static func cancelled(_ route: SSHRoute) -> TermindError {
        SSHError.make(.sshCancelled, "Waiting for the connection to \(route) was cancelled.")
    }

    private static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// The live connections, by route.
    public var routes: [SSHRoute] { state.openKeys(isAlive: { $0.isAlive }) }

    /// Closes every connection (targets before the jumps they run through) and cancels
    /// openings in progress, then waits for those openings to end (at most `openingsGrace`
    /// seconds): one still handshaking on its engine thread when the process exits would run
    /// OpenSSL while the process tears it down.
    public func closeAll(openingsGrace: Double = 2) async {
        let (open, waiters) = state.removeAll()
        for id in waiters { resume(id, with: .failure(SSHError.make(.sshClosed, "The connection pool was closed while the connection was being opened."))) }
        let cancelled = Array(openings.values)
        openings.removeAll()
        for opening in cancelled { opening.cancel() }
        sweeper?.cancel()
        sweeper = nil
        for connection in open.sorted(by: { depth($0) > depth($1) }) { await connection.close() }
        await Self.wait(for: cancelled, atMost: openingsGrace)
    }

    /// Returns when every task has ended, or after `seconds`, whichever comes first.
    private static func wait(for tasks: [Task<Void, Never>], atMost seconds: Double) async {
        guard !tasks.isEmpty else { return }
        let once = ResumeOnce()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            once.set(continuation)
            Task {
                for task in tasks { await task.value }
                once.resume()
            }
            Task {
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                once.resume()
            }
        }
    }

    private func depth(_ connection: SSHConnection) -> Int {
        var count = 0
        var cursor = connection.via
        while let next = cursor { count += 1; cursor = next.via }
        return count
    }

    /// Closes the connections the pool's state says are idle; they leave the pool in the same
    /// step (no connection can be handed out between the decision and the close). A jump
    /// host is busy while a route runs through it, so targets go first and their jumps
    /// follow on a later sweep.
    public func closeIdle() async {
        let idle = state.sweep(now: Self.now(), idleSeconds: { $0.idleSeconds })
        for connection in idle { await connection.close() }
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

    private func retired(_ route: SSHRoute, generation: UInt64) {
        state.retired(route, generation: generation)
    }
}

/// A connection from the pool held for work that outlives single channels (an SFTP browser,
/// a forward, a metrics sampler): the pool's idle sweep leaves it alone until `release()`
/// (or until the lease goes away).
public final class SSHConnectionLease: Sendable {
    public let connection: SSHConnection
    public let route: SSHRoute
    private let pool: SSHConnectionPool
    private let released = ManagedAtomicFlag()

    init(pool: SSHConnectionPool, route: SSHRoute, connection: SSHConnection) {
        self.pool = pool
        self.route = route
        self.connection = connection
    }

    /// Gives the lease back (once; later calls do nothing).
    public func release() {
        guard released.setFirst() else { return }
        let pool = self.pool, route = self.route, connection = self.connection
        Task { await pool.release(route, connection: connection) }
    }

    deinit { release() }
}

/// A continuation resumed by whichever caller comes first; later calls do nothing.
private final class ResumeOnce: Sendable {
    private let continuation = Mutex<CheckedContinuation<Void, Never>?>(nil)
    func set(_ continuation: CheckedContinuation<Void, Never>) { self.continuation.withLock { $0 = continuation } }
    func resume() { continuation.withLock { $0.take() }?.resume() }
}
