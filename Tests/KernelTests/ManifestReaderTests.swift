import Foundation
import TermindCore
import XCTest

final class ManifestReaderTests: XCTestCase {
    private func read(_ text: String) throws -> ManifestReader.Result {
        try ManifestReader.readRegistry(Data(text.utf8), source: "Registry.json", baseDirectory: "/opt/termind")
    }

    func testMalformedJSONNamesTheLineAndColumn() {
        let text = """
        {
          "schema": 1,
          "features": [
            {"id": "vault", "version": "1.0.0" "abi": 1}
          ]
        }
        """
        XCTAssertThrowsError(try read(text)) { error in
            let message = (error as? TermindError)?.message ?? ""
            XCTAssertTrue(message.hasPrefix("Registry.json is not valid JSON"), message)
            XCTAssertTrue(message.contains("line 4"), message)
        }
    }

    func testTruncatedJSONSaysWhereInputEnds() {
        XCTAssertThrowsError(try read("{\n\"schema\": 1,\n\"features\": [")) { error in
            XCTAssertTrue(((error as? TermindError)?.message ?? "").contains("line 3"), "\(error)")
        }
    }

    func testWrongTopLevelAndSchemaVersionAreClear() {
        XCTAssertThrowsError(try read("[]")) { XCTAssertTrue("\($0)".contains("top level must be an object")) }
        XCTAssertThrowsError(try read(#"{"schema": 7, "features": []}"#)) { XCTAssertTrue("\($0)".contains("schema 7 is not supported")) }
        XCTAssertThrowsError(try read(#"{"schema": 1}"#)) { XCTAssertTrue("\($0)".contains("\"features\" is missing")) }
    }

    func testMissingFieldNamesTheFeatureAndField() throws {
        let result = try read(#"{"schema": 1, "features": [{"id": "vault", "version": "1.0.0", "abi": 1}]}"#)
        XCTAssertTrue(result.manifests.isEmpty)
        let problem = try XCTUnwrap(result.rejected.first)
        XCTAssertEqual(problem.featureID, "vault")
        XCTAssertEqual(problem.field, "library")
        XCTAssertEqual(problem.message, "feature 'vault' (Registry.json features[0]): field \"library\": required field is missing.")
    }

    func testWrongTypeAndUnknownFieldAreReported() throws {
        let result = try read(#"{"schema": 1, "features": [{"id": "a", "version": "1", "abi": "one", "library": "a.so"}, {"id": "b", "version": "1", "abi": 1, "library": "b.so", "permanant": true}]}"#)
        XCTAssertEqual(result.rejected.map(\.field), ["abi", "permanant"])
        XCTAssertTrue(result.rejected[0].message.contains("expected integer, got string"))
        XCTAssertTrue(result.rejected[1].message.contains("unknown field"))
    }

    func testAnUnknownTopLevelFieldIsAnError() {
        XCTAssertThrowsError(try read(#"{"schema": 1, "features": [], "featurs": []}"#)) { error in
            XCTAssertEqual((error as? TermindError)?.message, "Registry.json: unknown top-level field \"featurs\" (allowed: schema, features).")
        }
    }

    func testAnEntryThatSaysItIsPermanentStaysPermanentWhenItCannotBeRead() throws {
        let entries = [
            #"{"id": "vault", "version": "1", "abi": 1, "library": "v.so", "permanent": true, "extra": 1}"#,
            #"{"id": "vault", "version": 1, "abi": 1, "library": "v.so", "permanent": true}"#,
            #"{"id": "vault", "version": "1", "abi": 1, "library": "v.so", "permanent": "yes"}"#,
            #"{"id": "vault", "version": "1", "abi": 1, "library": "v.so", "extra": 1}"#,
            #"{"id": "vault", "version": "1", "abi": 1, "library": "v.so", "permanent": false, "extra": 1}"#,
        ]
        let result = try read(#"{"schema": 1, "features": [\#(entries.joined(separator: ","))]}"#)
        XCTAssertEqual(result.rejected.map(\.permanent), [true, true, true, false, false])
        // A plugin.json is read as a plugin, whatever it says.
        let plugin = ManifestReader.readPlugin(Data(#"{"id": "p", "version": "1", "abi": 1, "library": "p.so", "permanent": true}"#.utf8), source: "plugin.json", baseDirectory: "/x")
        XCTAssertEqual(try plugin.get().origin, .plugin)
        XCTAssertFalse(try plugin.get().isPermanent)
    }

    func testDefaultsAndLibraryResolveAgainstTheBaseDirectory() throws {
        let result = try read(#"{"schema": 1, "features": [{"id": "vault", "version": "1.0.0", "abi": 1, "library": "libTermindVault.so"}]}"#)
        let m = try XCTUnwrap(result.manifests.first)
        XCTAssertEqual(m.libraryPath, "/opt/termind/libTermindVault.so")
        XCTAssertEqual(m.kind, .swift)
        XCTAssertEqual(m.order, 100)
        XCTAssertFalse(m.permanent)
        XCTAssertEqual(m.ports, .init())
    }

    func testTheExampleManifestsAndRegistryInTheRepositoryAreValid() throws {
        for path in ["Plugins/Examples/Digest/plugin.json", "Plugins/Examples/WakeOnLAN/plugin.json"] {
            let data = try XCTUnwrap(FileManager.default.contents(atPath: Repository.path(path)), path)
            if case .failure(let problem) = ManifestReader.readPlugin(data, source: path, baseDirectory: "/x") { XCTFail(problem.message) }
        }
        let registry = try XCTUnwrap(FileManager.default.contents(atPath: Repository.path("Registry.json")))
        XCTAssertTrue(try ManifestReader.readRegistry(registry, source: "Registry.json", baseDirectory: "/x").rejected.isEmpty)
    }
}

import TermindHarness
