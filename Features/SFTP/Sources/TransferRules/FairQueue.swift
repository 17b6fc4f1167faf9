/// The process scheduler's admission rule (seed, "One process scheduler"): at most `active`
/// files move at once and at most `perHost` on one host; the next file comes from the host
/// served longest ago, then from that host's source (a CLI invocation, an agent run, a batch)
/// served longest ago, first in, first out within a source. A file that touches two hosts (a
/// cross-host copy) takes one slot on each and one in the process. Limits are read at each
/// admission, so a change applies to what is still queued; what runs keeps running.
public struct FairQueue<ID: Hashable & Sendable>: Sendable {
    public struct Limits: Equatable, Sendable {
        public var active: Int
        public var perHost: Int
        public init(active: Int, perHost: Int) {
            self.active = active
            self.perHost = perHost
        }
    }

    private struct Entry: Sendable {
        let id: ID
        let hosts: [String]
        let source: String
        let sequence: UInt64
    }

    private var queued: [Entry] = []
    private var running: [ID: Entry] = [:]
    private var perHost: [String: Int] = [:]
    private var tick: UInt64 = 0
    private var sequence: UInt64 = 0
    private var hostServed: [String: UInt64] = [:]
    private var sourceServed: [String: UInt64] = [:]
    /// An entry put back (resumed) keeps its place in its source's order.
    private var places: [ID: UInt64] = [:]

    public init() {}

    public var activeCount: Int { running.count }
    public var queuedCount: Int { queued.count }
    public func isQueued(_ id: ID) -> Bool { queued.contains { $0.id == id } }
    public func isActive(_ id: ID) -> Bool { running[id] != nil }
    public func active(on host: String) -> Int { perHost[host] ?? 0 }

    /// Queues `id` for `hosts` (the first is the one it rotates under) from `source`.
    public mutating func enqueue(_ id: ID, hosts: [String], source: String) {
        precondition(!hosts.isEmpty, "a queued file names its host")
        let place: UInt64
        if let kept = places[id] {
            place = kept
        } else {
            sequence += 1
            place = sequence
            places[id] = place
        }
        var unique: [String] = []
        for host in hosts where !unique.contains(host) { unique.append(host) }
        let entry = Entry(id: id, hosts: unique, source: source, sequence: place)
        let index = queued.firstIndex { $0.sequence > place } ?? queued.endIndex
        queued.insert(entry, at: index)
    }

    /// Takes `id` out, queued or running (its slots free). Returns whether it was there.
    @discardableResult
    public mutating func remove(_ id: ID) -> Bool {
        if let entry = running.removeValue(forKey: id) {
            for host in entry.hosts { perHost[host, default: 1] -= 1 }
            return true
        }
        guard let index = queued.firstIndex(where: { $0.id == id }) else { return false }
        queued.remove(at: index)
        return true
    }

    /// Forgets `id` for good (its place in its source's order too).
    public mutating func finish(_ id: ID) {
        remove(id)
        places[id] = nil
    }

    /// The entries to start now, in the order they were chosen.
    public mutating func admit(_ limits: Limits) -> [ID] {
        let active = max(1, limits.active), host = max(1, min(limits.perHost, active))
        var started: [ID] = []
        var progress = true
        while progress, running.count < active, !queued.isEmpty {
            progress = false
            // Hosts by when they were last served (never first), then by their oldest entry.
            var oldest: [String: UInt64] = [:]
            for entry in queued where oldest[entry.hosts[0]] == nil { oldest[entry.hosts[0]] = entry.sequence }
            let hosts = oldest.keys.sorted { (hostServed[$0] ?? 0, oldest[$0]!) < (hostServed[$1] ?? 0, oldest[$1]!) }
            for name in hosts where running.count < active {
                // That host's sources by when they were last served; each offers its first entry only.
                var firsts: [String: Int] = [:]
                for (index, entry) in queued.enumerated() where entry.hosts[0] == name && firsts[entry.source] == nil { firsts[entry.source] = index }
                let sources = firsts.keys.sorted {
                    (sourceServed[name + "\u{0}" + $0] ?? 0, queued[firsts[$0]!].sequence) < (sourceServed[name + "\u{0}" + $1] ?? 0, queued[firsts[$1]!].sequence)
                }
                guard let index = sources.lazy.map({ firsts[$0]! }).first(where: { queued[$0].hosts.allSatisfy { (perHost[$0] ?? 0) < host } }) else { continue }
                let entry = queued.remove(at: index)
                tick += 1
                hostServed[name] = tick
                sourceServed[name + "\u{0}" + entry.source] = tick
                running[entry.id] = entry
                for h in entry.hosts { perHost[h, default: 0] += 1 }
                started.append(entry.id)
                progress = true
                break  // hosts are ranked again after each start
            }
        }
        return started
    }
}
