import Foundation
import Synchronization
import TermindCore
import XCTest

final class SchemaDerivationTests: XCTestCase {
    enum Mode: String, Codable, SchemaEnum { case fast, safe }
    struct Inner: Codable { var name: String; var weight: Double? }
    struct Sample: Codable {
        var id: UUID
        var count: Int
        var enabled: Bool
        var mode: Mode
        var tags: [String]
        var inner: Inner
        var optionalInner: Inner?
        var labels: [String: Int]
        var secret: Secret
        var nickname: String?
    }

    func testDerivesTypesRequirednessEnumsAndNesting() throws {
        let schema = SchemaDerivation.schema(for: Sample.self)
        guard case .object(let properties) = schema else { return XCTFail("expected object, got \(schema)") }
        let byName = Dictionary(uniqueKeysWithValues: properties.map { ($0.name, $0) })
        XCTAssertEqual(byName["id"]?.schema, .string(format: "uuid"))
        XCTAssertEqual(byName["count"]?.schema, .integer)
        XCTAssertEqual(byName["enabled"]?.schema, .boolean)
        XCTAssertEqual(byName["mode"]?.schema, .enumeration(["fast", "safe"]))
        XCTAssertEqual(byName["tags"]?.schema, .array(.string()))
        XCTAssertEqual(byName["labels"]?.schema, .dictionary(.integer))
        XCTAssertEqual(byName["secret"]?.schema, .string())
        XCTAssertEqual(byName["inner"]?.schema, .object([.init(name: "name", schema: .string(), required: true),
                                                         .init(name: "weight", schema: .number, required: false)]))
        XCTAssertEqual(byName["optionalInner"]?.required, false)
        XCTAssertEqual(byName["nickname"]?.required, false)
        XCTAssertEqual(properties.filter(\.required).map(\.name), ["id", "count", "enabled", "mode", "tags", "inner", "labels", "secret"])
    }

