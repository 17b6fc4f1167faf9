import struct FoundationEssentials.Data

/// What waits for a durable session's screen model, in order: output (with the terminal's
/// modes before it), gaps (output dropped), and other operations (`Other`: resizes,
/// redraws), so that a redraw shows exactly the output queued before it.
///
/// Bounded: output is coalesced into entries of at most `chunk` bytes (tiny chunks do not
/// pile up as many entries, and no entry grows without end); when more than `highWater`
/// bytes of output wait, the oldest entries become gaps until `lowWater` bytes are left —
/// the newest entry always stays. A gap keeps its size and the modes after it, so the
/// screen carries on from there (`TerminalScreen.resynchronize`).
///
/// Its operations are `@inlinable` so that a user's `Other` (private to Workspaces) gets
/// them specialized: run generic across the module boundary, a one-byte `feed` looked up
/// type metadata and witness tables on every chunk (about a tenth of serve's CPU per key).
public struct ScreenBacklog<Other>: Sendable where Other: Sendable {
    public enum Entry: Sendable {
        /// Output, with the modes before it (for a resynchronization after a gap).
        case output(Data, modesBefore: TerminalModes)
        /// Output dropped: its size, and the modes after it.
        case gap(Int, modesAfter: TerminalModes)
        case other(Other)
    }

    public let highWater: Int
    public let lowWater: Int
    public let chunk: Int
    /// What waits, in order (`entries`), and the bytes of output in it (`outputBytes`).
    @usableFromInline var waiting: [Entry] = []
    @usableFromInline var waitingBytes = 0
    @usableFromInline var waitingOthers = 0
    /// What waits, in order.
    public var entries: [Entry] { waiting }
    /// Bytes of output waiting (gaps not counted).
    public var outputBytes: Int { waitingBytes }
    /// Other operations waiting (`Other`).
    public var operationsWaiting: Int { waitingOthers }

    @inlinable
    public init(highWater: Int = 8 << 20, lowWater: Int = 1 << 20, chunk: Int = 256 << 10) {
        self.highWater = highWater
        self.lowWater = lowWater
        self.chunk = chunk
    }

    @inlinable
    public var isEmpty: Bool { waiting.isEmpty }

    /// Queues output; `modes` are the terminal's modes just before it.
    @inlinable
    public mutating func feed(_ data: Data, modesBefore modes: TerminalModes) {
        if case .output(var earlier, let before)? = waiting.last, earlier.count + data.count <= chunk {
            waiting.removeLast()
            earlier.append(data)  // in place: taken out of the list, it has no other owner
            waiting.append(.output(earlier, modesBefore: before))
        } else {
            waiting.append(.output(data, modesBefore: modes))
        }
        waitingBytes += data.count
        if waitingBytes > highWater { dropOldestOutput() }
    }

    @inlinable
    public mutating func append(_ other: Other) {
        waiting.append(.other(other))
        waitingOthers += 1
    }

    /// Drops every output and gap waiting; the other operations stay, in order.
    @inlinable
    public mutating func discardOutput() {
        waiting.removeAll { if case .other = $0 { false } else { true } }
        waitingBytes = 0
    }

    /// The next entry to carry out, if any.
    @inlinable
    public mutating func next() -> Entry? {
        guard !waiting.isEmpty else { return nil }
        let entry = waiting.removeFirst()
        switch entry {
        case .output(let data, _): waitingBytes -= data.count
        case .other: waitingOthers -= 1
        case .gap: break
        }
        return entry
    }

    /// Too far behind: the oldest output goes, the newest entry always stays.
    @inlinable
    mutating func dropOldestOutput() {
        for index in waiting.indices.dropLast() where waitingBytes > lowWater {
            guard case .output(let data, _) = waiting[index] else { continue }
            // The modes after it are the ones before the next output (or the newest's).
            let after = waiting[(index + 1)...].lazy.compactMap { entry -> TerminalModes? in
                if case .output(_, let modes) = entry { return modes } else { return nil }
            }.first ?? TerminalModes()
            waiting[index] = .gap(data.count, modesAfter: after)
            waitingBytes -= data.count
        }
    }
}
