/// The process scheduler's admission rule (seed, "One process scheduler"): at most `active`
/// files move at once and at most `perHost` on one host; the next file comes from the host
/// served longest ago, then from that host's source (a CLI invocation, an agent run, a batch)
/// served longest ago, first in, first out within a source. A file that touches two hosts (a
/// cross-host copy) takes one slot on each and one in the process. Limits are read at each
/// admission, so a change applies to what is still queued; what runs keeps running.
///
/// Queued entries are kept by host, then by source, each source's in order: choosing the
/// next file costs the number of hosts and sources waiting, not the number of files.
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

    /// One source's queued entries by sequence: taken from the front by moving `head`, so
    /// neither taking nor adding copies the others (a run queues thousands of files).
    private struct Line {
        var entries: [Entry] = []
        var head = 0
        var first: Entry { entries[head] }
        var isEmpty: Bool { head == entries.count }
        mutating func insert(_ entry: Entry) {
            // Almost always the newest; a resumed entry goes back to its place.
            var index = entries.endIndex
            while index > head, entries[index - 1].sequence > entry.sequence { index -= 1 }
            entries.insert(entry, at: index)
        }
        mutating func takeFirst() -> Entry {
            let entry = entries[head]
            head += 1
            if head >= 64, head * 2 >= entries.count {
                entries.removeFirst(head)
                head = 0
            }
            return entry
        }
        mutating func remove(_ id: ID) {
            guard let index = entries[head...].firstIndex(where: { $0.id == id }) else { return }
            entries.remove(at: index)
        }
    }

    /// Host (the first of an entry's) → source → its entries by sequence.
    private var waiting: [String: [String: Line]] = [:]
    private var where_: [ID: (host: String, source: String)] = [:]
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
    public func active(on host: String) -> Int { perHost[host] ?? 0 }

    /// Queues `id` for `hosts` (the first is the one it rotates under) from `source`.
    @_specialize(exported: true, where ID == UInt64)
    public mutating func enqueue(_ id: ID, hosts: [String], source: String) {
        precondition(!hosts.isEmpty, "a queued file names its host")
        guard where_[id] == nil, running[id] == nil else { return }
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
        // In place: a copy of the line per file made queueing thousands quadratic.
        waiting[unique[0], default: [:]][source, default: Line()].insert(Entry(id: id, hosts: unique, source: source, sequence: place))
        where_[id] = (unique[0], source)
    }

    /// Takes `id` out, queued or running (its slots free). Returns whether it was there.
    @_specialize(exported: true, where ID == UInt64)
    @discardableResult
    public mutating func remove(_ id: ID) -> Bool {
        if let entry = running.removeValue(forKey: id) {
            for host in entry.hosts { perHost[host, default: 1] -= 1 }
            return true
        }
        guard let (host, source) = where_.removeValue(forKey: id) else { return false }
        waiting[host]?[source]?.remove(id)
        if waiting[host]?[source]?.isEmpty == true { waiting[host]?[source] = nil }
        if waiting[host]?.isEmpty == true { waiting[host] = nil }
        return true
    }

    /// Forgets `id` for good (its place in its source's order too).
    @_specialize(exported: true, where ID == UInt64)
    public mutating func finish(_ id: ID) {
        remove(id)
        places[id] = nil
    }

    /// The entries to start now, in the order they were chosen.
    @_specialize(exported: true, where ID == UInt64)
    public mutating func admit(_ limits: Limits) -> [ID] {
        let active = max(1, limits.active), host = max(1, min(limits.perHost, active))
        // Nothing can start while the first host of every waiting file is full (the common
        // case: one host, its slots taken), answered without ranking hosts and sources.
        if waiting.keys.allSatisfy({ (perHost[$0] ?? 0) >= host }) { return [] }
        var started: [ID] = []
        var progress = true
        while progress, running.count < active, !waiting.isEmpty {
            progress = false
            // Hosts by when they were last served (never first), then by their oldest entry.
            let hosts = waiting.map { name, sources in (name, hostServed[name] ?? 0, sources.values.map { $0.first.sequence }.min() ?? 0) }
                .sorted { ($0.1, $0.2) < ($1.1, $1.2) }
            for (name, _, _) in hosts {
                // That host's sources by when they were last served; each offers its first entry only.
                let sources = waiting[name]!.map { source, line in (source, sourceServed[name + "\u{0}" + source] ?? 0, line.first) }
                    .sorted { ($0.1, $0.2.sequence) < ($1.1, $1.2.sequence) }
                guard let (source, _, entry) = sources.first(where: { $0.2.hosts.allSatisfy { (perHost[$0] ?? 0) < host } }) else { continue }
                _ = waiting[name]![source]!.takeFirst()
                if waiting[name]![source]!.isEmpty { waiting[name]![source] = nil }
                if waiting[name]!.isEmpty { waiting[name] = nil }
                where_[entry.id] = nil
                tick += 1
                hostServed[name] = tick
                sourceServed[name + "\u{0}" + source] = tick
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
