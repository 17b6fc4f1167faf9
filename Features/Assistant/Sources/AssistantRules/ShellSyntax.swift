/// A bounded reader of POSIX shell command lines, for the command classifier: it splits a
/// line into simple commands (words with quotes and escapes resolved, redirections, the
/// operators between them) and lifts out what runs inside (command and process
/// substitutions, `bash -c` scripts, here-documents). Anything it does not fully understand
/// (unbalanced quotes, `case`, function definitions, a nesting deeper than `depthLimit`) is
/// reported as such: the classifier then fails closed.
public enum ShellSyntax {
    public static let lengthLimit = 16 << 10
    public static let depthLimit = 4

    /// A word of a command: its text with quotes removed, and what in it the shell would
    /// still expand (a variable, a glob): its value is then not known here.
    public struct Word: Sendable, Equatable {
        public var text: String
        /// `$VAR`, `${…}`, `$(…)`, `` `…` ``, `$((…))` outside single quotes.
        public var expands = false
        /// An unquoted `*`, `?` or `[`: the shell may replace it with file names.
        public var globs = false
        public init(_ text: String, expands: Bool = false, globs: Bool = false) {
            self.text = text
            self.expands = expands
            self.globs = globs
        }
        /// Its text is what the command gets.
        public var isLiteral: Bool { !expands && !globs }
    }

    public struct Redirection: Sendable, Equatable {
        /// `>`, `>>`, `<`, `<<`, `<<-`, `<<<`, `>&`, `<&`, `&>`, `&>>`, `>|`, `<>`.
        public var op: String
        /// The descriptor written before it (`2>`), if any.
        public var descriptor: Int?
        public var target: Word
    }

    /// A command as the shell runs it: assignments before it, its words, its redirections.
    public struct Command: Sendable, Equatable {
        public var assignments: [Word] = []
        public var words: [Word] = []
        public var redirections: [Redirection] = []
        /// Run in the background (`&`).
        public var background = false
    }

    /// What a line holds.
    public struct Parsed: Sendable, Equatable {
        public var commands: [Command] = []
        /// The scripts that run inside it: substitutions (`$(…)`, backticks, `<(…)`,
        /// `>(…)`) and unquoted here-document bodies' substitutions.
        public var nested: [String] = []
        /// Here-document bodies fed to a command (by index in `commands`).
        public var hereDocuments: [Int: String] = [:]
    }

    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    static let reserved: Set<String> = ["if", "then", "elif", "else", "fi", "do", "done", "while", "until", "!", "{", "}"]

    public static func parse(_ line: String) throws(Problem) -> Parsed {
        guard line.utf8.count <= lengthLimit else { throw Problem("the command is longer than \(lengthLimit >> 10) KiB") }
        guard !line.unicodeScalars.contains(where: { $0.value == 0 }) else { throw Problem("the command holds a NUL character") }
        var reader = Reader(Array(line.unicodeScalars))
        return try reader.read()
    }

    private struct Reader {
        let text: [Unicode.Scalar]
        var index = 0
        var parsed = Parsed()
        var current = Command()
        /// Here-documents whose bodies start at the next newline: (delimiter, quoted, strip tabs, command).
        var pendingHereDocuments: [(String, Bool, Bool, Int)] = []
        /// The command position expects the words of a `for` header until `;` or a newline.
        var inForHeader = false
        /// Subshells open: a `)` without its `(`, or a `(` never closed, is not understood (it
        /// could close whatever wraps the command).
        var depth = 0

        init(_ text: [Unicode.Scalar]) { self.text = text }

        var atEnd: Bool { index >= text.count }
        func peek(_ offset: Int = 0) -> Unicode.Scalar? { index + offset < text.count ? text[index + offset] : nil }