    func testValidationNamesEveryOffendingFieldByPath() throws {
        let schema = SchemaDerivation.schema(for: Inner.self)
        let value = try JSONCoding.parse(Data(#"{"weight": "heavy", "colour": 1}"#.utf8), source: "test")
        XCTAssertEqual(schema.problems(in: value), [
            "body.colour: unknown field (expected one of: name, weight)",
            "body.name: required field is missing",
            "body.weight: expected number, got string",
        ])
        let list = SchemaDerivation.schema(for: [Inner].self)
        XCTAssertEqual(list.problems(in: try JSONCoding.parse(Data(#"[{"name": "a"}, {"name": 3}]"#.utf8), source: "t")),
                       ["body[1].name: expected string, got integer"])
    }

    func testEnumValueOutsideTheCasesIsNamed() throws {
        XCTAssertEqual(Mode.schema.problems(in: .string("turbo")), ["body: 'turbo' is not one of fast, safe"])
    }

    func testSchemaJSONIsStandard() throws {
        let json = SchemaDerivation.schema(for: Inner.self).json
        XCTAssertEqual(json["type"], .string("object"))
        XCTAssertEqual(json["required"], .array([.string("name")]))
        XCTAssertEqual(json["additionalProperties"], .bool(false))
        XCTAssertEqual(json["properties"]?["weight"]?["type"], .string("number"))
    }

    func testRecursiveTypesTerminate() {
        final class Node: Codable { var value: Int = 0; var children: [Node] = [] }
        guard case .object(let properties) = SchemaDerivation.schema(for: Node.self) else { return XCTFail() }
        XCTAssertEqual(properties.map(\.name), ["value", "children"])
    }
}

final class FunctionSignatureTests: XCTestCase {
    func testParsesReturnAndParameters() throws {
        let s = try FunctionSignature.parse("uint32( string , uint64 )").get()
        XCTAssertEqual(s.returns, .uint32)
        XCTAssertEqual(s.parameters, [.string, .uint64])
        XCTAssertEqual(try FunctionSignature.parse("void()").get().parameters, [])
        // C's way of writing "no parameters".
        XCTAssertEqual(try FunctionSignature.parse("void(void)").get().parameters, [])
        XCTAssertEqual(try FunctionSignature.parse("int32( void )").get().parameters, [])
    }

    func testRejectsUnknownTypesVoidParametersAndShape() {
        XCTAssertThrowsError(try FunctionSignature.parse("float(int32)").get()) { XCTAssertTrue("\($0)".contains("'float'")) }
        XCTAssertThrowsError(try FunctionSignature.parse("int32(void, int32)").get()) { XCTAssertTrue("\($0)".contains("'void'")) }
        XCTAssertThrowsError(try FunctionSignature.parse("int32").get())
        XCTAssertThrowsError(try FunctionSignature.parse("int32(" + Array(repeating: "int32", count: 17).joined(separator: ",") + ")").get())
    }
}

final class DeferredSchemaTests: XCTestCase {
    func testASchemaIsDerivedWhenFirstAskedForAndThenKept() {
        let derivations = Mutex(0)
        let deferred = DeferredSchema {
            derivations.withLock { $0 += 1 }
            return SchemaDerivation.schema(for: SchemaDerivationTests.Inner.self)
        }
        XCTAssertEqual(derivations.withLock { $0 }, 0, "nothing is derived when it is made")
        let first = deferred.schema
        XCTAssertEqual(deferred.schema, first)
        XCTAssertEqual(derivations.withLock { $0 }, 1)
        XCTAssertEqual(first, SchemaDerivation.schema(for: SchemaDerivationTests.Inner.self))
        XCTAssertEqual(DeferredSchema(.any).schema, .any)
    }

    func testATypedEndpointDerivesNothingUntilUsedAndStillNamesTheFieldOfABadRequest() async throws {
        typealias Echo = CountedEcho
        let endpoint = ContractEndpoint.typed(Echo.self, owner: "test") { request, _ in .init(text: String(repeating: request.text, count: request.times ?? 1)) }
        // Deriving a schema decodes a placeholder of the type: none yet.
        XCTAssertEqual(countedEchoDecodings.withLock { $0 }, 0, "registering the endpoint derived its request schema")
        let reply = try await endpoint.handler(Data(#"{"text": "ab", "times": 2}"#.utf8), .inProcess)
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), #"{"text":"abab"}"#)
        do {
            _ = try await endpoint.handler(Data(#"{"times": "two"}"#.utf8), .inProcess)
            XCTFail("a bad body must be refused")
        } catch {
            let message = TermindError.from(error).message
            XCTAssertTrue(message.contains("text") && message.contains("times"), message)
        }
        XCTAssertEqual(endpoint.requestSchema, SchemaDerivation.schema(for: Echo.Request.self))
        XCTAssertGreaterThan(countedEchoDecodings.withLock { $0 }, 1, "the first call derived the schema and decoded the body")
    }
}

/// How often `CountedEcho.Request` was decoded (schema derivation decodes a placeholder).
private let countedEchoDecodings = Mutex(0)

private struct CountedEcho: Contract {
    static let name = "test.echo"
    static let version = 1
    static let summary = "echo"
    static let effect: Effect = .read
    struct Request: Codable, Sendable {
        var text: String
        var times: Int?
        enum CodingKeys: String, CodingKey { case text, times }
        init(from decoder: any Decoder) throws {
            countedEchoDecodings.withLock { $0 += 1 }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            text = try container.decode(String.self, forKey: .text)
            times = try container.decodeIfPresent(Int.self, forKey: .times)
        }
    }
    struct Response: Codable, Sendable { var text: String }
}

final class ContractIDTests: XCTestCase {
    func testParsesAndRejects() {
        XCTAssertEqual(ContractID(parsing: "vault.host.list@1"), ContractID(name: "vault.host.list", version: 1))
        for bad in ["vault", "vault@0", "Vault.x@1", "vault@1@2", "@1", "vault..x@1", "vault@x"] {
            XCTAssertNil(ContractID(parsing: bad), bad)
        }
    }

    /// The one-pass reading says what splitting at '@' and '.' says, on the edges too.
    func testTheBytewiseReadingAgreesWithSplitting() {
        func split(_ text: String) -> ContractID? {
            let parts = text.split(separator: "@", omittingEmptySubsequences: false)
            let words = parts.first.map { $0.split(separator: ".", omittingEmptySubsequences: false) } ?? []
            guard parts.count == 2, let version = Int(parts[1]), version >= 1, !words.isEmpty,
                  words.allSatisfy({ RegistryValidator.isValidID(String($0)) }) else { return nil }
            return ContractID(name: String(parts[0]), version: version)
        }
        let long = String(repeating: "a", count: 64)
        for text in ["a.b@+1", "a.b@01", "a-b_c.d9@2", "a.@1", ".a@1", "a@", "", "@", "\u{E9}@1", "a.b@1 ", " a@1", "a.b@-1", "a.B@1", "1a@1",
                     "a._b@1", "a.-@1", long + "@1", long + "a@1", "x." + long + "@3", "a.b@99999999999999999999", "a\u{301}.b@1", "a.b@1\u{301}",
                     "vault.host.list@1", "v@1@", "a..@1", "a.b.@1"] {
            XCTAssertEqual(ContractID(parsing: text), split(text), text)
            XCTAssertEqual(RegistryValidator.isValidPortID(String(text.prefix { $0 != "@" })), split(String(text.prefix { $0 != "@" }) + "@1") != nil, text)
        }
    }
}
