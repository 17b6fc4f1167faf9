import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The byte channels' records (docs/mcp.md, "Files"), pure: every link's state from its
/// creation to its end, what a request's head may claim, and the limits — at most four links
/// moving bytes at once, per direction at most 64 unfinished and 256 finished links, finished
/// ones kept thirty minutes, each link ten minutes from its creation. The clock is passed in.
public struct LinkBook: Sendable {
    public typealias Direction = ByteChannelRules.Direction

    public enum State: String, Sendable, Equatable { case ready, active, paused, completed, failed, revoked }

    public struct Link: Sendable, Equatable {
        public let id: String
        /// SHA-256 of the capability (the capability itself is never kept).
        public let key: String
        public let direction: Direction
        /// The saved host's id and the path, as the tool resolved them.
        public let host: String
        public let path: String
        /// The MCP session (its conversation) that made it.
        public let owner: String
        public let created: Double
        public let expires: Double
        /// Upload: the exact length and SHA-256 the bytes must have; whether to replace.
        public let size: UInt64?
        public let sha256: String?
        public let replace: Bool
        public internal(set) var state: State = .ready
        /// Upload: the bytes the host acknowledged; download: the bytes the last read sent.
        public var bytes: UInt64 = 0
        public var error: String?
        public internal(set) var finished: Double?
        /// Each claim's number: a late release of an older claim changes nothing.
        public internal(set) var generation = 0

        public var unfinished: Bool { state == .ready || state == .active || state == .paused }
    }

    /// A request refused at its head: the status, why, and headers to send.
    public struct Refusal: Error, Sendable, Equatable {
        public let status: Int
        public let message: String
        public let headers: [String: String]
        init(_ status: Int, _ message: String, headers: [String: String] = [:]) {
            self.status = status
            self.message = message
            self.headers = headers
        }
    }

    public private(set) var links: [String: Link] = [:]
    private var next = 0
    private var active = 0
    /// Keys revoked (by expiry or by `revoke`) since `takeRevoked` last ran.
    private var revokedKeys: [String] = []

    public init() {}

    public var activeCount: Int { active }

    /// The keys revoked since the last call, by any operation (whose partial uploads the
    /// caller drops).
    public mutating func takeRevoked() -> [String] {
        defer { revokedKeys.removeAll() }
        return revokedKeys
    }

    /// A new link for `key` (the capability's SHA-256); refused past the unfinished limit.
    public mutating func create(_ direction: Direction, key: String, host: String, path: String, owner: String, size: UInt64? = nil, sha256: String? = nil,
                                replace: Bool = false, now: Double) throws(Refusal) -> Link {
        _ = prune(now: now)
        let same = links.values.filter { $0.direction == direction }
        guard same.filter(\.unfinished).count < ByteChannelRules.unfinishedLimit else {
            throw Refusal(429, "\(ByteChannelRules.unfinishedLimit) \(direction) links are unfinished already: finish some, or wait for them to expire (ten minutes).")
        }
        next += 1
        let link = Link(id: "\(direction == .upload ? "u" : "d")\(next)", key: key, direction: direction, host: host, path: path, owner: owner, created: now,
                        expires: now + ByteChannelRules.lifetime, size: size, sha256: sha256, replace: replace)
        links[key] = link
        return link
    }

    /// At most `finishedLimit` finished links a direction: the oldest go first.
    private mutating func trim() {
        for direction in [Direction.upload, .download] {
            let finished = links.values.filter { $0.direction == direction && !$0.unfinished }.sorted { ($0.finished ?? 0, $0.id) < ($1.finished ?? 0, $1.id) }
            for link in finished.prefix(max(0, finished.count - ByteChannelRules.finishedLimit)) { links.removeValue(forKey: link.key) }
        }
    }

