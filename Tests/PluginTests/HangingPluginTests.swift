import Foundation
import TermindCore
import TermindHarness
import XCTest

/// A C plugin whose `start` or `stop` never returns must not hang termind: a start is given
/// a bound and the plugin disabled with the reason, a stop is abandoned after its bound,
/// Ctrl-C ends a command that is still booting, and SIGTERM ends `serve`.
final class HangingPluginTests: XCTestCase {
    private static let source = #"""
    #include "termind_plugin.h"
    #include <string.h>
    #include <unistd.h>
    static const termind_host_api *host;
    static char *copy(const char *s) { size_t n = strlen(s) + 1; char *c = host->alloc(n); memcpy(c, s, n); return c; }
    static int start(char **error) {
    #ifdef START_HANGS
        for (;;) pause();
    #endif
        return TERMIND_OK;
    }
    static void stop(void) {
    #ifdef STOP_HANGS
        for (;;) pause();
    #endif
    }
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        *reply = copy("{\"ok\": true}");
        return TERMIND_OK;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, PLUGIN_ID, "1.0.0", start, stop, handle, NULL
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
    """#

    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        try directory.write("Registry.json", #"{"schema": 1, "features": []}"#)
    }

    override func tearDown() {
        directory?.remove()
    }

    /// A plugin `id` built with `define` in a folder of its own; that folder.
    private func plugin(_ id: String, _ define: String) throws -> String {
        let folder = directory.file("plugins-\(id)/\(id)")
        let manifest = #"{"id": "\#(id)", "version": "1.0.0", "abi": 1, "kind": "c", "library": "lib\#(id).so", "contracts": ["\#(id).ping@1"]}"#
        try CPluginCompiler.build(source: Self.source, folder: folder, name: id, defines: ["PLUGIN_ID=\"\(id)\"", define], manifest: manifest)
        return directory.file("plugins-\(id)")
    }

    private func arguments(_ plugins: String) -> [String] {
        ["--registry", directory.file("Registry.json"), "--plugins", plugins, "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("key")]
    }

    /// Runs termind, waiting at most `seconds` for it (then kills it); its status and output,
    /// and whether it ended by itself.
    private func run(_ argv: [String], seconds: Double, signal: (number: Int32, after: Double)? = nil) throws -> (status: Int32, output: String, errors: String, ended: Bool) {
        let process = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", argv, captureOutput: true)
        if let signal {
            Thread.sleep(forTimeInterval: signal.after)
            process.signal(signal.number)
        }
        let ended = waitUntil(seconds: seconds) { !process.isRunning }
        if !ended { process.signal(SIGKILL) }
        let (output, errors) = process.readAll()
        return (process.wait(), String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self), ended)
    }

    func testAStartThatNeverReturnsDisablesThePluginWithTheReasonAndCtrlCEndsTheWait() throws {
        let plugins = try plugin("stuckstart", "START_HANGS")
        // The boot goes on without it: the command answers, the plugin is disabled and says why.
        let listed = try run(["--json"] + arguments(plugins) + ["features"], seconds: 40)
        XCTAssertTrue(listed.ended, "termind features never returned: \(listed.output)")
        XCTAssertEqual(listed.status, 0, listed.output)
        let features = try JSONCoding.parse(Data(listed.output.utf8), source: "features")["features"]?.arrayValue ?? []
        let stuck = try XCTUnwrap(features.first { $0["id"]?.stringValue == "stuckstart" }, listed.output)
        XCTAssertEqual(stuck["state"]?.stringValue, "disabled")
        XCTAssertEqual(stuck["reasonCode"]?.stringValue, "feature.start_timeout", listed.output)
        XCTAssertTrue(stuck["reason"]?.stringValue?.contains("did not finish starting within 10 s") == true, listed.output)

        // Ctrl-C while it waits for the start ends the command at once.
        let interrupted = try run(arguments(plugins) + ["features"], seconds: 5, signal: (SIGINT, 1))
        XCTAssertTrue(interrupted.ended, "Ctrl-C did not end a command waiting for a plugin's start")
        XCTAssertEqual(interrupted.status, 130, interrupted.errors)
    }

    func testSIGTERMEndsServeWhoseStopNeverReturns() throws {
        let plugins = try plugin("stuckstop", "STOP_HANGS")
        let serve = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", plugins])
        serve.process.signal(SIGTERM)
        let ended = waitUntil(seconds: 20) { !serve.process.isRunning }
        if !ended { serve.process.signal(SIGKILL) }
        XCTAssertTrue(ended, "serve did not end on SIGTERM while a plugin's stop hung")
        XCTAssertEqual(serve.process.wait(), 0)
    }

    func testAPluginMayNotTakeTheClientsId() throws {
        let plugins = try plugin("client", "NOTHING")
        let listed = try run(["--json"] + arguments(plugins) + ["features"], seconds: 30)
        XCTAssertEqual(listed.status, 0, listed.output)
        let problems = try JSONCoding.parse(Data(listed.output.utf8), source: "features")["problems"]?.arrayValue ?? []
        let problem = try XCTUnwrap(problems.first { $0["code"]?.stringValue == "manifest.reserved_id" }, listed.output)
        XCTAssertTrue(problem["message"]?.stringValue?.contains("'client' is reserved") == true, listed.output)
    }
}
