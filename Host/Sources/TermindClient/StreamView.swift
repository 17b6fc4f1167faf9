import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// How the client shows a stream's events that are not output or questions
/// (docs/contracts.md, Streams), for any feature:
///
/// * `progress` (`item`, `done`, `total`, `unit`: "bytes" or "items", `key`: what the rate
///   is measured over when the item changes, as a batch naming its current file): one line on a
///   terminal's standard error, redrawn in place at most 10 times a second, with rate and
///   ETA; without a terminal nothing; with `--json` each event as a JSON line on standard
///   error (standard output keeps the result).
/// * `record` (`record`: an object): printed as it arrives as `key  value` lines; with
///   `--json` one JSON line on standard output.
/// * `view` (`title`, `rows`: records, `sections`: more titled tables, `refresh`: seconds
///   between redraws, `columns`: the fields its tables show first, in order): tables that a
///   terminal redraws in place (the latest view at most every `refresh`, 0.25 s unless said),
///   each line cut to the terminal's width; without one each view is printed in turn; with
///   `--json` one JSON line each (its `json` field when it has one). A view with `result:
///   true` is the human form of the result: printed instead of it (at once, and each below
///   the result before it), left out with `--json`.
/// * `notice` (`text`): a line on standard error.
///
/// The terminal is left as found: the cursor shown again and the progress line cleared
/// when the stream ends, fails, or a signal ends termind.
final class StreamView: Sendable {
    private let console: Console
    private let json: Bool
    private let errIsTerminal: Bool
    private let outIsTerminal: Bool
    /// What is on the terminal now; held while anything is written to it.
    private struct State {
        var progressShown = false
        var lastProgress: Double = 0
        var progressStart: [String: (time: Double, done: Double)] = [:]
        var viewLines = 0
        var lastView: Double = 0
        var cursorHidden = false
        var recordsShown = 0
        /// Live views write to standard output: the latest not yet drawn, and when it is due.
        var pendingView: JSONValue?
        var resultShown = false
        /// The view drawn last was a result (the next result goes below it).
        var lastWasResult = false
        /// The columns the stream's views put first (a view's `columns`).
        var viewColumns: [String]?
        var jsonLinesWritten = false
        var rawTerminal: @Sendable () -> Bool = { false }
    }
    private let state = Mutex(State())

    /// A view stood for the result (`result: true`): the client prints the result only with `--json`.
    var showedResult: Bool { state.withLock { s in s.resultShown } }

    init(json: Bool, console: Console) {
        self.console = console
        self.json = json
        errIsTerminal = console.isTerminal(console.errorOutput)
        outIsTerminal = console.isTerminal(console.output)
        if console.isProcess { StreamView.current.withLock { $0 = self } }
    }

    /// This process's view a signal must tidy up after (the process is about to end).
    static let current = Mutex<StreamView?>(nil)

    /// Handles `event` if it is one of the kinds above; false otherwise.
    func handle(_ event: StreamEvent) -> Bool {
        switch event.kind {
        case "progress"?: progress(event)
        case "record"?: record(event["record"] ?? .null)
        case "view"?: view(event.fields)
        case "notice"?: notice(event["text"]?.stringValue ?? "")
        default: return false
        }
        return true
    }

    /// Before anything else is written to standard error or output: the progress line goes.
    func clearProgress() {
        state.withLock { s in clearProgressLocked(&s) }
    }

    /// Before a question: the terminal as a person expects it (a view still waiting for its
    /// turn drawn, cursor shown, no progress line); the next view is drawn below what the
    /// question wrote.
    func pause() {
        state.withLock { s in
            if let view = s.pendingView { drawLocked(view, &s) }
            s.pendingView = nil
            restoreLocked(&s)
            s.viewLines = 0
        }
    }

    /// The stream ended: the last pending view is drawn, the terminal restored.
    func finish() {
        state.withLock { s in
            if let view = s.pendingView { drawLocked(view, &s) }
            s.pendingView = nil
            clearProgressLocked(&s)
            restoreLocked(&s)
        }
    }

