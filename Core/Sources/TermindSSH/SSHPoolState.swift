/// Every decision of the connection pool as a value: which request opens a route, which
/// wait for that opening, who gets its result, which connections the idle sweep may close,
/// how long a route that keeps failing rests before it is tried again, and that a closed
/// pool opens nothing more.
/// No sockets, no tasks, no clock of its own — the actor `SSHConnectionPool` performs the
/// actions it returns, and the unit tests drive it directly.
///
/// `Key` is a route, `Handle` a live connection (both opaque here).
struct SSHPoolState<Key: Hashable, Handle: AnyObject> {
    typealias WaiterID = UInt64

    /// Why an opening failed, as far as its waiters are concerned.
    enum FailureKind: Equatable {
        /// The network or the server said no (refused, timed out, rejected credentials): the
        /// same for every caller, so every waiter gets it.
        case shared
        /// Only the opener's own answers or interaction said no (a host key it could not
        /// accept, prompts nobody answered, the opener gave up): the other waiters try again
        /// with their own policies.
        case openersOwn
    }

    enum RequestAction: Equatable {
        static func == (a: Self, b: Self) -> Bool {
            switch (a, b) {
            case (.use(let x), .use(let y)): x === y
            case (.open(let x), .open(let y)): x == y
            case (.wait, .wait): true
            case (.backoff(let x), .backoff(let y)): x == y
            case (.closed, .closed): true
            default: false
            }
        }

        /// A live connection: use it.
        case use(Handle)
        /// Nobody is opening it: this waiter opens it (ticket names the opening).
        case open(ticket: UInt64)
        /// Someone is opening it: wait for `opened` / `openFailed`.
        case wait
        /// The route's last openings failed for everyone: ask again at `until`, not before.
        case backoff(until: Double)
        /// The pool was closed (`removeAll`): nothing opens any more.
        case closed
    }

    /// After openings that failed for everyone (`shared`: refused, unreachable, timed out,
    /// credentials rejected) a route rests before the next attempt: 0.25 s after the first
    /// failure, doubling with each one in a row up to 8 s, and forgotten once an opening
    /// succeeds. Callers that retry at once (a forward's next client, a monitor's next
    /// sample, every feature after a network blip) then cannot hammer a host that is down
    /// or refusing — nor trip its MaxStartups or an intrusion blocker with failed logins —
    /// while a person trying again by hand waits at most 8 s.
    static var backoffBase: Double { 0.25 }
    static var backoffLimit: Double { 8 }

    /// The rest after `failures` shared failures in a row.
    static func backoff(afterFailures failures: Int) -> Double {
        min(backoffLimit, backoffBase * Double(1 << min(max(failures - 1, 0), 16)))
    }

    private enum Entry {
        /// `opener` is nil once the waiter that started it gave up (the others still wait).
        case opening(ticket: UInt64, opener: WaiterID?, waiters: [WaiterID])
        case open(Handle, generation: UInt64, leases: Int, handedOut: Double)
    }

    private var entries: [Key: Entry] = [:]
    private var tickets: UInt64 = 0
    /// Routes whose last openings failed for everyone: how many in a row, and until when
    /// they rest.
    private var failures: [Key: (count: Int, until: Double)] = [:]
    /// `removeAll` ran: the pool is closed for good.
    private(set) var isClosed = false
    /// Seconds a connection may sit unused (no lease, nothing on it, not handed out) before
    /// the sweep closes it; nil keeps connections until closed.
    let idleTimeout: Double?

    init(idleTimeout: Double?) { self.idleTimeout = idleTimeout }

    /// A waiter asks for `key` at time `now`. A live connection is handed out (which restarts
    /// its idle clock in the same step, so a sweep can never close what was just handed out).
    mutating func request(_ key: Key, waiter: WaiterID, now: Double, isAlive: (Handle) -> Bool) -> RequestAction {
        if isClosed { return .closed }
        switch entries[key] {
        case .open(let handle, let generation, let leases, _)? where isAlive(handle):
            entries[key] = .open(handle, generation: generation, leases: leases, handedOut: now)
            return .use(handle)
        case .opening(let ticket, let opener, var waiters)?:
            waiters.append(waiter)
            entries[key] = .opening(ticket: ticket, opener: opener, waiters: waiters)
            return .wait
        case .open?, nil:
            if let failed = failures[key], now < failed.until { return .backoff(until: failed.until) }
            tickets += 1
            entries[key] = .opening(ticket: tickets, opener: waiter, waiters: [])
            return .open(ticket: tickets)
        }
    }

