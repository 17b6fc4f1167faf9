extension SSHConfig {
    /// The blocks of one entry list, so resolving a host visits only blocks that can apply
    /// to it. A `Host` block whose patterns are all literal (no `*`, `?` or `!`) activates
    /// only for a host it names byte for byte; for any other host it just ends inactive, and
    /// everything in it — options and Includes, which are then read as never matching — has
    /// no effect. Skipping it is therefore exact, and turns importing N hosts from an N-block
    /// file from O(N²) entry visits into about O(N).
    struct BlockIndex: Sendable {
        /// Entries before the first Host/Match line: they apply to every host.
        let preamble: Range<Int>
        /// Each block: a Host, Match or unreadable block line and the entries after it.
        let blocks: [Range<Int>]
        /// Literal-only Host blocks, by the UTF-8 bytes of each pattern they name.
        let literal: [[UInt8]: [Int]]
        /// Blocks every host must evaluate (patterns with wildcards or negation, Match, broken).
        let general: [Int]

        init(_ entries: [Entry]) {
            var starts: [Int] = []
            for (index, entry) in entries.enumerated() {
                switch entry {
                case .host, .match, .brokenBlock: starts.append(index)
                default: break
                }
            }
            preamble = 0..<(starts.first ?? entries.count)
            blocks = starts.enumerated().map { i, start in start..<(i + 1 < starts.count ? starts[i + 1] : entries.count) }
            var literal: [[UInt8]: [Int]] = [:]
            var general: [Int] = []
            for (b, range) in blocks.enumerated() {
                if case .host(let patterns, _) = entries[range.lowerBound],
                   patterns.allSatisfy({ !$0.contains(where: { $0 == "*" || $0 == "?" || $0 == "!" }) }) {
                    for pattern in Set(patterns.map { Array($0.utf8) }) { literal[pattern, default: []].append(b) }
                } else {
                    general.append(b)
                }
            }
            self.literal = literal
            self.general = general
        }

        /// Blocks that can apply to `host`, in file order.
        func blocks(for host: String) -> [Range<Int>] {
            let named = literal[Array(host.utf8)] ?? []
            var result: [Range<Int>] = []
            result.reserveCapacity(general.count + named.count)
            var g = 0, n = 0
            while g < general.count || n < named.count {
                if n >= named.count || (g < general.count && general[g] < named[n]) {
                    result.append(blocks[general[g]]); g += 1
                } else {
                    result.append(blocks[named[n]]); n += 1
                }
            }
            return result
        }
    }
}
