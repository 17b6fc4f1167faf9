import struct Foundation.Data

/// What waits for a durable session's screen model, in order: output (with the terminal's
/// modes before it), gaps (output dropped), and other operations (`Other`: resizes,
/// redraws), so that a redraw shows exactly the output queued before it.
///
/// Bounded: output is coalesced into entries of at most `chunk` bytes (tiny chunks do not
/// pile up as many entries, and no entry grows without end); when more than `highWater`
/// bytes of output wait, the oldest entries become gaps until `lowWater` bytes are left —
/// the newest entry always stays. A gap keeps its size and the modes after it, so the
/// screen carries on from there (`TerminalScreen.resynchronize`).
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
    public private(set) var entries: [Entry] = []
    /// Bytes of output waiting (gaps not counted).
    public private(set) var outputBytes = 0

    public init(highWater: Int = 8 << 20, lowWater: Int = 1 << 20, chunk: Int = 256 << 10) {
        self.highWater = highWater
        self.lowWater = lowWater
        self.chunk = chunk
    }

    public var isEmpty: Bool { entries.isEmpty }

    /// Queues output; `modes` are the terminal's modes just before it.
    public mutating func feed(_ data: Data, modesBefore modes: TerminalModes) {
        if case .output(var earlier, let before)? = entries.last, earlier.count + data.count <= chunk {
            entries.removeLast()
            earlier.append(data)  // in place: taken out of the list, it has no other owner
            entries.append(.output(earlier, modesBefore: before))
        } else {
            entries.append(.output(data, modesBefore: modes))
        }
        outputBytes += data.count
        if outputBytes > highWater { dropOldestOutput() }
    }

    public mutating func append(_ other: Other) { entries.append(.other(other)) }

    /// Drops every output and gap waiting; the other operations stay, in order.
    public mutating func discardOutput() {
        entries.removeAll { if case .other = $0 { false } else { true } }
        outputBytes = 0
    }

    /// The next entry to carry out, if any.
    public mutating func next() -> Entry? {
        guard !entries.isEmpty else { return nil }
        let entry = entries.removeFirst()
        if case .output(let data, _) = entry { outputBytes -= data.count }
        return entry
    }

    /// Too far behind: the oldest output goes, the newest entry always stays.
    private mutating func dropOldestOutput() {
        for index in entries.indices.dropLast() where outputBytes > lowWater {
            guard case .output(let data, _) = entries[index] else { continue }
            // The modes after it are the ones before the next output (or the newest's).
            let after = entries[(index + 1)...].lazy.compactMap { entry -> TerminalModes? in
                if case .output(_, let modes) = entry { return modes } else { return nil }
            }.first ?? TerminalModes()
            entries[index] = .gap(data.count, modesAfter: after)
            outputBytes -= data.count
        }
    }
}
