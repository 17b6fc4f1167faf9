import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// Writing results on a run's console: JSON for scripts (`--json`), aligned text for people.
extension Console {
    /// Text for people; control characters from outside text are shown escaped (TerminalText).
    func line(_ text: String) {
        write(TerminalText.escaped(text) + "\n", to: output)
    }

    func error(_ text: String) {
        write("termind: \(TerminalText.escaped(text))\n", to: errorOutput)
    }

    func json(_ data: Data) {
        let value = (try? JSONCoding.parse(data, source: "reply")) ?? .null
        json(value)
    }

    func json<T: Encodable>(_ value: T) {
        let data = (try? JSONCoding.encode(value, pretty: true)) ?? Data("null".utf8)
        write(data + Data("\n".utf8), to: output)
    }

    /// Rows with aligned columns; on a terminal each line cut to its width (`--json` has
    /// every cell whole).
    func table(_ header: [String], _ rows: [[String]], indent: String = "") {
        let width = isTerminal(output) ? TerminalBridge.size(output)?.columns : nil
        for text in Output.tableLines(header, rows) { line(Output.clipped(indent + text, to: width)) }
    }

    /// A JSON value for people. A reply holding one list of records (`{"hosts": [...]}`)
    /// prints as a table (its columns in the order `columns` gives, the command's). Other
    /// objects print their scalar fields as `key  value` lines, then each list under its
    /// name: records as a table, strings as `- item` lines.
    func human(_ value: JSONValue, columns preferred: [String]? = nil) {
        if case .object(let o) = value, o.count == 1, case .array(let rows)? = o.values.first, let records = Output.records(rows) {
            records.isEmpty ? line("(none)") : recordTable(records, preferred: preferred)
            return
        }
        guard case .object(let o) = value else { return line(Output.scalar(value)) }
        let keys = o.keys.sorted()
        let lists = keys.filter { key in if case .array(let items) = o[key]!, !items.isEmpty { return Output.records(items) != nil || !Output.isShort(o[key]) || Output.scalar(o[key]!).count > 60 } else { return false } }
        let plain = keys.filter { !lists.contains($0) }
        let width = plain.map(\.count).max() ?? 0
        for key in plain {
            line("\(key.padded(to: width))  \(Output.cell(key, o[key]!))")
        }
        for key in lists {
            guard case .array(let items) = o[key]! else { continue }
            line("\(key) (\(items.count)):")
            if let records = Output.records(items) {
                recordTable(records, indent: "  ")
            } else {
                for item in items { line("  - " + Output.scalar(item)) }
            }
        }
    }

    /// Records as a table of their short fields; fields holding long text (a cell over 40
    /// characters) follow the table, one line per item, under the record's first column.
    private func recordTable(_ records: [[String: JSONValue]], preferred: [String]? = nil, indent: String = "") {
        let columns = Output.columns(of: records, preferred: preferred)
        let long = Set(columns.dropFirst().filter { key in records.contains { ($0[key].map(Output.scalar) ?? "").count > 40 } })
        let shown = columns.filter { !long.contains($0) }
        table(shown.map { $0.uppercased() }, records.map { r in shown.map { key in r[key].map { Output.cell(key, $0) } ?? "" } }, indent: indent)
        guard let first = columns.first else { return }
        for record in records {
            for key in columns where long.contains(key) {
                let items: [String]
                switch record[key] {
                case .array(let list)?: items = list.map(Output.scalar)
                case let value?: items = value == .null ? [] : [Output.scalar(value)]
                case nil: items = []
                }
                for item in items { line("\(indent)\(record[first].map(Output.scalar) ?? "-") \(key): \(item)") }
            }
        }
    }

