import Foundation
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

final class ContractIDTests: XCTestCase {
    func testParsesAndRejects() {
        XCTAssertEqual(ContractID(parsing: "vault.host.list@1"), ContractID(name: "vault.host.list", version: 1))
        for bad in ["vault", "vault@0", "Vault.x@1", "vault@1@2", "@1", "vault..x@1", "vault@x"] {
            XCTAssertNil(ContractID(parsing: bad), bad)
        }
    }
}
