import Foundation
import TermindCore
import TermindHarness
import XCTest

/// JSONValueDecoder decodes a parsed value as JSONDecoder decodes its text: the same
/// values, and the same errors at the same paths (settings problems name a record's field
/// from the error's path).
final class JSONValueDecoderTests: XCTestCase {
    private struct Inner: Codable, Equatable {
        var name: String
        var weight: Double?
        var tags: [String] = []
    }

    private enum Mode: String, Codable, Equatable { case fast, slow }

    private struct Sample: Codable, Equatable {
        var count: Int
        var small: UInt8?
        var big: UInt64?
        var ratio: Double
        var flag: Bool
        var mode: Mode
        var inner: Inner
        var list: [Inner]
        var map: [String: Int]
        var nested: [[Int?]]
        var blob: Data?
        var when: Date?
        var link: URL?
        var any: JSONValue?
        var missing: String?
    }

    private func both<T: Decodable & Equatable>(_ type: T.Type, _ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> T {
        let data = Data(text.utf8)
        let value = try JSONCoding.parse(data, source: "sample")
        let expected = try JSONDecoder().decode(type, from: data)
        let decoded = try JSONValueDecoder.decode(type, from: value)
        XCTAssertEqual(decoded, expected, file: file, line: line)
        return decoded
    }

    /// The error JSONDecoder gives and the one JSONValueDecoder gives, described alike.
    private func failure<T: Decodable>(_ type: T.Type, _ text: String) throws -> (expected: String, decoded: String) {
        let data = Data(text.utf8)
        let value = try JSONCoding.parse(data, source: "sample")
        func describe(_ body: () throws -> T) -> String {
            do { _ = try body(); return "decoded" } catch let error as DecodingError {
                func path(_ context: DecodingError.Context) -> String {
                    context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
                }
                switch error {
                case .typeMismatch(let type, let context): return "typeMismatch \(type) at \(path(context))"
                case .valueNotFound(let type, let context): return "valueNotFound \(type) at \(path(context))"
                case .keyNotFound(let key, let context): return "keyNotFound \(key.stringValue) at \(path(context))"
                case .dataCorrupted(let context): return "dataCorrupted at \(path(context))"
                @unknown default: return "unknown"
                }
            } catch { return "other \(error)" }
        }
        return (describe { try JSONDecoder().decode(type, from: data) }, describe { try JSONValueDecoder.decode(type, from: value) })
    }

    func testValuesDecodeAsJSONDecoderDecodesTheirText() throws {
        let full = """
        {"count": 3, "small": 255, "big": 18446744073709551615, "ratio": 2, "flag": true, "mode": "slow",
         "inner": {"name": "a", "weight": 1.5, "tags": ["x", "y"]},
         "list": [{"name": "b", "tags": []}, {"name": "c", "weight": null, "tags": ["z"]}],
         "map": {"k1": 1, "k2": -2}, "nested": [[1, null, 3], []],
         "blob": "aGVsbG8=", "when": 12.5, "link": "https://example.com/a?b=c", "any": {"deep": [1, "two", null, 3.5]},
         "missing": null, "extra": "ignored"}
        """
        let sample = try both(Sample.self, full)
        XCTAssertEqual(sample.blob, Data("hello".utf8))
        XCTAssertEqual(sample.big, UInt64.max)
        XCTAssertEqual(sample.any, .object(["deep": .array([.integer(1), .string("two"), .null, .double(3.5)])]))
        _ = try both(Sample.self, #"{"count": 1.0, "ratio": 0.25, "flag": false, "mode": "fast", "inner": {"name": "", "tags": []}, "list": [], "map": {}, "nested": []}"#)
        _ = try both([String: [Int]].self, #"{"a": [1, 2], "b": []}"#)
        _ = try both([Int: String].self, #"{"1": "one", "-2": "minus two"}"#)
        _ = try both([Double?].self, "[1, null, 2.5, -0.0]")
        _ = try both(JSONValue.self, #"{"x": [true, null, 18446744073709551615, -9223372036854775808]}"#)
    }

    func testErrorsNameTheSameKindAndPathAsJSONDecoders() throws {
        let base = #""ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": []"#
        let cases = [
            #"{"count": "3", \#(base)}"#,                                  // a string for an integer
            #"{"count": null, \#(base)}"#,                                 // null for a required integer
            #"{"ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": []}"#, // missing key
            #"{"count": 1, "ratio": 1, "flag": 1, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [{"name": 5}], "map": {}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": [], "list": [], "map": {}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": {}, "map": {}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [null], "map": {}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {"k": "v"}, "nested": []}"#,
            #"{"count": 1, "ratio": 1, "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": [[1, "x"]]}"#,
            #"{"count": 1, "ratio": "1", "flag": true, "mode": "fast", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": []}"#,
            #"{"count": 1, "blob": "not base64!", \#(base)}"#,
            "[]",
        ]
        for text in cases {
            let (expected, decoded) = try failure(Sample.self, text)
            XCTAssertNotEqual(expected, "decoded", text)
            XCTAssertEqual(decoded, expected, text)
        }
        // A number that does not fit: corrupted data for both, and this decoder names the
        // field (JSONDecoder names only the object holding it).
        for (text, field) in [(#"{"count": 1.5, \#(base)}"#, "count"), (#"{"count": 1, "small": 256, \#(base)}"#, "small"),
                              (#"{"count": 1, "small": -1, \#(base)}"#, "small")] {
            let (expected, decoded) = try failure(Sample.self, text)
            XCTAssertEqual(expected, "dataCorrupted at ", text)
            XCTAssertEqual(decoded, "dataCorrupted at \(field)", text)
        }
        // An enum's unknown case: both report corrupted data at the field.
        let (expected, decoded) = try failure(Sample.self, #"{"count": 1, "ratio": 1, "flag": true, "mode": "medium", "inner": {"name": "a", "tags": []}, "list": [], "map": {}, "nested": []}"#)
        XCTAssertEqual(decoded, expected)
        XCTAssertEqual(decoded, "dataCorrupted at mode")
    }

    /// Every manifest of the checkout's registry reads as it did through JSONDecoder.
    func testEveryRegistryManifestDecodesAsJSONDecoderDecodesIt() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Repository.path("Registry.json")))
        guard case .object(let document) = try JSONCoding.parse(data, source: "Registry.json"), case .array(let entries)? = document["features"] else {
            return XCTFail("Registry.json has no features")
        }
        XCTAssertGreaterThan(entries.count, 5)
        for entry in entries {
            let expected = try JSONDecoder().decode(FeatureManifest.self, from: JSONCoding.encode(entry))
            XCTAssertEqual(try JSONValueDecoder.decode(FeatureManifest.self, from: entry), expected, entry["id"]?.stringValue ?? "?")
        }
    }
}