    /// Reports an error in the form the caller asked for and returns the exit code.
    func failure(_ error: any Error, json wantsJSON: Bool) -> Invocation.Exit {
        switch error {
        case let e as TermindError:
            if wantsJSON {
                var fields: [String: JSONValue] = ["code": .string(e.code), "message": .string(e.message)]
                if let details = e.details { fields["details"] = details }
                self.json(JSONValue.object(["error": .object(fields)]))
            } else {
                self.error(e.message)
            }
            return Output.isUsage(e) ? .usage : .failure
        case let e as BootFailure where e.problems.first?.is(.featuresUnknown) == true || e.problems.first?.is(.serveOptionUnknown) == true:
            let code = e.problems.first?.code ?? ErrorCode.featuresUnknown.rawValue
            if wantsJSON { self.json(JSONValue.object(["error": .object(["code": .string(code), "message": .string(e.description)])])) } else { self.error("\(e.description) Run 'termind --help'.") }
            return .usage
        case let e as BootFailure:
            if wantsJSON {
                self.json(["error": ["code": e.problems.first?.code ?? Output.bootFailed.rawValue, "message": e.description]])
            } else {
                self.error("cannot start:\n" + e.problems.map { "  - \($0.message)" }.joined(separator: "\n"))
            }
            return .bootFailed
        case let e as Invocation.UsageError:
            if wantsJSON {
                self.json(["error": ["code": Invocation.UsageError.code.rawValue, "message": e.description]])
            } else {
                self.error("\(e.description) Run 'termind \(e.command.map { $0 + " " } ?? "")--help'.")
            }
            return .usage
        default:
            let mapped = TermindError.from(error)
            if wantsJSON { self.json(["error": ["code": mapped.code, "message": mapped.message]]) } else { self.error(mapped.message) }
            return .failure
        }
    }
}

/// Formatting shared by every way of showing results (no writing).
enum Output {
    /// The code of a boot failure that names no problem.
    static let bootFailed: ErrorCode = "boot.failed"

    /// Whether an error says the command was given bad input (exit 2, as for the client's
    /// own usage errors) rather than an operation that failed (exit 1), by its code's
    /// shape (docs/contracts.md): `….invalid` (a request its contract refused — a bad layout,
    /// an enum value it does not have, `--parallel 0` —, a settings value, a host key),
    /// `….bad_spec` (a forward spec), `quick_connect.…` (a quick-connect line).
    static func isUsage(_ error: TermindError) -> Bool {
        error.code.hasSuffix(".invalid") || error.code.hasSuffix(".bad_spec") || error.code.hasPrefix("quick_connect.")
    }

    /// Rows with aligned columns, as lines (escaped).
    static func tableLines(_ header: [String], _ rows: [[String]]) -> [String] {
        let all = ([header] + rows).map { $0.map { TerminalText.escaped($0, singleLine: true) } }
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        // Padded to the widths counted above (characters), in Swift: NSString's padding counts
        // UTF-16 units and took a quarter of a 4,000-entry listing's time. Only the end of a
        // line is trimmed, so a row whose first cell is empty keeps its columns.
        return all.map { row in
            var line = ""
            for (index, cell) in row.enumerated() {
                if index > 0 { line += "  " }
                line += cell
                if index < row.count - 1, cell.count < widths[index] { line += String(repeating: " ", count: widths[index] - cell.count) }
            }
            while line.last == " " { line.removeLast() }
            return line
        }
    }

    /// Records as table lines of their short fields (a live view's rows), in the order
    /// `preferred` gives first.
    static func tableLines(_ records: [[String: JSONValue]], preferred: [String]? = nil) -> [String] {
        // No rows, no table (not an empty header line under the title).
        guard !records.isEmpty else { return [] }
        let columns = columns(of: records, preferred: preferred)
        return tableLines(columns.map { $0.uppercased() }, records.map { r in columns.map { key in r[key].map { cell(key, $0) } ?? "" } })
    }

    /// The columns a table of `records` shows: short fields, those `preferred` names first
    /// in its order (a command's declared `columns`), then identifying ones, then the rest
    /// by name. Times (`…At`) show only where named.
    static func columns(of records: [[String: JSONValue]], preferred: [String]? = nil) -> [String] {
        let preferred = preferred ?? []
        let all = records.flatMap(\.keys).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
            .filter { key in records.allSatisfy { isShort($0[key]) } }
        let named = preferred.filter { all.contains($0) }
        let rest = all.filter { !preferred.contains($0) && !$0.hasSuffix("At") }.sorted { (rank($0), $0) < (rank($1), $1) }
        return named + rest
    }