    /// The opening `ticket` produced `handle`: it becomes the route's connection and every
    /// waiter (the opener first) gets it. A stale ticket (the route was closed meanwhile)
    /// changes nothing and returns nil: the caller closes the orphan.
    mutating func opened(_ key: Key, ticket: UInt64, handle: Handle, generation: UInt64, now: Double) -> [WaiterID]? {
        guard case .opening(ticket, let opener, let waiters)? = entries[key] else { return nil }
        entries[key] = .open(handle, generation: generation, leases: 0, handedOut: now)
        failures[key] = nil
        return (opener.map { [$0] } ?? []) + waiters
    }

    /// The opening `ticket` failed at `now`. `fail` get the error; `retry` ask again (one of
    /// them becomes the next opener). The opener always gets its own failure. A shared
    /// failure makes the route rest (`backoff`); the opener's own does not.
    mutating func openFailed(_ key: Key, ticket: UInt64, kind: FailureKind, now: Double) -> (fail: [WaiterID], retry: [WaiterID]) {
        guard case .opening(ticket, let opener, let waiters)? = entries[key] else { return ([], []) }
        entries[key] = nil
        if kind == .shared {
            let count = (failures[key]?.count ?? 0) + 1
            failures[key] = (count, now + Self.backoff(afterFailures: count))
        }
        let own = opener.map { [$0] } ?? []
        return kind == .shared ? (own + waiters, []) : (own, waiters)
    }

    /// A waiter stopped waiting (its task was cancelled). Returns the ticket to cancel when
    /// nobody waits for that opening any more; otherwise it goes on for the others (and a
    /// failure of the departed opener's own making sends them round again).
    mutating func cancel(_ key: Key, waiter: WaiterID) -> UInt64? {
        guard case .opening(let ticket, var opener, var waiters)? = entries[key] else { return nil }
        if let index = waiters.firstIndex(of: waiter) {
            waiters.remove(at: index)
        } else if opener == waiter {
            opener = nil
        } else {
            return nil
        }
        if opener == nil && waiters.isEmpty {
            entries[key] = nil
            return ticket
        }
        entries[key] = .opening(ticket: ticket, opener: opener, waiters: waiters)
        return nil
    }

    /// A lease keeps the connection from the idle sweep until released.
    mutating func lease(_ key: Key, handle: Handle) -> Bool {
        guard case .open(let current, let generation, let leases, let handedOut)? = entries[key], current === handle else { return false }
        entries[key] = .open(current, generation: generation, leases: leases + 1, handedOut: handedOut)
        return true
    }

    mutating func release(_ key: Key, handle: Handle, now: Double) {
        guard case .open(let current, let generation, let leases, _)? = entries[key], current === handle else { return }
        // The idle clock restarts when the last lease goes.
        entries[key] = .open(current, generation: generation, leases: max(0, leases - 1), handedOut: now)
    }

    func leases(_ key: Key) -> Int {
        if case .open(_, _, let leases, _)? = entries[key] { return leases }
        return 0
    }

    /// The connection of `generation` ended: it leaves the pool, unless the route has a newer
    /// one (a late notice never removes its replacement).
    mutating func retired(_ key: Key, generation: UInt64) {
        if case .open(_, generation, _, _)? = entries[key] { entries[key] = nil }
    }

    /// The connections to close now, removed from the pool in this same step: no lease,
    /// handed out longer ago than `idleTimeout`, and idle on the wire that long too
    /// (`idleSeconds` nil while a channel, an SFTP session, a listener or a route through it
    /// uses the connection).
    mutating func sweep(now: Double, idleSeconds: (Handle) -> Double?) -> [Handle] {
        guard let idleTimeout else { return [] }
        var closing: [Handle] = []
        for (key, entry) in entries {
            guard case .open(let handle, _, let leases, let handedOut) = entry, leases == 0, now - handedOut >= idleTimeout,
                  let idle = idleSeconds(handle), idle >= idleTimeout else { continue }
            entries[key] = nil
            closing.append(handle)
        }
        return closing
    }

    /// Everything, removed (closing the pool): the open connections to close, and the
    /// waiters of openings in progress, who are told the pool closed. From now on every
    /// request is answered `closed` (work that outlived its feature's stop, a plugin's
    /// abandoned stop, never opens a connection nobody would close).
    mutating func removeAll() -> (open: [Handle], waiters: [WaiterID]) {
        isClosed = true
        failures.removeAll()
        defer { entries.removeAll() }
        var open: [Handle] = [], waiters: [WaiterID] = []
        for entry in entries.values {
            switch entry {
            case .open(let handle, _, _, _): open.append(handle)
            case .opening(_, let opener, let others): waiters += (opener.map { [$0] } ?? []) + others
            }
        }
        return (open, waiters)
    }

    /// The keys with a live connection.
    func openKeys(isAlive: (Handle) -> Bool) -> [Key] {
        entries.compactMap { key, entry in
            if case .open(let handle, _, _, _) = entry, isAlive(handle) { return key }
            return nil
        }
    }
}