    /// For a signal about to end the process: only restore the terminal.
    static func restoreTerminal() {
        guard let view = current.withLock({ $0 }) else { return }
        view.state.withLock { view.restoreLocked(&$0) }
    }

    // MARK: - Progress

    private func progress(_ event: StreamEvent) {
        if json {
            writeJSONLine(.object(event.fields.filter { $0.key != "id" }), to: console.errorOutput)
            return
        }
        guard errIsTerminal else { return }
        let now = Bench.now()
        let item = event["item"]?.stringValue ?? ""
        let done = Self.number(event["done"]) ?? 0
        let total = Self.number(event["total"])
        let finished = total.map { done >= $0 } ?? false
        let key = event["key"]?.stringValue ?? item
        state.withLock { s in
            let start = s.progressStart[key] ?? (now, done)
            if s.progressStart[key] == nil { s.progressStart[key] = start }
            // Redrawn at most 10 times a second, and at the end of an item.
            guard finished || now - s.lastProgress >= 0.1 else { return }
            s.lastProgress = now
            let elapsed = now - start.time
            let rate = elapsed > 0.2 ? (done - start.done) / elapsed : nil
            let bytes = event["unit"]?.stringValue != "items"
            var parts: [String] = []
            if !item.isEmpty { parts.append(TerminalText.escaped(item, singleLine: true)) }
            if let total, total > 0 {
                parts.append(Self.bar(done / total) + String(printf: " %3.0f%%", min(100, done / total * 100)))
                parts.append("\(Self.amount(done, bytes: bytes))/\(Self.amount(total, bytes: bytes))")
            } else {
                parts.append(Self.amount(done, bytes: bytes))
            }
            if let rate, rate > 0 {
                parts.append("\(Self.amount(rate, bytes: bytes))/s")
                if let total, total > done { parts.append("ETA \(Self.duration((total - done) / rate))") }
            }
            var text = parts.joined(separator: "  ")
            let width = TerminalBridge.size(console.errorOutput)?.columns ?? 80
            if text.count > width - 1 { text = String(text.prefix(max(0, width - 1))) }
            console.write("\r\u{1B}[K" + text, to: console.errorOutput)
            s.progressShown = true
        }
    }

    private func clearProgressLocked(_ s: inout State) {
        guard s.progressShown else { return }
        console.write("\r\u{1B}[K", to: console.errorOutput)
        s.progressShown = false
    }

    // MARK: - Records, views, notices

    private func record(_ record: JSONValue) {
        if json { return writeJSONLine(record, to: console.output) }
        let first: Bool = state.withLock { s in
            clearProgressLocked(&s)
            defer { s.recordsShown += 1 }
            return s.recordsShown == 0
        }
        if !first { console.write("\n", to: console.output) }  // one blank line between records
        console.human(record)
    }

    private func view(_ fields: [String: JSONValue]) {
        let view = JSONValue.object(fields.filter { !["id", "event", "json", "result", "columns"].contains($0.key) })
        let columns: [String]? = if case .array(let names)? = fields["columns"] { names.compactMap(\.stringValue) } else { nil }
        let isResult = fields["result"] == .bool(true)
        if json {
            // The result is the document; a view may say what stands for it in JSON.
            if isResult { return }
            return writeJSONLine(fields["json"] ?? view, to: console.output)
        }
        state.withLock { s in
            if isResult { s.resultShown = true }
            if let columns { s.viewColumns = columns }
            guard outIsTerminal else {
                drawLocked(view, &s)
                return
            }
            if isResult {
                // A result is drawn at once, over the live view it ends but below an earlier
                // result (`ls` of several folders shows every listing).
                if s.lastWasResult { s.viewLines = 0 }
                s.pendingView = nil
                s.lastView = Bench.now()
                s.lastWasResult = true
                return drawLocked(view, &s)
            }
            s.lastWasResult = false
            let refresh: Double = if case .double(let seconds)? = fields["refresh"] { seconds } else if case .integer(let seconds)? = fields["refresh"] { Double(seconds) } else { 0.25 }
            let now = Bench.now()
            s.pendingView = view
            guard now - s.lastView >= refresh else { return }
            s.lastView = now
            drawLocked(view, &s)
            s.pendingView = nil
        }
    }

