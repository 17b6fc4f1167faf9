import TermindCore
import XCTest

/// Reading the JSON Schemas a C plugin declares: the subset termind exports, every
/// unsupported keyword refused with its path.
final class JSONSchemaReadingTests: XCTestCase {
    private func read(_ text: String) throws -> Result<JSONSchema, TermindError> {
        JSONSchema.read(try JSONCoding.parse(Data(text.utf8), source: "schema"), at: "request")
    }

    func testReadsWhatTermindExports() throws {
        let schema = try read(#"{"type": "object", "description": "d", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}, "mode": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer"}}, "required": ["name"]}"#).get()
        XCTAssertEqual(schema, .object([
            .init(name: "mode", schema: .enumeration(["a", "b"]), required: false),
            .init(name: "n", schema: .integer, required: false),
            .init(name: "name", schema: .string(), required: true),
            .init(name: "tags", schema: .array(.string()), required: false),
        ]))
        // What termind exports reads back as the same schema.
        XCTAssertEqual(try JSONSchema.read(schema.json, at: "x").get(), schema)
        XCTAssertEqual(try read(#"{"type": "object"}"#).get(), .dictionary(.any))
        XCTAssertEqual(try read(#"{"type": "object", "additionalProperties": {"type": "number"}}"#).get(), .dictionary(.number))
        XCTAssertEqual(try read(#"{}"#).get(), .any)
        XCTAssertEqual(try read(#"{"type": "string", "format": "uuid"}"#).get(), .string(format: "uuid"))
    }

    func testUnsupportedOrMalformedSchemasNameThePath() throws {
        let cases: [(String, String)] = [
            (#"{"type": "string", "minLength": 1}"#, "request: unsupported keyword 'minLength'"),
            (#"{"type": ["string", "null"]}"#, "request.type: must be one string"),
            (#"{"type": "object", "properties": {"a": {"type": "strnig"}}}"#, "request.properties.a.type: 'strnig' is not one of"),
            (#"{"type": "object", "properties": {}, "required": ["b"]}"#, "request.required: names 'b', which is not under \"properties\""),
            (#"{"type": "object", "properties": {}, "additionalProperties": true}"#, "request.additionalProperties: an object with \"properties\" is closed"),
            (#"{"type": "integer", "items": {}}"#, "request: keyword 'items' does not apply to type integer"),
            (#"{"type": "string", "enum": []}"#, "request.enum: must be a non-empty array of strings"),
            (#"[]"#, "request: a schema is a JSON object, not array"),
        ]
        for (text, message) in cases {
            guard case .failure(let error) = try read(text) else { XCTFail("accepted \(text)"); continue }
            XCTAssertTrue(error.message.hasPrefix(message), "\(text): \(error.message)")
        }
    }

    func testTheValidatorRefusesABadSchemaOrOneForAnUndeclaredContract() throws {
        let validator = RegistryValidator(libraryExists: { _ in true })
        func plugin(_ schemas: [String: FeatureManifest.ContractSchemas], kind: FeatureManifest.Kind = .c) -> FeatureManifest {
            FeatureManifest(id: "p", kind: kind, library: "/p.so", contracts: ["p.x@1"], schemas: schemas, source: "plugin.json", origin: .plugin)
        }
        let bad = try validator.plan([plugin(["p.x@1": .init(request: .object(["type": .string("string"), "pattern": .string("a")]))])])
        XCTAssertEqual(bad.disabled.first?.field, "schemas")
        XCTAssertTrue(bad.disabled.first?.message.contains("p.x@1.request: unsupported keyword 'pattern'") ?? false, "\(bad.disabled)")
        let undeclared = try validator.plan([plugin(["p.y@1": .init(response: .object([:]))])])
        XCTAssertTrue(undeclared.disabled.first?.message.contains("'p.y@1' is not one of the contracts or streams this feature declares") ?? false)
        let swift = try validator.plan([plugin(["p.x@1": .init(response: .object([:]))], kind: .swift)])
        XCTAssertTrue(swift.disabled.first?.message.contains("only C plugins") ?? false)
        XCTAssertEqual(try validator.plan([plugin(["p.x@1": .init(request: .object(["type": .string("object")]))])]).ordered.map(\.id), ["p"])
    }
}
