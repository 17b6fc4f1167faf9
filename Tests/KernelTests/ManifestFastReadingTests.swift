import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `FeatureManifest(exactly:)`, the reader of a manifest exactly of the manifest's shape, and
/// the checked path (the schema derived from the `Codable` type, then the decoder) give the
/// same manifest, and what the checked path refuses the exact reader refuses too, so a
/// manifest is never read differently for having taken one path or the other.
final class ManifestFastReadingTests: XCTestCase {
    private let schema = SchemaDerivation.schema(for: FeatureManifest.self)

    /// The checked path's manifest, or nil where it refuses.
    private func checked(_ value: JSONValue) -> FeatureManifest? {
        guard schema.problems(in: value, at: "").isEmpty else { return nil }
        return try? JSONValueDecoder.decode(FeatureManifest.self, from: value)
    }

    /// Every field a manifest may have, each set.
    private let everyField = #"""
    {"id": "all", "version": "1.2.3", "abi": 1, "kind": "c", "library": "liball.so", "order": 7, "permanent": false,
     "dependencies": {"required": ["a"], "optional": ["b"]}, "ports": {"provides": ["all.p"], "requires": ["kernel.store"], "optional": ["x.y"]},
     "contracts": ["all.run@1"], "streams": ["all.watch@1"], "calls": ["vault.host.list@1"], "callsFrom": {"vault.host.list@1": ["all.run@1"]},
     "functions": [{"name": "crc", "symbol": "all_crc", "signature": "uint32(string)", "summary": "A checksum"}, {"name": "n", "symbol": "n", "signature": "void()"}],
     "commands": [{"name": "all run", "contract": "all.run@1", "arguments": ["host", "command..."], "paths": ["file"], "secrets": ["token"],
                   "workingDirectory": "cwd", "terminal": "tty", "output": "format", "summary": "Run it", "help": ["line one", "line two"],
                   "flags": {"r": "recursive"}, "options": {"L": "localForward"}, "environment": {"tmux": "TMUX"},
                   "values": {"direction": "get", "n": 3, "nested": {"a": [1, null, true]}}, "columns": ["host"], "stopsOptions": true,
                   "quietResult": false, "interactive": "isTerminal", "interruptible": true},
                  {"name": "all watch", "stream": "all.watch@1", "arguments": []}],
     "schemas": {"all.run@1": {"request": {"type": "object"}, "response": {"type": "string"}, "acceptsInput": true,
                               "events": {"line": {"type": "object"}}, "questions": {"confirm": "yesNo"}}},
     "libraryOutsidePlugin": true, "isolation": "process", "access": {"read": ["/etc"], "write": ["/tmp"], "tcp": true},
     "limits": {"memoryMiB": 256, "openFiles": 64, "callSeconds": 5}, "summary": "Everything", "help": {"title": "All", "rank": 3},
     "effects": {"all.run@1": "read"}, "serveOptions": [{"name": "all-port", "value": "PORT", "summary": "Where"}],
     "commandsNeedConsumersOf": ["all.p"], "settingsRecords": ["all.prefs"]}
    """#

    private func parse(_ text: String) throws -> JSONValue { try JSONCoding.parse(Data(text.utf8), source: "test") }

    func testEveryManifestTermindShipsAndEveryFieldReadsAsTheCheckedPathReadsIt() throws {
        var corpus: [(String, JSONValue)] = []
        let registry = try JSONCoding.parse(Data(contentsOf: URL(fileURLWithPath: FeatureHarness.buildDirectory + "/Registry.json")), source: "Registry.json")
        for entry in registry["features"]?.arrayValue ?? [] { corpus.append((entry["id"]?.stringValue ?? "?", entry)) }
        XCTAssertGreaterThanOrEqual(corpus.count, 8)
        for plugin in ["Digest", "WakeOnLAN"] {
            let path = FeatureHarness.buildDirectory + "/plugins/\(plugin)/plugin.json"
            corpus.append((plugin, try JSONCoding.parse(Data(contentsOf: URL(fileURLWithPath: path)), source: path)))
        }
        corpus.append(("every field", try parse(everyField)))
        corpus.append(("the least", try parse(#"{"id": "least", "version": "1", "abi": 1, "library": "l.so"}"#)))
        for (name, value) in corpus {
            let expected = try XCTUnwrap(checked(value), "\(name): the checked path refuses it")
            XCTAssertEqual(FeatureManifest(exactly: value), expected, name)
        }
        // Each field of the full manifest came through (not left at a default by both paths).
        let all = try XCTUnwrap(FeatureManifest(exactly: try parse(everyField)))
        XCTAssertEqual(all.kind, .c)
        XCTAssertEqual(all.callsFrom, ["vault.host.list@1": ["all.run@1"]])
        XCTAssertEqual(all.commands.first?.values?["nested"], .object(["a": .array([.integer(1), .null, .bool(true)])]))
        XCTAssertEqual(all.commands.first?.interruptible, true)
        XCTAssertEqual(all.limits?.callSeconds, 5)
        XCTAssertEqual(all.access?.tcp, true)
        XCTAssertEqual(all.schemas["all.run@1"]?.questions, ["confirm": "yesNo"])
        XCTAssertEqual(all.serveOptions.first?.name, "all-port")
        XCTAssertEqual(all.help?.rank, 3)
    }

    /// Every field of the full manifest, and every object in it, changed in each way the
    /// checked path may refuse (null, another type, a number with a fraction, an unknown
    /// field): where the checked path refuses, the exact reader gives nil; where it accepts,
    /// the exact reader gives nil or the very same manifest.
    func testWhatTheCheckedPathRefusesTheExactReaderRefuses() throws {
        let base = try parse(everyField)
        var tried = 0, refused = 0
        for variant in Self.variants(of: base) {
            tried += 1
            let expected = checked(variant)
            let exact = FeatureManifest(exactly: variant)
            if expected == nil {
                refused += 1
                XCTAssertNil(exact, "the exact reader accepted what the checked path refuses: \(Self.text(variant))")
            } else if let exact {
                XCTAssertEqual(exact, expected, Self.text(variant))
            }
        }
        // The variants did probe refusals, and many of them.
        XCTAssertGreaterThan(tried, 300)
        XCTAssertGreaterThan(refused, 200)
    }

    static func text(_ value: JSONValue) -> String { JSONWriter.bytes(value).map { String(decoding: $0, as: UTF8.self) } ?? "?" }

    /// The value with one change at one place, for every place.
    static func variants(of value: JSONValue) -> [JSONValue] {
        var out: [JSONValue] = []
        let replacements: [JSONValue] = [.null, .string("s"), .integer(2), .double(2.5), .double(3), .bool(true), .array([.string("a")]),
                                         .object(["k": .string("v")]), .array([.integer(1)])]
        func walk(_ value: JSONValue, _ rebuild: (JSONValue) -> JSONValue) {
            for replacement in replacements where replacement != value { out.append(rebuild(replacement)) }
            switch value {
            case .object(let fields):
                out.append(rebuild(.object(fields.merging(["unknownField": .bool(true)]) { $1 })))
                for (key, child) in fields {
                    walk(child) { changed in
                        var copy = fields
                        copy[key] = changed
                        return rebuild(.object(copy))
                    }
                    out.append(rebuild(.object(fields.filter { $0.key != key })))
                }
            case .array(let items):
                for (index, child) in items.enumerated() {
                    walk(child) { changed in
                        var copy = items
                        copy[index] = changed
                        return rebuild(.array(copy))
                    }
                }
            default:
                break
            }
        }
        walk(value) { $0 }
        return out
    }
}
