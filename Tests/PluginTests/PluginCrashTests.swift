import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// A C plugin runs inside termind's process: when it crashes, termind ends with the
/// signal's status (abort → 134, segfault → 139), as docs/plugins.md says, and a server's
/// socket file is left behind for the next server to replace.
final class PluginCrashTests: XCTestCase {
    static let source = #"""
    #include "termind_plugin.h"
    #include <stdlib.h>
    #include <string.h>
    static volatile int *nowhere;
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        if (strcmp(contract, "crash.abort@1") == 0) abort();
        *nowhere = 1; /* a real bad pointer: segfault */
        return TERMIND_ERR_FAILED;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, "crash", "1.0.0", NULL, NULL, handle, NULL
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { return &descriptor; }
    """#

    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        try CPluginCompiler.build(source: Self.source, folder: directory.file("plugins/crash"), name: "crash",
                                  manifest: #"{"id": "crash", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libcrash.so", "contracts": ["crash.abort@1", "crash.segv@1"]}"#)
        try directory.write("Registry.json", #"{"schema": 1, "features": []}"#)
    }

    override func tearDown() {
        directory?.remove()
    }

    func testACrashingPluginEndsTheProcessWithTheSignalsStatus() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        let termind = FeatureHarness.buildDirectory + "/termind"
        let base = ["--registry", directory.file("Registry.json"), "--plugins", directory.file("plugins"), "call"]
        XCTAssertEqual(try ProcessRunner.run(termind, base + ["crash.abort@1"], environment: environment).status, 134)
        XCTAssertEqual(try ProcessRunner.run(termind, base + ["crash.segv@1"], environment: environment).status, 139)

        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", directory.file("plugins")])
        let client = try ControlClient(path: server.socketPath)
        XCTAssertThrowsError(try client.call("crash.segv@1", body: Data("{}".utf8))) {
            XCTAssertEqual(($0 as? TermindError)?.code, "socket.closed")
        }
        XCTAssertEqual(server.process.wait(), 139)
        XCTAssertTrue(FileManager.default.fileExists(atPath: server.socketPath), "the socket file is left behind")
        // The next server replaces the stale socket.
        let next = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json")])
        XCTAssertNoThrow(try ControlClient(path: next.socketPath).call("kernel.ping@1", body: Data(#"{"payload": "x"}"#.utf8)))
        XCTAssertEqual(next.stop(), 0)
    }
}
