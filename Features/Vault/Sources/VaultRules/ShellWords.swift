/// Word splitting without a shell: quotes and backslashes group and escape characters,
/// nothing is expanded (`$`, backticks, globs and `~` stay literal) and nothing is run.
enum ShellWords {
    enum Failure: Error, Equatable {
        case unterminatedQuote(Character)
        case trailingBackslash
    }

    /// Splits like a POSIX shell's tokeniser: single quotes are literal, double quotes allow
    /// `\"`, `\\`, `\$` and `` \` `` escapes, an unquoted backslash escapes any character.
    static func split(_ text: String) throws(Failure) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character? = nil
        var iterator = text.makeIterator()
        while let c = iterator.next() {
            if let q = quote {
                if c == q {
                    quote = nil
                } else if q == "\"", c == "\\" {
                    guard let next = iterator.next() else { throw .unterminatedQuote(q) }
                    if next != "\"" && next != "\\" && next != "$" && next != "`" { word.append("\\") }
                    word.append(next)
                } else {
                    word.append(c)
                }
                continue
            }
            switch c {
            case " ", "\t", "\n", "\r":
                if inWord { words.append(word); word = ""; inWord = false }
            case "'", "\"":
                quote = c
                inWord = true
            case "\\":
                guard let next = iterator.next() else { throw .trailingBackslash }
                word.append(next)
                inWord = true
            default:
                word.append(c)
                inWord = true
            }
        }
        if let q = quote { throw .unterminatedQuote(q) }
        if inWord { words.append(word) }
        return words
    }

    /// Splits an ssh_config argument list exactly like OpenSSH's `argv_split(s, .., 1)`:
    /// spaces and tabs separate, `'` and `"` quote, `\'`, `\"`, `\\` (and `\ ` outside
    /// quotes) are escapes, other backslashes stay, and `#` at the start of a word ends the
    /// line. Returns nil for an unterminated quote.
    static func splitConfigArguments(_ text: Substring) -> [String]? {
        let s = Array(text.unicodeScalars)
        var words: [String] = []
        var i = 0
        while i < s.count {
            if s[i] == " " || s[i] == "\t" { i += 1; continue }
            if s[i] == "#" { break }
            var quote: Unicode.Scalar? = nil
            var word = String.UnicodeScalarView()
            while i < s.count {
                let c = s[i]
                if c == "\\" {
                    if i + 1 < s.count, s[i + 1] == "'" || s[i + 1] == "\"" || s[i + 1] == "\\" || (quote == nil && s[i + 1] == " ") {
                        i += 1
                        word.append(s[i])
                    } else {
                        word.append(c)
                    }
                } else if quote == nil && (c == " " || c == "\t") {
                    break
                } else if quote == nil && (c == "\"" || c == "'") {
                    quote = c
                } else if quote != nil && c == quote {
                    quote = nil
                } else {
                    word.append(c)
                }
                i += 1
            }
            if quote != nil { return nil }
            words.append(String(word))
        }
        return words
    }
}
