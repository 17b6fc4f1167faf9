/// OpenSSH's patterns (match.c), the one port of them in termind: `*` matches any run of
/// bytes (including none), `?` any one byte, every other byte itself. Used for Host and Match
/// lines of ssh_config, IgnoreUnknown, and known_hosts host fields.
enum SSHPattern {
    /// match.c match_pattern, bytewise. Iterative (one remembered `*`), so no pattern can make
    /// it take exponential time.
    static func match(_ string: String, _ pattern: String) -> Bool {
        match(Array(string.utf8)[...], Array(pattern.utf8)[...])
    }

    static func match(_ s: ArraySlice<UInt8>, _ p: ArraySlice<UInt8>) -> Bool {
        var si = s.startIndex, pi = p.startIndex
        var starP: Int?, starS = s.startIndex
        while si < s.endIndex {
            if pi < p.endIndex && (p[pi] == UInt8(ascii: "?") || (p[pi] == s[si] && p[pi] != UInt8(ascii: "*"))) {
                si += 1; pi += 1
            } else if pi < p.endIndex && p[pi] == UInt8(ascii: "*") {
                starP = pi; starS = si; pi += 1
            } else if let star = starP {
                pi = star + 1; starS += 1; si = starS
            } else {
                return false
            }
        }
        while pi < p.endIndex && p[pi] == UInt8(ascii: "*") { pi += 1 }
        return pi == p.endIndex
    }

    /// match.c match_pattern_list: 1 if a subpattern of the comma-separated `list` matches,
    /// -1 as soon as a negated (`!pattern`) one does, 0 otherwise. With `lowercasePatterns`
    /// (OpenSSH's dolower) the patterns are ASCII-lowercased; the caller lowercases `string`
    /// where OpenSSH does. A subpattern of 1023 or more bytes makes the whole list fail (0),
    /// as OpenSSH's fixed buffer does.
    static func matchList(_ string: String, _ list: String, lowercasePatterns: Bool) -> Int {
        matchList(Array(string.utf8)[...], Array(list.utf8), lowercasePatterns: lowercasePatterns)
    }

    static func matchList(_ string: ArraySlice<UInt8>, _ list: [UInt8], lowercasePatterns: Bool) -> Int {
        var gotPositive = false
        var i = 0
        while i < list.count {
            let negated = list[i] == UInt8(ascii: "!")
            if negated { i += 1 }
            var sub: [UInt8] = []
            while i < list.count, list[i] != UInt8(ascii: ",") {
                sub.append(lowercasePatterns ? asciiLower(list[i]) : list[i])
                i += 1
            }
            if sub.count >= 1023 { return 0 }
            if i < list.count { i += 1 }  // the comma
            if match(string, sub[...]) {
                if negated { return -1 }
                gotPositive = true
            }
        }
        return gotPositive ? 1 : 0
    }

    static func asciiLower(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }

    /// ASCII-only lowercasing, as C's tolower (what OpenSSH applies to host names).
    static func asciiLowercased(_ text: String) -> String {
        String(decoding: text.utf8.map(asciiLower), as: UTF8.self)
    }
}
