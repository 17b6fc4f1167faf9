import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Every operation says what it does (read, write, destructive; network, secrets): the
/// kernel's policy hook decides on it for calls made on someone's behalf.
final class EffectTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private func contracts(_ extra: [String] = []) throws -> [JSONValue] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("none.sock")
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                                           ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("key"), "--json"] + extra + ["contracts"],
                                           environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "contracts")["contracts"]?.arrayValue ?? []
    }

    func testEveryBuiltInContractAndStreamAndTheExamplePluginsDeclareTheirEffect() throws {
        let all = try contracts(["--plugins", FeatureHarness.buildDirectory + "/plugins"])
        XCTAssertGreaterThan(all.count, 90)
        let undeclared = all.filter { $0["effectDeclared"] != .bool(true) }.compactMap { $0["id"]?.stringValue }
        XCTAssertEqual(undeclared, [], "operations that do not say what they do")
        // A few that must not be taken for less than they are.
        let effects = Dictionary(uniqueKeysWithValues: all.compactMap { info in info["id"]?.stringValue.map { ($0, info["effect"] ?? .null) } })
        XCTAssertEqual(effects["workspaces.exec@1"]?["level"], .string("destructive"))
        XCTAssertEqual(effects["workspaces.exec@1"]?["network"], .bool(true))
        XCTAssertEqual(effects["vault.host.list@1"]?["level"], .string("read"))
        XCTAssertEqual(effects["vault.identity.add@1"]?["secrets"], .bool(true))
        XCTAssertEqual(effects["sftp.transfer@1"]?["level"], .string("destructive"))
        XCTAssertEqual(effects["digest.hash@1"]?["level"], .string("read"))
    }

    func testTheManifestFormReadsAndRefusesWhatIsNotAnEffect() {
        XCTAssertEqual(try Effect.parse("read").get(), .read)
        XCTAssertEqual(try Effect.parse("write+network").get(), Effect(.write, network: true))
        XCTAssertEqual(try Effect.parse("destructive+secrets+network").get(), Effect(.destructive, network: true, secrets: true))
        XCTAssertEqual(Effect(.write, secrets: true).description, "write+secrets")
        for bad in ["", "reads", "write+net", "read+network+network", "network"] {
            guard case .failure(let error) = Effect.parse(bad) else { return XCTFail("'\(bad)' was taken for an effect") }
            XCTAssertTrue(error.message.contains("'\(bad)' is not an effect"), error.message)
        }
        XCTAssertEqual(Effect.read.union(Effect(.write, network: true)), Effect(.write, network: true))
        XCTAssertTrue(Effect.Level.read < .write && Effect.Level.write < .destructive)
    }

    func testAPluginThatDeclaresNoEffectIsTakenAsTheWorstAndABadOneIsRefused() throws {
        let source = #"""
        #include "termind_plugin.h"
        #include <string.h>
        static const termind_host_api *host;
        static int handle(const char *contract, const char *request, size_t length, char **reply) {
            char *c = host->alloc(3); memcpy(c, "{}", 3); *reply = c; return TERMIND_OK;
        }
        static const termind_plugin_descriptor descriptor = {
            sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, PLUGIN_ID, "1.0.0", NULL, NULL, handle, NULL
        };
        const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
        """#
        try CPluginCompiler.build(source: source, folder: directory.file("plain/silent"), name: "silent", defines: ["PLUGIN_ID=\"silent\""],
                                  manifest: #"{"id": "silent", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libsilent.so", "contracts": ["silent.go@1"]}"#)
        let silent = try XCTUnwrap(try contracts(["--plugins", directory.file("plain")]).first { $0["id"]?.stringValue == "silent.go@1" })
        XCTAssertEqual(silent["effectDeclared"], .bool(false))
        XCTAssertEqual(silent["effect"]?["level"], .string("destructive"))
        XCTAssertEqual(silent["effect"]?["network"], .bool(true))
        XCTAssertEqual(silent["effect"]?["secrets"], .bool(true))

        try CPluginCompiler.build(source: source, folder: directory.file("bad/wrong"), name: "wrong", defines: ["PLUGIN_ID=\"wrong\""],
                                  manifest: #"{"id": "wrong", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libwrong.so", "contracts": ["wrong.go@1"], "effects": {"wrong.go@1": "harmless"}}"#)
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        let listed = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                                           ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("key"), "--plugins", directory.file("bad"), "--json", "features"],
                                           environment: environment)
        let features = try JSONCoding.parse(Data(listed.stdout.utf8), source: "features")["features"]?.arrayValue ?? []
        let wrong = try XCTUnwrap(features.first { $0["id"]?.stringValue == "wrong" }, listed.stdout)
        XCTAssertEqual(wrong["state"]?.stringValue, "disabled")
        XCTAssertTrue(wrong["reason"]?.stringValue?.contains("field \"effects\": 'wrong.go@1': 'harmless' is not an effect") == true, listed.stdout)
    }
}
