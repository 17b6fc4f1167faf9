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
        var quote: Character?
        var escaped = false
        for character in line {
            if escaped {
                // Inside "…" a backslash escapes only \ " $ `; before anything else it stays.
                if quote == "\"", !"\\\"$`".contains(character) { word.append("\\") }
                word.append(character)
                escaped = false
                continue
            }
            switch (quote, character) {
            case ("'", "'"), ("\"", "\""):
                quote = nil
            case ("'", _):
                word.append(character)
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
                word.append(character)
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
    /// where links lead).
    public static func resolve(_ path: String, folder: String, home: String) -> String {
        if path.hasPrefix("/") { return path }
        if path == "~" { return home }
        if path.hasPrefix("~/") { return join(home, String(path.dropFirst(2))) }
        if path.isEmpty || path == "." { return folder }
        return join(folder, path)
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
