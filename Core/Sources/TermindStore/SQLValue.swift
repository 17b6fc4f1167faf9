import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Equatable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    /// Describes the kind only: values may be secrets or user data and never appear in
    /// errors or logs (as GRDB hides statement arguments).
    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer: "<integer>"
        case .real: "<real>"
        case .text: "<text>"
        case .blob(let d): "<blob \(d.count) bytes>"
        }
    }
}

/// Conversions for binding Swift values.
public protocol SQLBindable: Sendable {
    var sqlValue: SQLValue { get }
}

extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .real(self) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Data: SQLBindable { public var sqlValue: SQLValue { .blob(self) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// One result row, by column name.
public struct Row: Sendable {
    public let columns: [String]
    public let values: [SQLValue]

    public subscript(_ column: String) -> SQLValue {
        guard let index = columns.firstIndex(of: column) else { return .null }
        return values[index]
    }

    public func string(_ column: String) -> String? {
        if case .text(let s) = self[column] { return s }
        return nil
    }

    public func int(_ column: String) -> Int? {
        if case .integer(let i) = self[column] { return Int(i) }
        return nil
    }

    public func data(_ column: String) -> Data? {
        switch self[column] {
        case .blob(let d): return d
        case .text(let s): return Data(s.utf8)
        default: return nil
        }
    }

    public func bool(_ column: String) -> Bool? { int(column).map { $0 != 0 } }

    /// A column that must hold text: a row without it (a missing column, NULL, another
    /// type) is a broken row, said loudly with the column, never read as "".
    public func text(_ column: String) throws -> String {
        if case .text(let s) = self[column] { return s }
        throw missing(column, "text")
    }

    /// A column that must hold an integer.
    public func integer(_ column: String) throws -> Int {
        if case .integer(let i) = self[column] { return Int(i) }
        throw missing(column, "an integer")
    }

    private func missing(_ column: String, _ type: String) -> TermindError {
        let found: String
        if let index = columns.firstIndex(of: column) { found = values[index].description } else { found = "no such column" }
        return TermindError(.storeCorrupt, "A stored row has no \(type) in column '\(column)' (\(found)); the database was changed outside termind or is damaged.")
    }
}
