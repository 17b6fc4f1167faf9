import Foundation
import TermindCore
import TermindKernel

/// Writing results: JSON for scripts (`--json`), aligned text for people.
enum Output {
    static func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    static func error(_ text: String) {
        FileHandle.standardError.write(Data("termind: \(text)\n".utf8))
    }

    static func json(_ data: Data) {
        let value = (try? JSONCoding.parse(data, source: "reply")) ?? .null
        json(value)
    }

    static func json<T: Encodable>(_ value: T) {
        let data = (try? JSONCoding.encode(value, pretty: true)) ?? Data("null".utf8)
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    /// Rows with aligned columns.
    static func table(_ header: [String], _ rows: [[String]]) {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        for row in all {
            let cells = row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }
            line(cells.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// A JSON value for people: objects as `key: value` lines, nested values as compact JSON.
    static func human(_ value: JSONValue) {
        // A reply holding one list of records (`{"hosts": [...]}`) prints as a table.
        if case .object(let o) = value, o.count == 1, case .array(let rows)? = o.values.first {
            let records = rows.compactMap { row -> [String: JSONValue]? in if case .object(let r) = row { return r } else { return nil } }
            if records.count == rows.count {
                if records.isEmpty { line("(none)"); return }
                let columns = records.flatMap(\.keys).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
                    .filter { key in !key.hasSuffix("At") && records.allSatisfy { isShort($0[key]) } }
                    .sorted { (rank($0), $0) < (rank($1), $1) }
                table(columns.map { $0.uppercased() }, records.map { r in columns.map { r[$0].map(scalar) ?? "" } })
                return
            }
        }
        switch value {
        case .object(let o):
            let width = o.keys.map(\.count).max() ?? 0
            for key in o.keys.sorted() {
                line("\(key.padding(toLength: width, withPad: " ", startingAt: 0))  \(scalar(o[key]!))")
            }
        default:
            line(scalar(value))
        }
    }

    private static func isShort(_ value: JSONValue?) -> Bool {
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
            return items.isEmpty ? "-" : items.compactMap(\.stringValue).joined(separator: ",")
        default:
            return (try? String(decoding: JSONCoding.encode(value), as: UTF8.self)) ?? ""
        }
    }

    /// Reports an error in the form the caller asked for and returns the exit code.
    static func failure(_ error: any Error, json: Bool) -> Invocation.Exit {
        switch error {
        case let e as TermindError:
            if json { Output.json(["error": ["code": e.code, "message": e.message]]) } else { Output.error(e.message) }
            return .failure
        case let e as BootFailure where e.problems.first?.code == "features.unknown":
            if json { Output.json(["error": ["code": "features.unknown", "message": e.description]]) } else { Output.error("\(e.description) Run 'termind --help'.") }
            return .usage
        case let e as BootFailure:
            if json {
                Output.json(["error": ["code": e.problems.first?.code ?? "boot.failed", "message": e.description]])
            } else {
                Output.error("cannot start:\n" + e.problems.map { "  - \($0.message)" }.joined(separator: "\n"))
            }
            return .bootFailed
        case let e as Invocation.UsageError:
            if json { Output.json(["error": ["code": "usage", "message": e.description]]) } else { Output.error("\(e.description) Run 'termind --help'.") }
            return .usage
        default:
            if json { Output.json(["error": ["code": "internal", "message": "\(type(of: error))"]]) } else { Output.error("failed: \(type(of: error))") }
            return .failure
        }
    }
}
