import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// Broken C plugins, compiled by this test with the system C compiler from one source
/// with a switch per defect. Each must be rejected with its reason while the example
/// plugin beside them keeps working.
final class BrokenPluginTests: XCTestCase {
    private static let source = #"""
    #include "termind_plugin.h"
    #include <string.h>
    static const termind_host_api *host;
    static char *dup(const char *s) { size_t n = strlen(s) + 1; char *c = host->alloc(n); memcpy(c, s, n); return c; }
    static int start(char **error) {
    #ifdef START_FAILS
        *error = dup("the license server is unreachable");
        return TERMIND_ERR_FAILED;
    #else
        return TERMIND_OK;
    #endif
    }
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
    #ifdef BAD_REPLY
        *reply = dup("{this is not json");
    #else
        *reply = dup("{\"ok\": true}");
    #endif
        return TERMIND_OK;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor),
    #ifdef WRONG_ABI
        2,
    #else
        TERMIND_PLUGIN_ABI_VERSION,
    #endif
    #ifdef NO_HANDLE
        PLUGIN_ID, "1.0.0", start, NULL, NULL, NULL
    #else
        PLUGIN_ID, "1.0.0", start, NULL, handle, NULL
    #endif
    };
    #ifdef MISSING_ENTRY
    const termind_plugin_descriptor *termind_plugin_entry_v0(const termind_host_api *api) { host = api; return &descriptor; }
    #else
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) {
        host = api;
    #ifdef NULL_DESCRIPTOR
        return NULL;
    #else
        return &descriptor;
    #endif
    }
    #endif
    int present_function(int x) { return x * 2; }
    """#

    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        try directory.write("src/plugin.c", Self.source)
    }

    override func tearDown() {
        directory?.remove()
    }

    /// Compiles the source with `defines` into plugins/<folder>/ with a manifest.
    private func plugin(_ folder: String, id: String, defines: [String] = [], extraManifest: String = "") throws {
        let library = directory.file("plugins/\(folder)/lib\(folder).so")
        try FileManager.default.createDirectory(atPath: directory.file("plugins/\(folder)"), withIntermediateDirectories: true)
        let include = Repository.path("Core/Sources/CTermindPluginABI/include")
        let flags = ["-shared", "-fPIC", "-Wall", "-Werror", "-Wno-unused-function", "-Wno-unused-parameter", "-Wno-unused-const-variable", "-I", include, "-DPLUGIN_ID=\"\(id)\""] + defines.map { "-D\($0)" }
        let result = try ProcessRunner.run("/usr/bin/cc", flags + ["-o", library, directory.file("src/plugin.c")])
        XCTAssertEqual(result.status, 0, "cc failed: \(result.stderr)")
        try directory.write("plugins/\(folder)/plugin.json", """
        {"id": "\(id)", "version": "1.0.0", "abi": 1, "kind": "c", "library": "lib\(folder).so", "contracts": ["\(id).run@1"]\(extraManifest)}
        """)
    }

    private func boot() async throws -> (Kernel, [String: FeatureStatus], [FeatureProblem]) {
        // The working example sits beside the broken ones.
        let example = directory.file("plugins/digest")
        try FileManager.default.copyItem(atPath: FeatureHarness.buildDirectory + "/plugins/Digest", toPath: example)
        let kernel = Kernel(configuration: KernelConfiguration(registryPath: nil, pluginDirectories: [directory.file("plugins")]), sink: .disabled())
        let statuses = try await kernel.boot()
        return (kernel, Dictionary(uniqueKeysWithValues: statuses.map { ($0.id, $0) }), await kernel.unattributed)
    }

    func testEachBrokenPluginIsRejectedWithItsReasonWhileTheRestRuns() async throws {
        try plugin("good", id: "good")
        try plugin("noentry", id: "noentry", defines: ["MISSING_ENTRY"])
        try plugin("wrongabi", id: "wrongabi", defines: ["WRONG_ABI"])
        try plugin("startfails", id: "startfails", defines: ["START_FAILS"])
        try plugin("nulldesc", id: "nulldesc", defines: ["NULL_DESCRIPTOR"])
        try plugin("wrongid", id: "wrongid", defines: [], extraManifest: "")
        // The manifest says one id, the library another.
        try directory.write("plugins/wrongid/plugin.json", #"{"id": "claimed", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libwrongid.so"}"#)
        try plugin("nofunction", id: "nofunction", extraManifest: #", "functions": [{"name": "gone", "symbol": "absent_function", "signature": "int32(int32)"}]"#)
        try plugin("zdup", id: "good")
        try plugin("badreply", id: "badreply", defines: ["BAD_REPLY"])
        try plugin("nohandle", id: "nohandle", defines: ["NO_HANDLE"])
        try directory.write("plugins/unreadable/plugin.json", #"{"id": "unreadable", "version": 1}"#)
        try plugin("writable", id: "writable")
        chmod(directory.file("plugins/writable/libwritable.so"), 0o777)
        try plugin("openfolder", id: "openfolder")
        chmod(directory.file("plugins/openfolder"), 0o777)

        let (kernel, byID, unattributed) = try await boot()
        XCTAssertEqual(byID["good"]?.state, .running)
        XCTAssertEqual(byID["digest"]?.state, .running)
        XCTAssertEqual(byID["badreply"]?.state, .running)
        let expectations: [(String, String)] = [
            ("noentry", "does not export the entry symbol 'termind_plugin_entry_v1'"),
            ("wrongabi", "its descriptor speaks ABI 2 but the manifest says 1"),
            ("startfails", "failed to start: the license server is unreachable"),
            ("nulldesc", "its entry point returned no descriptor"),
            ("claimed", "its descriptor says id 'wrongid' but the manifest says 'claimed'"),
            ("nofunction", "does not export the symbol 'absent_function' that function 'gone' names in \"functions\""),
            ("nohandle", "its descriptor has no handle function, but the manifest declares contracts (nohandle.run@1); set .handle or declare no contracts"),
        ]
        for (id, reason) in expectations {
            XCTAssertEqual(byID[id]?.state, .disabled, id)
            XCTAssertTrue(byID[id]?.reason?.contains(reason) ?? false, "\(id): \(byID[id]?.reason ?? "no reason")")
        }
        XCTAssertTrue(unattributed.contains { $0.code == "registry.duplicate_id" && $0.message.contains("zdup") }, "\(unattributed)")
        XCTAssertTrue(unattributed.contains { $0.message.contains("unreadable") && $0.field == "version" && $0.message.contains("expected string, got integer") }, "\(unattributed)")
        for (id, detail) in [("writable", "libwritable.so is writable by group or others (mode 777)"), ("openfolder", "openfolder is writable by group or others (mode 777)")] {
            XCTAssertNil(byID[id], "an unsafe plugin is never loaded")
            XCTAssertTrue(unattributed.contains { $0.code == "plugin.insecure" && $0.message.contains(detail) }, "\(id): \(unattributed)")
        }

        // The survivors still answer; a plugin's malformed reply is an error, not a crash.
        let digest = try JSONCoding.parse(try await kernel.call("digest.fn.crc32@1", body: Data(#"{"args": ["a"]}"#.utf8)), source: "r")
        XCTAssertEqual(digest["result"], .integer(0xE8B7_BE43))
        let good = try await kernel.call("good.run@1", body: Data("{}".utf8))
        XCTAssertEqual(try JSONCoding.parse(good, source: "r")["ok"], .bool(true))
        do {
            _ = try await kernel.call("badreply.run@1", body: Data("{}".utf8))
            XCTFail("a malformed reply must be reported")
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("The reply of plugin 'badreply' to badreply.run@1 is not valid JSON"), error.message)
        }
        await kernel.shutdown()
    }

    func testConformanceCheckPassesTheExampleAndNamesAFailure() async throws {
        let good = await PluginConformance.check(pluginDirectory: FeatureHarness.buildDirectory + "/plugins/Digest")
        XCTAssertTrue(good.allSatisfy(\.passed), "\(good)")
        XCTAssertEqual(good.map(\.name), ["manifest", "load and start", "digest.file@1", "digest.fn.crc32@1", "digest.fn.sha256@1", "stop"])

        try plugin("startfails", id: "startfails", defines: ["START_FAILS"])
        let bad = await PluginConformance.check(pluginDirectory: directory.file("plugins/startfails"))
        XCTAssertEqual(bad.last?.name, "load and start")
        XCTAssertEqual(bad.last?.passed, false)
        XCTAssertTrue(bad.last?.detail.contains("license server is unreachable") ?? false)

        let cli = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["plugins", "check", directory.file("plugins/startfails")])
        XCTAssertEqual(cli.status, 1)
        XCTAssertTrue(cli.stdout.contains("FAIL load and start"), cli.stdout)
        XCTAssertTrue(cli.stdout.contains("1 passed, 1 failed"), cli.stdout)
    }
}
