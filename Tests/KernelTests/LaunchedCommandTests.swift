import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// Commands a running `termind serve` takes from the launcher (docs/contracts.md, "The
/// launcher"): the launcher loads no Foundation, the server runs the generic client against
/// the launcher's own descriptors, folder and environment, asks the launcher to prompt and
/// set terminal modes, hears its signals, and replies with the exit code. Each test checks
/// what a person or a script sees, against a real server and the fixture stream feature
/// (StreamRenderingTests shows the same prompts, progress and views on a terminal both ways).
final class LaunchedCommandTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private func registry() throws -> String { try directory.fixtureStreamsRegistry() }

    private func environment(socket: String) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["XDG_RUNTIME_DIR"] = directory.file("home/run")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_STORE", "LD_DEBUG"] { environment.removeValue(forKey: name) }
        environment["TERMIND_SOCKET"] = socket
        return environment
    }

    private func serve() throws -> ServeProcess {
        try ServeProcess(directory: directory, arguments: ["--registry", try registry()])
    }

    private func run(_ arguments: [String], socket: String, stdin: String? = nil, in folder: String? = nil,
                     extra: [String: String] = [:]) throws -> ProcessResult {
        try ProcessRunner.run(termind, arguments, environment: environment(socket: socket).merging(extra) { $1 }, stdin: stdin, currentDirectory: folder)
    }

    /// The point of the launcher: a command the server takes never maps Foundation or any
    /// termind library in the process that was started; one run in-process does.
    func testACommandTheServerTakesLoadsNeitherFoundationNorTermindsLibraries() throws {
        let server = try serve()
        defer { server.stop() }
        let served = try run(["--json", "features"], socket: server.socketPath, extra: ["LD_DEBUG": "files"])
        XCTAssertEqual(served.status, 0, served.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(served.stdout.utf8), source: "features")["server"], .bool(true))
        let loaded = served.stderr.split(separator: "\n").filter { $0.contains("file=") }
        XCTAssertTrue(loaded.contains { $0.contains("libswiftCore.so") }, "LD_DEBUG said nothing: \(served.stderr.prefix(400))")
        XCTAssertEqual(loaded.filter { $0.contains("libFoundation") || $0.contains("libTermind") || $0.contains("libicu") }, [])
        let local = try run(["--json", "--registry", try registry(), "features"], socket: server.socketPath, extra: ["LD_DEBUG": "files"])
        XCTAssertEqual(local.status, 0, local.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(local.stdout.utf8), source: "features")["server"], .bool(false))
        XCTAssertTrue(local.stderr.contains("libTermindClient.so") && local.stderr.contains("libFoundation.so"), "the in-process run loads the client")
    }

    /// The server reads the launcher's standard input, writes its output, resolves relative
    /// paths against the launcher's folder and exits with the command's code.
    func testTheLaunchersInputFolderAndExitCodesAreTheCommands() throws {
        let server = try serve()
        defer { server.stop() }
        let ping = try run(["call", "kernel.ping@1", "-"], socket: server.socketPath, stdin: #"{"payload": "through the launcher"}"#)
        XCTAssertEqual(ping.status, 0, ping.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(ping.stdout.utf8), source: "ping")["payload"], .string("through the launcher"))

        // A relative --answers file, from a folder the server has never been in.
        let folder = directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try #"{"fixture.choice": "beta"}"#.write(toFile: folder + "/answers.json", atomically: true, encoding: .utf8)
        let answered = try run(["--answers", "answers.json", "show", "--ask", "choice", "--stdout", "out\n", "--stderr", "err\n"],
                               socket: server.socketPath, in: folder)
        XCTAssertEqual(answered.status, 0, answered.stderr)
        XCTAssertEqual(answered.stdout, "out\nanswers  beta\n")
        XCTAssertEqual(answered.stderr, "err\n")

        let unknown = try run(["nope"], socket: server.socketPath)
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.hasPrefix("termind: Unknown command 'nope'."), unknown.stderr)
        let undeclared = try run(["show", "--undeclared", "true"], socket: server.socketPath)
        XCTAssertEqual(undeclared.status, 1)
        XCTAssertTrue(undeclared.stderr.contains("which it does not declare"), undeclared.stderr)
        // Usage errors come from the same parser as in-process.
        let usage = try run(["show", "--steps"], socket: server.socketPath)
        XCTAssertEqual(usage.status, 2)
        XCTAssertTrue(usage.stderr.contains("--steps needs a value."), usage.stderr)
    }

    /// SIGTERM to the launcher cancels the command on the server, which ends it as it would
    /// in its own process: a line saying so, and 128 + the signal.
    func testASignalToTheLauncherCancelsTheCommandOnTheServer() throws {
        let server = try serve()
        defer { server.stop() }
        let launcher = try SpawnedProcess(termind, ["show", "--stdout", "holding\n", "--hold", "60"], environment: environment(socket: server.socketPath),
                                          captureOutput: true)
        defer { launcher.signal(SIGKILL); launcher.wait() }
        XCTAssertNotNil(launcher.readOutput(until: "holding", timeout: 20))
        launcher.signal(SIGTERM)
        let (_, error) = launcher.readAll()
        XCTAssertEqual(launcher.wait(), 143)
        XCTAssertTrue(String(decoding: error, as: UTF8.self).contains("Cancelled by SIGTERM"), String(decoding: error, as: UTF8.self))
    }

    /// A server that dies under a command: the launcher says the outcome is unknown and fails.
    func testAServerThatGoesAwayMidCommandLeavesTheOutcomeUnknown() throws {
        let server = try serve()
        let launcher = try SpawnedProcess(termind, ["show", "--stdout", "holding\n", "--hold", "60"], environment: environment(socket: server.socketPath),
                                          captureOutput: true)
        defer { launcher.signal(SIGKILL); launcher.wait() }
        XCTAssertNotNil(launcher.readOutput(until: "holding", timeout: 20))
        server.process.signal(SIGKILL)
        server.process.wait()
        let (_, error) = launcher.readAll()
        XCTAssertEqual(launcher.wait(), 1)
        XCTAssertTrue(String(decoding: error, as: UTF8.self).contains("closed the connection before the command ended"), String(decoding: error, as: UTF8.self))
    }

    /// Ctrl-Z in a shell stops the launcher as a job, and the command's output — written by
    /// the server to the launcher's terminal — waits meanwhile, as it would behind a stopped
    /// process of its own; `fg` lets it go on to the end.
    func testCtrlZStopsTheCommandsOutputUntilFg() throws {
        let server = try serve()
        defer { server.stop() }
        var environment = environment(socket: server.socketPath)
        environment["PS1"] = "local$ "
        let report = try PseudoTerminal.run(["/bin/bash", "--norc", "--noprofile", "-i"], steps: [
            .send("'\(termind)' show --ticks 60 --pause 0.05\n"), .expect("tick 3"),
            .send("\u{1A}"), .expect("Stopped"),
            .send("echo MARK-$((1+1))\n"), .expect("MARK-2"), .sleep(1),
            .send("echo AFTER-$((2+2))\n"), .expect("AFTER-4"),
            .send("fg\n"), .expect("tick 60"), .sleep(0.5),
            .send("exit\n"),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true, true, true], report.output)
        let output = report.output
        let stopped = try XCTUnwrap(output.range(of: "MARK-2")), resumed = try XCTUnwrap(output.range(of: "AFTER-4", range: stopped.upperBound..<output.endIndex))
        XCTAssertFalse(output[stopped.upperBound..<resumed.lowerBound].contains("tick"), "output went on while the job was stopped: \(output)")
        for n in [4, 30, 59] { XCTAssertTrue(output.contains("tick \(n)\r\n"), "tick \(n) is missing: \(output)") }
    }

    /// The launcher's broken pipe is the command's, as a pipeline's writer: through the
    /// server as in-process, a reader that goes away ends termind with 141.
    func testAReaderThatGoesAwayEndsTheCommandWith141() throws {
        let server = try serve()
        defer { server.stop() }
        for boot in [[], ["--registry", try registry()]] {
            let words = ([termind] + boot + ["show", "--ticks", "200", "--pause", "0.005"]).map { "'\($0)'" }.joined(separator: " ")
            let result = try ProcessRunner.run("/bin/bash", ["-c", "\(words) | head -n 2; echo \"status ${PIPESTATUS[0]}\""], environment: environment(socket: server.socketPath))
            XCTAssertEqual(result.stdout, "tick 1\ntick 2\nstatus 141\n", "\(boot): \(result.stderr)")
        }
    }

    /// A server that predates the launcher (no `client.invoke@1`) and commands that must run
    /// in the launcher's own process: the launcher runs them itself, with the same result.
    func testCommandsTheServerDoesNotTakeRunInTheLaunchersProcess() async throws {
        let kernel = Kernel(configuration: KernelConfiguration(registryPath: try registry(), libraryDirectory: FeatureHarness.buildDirectory,
                                                               pluginDirectories: [], selection: nil, hostVersion: "test"), sink: .disabled())
        _ = try await kernel.boot()
        let socket = directory.file("old/control.sock")
        let old = ControlServer(path: socket, kernel: kernel, logger: kernel.logger)
        try old.start()
        // Answered by the old server, through the full client's own connection.
        let features = try run(["--json", "features"], socket: socket)
        old.stop()
        await kernel.shutdown()
        XCTAssertEqual(features.status, 0, features.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(features.stdout.utf8), source: "features")["server"], .bool(true))

        let server = try serve()
        defer { server.stop() }
        // `version` is this build's: the launcher answers it itself even with a server
        // answering, loading nothing of termind's (CLITests compares what it says).
        let version = try run(["version"], socket: server.socketPath, extra: ["LD_DEBUG": "files"])
        XCTAssertEqual(version.status, 0, version.stderr)
        XCTAssertTrue(version.stdout.hasPrefix("termind "), version.stdout)
        XCTAssertTrue(version.stderr.contains("file="), "LD_DEBUG=files listed nothing")
        XCTAssertFalse(version.stderr.contains("libTermindClient.so"), "version loaded the client instead of running in the launcher")
    }
}
