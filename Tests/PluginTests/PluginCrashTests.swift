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

    func testPluginsCheckSaysWhichCallItWasMakingWhenThePluginCrashed() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["plugins", "check", directory.file("plugins/crash")],
                                           environment: printingBacktraces(environment))
        XCTAssertEqual(result.status, 134, result.stderr)
        XCTAssertTrue(result.stdout.contains("ok   load and start"), result.stdout)
        XCTAssertTrue(result.stdout.hasSuffix("...  crash.abort@1: calling it with an empty request\n"), result.stdout)
    }

    static let staleSource = #"""
    #include "termind_plugin.h"
    #include <stdio.h>
    #include <string.h>
    static const termind_host_api *host;
    static void *kept;
    static char *copy(const char *s) { size_t n = strlen(s) + 1; char *c = host->alloc(n); memcpy(c, s, n); return c; }
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        if (strcmp(contract, "stale.chain@1") == 0) {
            /* Who this call is for, as the host says. */
            char *chain = TERMIND_HOST_HAS(host, call_chain) ? host->call_chain() : NULL;
            /* The same text for the same chain: keys in order. */
            const char *d = chain ? strstr(chain, "\"detail\"") : NULL, *i = chain ? strstr(chain, "\"id\"") : NULL, *k = chain ? strstr(chain, "\"kind\"") : NULL;
            int ordered = d && i && k && d < i && i < k;
            size_t n = (chain ? strlen(chain) : 4) + 32;
            char *text = host->alloc(n);
            snprintf(text, n, "{\"chain\": %s, \"ordered\": %d}", chain ? chain : "null", ordered);
            host->free(chain);
            *reply = text;
            return TERMIND_OK;
        }
        /* A handle kept past its stream's end, used again. */
        char buffer[16];
        int emitted = host->stream_emit(kept, "notice", "{\"text\": \"late\"}", NULL, 0);
        long long got = (long long)host->stream_read(kept, buffer, sizeof buffer);
        int cancelled = host->stream_cancelled(kept);
        char *answer = host->stream_ask(kept, "{\"kind\": \"confirm\", \"topic\": \"stale.q\", \"text\": \"?\"}");
        char text[160];
        snprintf(text, sizeof text, "{\"emit\": %d, \"read\": %lld, \"cancelled\": %d, \"asked\": %s}", emitted, got, cancelled, answer ? "true" : "false");
        *reply = copy(text);
        return TERMIND_OK;
    }
    static int handle_stream(const char *stream, const char *request, size_t length, void *handle, char **reply) {
        kept = handle;
        *reply = copy("{}");
        return TERMIND_OK;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, "stale", "1.0.0", NULL, NULL, handle, handle_stream
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
    """#

    func testAStreamHandleUsedAfterItsStreamEndedNamesNoStreamAndTheServerLivesOn() throws {
        let manifest = #"{"id": "stale", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libstale.so", "contracts": ["stale.poke@1", "stale.chain@1"], "streams": ["stale.keep@1"], "commands": [{"name": "stale keep", "stream": "stale.keep@1", "arguments": []}, {"name": "stale poke", "contract": "stale.poke@1", "arguments": []}]}"#
        try CPluginCompiler.build(source: Self.staleSource, folder: directory.file("stale/stale"), name: "stale", manifest: manifest)
        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", directory.file("stale")])
        defer { server.stop() }
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        let termind = FeatureHarness.buildDirectory + "/termind"
        for _ in 0..<5 {
            XCTAssertEqual(try ProcessRunner.run(termind, ["--socket", server.socketPath, "stale", "keep"], environment: environment).status, 0)
            let poked = try ProcessRunner.run(termind, ["--socket", server.socketPath, "--json", "stale", "poke"], environment: environment)
            XCTAssertEqual(poked.status, 0, poked.stderr)
            let reply = try JSONCoding.parse(Data(poked.stdout.utf8), source: "poke")
            XCTAssertEqual(reply["emit"], .integer(2), poked.stdout)
            XCTAssertEqual(reply["read"], .integer(-1), poked.stdout)
            XCTAssertEqual(reply["cancelled"], .integer(1), poked.stdout)
            XCTAssertEqual(reply["asked"], .bool(false), poked.stdout)
        }
        XCTAssertTrue(server.process.isRunning, "the server died")
        // The plugin reads who a call is for: the socket's peer, by uid and pid.
        let client = try ControlClient(path: server.socketPath)
        let reply = try JSONCoding.parse(try client.call("stale.chain@1", body: Data("{}".utf8)), source: "chain")
        let link = try XCTUnwrap(reply["chain"]?.arrayValue?.first)
        XCTAssertEqual(link["kind"], .string("client"))
        XCTAssertEqual(link["id"], .string("uid \(getuid())"))
        XCTAssertTrue(link["detail"]?.stringValue?.hasPrefix("pid \(getpid())") == true, "\(reply)")
        XCTAssertEqual(reply["ordered"], .integer(1), "call_chain's keys are sorted: \(reply)")
    }

    /// In the plugin's own process `call_chain` says the same (the chain crosses as the text
    /// termind wrote, untouched).
    func testThePluginReadsWhoACallIsForInItsOwnProcessToo() throws {
        let manifest = #"{"id": "stale", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libstale.so", "isolation": "process", "contracts": ["stale.poke@1", "stale.chain@1"], "streams": ["stale.keep@1"]}"#
        try CPluginCompiler.build(source: Self.staleSource, folder: directory.file("stale/stale"), name: "stale", manifest: manifest)
        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", directory.file("stale")])
        defer { server.stop() }
        let reply = try JSONCoding.parse(try ControlClient(path: server.socketPath).call("stale.chain@1", body: Data("{}".utf8)), source: "chain")
        XCTAssertEqual(reply["chain"]?.arrayValue?.count, 1, "\(reply)")
        let link = try XCTUnwrap(reply["chain"]?.arrayValue?.first)
        XCTAssertEqual(link["kind"], .string("client"))
        XCTAssertEqual(link["id"], .string("uid \(getuid())"))
        XCTAssertTrue(link["detail"]?.stringValue?.hasPrefix("pid \(getpid())") == true, "\(reply)")
        XCTAssertEqual(reply["ordered"], .integer(1), "call_chain's keys are sorted: \(reply)")
    }
}
