import FoundationEssentials

/// Derives a `JSONSchema` from a `Decodable` type by decoding a placeholder instance
/// with a recording decoder: every key the type's `init(from:)` asks for becomes a
/// property (required unless asked with `decodeIfPresent`). Types whose decoding
/// validates values (string enums, UUID, custom formats) conform to `SchemaEnum` or
/// `SchemaDescribable` instead. Recursion is cut at a fixed depth.
public enum SchemaDerivation {
    public static func schema<T: Decodable>(for type: T.Type) -> JSONSchema {
        let node = SchemaNode()
        do {
            _ = try placeholder(T.self, node: node, depth: 0)
        } catch {
            return .any
        }
        return node.schema
    }

    static let maximumDepth = 24

    static func placeholder<T: Decodable>(_ type: T.Type, node: SchemaNode, depth: Int) throws -> T {
        // The plain types first: comparing a metatype with a concrete one is a pointer
        // compare, while asking whether a type conforms to a protocol it does not conform to
        // scans every conformance record of every loaded library, once per type and
        // protocol in each process — most of the cost of deriving a schema in a one-shot
        // command. None of these types conforms to SchemaDescribable.
        switch T.self {
        case is String.Type: node.fixed = .string(); return "" as! T
        case is UUID.Type: node.fixed = .string(format: "uuid"); return UUID() as! T
        case is Bool.Type: node.fixed = .boolean; return false as! T
        case is Double.Type: node.fixed = .number; return 0.0 as! T
        case is Float.Type: node.fixed = .number; return Float(0) as! T
        case is Int.Type: node.fixed = .integer; return 0 as! T
        case is Int64.Type: node.fixed = .integer; return Int64(0) as! T
        case is Int32.Type: node.fixed = .integer; return Int32(0) as! T
        case is UInt.Type: node.fixed = .integer; return UInt(0) as! T
        case is UInt64.Type: node.fixed = .integer; return UInt64(0) as! T
        case is UInt32.Type: node.fixed = .integer; return UInt32(0) as! T
        case is UInt16.Type: node.fixed = .integer; return UInt16(0) as! T
        case is UInt8.Type: node.fixed = .integer; return UInt8(0) as! T
        case is JSONValue.Type: node.fixed = .any; return JSONValue.null as! T
        default: break
        }
        if let describable = T.self as? any SchemaDescribable.Type {
            node.fixed = describable.schema
            if let e = T.self as? any (SchemaEnum & Decodable).Type {
                return firstCase(e) as! T
            }
            return try T(from: SchemaDecoder(node: node, depth: depth, describedOnly: true))
        }
        if let dictionary = T.self as? any StringKeyedDictionary.Type {
            node.fixed = .dictionary(dictionary.valueSchema(depth: depth + 1))
            return dictionary.empty as! T
        }
        guard depth < maximumDepth else { node.fixed = .any; throw CutOff() }
        return try T(from: SchemaDecoder(node: node, depth: depth, describedOnly: false))
    }

    private static func firstCase<E: SchemaEnum>(_ type: E.Type) -> E { E.allCases.first! }

    struct CutOff: Error {}
}

protocol StringKeyedDictionary {
    static func valueSchema(depth: Int) -> JSONSchema
    static var empty: Self { get }
}

extension Dictionary: StringKeyedDictionary where Key == String, Value: Decodable {
    static func valueSchema(depth: Int) -> JSONSchema {
        let node = SchemaNode()
        _ = try? SchemaDerivation.placeholder(Value.self, node: node, depth: depth)
        return node.schema
    }
    static var empty: Self { [:] }
}

/// What the recording decoder learned about one value.
final class SchemaNode {
    var fixed: JSONSchema?
    var properties: [(name: String, node: SchemaNode, required: Bool)] = []
    var isObject = false
    var element: SchemaNode?

    var schema: JSONSchema {
        if let fixed { return fixed }
        if let element { return .array(element.schema) }
        if isObject {
            return .object(properties.map { .init(name: $0.name, schema: $0.node.schema, required: $0.required) })
        }
        return .any
    }
}

struct SchemaDecoder: Decoder {
    let node: SchemaNode
    let depth: Int
    /// The type already stated its schema; decode a placeholder without recording.
    let describedOnly: Bool
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if !describedOnly { node.isObject = true }
        return KeyedDecodingContainer(KeyedRecorder<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        UnkeyedRecorder(decoder: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleRecorder(decoder: self)
    }

    func child() -> (SchemaNode, Int) { (SchemaNode(), depth + 1) }
}

private struct KeyedRecorder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var allKeys: [Key] { [] }

    func contains(_ key: Key) -> Bool { true }
    func decodeNil(forKey key: Key) throws -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try record(type, key: key, required: true)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        // Past the depth bound, an optional (recursive) field ends the recursion as `any`.
        if decoder.depth + 1 >= SchemaDerivation.maximumDepth {
            if !decoder.describedOnly, !decoder.node.properties.contains(where: { $0.name == key.stringValue }) {
                decoder.node.properties.append((key.stringValue, SchemaNode(), false))
            }
            return nil
        }
        return try record(type, key: key, required: false)
    }

    // The concrete overloads' default implementations call `decode`, which would record
    // the field as required; route them all through `record` explicitly.
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { try record(type, key: key, required: false) }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try record(type, key: key, required: false) }

    private func record<T: Decodable>(_ type: T.Type, key: Key, required: Bool) throws -> T {
        let (node, depth) = decoder.child()
        if !decoder.describedOnly,
           !decoder.node.properties.contains(where: { $0.name == key.stringValue }) {
            decoder.node.properties.append((key.stringValue, node, required))
        }
        return try SchemaDerivation.placeholder(T.self, node: node, depth: depth)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        let (node, depth) = decoder.child()
        decoder.node.properties.append((key.stringValue, node, true))
        return try SchemaDecoder(node: node, depth: depth, describedOnly: false).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let (node, depth) = decoder.child()
        decoder.node.properties.append((key.stringValue, node, true))
        return UnkeyedRecorder(decoder: SchemaDecoder(node: node, depth: depth, describedOnly: false))
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder }
}

private struct UnkeyedRecorder: UnkeyedDecodingContainer {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { 1 }
    var currentIndex = 0
    /// One placeholder element records the element schema; past the depth bound an array
    /// is empty, which ends recursive types.
    var isAtEnd: Bool { currentIndex >= 1 || decoder.depth + 1 >= SchemaDerivation.maximumDepth }

    init(decoder: SchemaDecoder) {
        self.decoder = decoder
        if !decoder.describedOnly, decoder.node.element == nil { decoder.node.element = SchemaNode() }
    }

    mutating func decodeNil() throws -> Bool { false }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        currentIndex += 1
        let node = decoder.node.element ?? SchemaNode()
        return try SchemaDerivation.placeholder(T.self, node: node, depth: decoder.depth + 1)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        currentIndex += 1
        let node = decoder.node.element ?? SchemaNode()
        return try SchemaDecoder(node: node, depth: decoder.depth + 1, describedOnly: false).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        currentIndex += 1
        let node = decoder.node.element ?? SchemaNode()
        return UnkeyedRecorder(decoder: SchemaDecoder(node: node, depth: decoder.depth + 1, describedOnly: false))
    }

    mutating func superDecoder() throws -> any Decoder { decoder }
}

private struct SingleRecorder: SingleValueDecodingContainer {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // A wrapper type decoding its single inner value shares the node.
        try SchemaDerivation.placeholder(T.self, node: decoder.describedOnly ? SchemaNode() : decoder.node, depth: decoder.depth + 1)
    }
}
