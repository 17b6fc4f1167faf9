import Foundation
import TermindCore
import TermindHarness
import XCTest

/// JSONWriter writes exactly the bytes Foundation's JSONEncoder (as `JSONCoding.encoder()`
/// sets it up) writes for the same value: audit rows hash that text, and stored envelopes
/// and hashes from before the writer must stay what they were.
final class JSONWriterTests: XCTestCase {
    private let keys = ["", "a", "A", "B", "Z", "_x", "a10", "a9", "aa", "a-b", "a_b", "1", "10", "9", "é", "e", "ä", "ß", "ss",
                        "\u{1F600}", "\u{FF21}", "a\u{0301}", "\u{E9}x", "k\"q", "k\\b", "tab\t", "\u{7F}", "\u{2028}", "\u{0}"]

    private func randomString(_ generator: inout SeededGenerator) -> String {
        let pieces: [String] = ["plain", "\"", "\\", "/", "\n", "\r", "\t", "\u{8}", "\u{C}", "\u{1}", "\u{1F}", "\u{7F}", "é", "\u{2028}",
                                "\u{1F600}", "\u{301}", " ", "</script>", "\u{0}", "日本"]
        return (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
    }

    private func randomDouble(_ generator: inout SeededGenerator) -> Double {
        switch Int.random(in: 0...6, using: &generator) {
        case 0: return Double(Int.random(in: -1_000_000...1_000_000, using: &generator))
        case 1: return Double.random(in: -1...1, using: &generator)
        case 2: return Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &generator) & ~(0x7FF << 52) | (UInt64.random(in: 1...0x7FE, using: &generator) << 52))
        case 3: return [0.0, -0.0, 0.1, 1e21, 1e-7, 1e300, Double.leastNonzeroMagnitude, 1.5e16, 2.5e-5, 123_456_789_012_345_680, Double.greatestFiniteMagnitude].randomElement(using: &generator)!
        case 4: return Double(Int.random(in: 0...1000, using: &generator)) / 100
        default: return Double.random(in: -1e20...1e20, using: &generator)
        }
    }

    private func randomValue(_ generator: inout SeededGenerator, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0...(depth > 3 ? 5 : 7), using: &generator) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2: return .integer([Int64.min, Int64.max, 0, -1, Int64.random(in: Int64.min...Int64.max, using: &generator)].randomElement(using: &generator)!)
        case 3: return .unsignedInteger(UInt64.random(in: (UInt64(Int64.max) + 1)...UInt64.max, using: &generator))
        case 4: return .double(randomDouble(&generator))
        case 5: return .string(randomString(&generator))
        case 6: return .array((0..<Int.random(in: 0...5, using: &generator)).map { _ in randomValue(&generator, depth: depth + 1) })
        default:
            var fields: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...8, using: &generator) {
                let key = Bool.random(using: &generator) ? keys.randomElement(using: &generator)! : randomString(&generator)
                fields[key] = randomValue(&generator, depth: depth + 1)
            }
            return .object(fields)
        }
    }

    func testTheWriterWritesWhatJSONEncoderWritesForRandomValues() throws {
        var generator = SeededGenerator(seed: 8259)
        let encoder = JSONCoding.encoder()
        for round in 0..<3000 {
            let value = randomValue(&generator)
            let expected = try encoder.encode(value)
            let written = try XCTUnwrap(JSONWriter.bytes(value))
            guard Data(written) == expected else {
                return XCTFail("round \(round): \(String(decoding: written, as: UTF8.self)) ≠ \(String(decoding: expected, as: UTF8.self))")
            }
            XCTAssertEqual(try JSONCoding.encode(value), expected)
        }
    }

    func testKeysAreInUTF8ByteOrderAndANonFiniteNumberIsRefusedAsTheEncoderRefusesIt() throws {
        let value = JSONValue.object(Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($1, .integer(Int64($0))) }))
        XCTAssertEqual(Data(try XCTUnwrap(JSONWriter.bytes(value))), try JSONCoding.encoder().encode(value))
        let order = try JSONCoding.parseKeysInOrder(Data(try XCTUnwrap(JSONWriter.bytes(value))))
        XCTAssertEqual(order, order.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        XCTAssertEqual(String(decoding: try XCTUnwrap(JSONWriter.bytes(.array([.double(1), .double(-0.0), .double(100), .double(0.5)]))), as: UTF8.self), "[1,-0,100,0.5]")
        XCTAssertNil(JSONWriter.bytes(.array([.double(.nan)])))
        XCTAssertThrowsError(try JSONCoding.encode(JSONValue.double(.infinity)))
        var frame: [UInt8] = []
        JSONWriter.write(.array([.double(.infinity)]), into: &frame, nonFiniteAsNull: true)
        XCTAssertEqual(String(decoding: frame, as: UTF8.self), "[null]")
    }
}

private extension JSONCoding {
    /// The top-level object's keys in the order the text has them (its values are integers:
    /// a key is every string, read byte by byte).
    static func parseKeysInOrder(_ data: Data) throws -> [String] {
        let bytes = [UInt8](data)
        var keys: [String] = []
        var index = 0
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: "\"") else { index += 1; continue }
            var end = index + 1
            while bytes[end] != UInt8(ascii: "\"") { end += bytes[end] == UInt8(ascii: "\\") ? 2 : 1 }
            keys.append(try parse(Data(bytes[index...end]), source: "key").stringValue ?? "")
            index = end + 1
        }
        return keys
    }
}
