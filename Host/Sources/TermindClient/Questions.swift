import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// The questions a stream may ask (docs/contracts.md, Streams), answered in this order:
/// from `--answers FILE` by the question's topic, `--yes` for a yes/no confirmation, then
/// by the person at the controlling terminal. The feature words them; the text shown is
/// escaped (it may hold a server's). With none of these a question is answered
/// `{"unanswered": true}`, never with a guess: the feature then fails closed and says what
/// to do instead.
struct Questions: Sendable {
    /// A scripted answer that does not fit its question.
    static let invalidAnswer: ErrorCode = "answers.invalid"
    /// A secret prompt answered from a file others can read.
    static let unsafeAnswers: ErrorCode = "answers.unsafe"

    /// Where questions are asked (and the editor found): the run's console.
    let console: Console
    /// Scripted answers by topic.
    let book: [String: JSONValue]
    /// Whether `book` may answer secret prompts (the file is readable by its owner only).
    let bookIsPrivate: Bool
    let assumeYes: Bool

    /// Reads `--answers FILE` (a JSON object by topic) and `--yes`.
    init(_ inv: Invocation) throws {
        guard let path = inv.answersPath else {
            self.init(console: inv.console, book: [:], bookIsPrivate: false, assumeYes: inv.assumeYes)
            return
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw Invocation.UsageError(description: "--answers \(path): \(String(cString: strerror(errno))).")
        }
        let data: Data
        let value: JSONValue
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
            value = try JSONCoding.parse(data, source: "--answers \(path)")
        } catch let error as TermindError {
            throw Invocation.UsageError(description: error.message)
        }
        guard case .object(let book) = value else {
            throw Invocation.UsageError(description: "--answers \(path) must hold a JSON object of answers by question topic, e.g. {\"ssh.hostKey\": \"once\"}; it holds \(value.typeName == "array" ? "an" : "a") \(value.typeName).")
        }
        self.init(console: inv.console, book: book, bookIsPrivate: info.st_uid == getuid() && info.st_mode & 0o077 == 0, assumeYes: inv.assumeYes)
    }

    private init(console: Console, book: [String: JSONValue], bookIsPrivate: Bool, assumeYes: Bool) {
        self.console = console
        self.book = book
        self.bookIsPrivate = bookIsPrivate
        self.assumeYes = assumeYes
    }

    /// The answer to `question` (without its askID).
    func answer(_ question: JSONValue) throws -> JSONValue {
        let unanswered: JSONValue = .object(["unanswered": .bool(true)])
        let kind = question["kind"]?.stringValue
        if let topic = question["topic"]?.stringValue, let scripted = book[topic] {
            guard question["personOnly"] != .bool(true) else {
                throw TermindError(Self.invalidAnswer, "--answers: \"\(topic)\" is answered by a person at a terminal only, never from a file.")
            }
            return try Self.scripted(scripted, topic: topic, kind: kind, question: question, isPrivate: bookIsPrivate)
        }
        if kind == "confirm" && assumeYes { return .object(["answer": .bool(true)]) }
        let answer: JSONValue? = switch kind {
        case "edit"?: edit(question)
        case "choice"?: choice(question)
        case "confirm"?: confirm(question)
        case "prompts"?: prompts(question)
        default: nil
        }
        return answer ?? unanswered
    }

    /// A scripted answer, checked against what the question allows; a wrong one is an
    /// error naming the topic (never sent as if a person had typed it).
    private static func scripted(_ value: JSONValue, topic: String, kind: String?, question: JSONValue, isPrivate: Bool) throws -> JSONValue {
        switch kind {
        case "choice"?:
            guard case .object(let choices)? = question["choices"] else { break }
            let allowed = Set(choices.values.compactMap(\.stringValue) + [question["default"]?.stringValue].compactMap { $0 })
            guard let text = value.stringValue, allowed.contains(text) else {
                throw TermindError(Self.invalidAnswer, "--answers: \"\(topic)\" must be one of \(allowed.sorted().map { "\"\($0)\"" }.joined(separator: ", ")).")
            }
            return .object(["answer": .string(text)])
        case "confirm"?:
            guard case .bool(let yes) = value else {
                throw TermindError(Self.invalidAnswer, "--answers: \"\(topic)\" is a yes/no question; answer it true or false.")
            }
            return .object(["answer": .bool(yes)])
        case "prompts"?:
            guard isPrivate else {
                throw TermindError(Self.unsafeAnswers, "--answers: \"\(topic)\" answers a secret prompt, so the answers file must be readable by you alone (chmod 600 it).")
            }
            let count = (question["prompts"].flatMap { if case .array(let p) = $0 { p.count } else { nil } }) ?? 0
            guard case .array(let answers) = value, answers.count == count, answers.allSatisfy({ $0.stringValue != nil }) else {
                throw TermindError(Self.invalidAnswer, "--answers: \"\(topic)\" needs a list of \(count) string\(count == 1 ? "" : "s"), one per prompt.")
            }
            return .object(["answers": .array(answers)])
        default:
            break
        }
        throw TermindError(Self.invalidAnswer, "--answers: \"\(topic)\" cannot answer a question of kind \(kind ?? "unknown").")
    }

    /// Shows `text`, reads one line; `choices` maps what may be typed to the answer, Enter
    /// is the question's `default` (when it has one). Anything else is asked again — a typo
    /// is never taken for the default (a host key saved, a conflict skipped).
    private func choice(_ question: JSONValue) -> JSONValue? {
        guard case .object(let choices)? = question["choices"] else { return nil }
        let fallback = question["default"]?.stringValue
        while true {
            guard let typed = readLine(question["text"]?.stringValue ?? "") else { return nil }
            if let answer = choices[typed]?.stringValue { return .object(["answer": .string(answer)]) }
            if typed.isEmpty, let fallback { return .object(["answer": .string(fallback)]) }
            say("Please answer one of: \(choices.keys.sorted().joined(separator: ", "))\(fallback.map { " (Enter: \($0))" } ?? "").\n")
        }
    }

    /// Shows `text [y/N]` (or `[Y/n]`), reads one line: y/yes or n/no, Enter the default.
    private func confirm(_ question: JSONValue) -> JSONValue? {
        let fallback = question["default"] == .bool(true)
        let text = (question["text"]?.stringValue ?? "").trimmedWhitespace
        while true {
            guard let typed = readLine(text + (fallback ? " [Y/n] " : " [y/N] ")) else { return nil }
            switch typed {
            case "": return .object(["answer": .bool(fallback)])
            case "y", "yes": return .object(["answer": .bool(true)])
            case "n", "no": return .object(["answer": .bool(false)])
            default: say("Please answer yes or no.\n")
            }
        }
    }

    /// One line typed at the controlling terminal, trimmed and lowercased; nil without one.
    private func readLine(_ text: String) -> String? {
        console.terminal.readLine(TerminalText.escaped(text), echo: true, controllingTerminal: true)?
            .trimmedWhitespaceAndNewlines.lowercased()
    }

    /// Shows the header lines, then reads each prompt's answer, with echo as it asks.
    private func prompts(_ question: JSONValue) -> JSONValue? {
        if case .array(let header)? = question["header"] {
            for line in header.compactMap(\.stringValue) { say(line.hasSuffix("\n") ? line : line + "\n") }
        }
        guard case .array(let prompts)? = question["prompts"] else { return .object(["answers": .array([])]) }
        var answers: [JSONValue] = []
        for prompt in prompts {
            let text = TerminalText.escaped(prompt["text"]?.stringValue ?? "")
            guard let typed = console.terminal.readLine(text, echo: prompt["echo"] == .bool(true), controllingTerminal: true) else { return nil }
            answers.append(.string(typed))
        }
        return .object(["answers": .array(answers)])
    }

    /// An `edit` question: the person's editor (`$VISUAL`, else `$EDITOR`, else vi — a shell
    /// command line, as git reads it) opens `path`, on the terminal when there is one; the
    /// answer is whether it exited with status 0. Only an absolute path to a regular file.
    private func edit(_ question: JSONValue) -> JSONValue? {
        guard let path = question["path"]?.stringValue, path.hasPrefix("/") else { return nil }
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let editor = console.variable("VISUAL") ?? console.variable("EDITOR") ?? "vi"
        return .object(["answer": .bool(console.terminal.edit(path, command: editor) == 0)])
    }

    /// Text on the controlling terminal (escaped: it may hold a server's).
    private func say(_ text: String) {
        console.terminal.show(TerminalText.escaped(text))
    }
}