    /// Expired links that were not moving bytes are revoked; finished ones go after thirty
    /// minutes. The keys revoked (their partial uploads are to be dropped).
    public mutating func prune(now: Double) -> [String] {
        var revoked: [String] = []
        for (key, link) in links {
            if link.unfinished, link.state != .active, now > link.expires {
                links[key]?.state = .revoked
                links[key]?.error = "expired"
                links[key]?.finished = now
                revoked.append(key)
                revokedKeys.append(key)
            } else if let finished = link.finished, now - finished > ByteChannelRules.keptFor {
                links.removeValue(forKey: key)
            }
        }
        trim()
        return revoked
    }

    /// Claims `key` for a request's head, before its body is read or its host contacted: a
    /// download's `range` (its Range header) must be the one form taken; an upload's
    /// `offset` (Upload-Offset) and `length` (Content-Length) must be what is left.
    public mutating func claim(_ key: String, direction: Direction, range: String?, offset: String?, length: String?, now: Double) -> Result<Link, Refusal> {
        _ = prune(now: now)
        guard var link = links[key], link.direction == direction else {
            return .failure(Refusal(404, "No such \(direction) link (it expired long ago, was never made, or this is the other direction's)."))
        }
        switch link.state {
        case .revoked: return .failure(Refusal(410, "This link was revoked (\(link.error ?? "its session ended")."))
        case .failed where direction == .upload: return .failure(Refusal(410, "This upload failed: \(link.error ?? "failed"); nothing was committed."))
        case .active: return .failure(Refusal(409, "This link is in use by another request: one at a time."))
        case .completed where direction == .upload: return .failure(Refusal(409, "This upload was committed already; its bytes are never sent twice."))
        default: break
        }
        guard now <= link.expires else { return .failure(Refusal(410, "This link expired.")) }
        if direction == .download {
            guard case .some(.some) = ByteChannelRules.rangeStart(range) else {
                return .failure(Refusal(416, "A download takes at most one Range: bytes=N- (the link is not used up)."))
            }
        } else if let problem = ByteChannelRules.uploadProblem(said: offset, length: length, acknowledged: link.bytes, size: link.size ?? 0) {
            return .failure(Refusal(409, problem + ".", headers: ["Upload-Offset": "\(link.bytes)"]))
        }
        guard active < ByteChannelRules.activeSlots else {
            return .failure(Refusal(503, "\(ByteChannelRules.activeSlots) links are moving bytes already: try again shortly.", headers: ["Retry-After": "2"]))
        }
        link.state = .active
        link.generation += 1
        active += 1
        links[key] = link
        return .success(link)
    }

    /// Ends claim `generation` of `key` with `state` (and what `change` sets); false when a
    /// newer claim or a revocation came meanwhile (nothing changes then).
    @discardableResult
    public mutating func release(_ key: String, generation: Int, to state: State, now: Double, _ change: (inout Link) -> Void = { _ in }) -> Bool {
        guard var link = links[key], link.generation == generation else { return false }
        if link.state == .active { active -= 1 }
        link.state = state
        change(&link)
        if !link.unfinished { link.finished = now }
        links[key] = link
        trim()
        return true
    }

    /// Revokes `owner`'s links (all when nil): unfinished ones, and finished downloads (which
    /// take a Range until they expire). The keys revoked.
    public mutating func revoke(owner: String?, now: Double) -> [String] {
        var revoked: [String] = []
        for (key, link) in links where (owner == nil || link.owner == owner) && (link.unfinished || (link.direction == .download && link.state == .completed)) {
            if link.state == .active { active -= 1 }
            links[key]?.state = .revoked
            links[key]?.error = "revoked"
            links[key]?.finished = now
            links[key]?.generation += 1
            revoked.append(key)
            revokedKeys.append(key)
        }
        trim()
        return revoked
    }

    /// A link of `owner` by id (for `sftp_link_status`).
    public mutating func status(_ id: String, owner: String, now: Double) -> Link? {
        _ = prune(now: now)
        return links.values.first { $0.id == id && $0.owner == owner }
    }
}