    /// A line cut to `width` columns (the last one an ellipsis) when it is longer.
    static func clipped(_ line: String, to width: Int?) -> String {
        guard let width, width > 1, line.count > width else { return line }
        return String(line.prefix(width - 1)) + "…"
    }

    /// A value as a person reads it in a table or a `key  value` line: times (RFC 3339
    /// strings, or seconds since 1970 in a `…At`/`started` field) in local time, byte
    /// counts (`…bytes`, `size`) with units, anything else as it is.
    static func cell(_ key: String, _ value: JSONValue) -> String {
        switch value {
        case .string(let text):
            if let date = timestamp(text) { return localTime(date) }
        case .double(let seconds) where isTime(key) && (1e9...1e10).contains(seconds):
            return localTime(Date(timeIntervalSince1970: seconds))
        case .integer(let seconds) where isTime(key) && (1_000_000_000...10_000_000_000).contains(seconds):
            return localTime(Date(timeIntervalSince1970: Double(seconds)))
        case .integer(let n) where isByteCount(key):
            return n < 1024 ? "\(n) B" : StreamView.amount(Double(n), bytes: true)
        case .unsignedInteger(let n) where isByteCount(key):
            return n < 1024 ? "\(n) B" : StreamView.amount(Double(n), bytes: true)
        default:
            break
        }
        return scalar(value)
    }

    /// A field holding a time as seconds since 1970 (`lastSampleAt`, `started`).
    private static func isTime(_ key: String) -> Bool {
        key.hasSuffix("At") || ["started", "ended", "finished"].contains(key)
    }

    private static func isByteCount(_ key: String) -> Bool {
        let lower = key.lowercased()
        return lower.hasSuffix("bytes") || lower.hasPrefix("bytes") || lower == "size"
    }

    /// An RFC 3339 time (`2026-12-06T07:20:10Z`, with or without fractions), or nil.
    static func timestamp(_ text: String) -> Date? {
        guard text.count >= 20, text.count <= 35, text.dropFirst(10).first == "T", text.first?.isNumber == true else { return nil }
        return try? Date.ISO8601FormatStyle(includingFractionalSeconds: text.contains(".")).parse(text)
    }

    /// `2026-12-06 08:20:10` in this machine's time zone.
    static func localTime(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return "?" }
        return String(printf: "%04ld-%02ld-%02ld %02ld:%02ld:%02ld", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                      Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    static func records(_ rows: [JSONValue]) -> [[String: JSONValue]]? {
        let records = rows.compactMap { row -> [String: JSONValue]? in if case .object(let r) = row { return r } else { return nil } }
        return records.count == rows.count ? records : nil
    }

    static func isShort(_ value: JSONValue?) -> Bool {
        switch value {
        case nil, .null?, .string?, .integer?, .unsignedInteger?, .double?, .bool?: return true
        case .array(let items)?: return items.allSatisfy { if case .string = $0 { return true } else { return false } }
        default: return false
        }
    }

    /// Identifying columns first.
    private static func rank(_ key: String) -> Int {
        ["id": 0, "label": 1, "name": 2].first { $0.key == key }?.value ?? 3
    }

    static func scalar(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): return s
        case .integer(let i): return String(i)
        case .unsignedInteger(let u): return String(u)
        case .double(let d): return String(d)
        case .bool(let b): return b ? "true" : "false"
        case .null: return "-"
        case .array(let items) where items.allSatisfy({ if case .string = $0 { return true } else { return false } }):
            return items.isEmpty ? "-" : items.compactMap(\.stringValue).joined(separator: ", ")
        default:
            return (try? String(decoding: JSONCoding.encode(value), as: UTF8.self)) ?? ""
        }
    }
}