        mutating func read() throws(Problem) -> Parsed {
            while !atEnd {
                let c = text[index]
                switch c {
                case " ", "\t":
                    index += 1
                case "\\" where peek(1) == "\n":
                    index += 2  // a line continued
                case "\n":
                    index += 1
                    try endCommand()
                    try readHereDocuments()
                case ";":
                    if peek(1) == ";" { throw Problem("`;;` (a case statement) is not understood") }
                    index += 1
                    try endCommand()
                case "&":
                    if peek(1) == "&" { index += 2; try endCommand() } else if peek(1) == ">" {
                        index += 1
                        try redirection(descriptor: nil, prefix: "&")
                    } else {
                        index += 1
                        current.background = true
                        try endCommand()
                    }
                case "|":
                    index += peek(1) == "|" || peek(1) == "&" ? 2 : 1
                    try endCommand()
                case "(":
                    guard current.words.isEmpty else { throw Problem("`(` after a command's words (a function definition) is not understood") }
                    index += 1  // a subshell: its commands are read as any
                    depth += 1
                    try endCommand()
                case ")":
                    guard depth > 0 else { throw Problem("`)` closes no `(`") }
                    depth -= 1
                    index += 1
                    try endCommand()
                case "<", ">":
                    if peek(1) == "(" {
                        // Process substitution: what runs inside is a script of its own.
                        index += 1
                        let inner = try balanced(open: "(", close: ")")
                        parsed.nested.append(inner)
                        current.words.append(Word("/dev/fd/63", expands: true))
                    } else {
                        try redirection(descriptor: nil, prefix: "")
                    }
                default:
                    // A descriptor number right before a redirection (`2>`, `2>&1`).
                    var digits = 0
                    while let d = peek(digits), d.properties.numericType == .decimal, d.isASCII { digits += 1 }
                    if c == "#" {
                        // A word that starts with # starts a comment.
                        while let next = peek(), next != "\n" { _ = next; index += 1 }
                    } else if digits > 0, let op = peek(digits), op == "<" || op == ">", peek(digits + 1) != "(" {
                        let number = Int(String(String.UnicodeScalarView(text[index..<(index + digits)])))
                        index += digits
                        try redirection(descriptor: number, prefix: "")
                    } else {
                        let word = try readWord()
                        try add(word)
                    }
                }
            }
            try endCommand()
            guard pendingHereDocuments.isEmpty else { throw Problem("a here-document has no end") }
            guard depth == 0 else { throw Problem("a `(` is never closed") }
            return parsed
        }

        mutating func add(_ word: Word) throws(Problem) {
            if current.words.isEmpty && !word.expands && !inForHeader {
                if word.text == "case" || word.text == "esac" || word.text == "function" || word.text == "select" || word.text == "coproc" {
                    throw Problem("`\(word.text)` is not understood")
                }
                if word.text == "for" {
                    inForHeader = true
                    return
                }
                if ShellSyntax.reserved.contains(word.text) { return }
                // NAME=value before the command.
                if let equals = word.text.firstIndex(of: "="), equals != word.text.startIndex,
                   word.text[..<equals].allSatisfy({ $0 == "_" || $0.isLetter || $0.isNumber }) {
                    current.assignments.append(word)
                    return
                }
            }
            if inForHeader { return }  // the loop's name and its list: their substitutions are lifted already
            if word.text == "]]" && !word.expands { return }
            current.words.append(word)
        }

        mutating func endCommand() throws(Problem) {
            inForHeader = false
            if !current.words.isEmpty || !current.assignments.isEmpty || !current.redirections.isEmpty {
                parsed.commands.append(current)
            }
            current = Command()
        }

        mutating func redirection(descriptor: Int?, prefix: String) throws(Problem) {
            var op = prefix
            while let c = peek(), c == "<" || c == ">" || c == "&" || c == "|" || c == "-", op.count < 3 {
                // `|` only right after `>` (`>|`); `-` only in `<<-`; `&` only after the arrows.
                if c == "|" && op != ">" { break }
                if c == "-" && op != "<<" { break }
                if c == "&" && op.isEmpty { break }
                op.unicodeScalars.append(c)
                index += 1
            }
            while peek() == " " || peek() == "\t" { index += 1 }
            guard !atEnd, peek() != "\n" else { throw Problem("`\(op)` has nothing after it") }
            let target = try readWord()
            if op == "<<" || op == "<<-" {
                // A delimiter quoted in any way (`'EOF'`, `\EOF`) keeps the body literal.
                let quoted = target.text != lastRaw
                pendingHereDocuments.append((target.text, quoted, op == "<<-", parsed.commands.count))
            }
            current.redirections.append(Redirection(op: op, descriptor: descriptor, target: target))
        }

        /// The last word as written (quotes and all).
        var lastRaw = ""

