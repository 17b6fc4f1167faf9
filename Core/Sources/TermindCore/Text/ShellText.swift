extension String {
    /// Every occurrence of `target`'s UTF-8 bytes replaced by `replacement`'s, left to right.
    /// Byte-wise on purpose: Swift's `replacing` and Foundation's `replacingOccurrences`
    /// compare Characters, so a `'` followed by a combining mark (one Character, `'́`) is not
    /// found, and a secret followed by one is not redacted. UTF-8 is self-synchronising, so a
    /// match of valid text always starts and ends on scalar boundaries and the result is valid.
    public func replacingUTF8(_ target: String, with replacement: String) -> String {
        let needle = Array(target.utf8)
        guard !needle.isEmpty else { return self }
        let haystack = Array(utf8)
        guard haystack.count >= needle.count else { return self }
        let substitute = Array(replacement.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(haystack.count)
        var index = 0
        var replaced = false
        while index < haystack.count {
            if haystack[index] == needle[0], index + needle.count <= haystack.count, haystack[index..<index + needle.count].elementsEqual(needle) {
                out += substitute
                index += needle.count
                replaced = true
            } else {
                out.append(haystack[index])
                index += 1
            }
        }
        return replaced ? String(decoding: out, as: UTF8.self) : self
    }
}

/// Text for a POSIX shell.
public enum ShellText {
    /// `text` as one single-quoted shell word, each `'` written as `'\''` (on bytes: see
    /// `replacingUTF8`; a quote the replace missed would end the word and let the rest run).
    public static func singleQuoted(_ text: String) -> String {
        "'" + text.replacingUTF8("'", with: "'\\''") + "'"
    }
}
