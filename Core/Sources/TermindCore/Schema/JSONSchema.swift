import FoundationEssentials

/// The subset of JSON Schema (draft 2020-12) that contracts use. Schemas are derived from
/// the contracts' Codable types (`SchemaDerivation`), exported by `termind contracts`,
/// and enforced on every request before it is decoded.
public indirect enum JSONSchema: Sendable, Equatable {
    case any
    case string(format: String? = nil)
    case integer
    case number
    case boolean
    case enumeration([String])
    case array(JSONSchema)
    case dictionary(JSONSchema)
    case object([Property])

    public struct Property: Sendable, Equatable {
        public let name: String
        public let schema: JSONSchema
        public let required: Bool
        public init(name: String, schema: JSONSchema, required: Bool) {
            self.name = name
            self.schema = schema
            self.required = required
        }
    }

    /// The schema as a JSON value, ready to print or embed in an MCP tool list.
    public var json: JSONValue {
        switch self {
        case .any:
            return .object([:])
        case .string(let format):
            var o: [String: JSONValue] = ["type": .string("string")]
            if let format { o["format"] = .string(format) }
            return .object(o)
        case .integer: return .object(["type": .string("integer")])
        case .number: return .object(["type": .string("number")])
        case .boolean: return .object(["type": .string("boolean")])
        case .enumeration(let cases):
            return .object(["type": .string("string"), "enum": .array(cases.map(JSONValue.string))])
        case .array(let items):
            return .object(["type": .string("array"), "items": items.json])
        case .dictionary(let values):
            return .object(["type": .string("object"), "additionalProperties": values.json])
        case .object(let properties):
            var props: [String: JSONValue] = [:]
            for p in properties { props[p.name] = p.schema.json }
            let required = properties.filter(\.required).map { JSONValue.string($0.name) }
            return .object([
                "type": .string("object"),
                "properties": .object(props),
                "required": .array(required),
                "additionalProperties": .bool(false),
            ])
        }
    }

    /// Checks `value` against the schema and returns every problem, each naming the
    /// path of the offending field (`body.port: expected integer, got string`).
    public func problems(in value: JSONValue, at path: String = "body") -> [String] {
        switch (self, value) {
        case (.any, _): return []
        case (.string, .string), (.integer, .integer), (.integer, .unsignedInteger), (.number, .integer), (.number, .unsignedInteger),
             (.number, .double), (.boolean, .bool):
            return []
        case (.enumeration(let cases), .string(let s)):
            return cases.contains(s) ? [] : ["\(path): '\(s)' is not one of \(cases.joined(separator: ", "))"]
        case (.array(let items), .array(let values)):
            return values.enumerated().flatMap { items.problems(in: $0.element, at: "\(path)[\($0.offset)]") }
        case (.dictionary(let schema), .object(let values)):
            return values.keys.sorted().flatMap { schema.problems(in: values[$0]!, at: "\(path).\($0)") }
        case (.object(let properties), .object(let values)):
            var found: [String] = []
            let known = Set(properties.map(\.name))
            for key in values.keys.sorted() where !known.contains(key) {
                found.append("\(path).\(key): unknown field (expected one of: \(properties.map(\.name).joined(separator: ", ")))")
            }
            for p in properties {
                switch values[p.name] {
                case nil, .null?:
                    if p.required { found.append("\(path).\(p.name): required field is missing") }
                case let v?:
                    found += p.schema.problems(in: v, at: "\(path).\(p.name)")
                }
            }
            return found
        default:
            return ["\(path): expected \(expectedName), got \(value.typeName)"]
        }
    }

    private var expectedName: String {
        switch self {
        case .any: "any value"
        case .string: "string"
        case .integer: "integer"
        case .number: "number"
        case .boolean: "boolean"
        case .enumeration: "string"
        case .array: "array"
        case .dictionary, .object: "object"
        }
    }
}

/// A type that states its own schema instead of having it derived.
public protocol SchemaDescribable {
    static var schema: JSONSchema { get }
}

/// A string enum whose cases become a JSON Schema `enum`.
public protocol SchemaEnum: SchemaDescribable, CaseIterable, RawRepresentable, Decodable where RawValue == String {}

extension SchemaEnum {
    public static var schema: JSONSchema { .enumeration(allCases.map(\.rawValue)) }
}
