import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What the remote script said once, before its first snapshot.
public struct RemoteHeader: Sendable, Equatable {
    public var pageSize: UInt64
    public var clockTicks: UInt64
    public var hasNvidiaSMI: Bool
    public init(pageSize: UInt64, clockTicks: UInt64, hasNvidiaSMI: Bool) {
        self.pageSize = pageSize
        self.clockTicks = clockTicks
        self.hasNvidiaSMI = hasNvidiaSMI
    }
}

/// One snapshot's sections as the script printed them, each within its bound.
public struct RawSnapshot: Sendable, Equatable {
    public var sections: [RemoteScript.Section: [UInt8]] = [:]
    /// Sections dropped for their size: the bytes they held (never their content).
    public var oversized: [RemoteScript.Section: Int] = [:]
    public init() {}

    public func text(_ section: RemoteScript.Section) -> String? {
        sections[section].map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Splits the monitor channel's output into the header and snapshots, holding at most one
/// snapshot's bounded sections and one bounded line: a host that never ends a line, a
/// section or a snapshot costs termind at most those bounds, never more.
public struct SnapshotReader: Sendable {
    public enum Event: Sendable, Equatable {
        case header(RemoteHeader)
        case snapshot(RawSnapshot)
        /// The stream broke the protocol (bytes before a header beyond the bound, a bad
        /// header, an unknown section): described by what and how many bytes, not content.
        case violation(String)
    }

    /// Bytes a shell's start-up output may take before the header.
    public static let preambleLimit = 64 << 10
    /// Bytes one snapshot may take in all (the sum of the section bounds is larger).
    public static let snapshotLimit = 12 << 20

    private var line: [UInt8] = []
    private var lineOverflow = 0
    private var headerSeen = false
    private var preamble = 0
    private var current: RawSnapshot?
    private var section: RemoteScript.Section?
    private var sectionBytes = 0
    private var snapshotBytes = 0
    /// Bytes each file of the files section took so far in this snapshot.
    private var fileBytes: [RemoteScript.Section: Int] = [:]
    /// After a violation nothing more is read: the monitor restarts the channel.
    public private(set) var failed = false

    public init() {}

    /// Bytes held now: the unfinished line and the unfinished snapshot's sections.
    public var bufferedBytes: Int { line.count + (current?.sections.values.reduce(0) { $0 + $1.count } ?? 0) }

    /// Feeds output bytes; returns what they completed.
    public mutating func feed(_ bytes: some Collection<UInt8>) -> [Event] {
        if let events = bytes.withContiguousStorageIfAvailable({ feed(buffer: $0) }) { return events }
        return Array(bytes).withUnsafeBufferPointer { feed(buffer: $0) }
    }

    private mutating func feed(buffer: UnsafeBufferPointer<UInt8>) -> [Event] {
        var events: [Event] = []
        var start = 0
        while !failed, start < buffer.count {
            let rest = UnsafeBufferPointer(rebasing: buffer[start...])
            let newline = rest.firstIndex(of: UInt8(ascii: "\n")).map { $0 - rest.startIndex }
            let piece = UnsafeBufferPointer(rebasing: rest[..<(rest.startIndex + (newline ?? rest.count))])
            // A line is held only as far as its section can still use it (markers and
            // headers are short); the rest is counted, not kept.
            let room = max(0, lineLimit - line.count)
            if piece.count <= room {
                line.append(contentsOf: piece)
            } else {
                line.append(contentsOf: piece.prefix(room))
                lineOverflow += piece.count - room
            }
            guard let newline else { break }
            if let event = endLine() { events.append(event) }
            start += newline + 1
        }
        return events
    }

    /// A line's useful length: markers and headers are short; content is bounded by its section.
    private var lineLimit: Int {
        guard headerSeen, let section else { return 256 }
        return max(256, min(section.limit - sectionBytes, Self.snapshotLimit - snapshotBytes) + 1)
    }

    private mutating func endLine() -> Event? {
        defer {
            line.removeAll(keepingCapacity: line.capacity <= 64 << 10)
            lineOverflow = 0
        }
        let length = line.count + lineOverflow + 1
        guard headerSeen else {
            if line.first == RemoteScript.marker {
                return readHeader()
            }
            preamble += length
            if preamble > Self.preambleLimit {
                return fail("\(preamble) bytes of output came before the monitor's header")
            }
            return nil
        }
        if line.first == RemoteScript.marker, lineOverflow == 0 {
            let name = String(decoding: line.dropFirst(), as: UTF8.self)
            return marker(name)
        }
        // The script starts each marker on a line of its own: an empty line between sections is its.
        if section == nil, line.isEmpty, lineOverflow == 0 { return nil }
        guard current != nil else {
            return fail("\(length) bytes outside a snapshot")
        }
        guard let section else { return fail("\(length) bytes before the snapshot's first section") }
        snapshotBytes += length
        sectionBytes += length
        if section == .files {
            // `/proc/uptime:…`: the line goes to its file's own section, within that one's bound.
            if line.isEmpty && lineOverflow == 0 { return nil }
            guard let (target, start) = Self.route(line) else { return nil }  // a file termind did not ask for
            let size = (fileBytes[target] ?? 0) + length - start
            fileBytes[target] = size
            if size > target.limit || snapshotBytes > Self.snapshotLimit || lineOverflow > 0 {
                current?.sections[target] = nil
                current?.oversized[target] = size
            } else if current?.oversized[target] == nil {
                current?.sections[target, default: []].append(contentsOf: line[start...])
                current?.sections[target, default: []].append(UInt8(ascii: "\n"))
            }
            return nil
        }
        if sectionBytes > section.limit || snapshotBytes > Self.snapshotLimit {
            current?.sections[section] = nil
            current?.oversized[section] = sectionBytes
        } else {
            current?.sections[section, default: []].append(contentsOf: line)
            current?.sections[section, default: []].append(UInt8(ascii: "\n"))
        }
        return nil
    }

    private static let routes: [(prefix: [UInt8], section: RemoteScript.Section)] = RemoteScript.Section.procfs.map { (Array(($0.path + ":").utf8), $0) }

    /// The section a `path:content` line of the files section belongs to, and where its content starts.
    private static func route(_ line: [UInt8]) -> (RemoteScript.Section, Int)? {
        for route in routes where line.starts(with: route.prefix) { return (route.section, route.prefix.count) }
        return nil
    }

    private mutating func readHeader() -> Event? {
        let words = String(decoding: line.dropFirst(), as: UTF8.self).split(separator: " ")
        guard words.count == 5, words[0] == RemoteScript.header else {
            return fail("a malformed header line (\(line.count) bytes)")
        }
        guard words[1] == "\(RemoteScript.version)" else {
            return fail("protocol version \(words[1].prefix(8)) where \(RemoteScript.version) was expected")
        }
        guard let page = UInt64(words[2]), (512...(1 << 20)).contains(page), let ticks = UInt64(words[3]), (1...1_000_000).contains(ticks),
              words[4] == "0" || words[4] == "1" else {
            return fail("a header with an invalid page size, clock rate or GPU flag")
        }
        headerSeen = true
        return .header(RemoteHeader(pageSize: page, clockTicks: ticks, hasNvidiaSMI: words[4] == "1"))
    }

    private mutating func marker(_ name: String) -> Event? {
        switch name {
        case "snapshot":
            guard current == nil else { return fail("a snapshot started inside another") }
            current = RawSnapshot()
            section = nil
            snapshotBytes = 0
            sectionBytes = 0
            fileBytes = [:]
            return nil
        case "end":
            guard let snapshot = current else { return fail("a snapshot end without its start") }
            current = nil
            section = nil
            return .snapshot(snapshot)
        default:
            guard current != nil else { return fail("a section marker outside a snapshot") }
            guard let next = RemoteScript.Section(rawValue: name) else {
                return fail("an unknown section marker (\(name.utf8.count) bytes)")
            }
            guard current?.sections[next] == nil, current?.oversized[next] == nil else {
                return fail("the \(name) section twice in one snapshot")
            }
            section = next
            sectionBytes = 0
            current?.sections[next] = []
            return nil
        }
    }

    private mutating func fail(_ reason: String) -> Event {
        failed = true
        current = nil
        line = []
        return .violation(reason)
    }
}
