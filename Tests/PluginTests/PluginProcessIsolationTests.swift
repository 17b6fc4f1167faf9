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
        // Its process reads only what it declares: the folder of the files it digests.
        if isolation == "process" { manifest["access"] = .object(["read": .array([.string(directory.file("files"))])]) }
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
        try FileManager.default.createDirectory(atPath: directory.file("files"), withIntermediateDirectories: true)
        let file = directory.file("files/blob.txt")
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
        // Its process killed from outside: after the restart delay a new one answers.
        for host in hosts { kill(host, SIGKILL) }
        let client = try ControlClient(path: server.socketPath)
        XCTAssertTrue(waitUntil(seconds: 10) { (try? client.call("digest.fn.crc32@1", body: Data(#"{"args": ["hello"]}"#.utf8))) != nil }, "a killed process is replaced")
        let replacements = try ProcessRunner.run("/usr/bin/pgrep", ["-P", "\(server.process.pid)"]).stdout.split(separator: "\n").compactMap { Int32($0) }
        XCTAssertEqual(replacements.count, 1)
        XCTAssertEqual(server.stop(), 0)
        // Gone, or a zombie nobody reaped (a container's first process may not).
        func ended(_ pid: Int32) -> Bool {
            kill(pid, 0) != 0 || ((try? ProcessRunner.run("/bin/cat", ["/proc/\(pid)/stat"]).stdout) ?? "").contains(") Z ")
        }
        XCTAssertTrue(waitUntil(seconds: 10) { replacements.allSatisfy(ended) }, "the plugin's process ends with termind")
    }

    /// The frames' own serializer (not JSONEncoder: it was most of an isolated call's cost)
    /// writes what the strict parser reads back as the same value.
    func testFramesSerializeEveryValueTheParserReadsBack() throws {
        var generator = SystemRandomNumberGenerator()
        func value(_ depth: Int) -> JSONValue {
            switch Int.random(in: 0..<(depth > 3 ? 6 : 8), using: &generator) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &generator))
            case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &generator))
            case 3: return .double(Double.random(in: -1e300...1e300, using: &generator))
            case 4, 5:
                let pieces = ["a", "\"", "\\", "\n", "\r", "\t", "\u{01}", "\u{1f}", "é", "漢", "🙂", "/", " ", "\u{7f}"]
                return .string((0..<Int.random(in: 0..<12, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined())
            case 6: return .array((0..<Int.random(in: 0..<5, using: &generator)).map { _ in value(depth + 1) })
            default:
                var fields: [String: JSONValue] = [:]
                for index in 0..<Int.random(in: 0..<5, using: &generator) { fields["k\(index)\u{1}\"é"] = value(depth + 1) }
                return .object(fields)
            }
        }
        for _ in 0..<2_000 {
            let original = value(0)
            let text = PluginWire.text(original)
            XCTAssertEqual(try JSONCoding.parse(Data(text.utf8), source: "a frame"), original, text)
        }
    }

    func testTheConformanceCheckPassesInItsOwnProcessAndAFlagForcesIsolation() throws {
        let check = try run(["plugins", "check", try digest("process") + "/digest"])
        XCTAssertEqual(check.status, 0, check.stdout + check.stderr)
        XCTAssertTrue(check.stdout.contains("passed, 0 failed"), check.stdout)
        // The examples' manifests say nothing: the flag puts the C one in a process of its own.
        let forced = try run(["--plugins", FeatureHarness.buildDirectory + "/plugins", "--plugin-isolation", "process", "--json", "features"])
        XCTAssertTrue(forced.stdout.contains("own process"), forced.stdout)
        let bad = try run(["--plugin-isolation", "sandbox", "features"])
        XCTAssertEqual(bad.status, 2)
        XCTAssertTrue(bad.stderr.contains("--plugin-isolation is 'sandbox'"), bad.stderr)
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
        // `termind features` says so; `termind plugins enable` turns it on again.
        let socket = ["--socket", server.socketPath]
        let features = try ProcessRunner.run(termind, socket + ["features"], environment: environment).stdout
        XCTAssertTrue(features.contains("crash") && features.contains("disabled") && features.contains("crashed 3 times"), features)
        let enabled = try ProcessRunner.run(termind, socket + ["plugins", "enable", "crash"], environment: environment)
        XCTAssertEqual(enabled.status, 0, enabled.stderr)
        XCTAssertTrue(enabled.stdout.contains("on again"), enabled.stdout)
        XCTAssertEqual(failure("crash.abort@1")?.code, "plugin.crashed", "on again: a new process takes the call")
        XCTAssertEqual(server.stop(), 0, "termind itself never crashed")
    }

    static let probe = #"""
    #include "termind_plugin.h"
    #include <errno.h>
    #include <fcntl.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <signal.h>
    #include <sys/ptrace.h>
    #include <sys/stat.h>
    #include <sys/syscall.h>
    #include <sys/socket.h>
    #include <sys/un.h>
    #include <unistd.h>
    static const termind_host_api *host;
    static int served;  /* calls this process took */
    static char *answer(int ok) {
        char text[160];
        snprintf(text, sizeof text, "{\"ok\": %s, \"errno\": %d, \"served\": %d}", ok ? "true" : "false", ok ? 0 : errno, served);
        size_t n = strlen(text) + 1; char *c = host->alloc(n); memcpy(c, text, n); return c;
    }
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        char *path = host->json_string_field(request, "path");
        int ok = 0;
        served++;
        if (strcmp(contract, "probe.read@1") == 0) {
            int fd = open(path, O_RDONLY); ok = fd >= 0; if (ok) close(fd);
        } else if (strcmp(contract, "probe.unix@1") == 0) {
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd >= 0) { struct sockaddr_un a = {0}; a.sun_family = AF_UNIX; strncpy(a.sun_path, path, sizeof a.sun_path - 1); ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0; close(fd); }
        } else if (strcmp(contract, "probe.tcp@1") == 0) {
            int fd = socket(AF_INET, SOCK_STREAM, 0); ok = fd >= 0; if (ok) close(fd);
        } else if (strcmp(contract, "probe.ptrace@1") == 0) {
            ok = ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0;
        } else if (strcmp(contract, "probe.alloc@1") == 0) {
            char *block = malloc((size_t)4 << 30); ok = block != NULL; if (ok) { memset(block, 1, (size_t)4 << 30); free(block); }
        } else if (strcmp(contract, "probe.signal@1") == 0) {
            ok = kill(getppid(), 0) == 0;
        } else if (strcmp(contract, "probe.fork@1") == 0) {
            pid_t child = fork(); if (child == 0) _exit(0); ok = child > 0;
        } else if (strcmp(contract, "probe.chmod@1") == 0) {
            ok = chmod(path, 0600) == 0;
        } else if (strcmp(contract, "probe.uring@1") == 0) {
            char params[120] = {0}; long fd = syscall(__NR_io_uring_setup, 1, params); ok = fd >= 0; if (ok) close((int)fd);
        } else if (strcmp(contract, "probe.pair@1") == 0) {
            int pair[2]; ok = socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) == 0;
        } else if (strcmp(contract, "probe.segv@1") == 0) {
            *(volatile int *)16 = 1;
        } else if (strcmp(contract, "probe.spin@1") == 0) {
            for (;;) {}
        } else if (strcmp(contract, "probe.forge@1") == 0) {
            /* Replies of its own on the host's socket (standard input), for every call id
               termind may have given this call, before the host's: a body that is not JSON. */
            for (unsigned long id = 1; id <= 4096; id++) {
                unsigned char frame[4 + 9 + 8] = {0, 0, 0, 17, 2};
                for (int i = 0; i < 8; i++) frame[5 + i] = (unsigned char)(id >> (56 - 8 * i));
                memcpy(frame + 13, "not json", 8);
                if (write(0, frame, sizeof frame) != (ssize_t)sizeof frame) break;
            }
            ok = 1;
        } else if (strcmp(contract, "probe.garble@1") == 0) {
            /* A reply frame too short to hold its call's id. */
            unsigned char frame[7] = {0, 0, 0, 3, 2, 0, 0};
            ok = write(0, frame, sizeof frame) == (ssize_t)sizeof frame;
        }
        host->free(path);
        *reply = answer(ok);
        return TERMIND_OK;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, "probe", "1.0.0", NULL, NULL, handle, NULL
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
    """#

    func testTheProcessIsSandboxedToWhatItsManifestDeclaresAndHeldToItsDeadline() throws {
        let allowed = directory.file("allowed")
        try FileManager.default.createDirectory(atPath: allowed, withIntermediateDirectories: true)
        try directory.write("allowed/data.txt", "readable")
        try directory.write("elsewhere.txt", "not declared")
        let contracts = ["read", "unix", "tcp", "ptrace", "alloc", "spin", "segv", "signal", "fork", "chmod", "uring", "pair"].map { "\"probe.\($0)@1\"" }.joined(separator: ", ")
        try CPluginCompiler.build(source: Self.probe, folder: directory.file("plugins/probe"), name: "probe",
                                  manifest: #"{"id": "probe", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libprobe.so", "isolation": "process", "access": {"read": ["\#(allowed)"]}, "limits": {"memoryMiB": 512, "callSeconds": 2}, "contracts": [\#(contracts)]}"#)
        // termind's own features: its database and secret store exist.
        let server = try ServeProcess(directory: directory, arguments: ["--plugins", directory.file("plugins")])
        let client = try ControlClient(path: server.socketPath)
        func probe(_ what: String, _ path: String = "") throws -> (ok: Bool, errno: Int64) {
            let reply = try JSONCoding.parse(try client.call("probe.\(what)@1", body: try JSONCoding.encode(JSONValue.object(["path": .string(path)]))), source: "reply")
            guard case .bool(let ok)? = reply["ok"], case .integer(let error)? = reply["errno"] else { throw TermindError(code: "test", message: "no answer") }
            return (ok, error)
        }
        XCTAssertTrue(try probe("read", allowed + "/data.txt").ok, "a declared path reads")
        // `termind features` says how the process is held on this kernel.
        let features = try ProcessRunner.run(termind, ["--socket", server.socketPath, "--json", "features"], environment: environment).stdout
        XCTAssertTrue(features.contains("own process") && features.contains("seccomp") && features.contains("no new privileges"), features)
        for path in [directory.file("elsewhere.txt"), directory.file("serve/db.sqlite"), directory.file("serve/secrets.key"), "/etc/shadow"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: path), path)
            let read = try probe("read", path)
            XCTAssertFalse(read.ok, "\(path) is not readable from the plugin's process")
            XCTAssertEqual(read.errno, Int64(EACCES), path)
        }
        // termind's environment, descriptors and memory through /proc: refused (Landlock's ptrace scoping).
        for entry in ["environ", "mem", "fd/0"] {
            XCTAssertEqual(try probe("read", "/proc/\(server.process.pid)/\(entry)").errno, Int64(EACCES), entry)
        }
        XCTAssertEqual(try probe("unix", server.socketPath).errno, Int64(EPERM), "termind's control socket is out of reach")
        // No TCP unless declared: the seccomp filter refuses the socket on every kernel (and
        // Landlock, from ABI 4, any bind or connect).
        XCTAssertEqual(try probe("tcp").errno, Int64(EPERM), "no TCP unless declared")
        XCTAssertEqual(try probe("ptrace").errno, Int64(EPERM))
        // Nor signals to termind, new processes, file metadata, io_uring or socket pairs.
        XCTAssertEqual(try probe("signal").errno, Int64(EPERM), "no signal to termind")
        XCTAssertEqual(try probe("fork").errno, Int64(EPERM), "no new process")
        XCTAssertEqual(try probe("chmod", directory.file("serve/db.sqlite")).errno, Int64(EPERM), "no chmod of termind's files")
        XCTAssertEqual(try probe("uring").errno, Int64(EPERM), "no io_uring")
        XCTAssertEqual(try probe("pair").errno, Int64(EPERM), "no Unix socket pair")
        XCTAssertFalse(try probe("alloc").ok, "4 GiB is past its 512 MiB: the allocation fails there")
        XCTAssertTrue(try probe("read", allowed + "/data.txt").ok, "and the process lives on")
        // Past its deadline a call fails with the reason and the process is ended and replaced.
        let started = Date()
        XCTAssertThrowsError(try client.call("probe.spin@1", body: Data("{}".utf8))) { error in
            XCTAssertEqual((error as? TermindError)?.code, "plugin.timeout", "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertTrue(waitUntil(seconds: 10) { (try? probe("read", allowed + "/data.txt").ok) == true }, "a new process answers")
        // A segfault fails its call, naming the signal; after the restart delay the next call succeeds.
        XCTAssertThrowsError(try probe("segv")) { error in
            XCTAssertEqual((error as? TermindError)?.code, "plugin.crashed")
            XCTAssertTrue((error as? TermindError)?.message.contains("signal 11") ?? false, "\(error)")
        }
        XCTAssertTrue(waitUntil(seconds: 10) { (try? probe("read", allowed + "/data.txt").ok) == true }, "the call after the restart succeeds")
        XCTAssertNoThrow(try client.call("kernel.ping@1", body: Data(#"{"payload": "x"}"#.utf8)))
        XCTAssertEqual(server.stop(), 0)
    }

    /// The process speaks the frames' binary form too (a call's reply): what it sends is
    /// still held to the reply's checks, and a frame that is not well formed ends it.
    func testForgedAndMalformedFramesFromThePluginsProcessAreRefused() throws {
        let contracts = ["read", "forge", "garble"].map { "\"probe.\($0)@1\"" }.joined(separator: ", ")
        try CPluginCompiler.build(source: Self.probe, folder: directory.file("plugins/probe"), name: "probe",
                                  manifest: #"{"id": "probe", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libprobe.so", "isolation": "process", "contracts": [\#(contracts)]}"#)
        let server = try ServeProcess(directory: directory, arguments: ["--plugins", directory.file("plugins")])
        let client = try ControlClient(path: server.socketPath)
        let body = Data(#"{"path": "/nonexistent"}"#.utf8)
        XCTAssertNoThrow(try client.call("probe.read@1", body: body))
        XCTAssertThrowsError(try client.call("probe.forge@1", body: body)) { error in
            XCTAssertEqual((error as? TermindError)?.code, "plugin.bad_reply", "\(error)")
            XCTAssertTrue((error as? TermindError)?.message.contains("is not valid JSON") ?? false, "\(error)")
        }
        // The frames for calls termind had not made yet ended that process. (A plugin answers
        // its own calls, so a forged frame can reach only this plugin's next call, if that
        // call was sent before the frame was read: it is then held to the reply's checks.)
        // No forged frame is ever taken for an answer, and a new process answers.
        var answer: JSONValue?
        var failures: [String] = []
        XCTAssertTrue(waitUntil(seconds: 10) {
            do {
                answer = try JSONCoding.parse(try client.call("probe.read@1", body: body), source: "reply")
                return true
            } catch {
                failures.append((error as? TermindError)?.code ?? "\(error)")
                return false
            }
        }, "a new process answers")
        XCTAssertEqual(answer?["errno"], .integer(Int64(ENOENT)))
        XCTAssertEqual(answer?["served"], .integer(1), "the forging process (which took two calls) was ended; this is a new one")
        XCTAssertEqual(Set(failures).subtracting(["plugin.crashed", "plugin.restarting", "plugin.bad_reply"]), [], "\(failures)")
        XCTAssertThrowsError(try client.call("probe.garble@1", body: body)) { error in
            XCTAssertEqual((error as? TermindError)?.code, "plugin.crashed", "\(error)")
        }
        XCTAssertTrue(waitUntil(seconds: 10) { (try? client.call("probe.read@1", body: body)) != nil }, "a new process answers")
        XCTAssertEqual(server.stop(), 0)
    }

    /// A plugin that segfaults inside `serve`: the durable session and the forward running
    /// beside it never notice, and the plugin's next call, after its restart, succeeds.
    func testASegfaultingPluginLeavesADurableSessionAndAForwardRunning() throws {
        let sshd = try SSHServerFixture.withNewKey(in: directory)
        defer { sshd.stop() }
        try CPluginCompiler.build(source: Self.probe, folder: directory.file("plugins/probe"), name: "probe",
                                  manifest: #"{"id": "probe", "version": "1.0.0", "abi": 1, "kind": "c", "library": "libprobe.so", "isolation": "process", "contracts": ["probe.segv@1", "probe.ptrace@1"]}"#)
        let server = try ServeProcess(directory: directory, arguments: ["--plugins", directory.file("plugins")])
        defer { _ = server.stop() }
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: server.socketPath)
        environment["TERM"] = "xterm-256color"
        let cli = TermindCLI(environment: environment)
        try cli.saveHosts(["box"], server: sshd, key: directory.file("id"))
        // A forward to sshd itself: its banner comes through.
        let port = try SSHServerFixture.freePort()
        try cli.run(["forward", "add", "web", "box", "--local-forward", "\(port):127.0.0.1:\(sshd.port)"])
        try cli.run(["forward", "start", "web"])
        func banner() -> String {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: in_port_t(UInt16(port).bigEndian), sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard connected == 0 else { return "" }
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(fd, &buffer, buffer.count)
            return n > 0 ? String(decoding: buffer.prefix(n), as: UTF8.self) : ""
        }
        XCTAssertTrue(banner().hasPrefix("SSH-2.0-"))
        // A durable session in a terminal.
        let tmux = TmuxTerminal(directory: directory, environment: environment)
        defer { tmux.stop() }
        try tmux.open("s", [termind, "ssh", "box", "--", "env PS1='$ ' bash --norc --noprofile -i"], columns: 80, rows: 24)
        XCTAssertTrue(try tmux.wait("s", for: "$").found)
        let sessions = try cli.run(["--json", "sessions"]).stdout
        XCTAssertTrue(sessions.contains("\"attached\""), "a durable session of serve: \(sessions)")

        let client = try ControlClient(path: server.socketPath)
        XCTAssertThrowsError(try client.call("probe.segv@1", body: Data("{}".utf8))) { error in
            XCTAssertEqual((error as? TermindError)?.code, "plugin.crashed", "\(error)")
        }
        try tmux.send("s", "echo still-$((6*7))\r")
        XCTAssertTrue(try tmux.wait("s", for: "still-42").found, "the session goes on")
        XCTAssertTrue(banner().hasPrefix("SSH-2.0-"), "the forward goes on")
        XCTAssertTrue(waitUntil(seconds: 10) { (try? client.call("probe.ptrace@1", body: Data("{}".utf8))) != nil }, "the plugin's next call succeeds")
        try tmux.send("s", "exit\r")
        _ = try tmux.waitForExit("s")
    }
}