    /// Draws a view: on a terminal over the previous one, else after it.
    private func drawLocked(_ view: JSONValue, _ s: inout State) {
        clearProgressLocked(&s)
        var lines: [String] = []
        if let title = view["title"]?.stringValue { lines.append(TerminalText.escaped(title, singleLine: true)) }
        func table(_ rows: JSONValue?) {
            guard case .array(let rows)? = rows else { return }
            let records = rows.compactMap { row -> [String: JSONValue]? in if case .object(let r) = row { r } else { nil } }
            lines += Output.tableLines(records, preferred: s.viewColumns)
        }
        table(view["rows"])
        if case .array(let sections)? = view["sections"] {
            for section in sections {
                lines.append("")
                if let title = section["title"]?.stringValue { lines.append(TerminalText.escaped(title, singleLine: true)) }
                table(section["rows"])
            }
        }
        var text = ""
        if outIsTerminal {
            // Each line within the terminal's width: a line that wrapped would take two rows,
            // and the next redraw would start too low and leave stray text behind.
            let width = TerminalBridge.size(console.output)?.columns
            lines = lines.map { Output.clipped($0, to: width) }
            if !s.cursorHidden { text += "\u{1B}[?25l"; s.cursorHidden = true }
            if s.viewLines > 0 { text += "\u{1B}[\(s.viewLines)F" }
            text += lines.map { "\u{1B}[K" + $0 + "\n" }.joined() + "\u{1B}[J"
            s.viewLines = lines.count
        } else {
            text = lines.joined(separator: "\n") + "\n\n"
        }
        console.write(text, to: console.output)
    }

    private func restoreLocked(_ s: inout State) {
        if s.cursorHidden {
            console.write("\u{1B}[?25h", to: console.output)
            s.cursorHidden = false
        }
        if s.progressShown { clearProgressLocked(&s) }
    }

    /// Whether a bridged terminal is raw (`TerminalBridge.isRaw`): a notice then starts on a
    /// line of its own and ends with a carriage return too.
    var terminalIsRaw: @Sendable () -> Bool {
        get { state.withLock { $0.rawTerminal } }
        set { state.withLock { $0.rawTerminal = newValue } }
    }

    private func notice(_ text: String) {
        state.withLock { s in clearProgressLocked(&s) }
        if json {
            writeJSONLine(.object(["event": .string("notice"), "text": .string(text)]), to: console.errorOutput)
        } else if terminalIsRaw() {
            console.write("\r\ntermind: \(TerminalText.escaped(text))\r\n", to: console.errorOutput)
        } else {
            console.error(text)
        }
    }

    /// With `--json`, records or views went to standard output as JSON lines.
    var wroteJSONLines: Bool { state.withLock { s in s.jsonLinesWritten } }

    private func writeJSONLine(_ value: JSONValue, to fd: Int32) {
        guard let line = try? JSONCoding.encode(value) else { return }
        if fd == console.output { state.withLock { s in s.jsonLinesWritten = true } }
        console.write(line + Data("\n".utf8), to: fd)
    }

    // MARK: - Formatting

    static func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let n)?: Double(n)
        case .unsignedInteger(let n)?: Double(n)
        case .double(let d)?: d
        default: nil
        }
    }

    static func amount(_ value: Double, bytes: Bool) -> String {
        guard bytes else { return value == value.rounded() ? String(Int(value)) : String(printf: "%.1f", value) }
        return TerminalText.bytes(UInt64(exactly: max(0, value).rounded(.down)) ?? .max)
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "?" }
        let s = Int(seconds.rounded())
        return s >= 3600 ? String(printf: "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60) : String(printf: "%ld:%02ld", s / 60, s % 60)
    }

    static func bar(_ fraction: Double) -> String {
        let width = 20
        let filled = Int((min(max(fraction, 0), 1) * Double(width)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
    }
}