        mutating func readHereDocuments() throws(Problem) {
            for (delimiter, quoted, stripTabs, command) in pendingHereDocuments {
                var body: [String] = []
                var found = false
                while !atEnd {
                    var line = ""
                    while let c = peek(), c != "\n" {
                        line.unicodeScalars.append(c)
                        index += 1
                    }
                    if !atEnd { index += 1 }
                    let compared = stripTabs ? String(line.drop { $0 == "\t" }) : line
                    if compared == delimiter {
                        found = true
                        break
                    }
                    body.append(line)
                }
                guard found else { throw Problem("the here-document has no line \(delimiter)") }
                let text = body.joined(separator: "\n")
                parsed.hereDocuments[command] = text
                if !quoted {
                    var inner = Reader(Array(text.unicodeScalars))
                    inner.parsed.nested = []
                    parsed.nested += try inner.substitutions()
                }
            }
            pendingHereDocuments.removeAll()
        }

        /// The command substitutions in a text that only expands (a here-document body).
        mutating func substitutions() throws(Problem) -> [String] {
            var found: [String] = []
            while !atEnd {
                let c = text[index]
                if c == "\\" { index += 2; continue }
                if c == "$" && peek(1) == "(" {
                    index += 1
                    if peek(1) == "(" {
                        let arithmetic = try balanced(open: "(", close: ")")
                        guard !arithmetic.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0 == "_" || $0 == "$" || $0 == "`" }) else {
                            throw Problem("arithmetic with names or expansions is not understood")
                        }
                        found += Self.arithmeticScripts(arithmetic)
                    } else {
                        found.append(try balanced(open: "(", close: ")"))
                    }
                    continue
                }
                if c == "$" && peek(1) == "{" {
                    index += 1
                    let inner = try balanced(open: "{", close: "}")
                    guard !inner.isEmpty, inner.unicodeScalars.allSatisfy({ $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil)) }) else {
                        throw Problem("`${\(inner)}` is not understood (only ${NAME})")
                    }
                    continue
                }
                if c == "`" {
                    found.append(try backquoted())
                    continue
                }
                index += 1
            }
            return found
        }

        /// `((…))`'s inner text: arithmetic runs nothing unless it holds a substitution.
        static func arithmeticScripts(_ inner: String) -> [String] {
            inner.contains("$(") || inner.contains("`") ? [inner] : []
        }

        /// From an opening bracket at `index`, the text up to its matching close (quotes and
        /// nesting respected); `index` moves past the close.
        mutating func balanced(open: Unicode.Scalar, close: Unicode.Scalar) throws(Problem) -> String {
            guard peek() == open else { throw Problem("expected `\(open)`") }
            index += 1
            let start = index
            var depth = 1
            while !atEnd {
                let c = text[index]
                switch c {
                case "\\": index += 2; continue
                case "'":
                    index += 1
                    while let q = peek(), q != "'" { _ = q; index += 1 }
                    guard !atEnd else { throw Problem("a ' is not closed") }
                case "\"":
                    index += 1
                    while let q = peek(), q != "\"" { if q == "\\" { index += 1 }; index += 1 }
                    guard !atEnd else { throw Problem("a \" is not closed") }
                default:
                    if c == open { depth += 1 } else if c == close {
                        depth -= 1
                        if depth == 0 {
                            let inner = String(String.UnicodeScalarView(text[start..<index]))
                            index += 1
                            return inner
                        }
                    }
                }
                index += 1
            }
            throw Problem("a `\(open)` is not closed")
        }

        mutating func backquoted() throws(Problem) -> String {
            index += 1
            var inner = ""
            while let c = peek(), c != "`" {
                if c == "\\", let next = peek(1) {
                    inner.unicodeScalars.append(next)
                    index += 2
                    continue
                }
                inner.unicodeScalars.append(c)
                index += 1
            }
            guard !atEnd else { throw Problem("a ` is not closed") }
            index += 1
            return inner
        }

        /// One word: quotes removed, escapes resolved, substitutions lifted out (and the
        /// word marked as expanding).
        mutating func readWord() throws(Problem) -> Word {
            var word = Word("")
            let start = index
            loop: while let c = peek() {
                switch c {
                case " ", "\t", "\n", ";", "&", "|", "<", ">", ")":
                    break loop
                case "(":
                    // `$(` is handled below; a bare `(` inside a word (`a(b`) is not understood.
                    throw Problem("`(` inside a word is not understood")
                case "\\":
                    index += 1
                    if let next = peek() { word.text.unicodeScalars.append(next); index += 1 }
                case "'":
                    index += 1
                    while let q = peek(), q != "'" {
                        word.text.unicodeScalars.append(q)
                        index += 1
                    }
                    guard !atEnd else { throw Problem("a ' is not closed") }
                    index += 1
                case "\"":
                    index += 1
                    while let q = peek(), q != "\"" {
                        if q == "\\", let next = peek(1), "$`\"\\\n".unicodeScalars.contains(next) {
                            word.text.unicodeScalars.append(next)
                            index += 2
                        } else if q == "$" || q == "`" {
                            try expansion(into: &word)
                        } else {
                            word.text.unicodeScalars.append(q)
                            index += 1
                        }
                    }
                    guard !atEnd else { throw Problem("a \" is not closed") }
                    index += 1
                case "$", "`":
                    try expansion(into: &word)
                case "*", "?", "[":
                    word.globs = true
                    word.text.unicodeScalars.append(c)
                    index += 1
                case "{" where word.text.isEmpty && (peek(1) == nil || peek(1) == " " || peek(1) == ";" || peek(1) == "\n"),
                     "}" where word.text.isEmpty && (peek(1) == nil || peek(1) == " " || peek(1) == ";" || peek(1) == "\n"):
                    // A group's brace, a word of its own.
                    word.text.unicodeScalars.append(c)
                    index += 1
                    break loop
                default:
                    // A leading ~ becomes a home folder's path: known to be a path, never an option.
                    if c == "{" { word.globs = true }  // brace expansion
                    word.text.unicodeScalars.append(c)
                    index += 1
                }
            }
            lastRaw = String(String.UnicodeScalarView(text[start..<index]))
            // `[` and `]` alone are the test command and its end, not patterns.
            if ["[", "]", "[[", "]]"].contains(word.text) && lastRaw == word.text { word.globs = false }
            return word
        }

        /// `$NAME`, `${…}`, `$(…)`, `$((…))`, `` `…` `` at `index`: lifted out, the word marked.
        mutating func expansion(into word: inout Word) throws(Problem) {
            let c = text[index]
            if c == "`" {
                parsed.nested.append(try backquoted())
                word.expands = true
                return
            }
            // `$`
            guard let next = peek(1) else {
                word.text += "$"
                index += 1
                return
            }
            // bash reads these differently from POSIX sh (the remote login shell is often bash):
            // `$'…'` unescapes, `$"…"` translates. Not understood, so never taken as read-only.
            if next == "'" || next == "\"" { throw Problem("`$\(next)…` (bash's quoting) is not understood") }
            if next == "(" {
                index += 1
                if peek(1) == "(" {
                    let arithmetic = try balanced(open: "(", close: ")")
                    // Arithmetic evaluates a variable's value as arithmetic again (`a[$(cmd)]` runs cmd):
                    // only numbers and operators are understood.
                    guard !arithmetic.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0 == "_" || $0 == "$" || $0 == "`" }) else {
                        throw Problem("arithmetic with names or expansions is not understood")
                    }
                    parsed.nested += Self.arithmeticScripts(arithmetic)
                } else {
                    parsed.nested.append(try balanced(open: "(", close: ")"))
                }
                word.expands = true
            } else if next == "{" {
                index += 1
                let inner = try balanced(open: "{", close: "}")
                // Only `${NAME}` and `${N}` are understood: an operator (`:-`, `#`, `%`, `/`, `!`,
                // bash's `@P` that runs a value's `$(…)`, …) is not, so never read-only.
                let plain = inner.unicodeScalars.first.map { $0 == "_" || $0.properties.isAlphabetic } == true
                    && inner.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil)) }
                let digits = !inner.isEmpty && inner.unicodeScalars.allSatisfy { $0.isASCII && $0.properties.numericType == .decimal }
                guard plain || digits else { throw Problem("`${\(inner)}` is not understood (only ${NAME})") }
                word.expands = true
            } else if next == "_" || next.properties.isAlphabetic || next.properties.numericType != nil || "@*#?$!-".unicodeScalars.contains(next) {
                index += 2
                if next == "_" || next.properties.isAlphabetic {
                    while let more = peek(), more == "_" || more.properties.isAlphabetic || (more.properties.numericType != nil && more.isASCII) { index += 1 }
                }
                word.expands = true
            } else {
                word.text += "$"
                index += 1
            }
        }
    }
}
