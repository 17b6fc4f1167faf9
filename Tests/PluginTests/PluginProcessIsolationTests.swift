import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// A C plugin whose manifest says `"isolation": "process"` runs in `termind-plugin-host`, a
/// child of termind: callers see the same contracts, stream and functions with the same
/// answers and errors as in process, the plugin's code is never mapped into termind, and a
/// crash fails only the call in flight — termind serves on, restarts the plugin's process
/// after a delay, and turns the plugin off after 3 crashes in 5 minutes.
final class PluginProcessIsolationTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        try directory.write("Registry.json", #"{"schema": 1, "features": []}"#)
    }

    override func tearDown() { directory?.remove() }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET", "TERMIND_STORE"] { environment.removeValue(forKey: name) }
        return environment
    }

    /// The Digest example in a plugins folder of its own, with `isolation` set.
    private func digest(_ isolation: String) throws -> String {
        let folder = directory.file("plugins-\(isolation)/digest")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        guard case .object(var manifest) = try JSONCoding.parse(try Data(contentsOf: URL(fileURLWithPath: Repository.path("Plugins/Examples/Digest/plugin.json"))), source: "plugin.json") else {
            throw TermindError(code: "test", message: "the Digest manifest is not an object")
        }
        manifest["isolation"] = .string(isolation)
        try JSONCoding.encode(JSONValue.object(manifest)).write(to: URL(fileURLWithPath: folder + "/plugin.json"))
        try FileManager.default.copyItem(atPath: FeatureHarness.buildDirectory + "/libTermindDigest.so", toPath: folder + "/libTermindDigest.so")
        return directory.file("plugins-\(isolation)")
    }

    private func run(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run(termind, ["--registry", directory.file("Registry.json"), "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments,
                              environment: environment, stdin: stdin)
    }

    func testDigestAnswersAsInProcessAndItsCodeNeverEntersTermind() throws {
        let inline = try digest("inline"), isolated = try digest("process")
        let file = directory.file("blob.txt")
        try Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: URL(fileURLWithPath: file))
        // One-shot commands: the same answers and the same errors, word for word.
        for arguments in [["--json", "call", "digest.file@1", #"{"path": "\#(file)", "algorithm": "sha512"}"#],
                          ["--json", "call", "digest.fn.crc32@1", #"{"args": ["hello"]}"#],
                          ["--json", "call", "digest.fn.sha256@1", #"{"args": ["hello"]}"#],
                          ["--json", "digest", file, "--algorithm", "md5"],
                          ["call", "digest.file@1", #"{"path": "\#(directory.file("missing"))"}"#],
                          ["call", "digest.file@1", #"{"path": "\#(file)", "algorithm": "crc64"}"#],
                          ["call", "digest.fn.crc32@1", #"{"args": [1, 2]}"#]] {
            let here = try run(["--plugins", inline] + arguments), there = try run(["--plugins", isolated] + arguments)
            XCTAssertEqual(there.status, here.status, arguments.joined(separator: " "))
            XCTAssertEqual(there.stdout, here.stdout, arguments.joined(separator: " "))
            XCTAssertEqual(there.stderr, here.stderr, arguments.joined(separator: " "))
        }
        // The stream with standard input, through its grants.
        let text = String(repeating: "0123456789abcdef", count: 20_000)
        let piped = try run(["--plugins", isolated, "--json", "digest", "-"], stdin: text)
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertEqual(piped.stdout, try run(["--plugins", inline, "--json", "digest", "-"], stdin: text).stdout)

        // Inside serve: the plugin's library is mapped in its child, never in termind.
        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", isolated])
        let reply = try ControlClient(path: server.socketPath).call("digest.fn.crc32@1", body: Data(#"{"args": ["hello"]}"#.utf8))
        XCTAssertEqual(try JSONCoding.parse(reply, source: "reply")["result"], .integer(907_060_870))
        // (/proc files report no size: read them with cat.)
        func maps(_ pid: Int32) -> String { (try? ProcessRunner.run("/bin/cat", ["/proc/\(pid)/maps"]).stdout) ?? "" }
        XCTAssertTrue(maps(server.process.pid).contains("libTermindCore.so"), "termind's own map reads")
        XCTAssertFalse(maps(server.process.pid).contains("libTermindDigest.so"), "the plugin's code is not in termind's process")
        let children = try ProcessRunner.run("/usr/bin/pgrep", ["-P", "\(server.process.pid)"]).stdout.split(separator: "\n").compactMap { Int32($0) }
        let hosts = children.filter { maps($0).contains("libTermindDigest.so") }
        XCTAssertEqual(hosts.count, 1, "one child of termind holds the plugin (children: \(children))")
        XCTAssertEqual(server.stop(), 0)
        for host in hosts { XCTAssertNotEqual(kill(host, 0), 0, "the plugin's process ended with termind") }
    }

    func testACrashFailsOnlyItsCallAndThePluginIsRestartedThenTurnedOff() throws {
        try CPluginCompiler.build(source: PluginCrashTests.source, folder: directory.file("plugins/crash"), name: "crash",
            manifest: #"{"id": "crash", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libcrash.so", "isolation": "process", "contracts": ["crash.abort@1", "crash.segv@1"]}"#)
        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json"), "--plugins", directory.file("plugins")])
        let client = try ControlClient(path: server.socketPath)
        func failure(_ contract: String) -> TermindError? {
            do {
                _ = try client.call(contract, body: Data("{}".utf8))
                return nil
            } catch {
                return error as? TermindError
            }
        }
        let segv = failure("crash.segv@1")
        XCTAssertEqual(segv?.code, "plugin.crashed")
        XCTAssertTrue(segv?.message.contains("signal 11") ?? false, segv?.message ?? "")
        // termind serves on.
        XCTAssertNoThrow(try client.call("kernel.ping@1", body: Data(#"{"payload": "x"}"#.utf8)))
        // Within the restart delay the plugin says when; after it, a new process takes the call.
        let soon = failure("crash.abort@1")
        XCTAssertEqual(soon?.code, "plugin.restarting", soon?.message ?? "")
        XCTAssertTrue(waitUntil(seconds: 5) { failure("crash.abort@1")?.code == "plugin.crashed" }, "a new process took the call (and aborted)")
        XCTAssertTrue(waitUntil(seconds: 5) { failure("crash.segv@1")?.code == "plugin.crashed" })
        // Three crashes in five minutes: off, with the reason, until enabled again.
        let off = failure("crash.segv@1")
        XCTAssertEqual(off?.code, "plugin.disabled", off?.message ?? "")
        XCTAssertTrue(off?.message.contains("crashed 3 times") ?? false, off?.message ?? "")
        XCTAssertNoThrow(try client.call("kernel.ping@1", body: Data(#"{"payload": "y"}"#.utf8)))
        XCTAssertEqual(server.stop(), 0, "termind itself never crashed")
    }
}
