/// One line typed at `termind sftp HOST`'s prompt: its words as a POSIX shell splits them
/// (blanks separate; '…' keeps everything; "…" keeps everything but the escapes \" \\ \$ \`;
/// a backslash outside quotes keeps the next character as it is), and paths resolved against
/// the folder the prompt is in.
public enum BrowseLine {
    public struct Problem: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    public static func words(_ line: String) throws(Problem) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Unicode.Scalar?
        var escaped = false
        // Scalars, not characters: a quote or blank followed by a combining mark is still one.
        for character in line.unicodeScalars {
            if escaped {
                // Inside "…" a backslash escapes only \ " $ `; before anything else it stays.
                if quote == "\"", !"\\\"$`".unicodeScalars.contains(character) { word.unicodeScalars.append("\\") }
                word.unicodeScalars.append(character)
                escaped = false
                continue
            }
            switch (quote, character) {
            case ("'", "'"), ("\"", "\""):
                quote = nil
            case ("'", _):
                word.unicodeScalars.append(character)
            case (_, "\\"):
                escaped = true
                inWord = true
            case (nil, "'"), (nil, "\""):
                quote = character
                inWord = true
            case (nil, " "), (nil, "\t"):
                if inWord { words.append(word) }
                word = ""
                inWord = false
            default:
                word.unicodeScalars.append(character)
                inWord = true
            }
        }
        if let quote { throw Problem(description: "the quote \(quote) is not closed") }
        if escaped { throw Problem(description: "the line ends with a backslash") }
        if inWord { words.append(word) }
        return words
    }

    /// `path` seen from `folder`: an absolute path stays as it is, `~` and `~/…` start at
    /// `home`, anything else is joined to `folder` (`..` is left to the server, which knows
    /// where links lead). For a path that will be matched as a pattern (`pattern`), the
    /// folder's or home's own `*`, `?`, `[` and `\` are escaped: after `cd 'run[1]'`,
    /// `rm old.log` is `run[1]/old.log`, never `run1/old.log`.
    public static func resolve(_ path: String, folder: String, home: String, pattern: Bool = false) -> String {
        let (folder, home) = pattern ? (escape(folder), escape(home)) : (folder, home)
        if path.hasPrefix("/") { return path }
        if path == "~" { return home }
        if path.hasPrefix("~/") { return join(home, String(path.dropFirst(2))) }
        if path.isEmpty || path == "." { return folder }
        return join(folder, path)
    }

    /// `text` with `*`, `?`, `[` and `\` made literal for a pattern (fnmatch's and glob's
    /// backslash).
    public static func escape(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            if "*?[\\".unicodeScalars.contains(scalar) { out.unicodeScalars.append("\\") }
            out.unicodeScalars.append(scalar)
        }
        return out
    }

    private static func join(_ folder: String, _ name: String) -> String {
        if name.isEmpty { return folder }
        return folder.hasSuffix("/") ? folder + name : folder + "/" + name
    }

    /// Splits leading options (`-r`, `-rp`) from the words after them; `--` ends them. A word
    /// that is only `-` is not an option.
    public static func options(_ words: ArraySlice<String>) -> (flags: Set<Character>, rest: [String]) {
        var flags: Set<Character> = []
        var index = words.startIndex
        while index < words.endIndex, words[index].hasPrefix("-"), words[index] != "-" {
            let word = words[index]
            index += 1
            if word == "--" { break }
            flags.formUnion(word.dropFirst())
        }
        return (flags, Array(words[index...]))
    }
}
