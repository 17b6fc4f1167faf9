import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The termind executable as a user and a script see it: exit codes, --json, errors.
final class CLITests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }
    private var plugins: String { FeatureHarness.buildDirectory + "/plugins" }

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
    }

    override func tearDown() {
        directory?.remove()
    }

    /// A registry in a temp folder; library names resolve next to the executable.
    private func registry(_ features: String) throws -> String {
        try directory.write("Registry.json", #"{"schema": 1, "features": [\#(features)]}"#)
    }

    private let echoEntry = #"{"id": "fixture-echo", "version": "1.0.0", "abi": 1, "library": "libTermindFixtureEcho.so", "order": 10, "ports": {"provides": ["vault.hosts"]}, "contracts": ["fixture-echo.echo@1"]}"#
    private let failingEntry = #"{"id": "fixture-failing", "version": "1.0.0", "abi": 1, "library": "libTermindFixtureFailingStart.so", "order": 5}"#

    private func run(_ arguments: [String], stdin: String? = nil, cwd: String? = nil, socket: String? = nil,
                     extra: [String: String] = [:]) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment
        environment["TERMIND_SOCKET"] = socket ?? directory.file("no-server.sock")
        // Never touch the real user's store, key or runtime folders.
        environment["HOME"] = directory.file("home")
        environment["XDG_DATA_HOME"] = directory.file("home/data")
        environment["XDG_CONFIG_HOME"] = directory.file("home/config")
        environment["XDG_RUNTIME_DIR"] = directory.file("home/run")
        for name in ["TERMIND_STORE", "TERMIND_SECRETS", "TERMIND_SECRETS_KEY", "TERMIND_SECRETS_PASSPHRASE_FILE"] { environment.removeValue(forKey: name) }
        environment.removeValue(forKey: "TERMIND_PLUGINS")
        environment.removeValue(forKey: "TERMIND_FEATURES")
        environment.removeValue(forKey: "TERMIND_REGISTRY")
        for (key, value) in extra { environment[key] = value }
        return try ProcessRunner.run(termind, arguments, environment: environment, stdin: stdin, currentDirectory: cwd)
    }

    private func json(_ result: ProcessResult) throws -> JSONValue {
        try JSONCoding.parse(Data(result.stdout.utf8), source: "stdout")
    }

    func testFeaturesListsBootOrderStatesAndReasons() throws {
        var dependent = echoEntry
        dependent.insert(contentsOf: #""dependencies": {"required": ["fixture-failing"]}, "#, at: dependent.index(after: dependent.startIndex))
        let path = try registry([failingEntry, dependent].joined(separator: ","))
        let result = try run(["--registry", path, "features", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        guard case .array(let features)? = try json(result)["features"] else { return XCTFail(result.stdout) }
        XCTAssertEqual(features.map { $0["id"]?.stringValue }, ["fixture-failing", "fixture-echo"])
        XCTAssertEqual(features.map { $0["state"]?.stringValue }, ["disabled", "disabled"])
        XCTAssertTrue(features[1]["reason"]?.stringValue?.contains("requires 'fixture-failing'") ?? false)

        let human = try run(["--registry", path, "features"])
        XCTAssertEqual(human.status, 0)
        XCTAssertTrue(human.stdout.contains("fixture-failing"), human.stdout)
        XCTAssertTrue(human.stdout.contains("the fixture refuses to start (as designed)"), human.stdout)
        XCTAssertTrue(human.stderr.contains("2 feature problems"), human.stderr)
    }

    func testChosenFeaturesAndUnknownIDs() throws {
        let path = try registry([echoEntry, failingEntry].joined(separator: ","))
        let chosen = try run(["--registry", path, "--features", "fixture-echo", "features", "--json"])
        XCTAssertEqual(chosen.status, 0, chosen.stderr)
        guard case .array(let features)? = try json(chosen)["features"] else { return XCTFail(chosen.stdout) }
        XCTAssertEqual(features.map { $0["id"]?.stringValue }, ["fixture-echo"])

        let unknown = try run(["--registry", path, "--features", "fixture-echo,vualt", "features"])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.contains("Unknown feature 'vualt'"), unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("Known: fixture-echo, fixture-failing"), unknown.stderr)
    }

    func testABrokenRegistryStopsBootWithItsLine() throws {
        let path = try directory.write("Registry.json", "{\n  \"schema\": 1,\n  \"features\": [\n    {\"id\": \"x\" \"abi\": 1}\n  ]\n}\n")
        let result = try run(["--registry", path, "features"])
        XCTAssertEqual(result.status, 3)
        XCTAssertTrue(result.stderr.contains("Registry.json is not valid JSON"), result.stderr)
        XCTAssertTrue(result.stderr.contains("line 4"), result.stderr)
        let missing = try run(["--registry", directory.file("nope.json"), "features", "--json"])
        XCTAssertEqual(missing.status, 3)
        XCTAssertEqual(try json(missing)["error"]?["code"], .string("registry.missing"))
    }

    func testAPermanentFeatureThatFailsStopsBoot() throws {
        let permanent = failingEntry.replacingOccurrences(of: #""order": 5"#, with: #""order": 5, "permanent": true"#)
        let result = try run(["--registry", try registry(permanent), "features"])
        XCTAssertEqual(result.status, 3)
        XCTAssertTrue(result.stderr.contains("Permanent feature 'fixture-failing' cannot run"), result.stderr)
    }

    func testAPermanentFeatureWithAnyValidationFailureStopsBootWithTheReason() throws {
        let permanent = echoEntry.replacingOccurrences(of: #""order": 10"#, with: #""order": 10, "permanent": true"#)
        let cases: [(String, String)] = [
            (permanent.replacingOccurrences(of: #""abi": 1"#, with: #""abi": 1, "colour": "blue""#), "field \"colour\": unknown field"),
            (permanent.replacingOccurrences(of: #""abi": 1"#, with: #""abi": "1""#), "field \"abi\": expected integer, got string"),
            (permanent.replacingOccurrences(of: #""id": "fixture-echo""#, with: #""id": "Fixture Echo""#), "'Fixture Echo' must be 1–64 characters"),
            (permanent.replacingOccurrences(of: "libTermindFixtureEcho.so", with: "libNowhere.so"), "no file at"),
        ]
        for (entry, reason) in cases {
            let result = try run(["--registry", try registry(entry), "features"])
            XCTAssertEqual(result.status, 3, "\(entry): \(result.stdout)")
            XCTAssertTrue(result.stderr.contains("Permanent feature"), result.stderr)
            XCTAssertTrue(result.stderr.contains(reason), "\(reason): \(result.stderr)")
        }
        let json = try run(["--registry", try registry(cases[0].0), "--json", "features"])
        XCTAssertEqual(json.status, 3)
        XCTAssertEqual(try self.json(json)["error"]?["code"], .string("feature.permanent_failed"))
        // The same broken entry without "permanent" only disables itself.
        let optional = try run(["--registry", try registry(cases[0].0.replacingOccurrences(of: #", "permanent": true"#, with: "")), "features"])
        XCTAssertEqual(optional.status, 0, optional.stderr)
    }

    func testCallContractsAndErrorsForScripts() throws {
        let path = try registry(echoEntry)
        let ok = try run(["--registry", path, "call", "fixture-echo.echo@1", "-"], stdin: #"{"message": "hi", "secret": "pw"}"#)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertEqual(try json(ok)["secretLength"], .integer(2))

        let unknown = try run(["--registry", path, "--json", "call", "vault.host.list@1"])
        XCTAssertEqual(unknown.status, 1)
        XCTAssertEqual(try json(unknown)["error"]?["code"], .string("contract.unknown"))

        let badBody = try run(["--registry", path, "call", "fixture-echo.echo@1", "{not json"])
        XCTAssertEqual(badBody.status, 2)
        XCTAssertTrue(badBody.stderr.contains("The BODY argument is not valid JSON"), badBody.stderr)

        let invalid = try run(["--registry", path, "call", "fixture-echo.echo@1", #"{"message": 1}"#])
        XCTAssertEqual(invalid.status, 2)
        XCTAssertTrue(invalid.stderr.contains("body.message: expected string, got integer"), invalid.stderr)
        XCTAssertTrue(invalid.stderr.contains("body.secret: required field is missing"), invalid.stderr)
    }

    func testContractsPrintSchemas() throws {
        let result = try run(["--registry", try registry(echoEntry), "contracts", "--json", "fixture-echo."])
        XCTAssertEqual(result.status, 0, result.stderr)
        let first = try json(result)["contracts"].flatMap { if case .array(let a) = $0 { return a.first } else { return nil } }
        XCTAssertEqual(first?["id"], .string("fixture-echo.echo@1"))
        XCTAssertEqual(first?["request"]?["properties"]?["secret"]?["type"], .string("string"))
        let human = try run(["--registry", try registry(echoEntry), "contracts", "kernel.ping"])
        XCTAssertTrue(human.stdout.contains("request:  {payload: string}"), human.stdout)
    }

    func testUsageErrorsAndHelp() throws {
        let help = try run(["--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("Usage: termind [options] <command>"))
        XCTAssertTrue(help.stdout.contains("Exit codes:"))
        XCTAssertEqual(try run(["features", "extra"]).status, 2)
        XCTAssertEqual(try run(["--registry"]).status, 2)
        let unknown = try run(["--registry", try registry(""), "frobnicate"])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.contains("Unknown command 'frobnicate'"), unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("Run 'termind --help'."), unknown.stderr)
        // A wrong word after a known group names the word and what the group has.
        let wrongWord = try run(["vault", "host", "rm", "web"])
        XCTAssertEqual(wrongWord.status, 2)
        XCTAssertTrue(wrongWord.stderr.contains("'termind vault host' has no command 'rm'; it has: "), wrongWord.stderr)
        XCTAssertTrue(wrongWord.stderr.contains("delete") && wrongWord.stderr.contains("edit"), wrongWord.stderr)
        // A command of several words, after `help` as after the words with --help.
        let words = try run(["help", "vault", "host", "add"])
        XCTAssertEqual(words.status, 0, words.stderr)
        XCTAssertTrue(words.stdout.contains("Usage: termind vault host add ADDRESS"), words.stdout)
        XCTAssertEqual(words.stdout, try run(["vault", "host", "add", "--help"]).stdout)
        let version = try run(["version", "--json"])
        XCTAssertEqual(version.status, 0)
        XCTAssertEqual(try json(version)["pluginABI"], .integer(1))
    }

    /// `termind version` (`--version`, with or without `--json`) is answered by the launcher
    /// alone — no termind library, no Foundation, no feature loaded (the dynamic loader's own
    /// list of what it opened says so) — and says word for word what the kernel's
    /// `kernel.version@1` says: the build's facts, the plugin ABI and the libraries.
    func testVersionRunsInTheLauncherAloneAndSaysWhatTheKernelSays() async throws {
        let kernel = Kernel(configuration: KernelConfiguration(registryPath: nil), sink: .disabled())
        let reply = try await kernel.call(KernelContracts.Version.self, Empty())
        var expected = "termind \(reply.termind)\nbuild: \(reply.signature)\nplugin ABI: \(reply.pluginABI)\n"
        for (name, version) in reply.libraries.sorted(by: { $0.key < $1.key }) { expected += "\(name): \(version)\n" }
        XCTAssertFalse(reply.libraries.values.contains("unknown"), expected)

        let text = try run(["version"], extra: ["LD_DEBUG": "files"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertEqual(text.stdout, expected)
        let opened = text.stderr.split(separator: "\n").filter { $0.contains("file=") }
        XCTAssertFalse(opened.isEmpty, "LD_DEBUG=files listed nothing: the check below would prove nothing")
        let heavy = opened.filter { line in ["libTermind", "libFoundation", "libdispatch", "libicu"].contains { line.contains($0) } }
        XCTAssertEqual(heavy, [], "the launcher loaded more than it needs to say its version")
        XCTAssertEqual(try run(["--version"]).stdout, expected)

        for arguments in [["version", "--json"], ["--json", "--version"]] {
            let json = try run(arguments)
            XCTAssertEqual(json.status, 0, json.stderr)
            XCTAssertEqual(try self.json(json), try JSONCoding.parse(try JSONCoding.encode(reply), source: "the kernel's reply"), "\(arguments)")
        }
        // Anything more is the client's to judge.
        let extra = try run(["version", "now"])
        XCTAssertEqual(extra.status, 2, extra.stdout)
        XCTAssertTrue(extra.stderr.contains("version takes no arguments"), extra.stderr)
    }

    /// With no server, the general help is the launcher's, written from Registry.json with
    /// none of termind's libraries loaded, and it says what the full client says after booting
    /// every feature of the same registry (`--registry` makes the client boot them).
    func testTheGeneralHelpRunsInTheLauncherAloneAndListsWhatTheClientLists() throws {
        let client = try run(["--registry", FeatureHarness.buildDirectory + "/Registry.json", "help"])
        XCTAssertEqual(client.status, 0, client.stderr)
        XCTAssertTrue(client.stdout.contains("vault host list|show|add") && client.stdout.contains("Port forwards (forwarding):"), client.stdout)
        let launcher = try run(["help"], extra: ["LD_DEBUG": "files"])
        XCTAssertEqual(launcher.status, 0, launcher.stderr)
        XCTAssertEqual(launcher.stdout, client.stdout)
        let opened = launcher.stderr.split(separator: "\n").filter { $0.contains("file=") }
        XCTAssertFalse(opened.isEmpty, "LD_DEBUG=files listed nothing: the check below would prove nothing")
        let heavy = opened.filter { line in ["libTermind", "libFoundation", "libdispatch", "libicu"].contains { line.contains($0) } }
        XCTAssertEqual(heavy, [], "the launcher loaded more than it needs to list the registry's commands")
        for arguments in [[], ["--help"], ["-h"], ["--json", "help"]] {
            XCTAssertEqual(try run(arguments).stdout, client.stdout, "\(arguments)")
        }
        // A command's own help is the client's, from the feature that declares it.
        let command = try run(["help", "vault", "host", "add"])
        XCTAssertEqual(command.status, 0, command.stderr)
        XCTAssertTrue(command.stdout.contains("Usage: termind vault host add"), command.stdout)
    }

    func testPluginCommandsMapArgumentsTypeOptionsAndResolvePaths() throws {
        let file = try directory.write("data/payload.txt", "termind\n")
        let digest = try run(["--plugins", plugins, "--json", "digest", "payload.txt", "--algorithm", "sha256"], cwd: directory.file("data"))
        XCTAssertEqual(digest.status, 0, digest.stderr)
        XCTAssertEqual(try json(digest)["digest"], .string(try sha256(file)))
        let badPort = try run(["--plugins", plugins, "wol", "00:11:22:33:44:55", "--port", "nine"])
        XCTAssertEqual(badPort.status, 2)
        XCTAssertTrue(badPort.stderr.contains("--port must be an integer, got 'nine'"), badPort.stderr)
        // A command's usage error points to that command's help, not termind's.
        XCTAssertTrue(badPort.stderr.contains("Run 'termind wol --help'."), badPort.stderr)
        let help = try run(["--plugins", plugins, "help", "wol"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("Usage: termind wol TARGET"), help.stdout)
    }

    /// Under systemd (`Type=notify`) serve says READY=1 once its socket answers, and
    /// STOPPING=1 on its way out.
    func testServeNotifiesSystemdWhenReadyAndWhenStopping() throws {
        let notify = directory.file("notify.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: Array(notify.utf8)) }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        XCTAssertEqual(bound, 0)
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        func message() -> String {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buffer, buffer.count, 0)
            return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
        }
        let socketPath = directory.file("s/control.sock")
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = notify
        environment["HOME"] = directory.file("home")
        let server = try SpawnedProcess(termind, ["--registry", try registry(echoEntry), "--socket", socketPath, "--store", directory.file("db.sqlite"),
                                                  "--secrets-key", directory.file("secrets.key"), "serve"], environment: environment, captureOutput: false)
        defer { server.signal(SIGKILL); server.wait() }
        let ready = message()
        XCTAssertTrue(ready.hasPrefix("READY=1\nMAINPID=\(server.pid)\n"), ready)
        // Ready means ready: a client is answered at once.
        let answered = try run(["--json", "features"], socket: socketPath)
        XCTAssertEqual(answered.status, 0)
        XCTAssertEqual(try json(answered)["server"], .bool(true), "answered in-process, not by the server")
        server.signal(SIGTERM)
        XCTAssertEqual(message(), "STOPPING=1")
        XCTAssertEqual(server.wait(), 0)
    }

    func testServeAnswersClientsAndStopsCleanlyOnSIGTERM() throws {
        let socket = directory.file("s/control.sock")
        let path = try registry(echoEntry)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: termind)
        server.arguments = ["--registry", path, "--plugins", plugins, "--socket", socket, "--store", directory.file("db.sqlite"),
                            "--secrets-key", directory.file("secrets.key"), "serve", "--json"]
        let out = Pipe()
        server.standardOutput = out
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        // The ready line is printed once the socket listens.
        let ready = try JSONCoding.parse(readLine(out.fileHandleForReading), source: "ready line")
        XCTAssertEqual(ready["event"], .string("ready"))
        XCTAssertEqual(ready["running"], .integer(3))

        let features = try run(["--json", "features"], socket: socket)
        XCTAssertEqual(features.status, 0, features.stderr)
        XCTAssertEqual(try json(features)["server"], .bool(true))
        // A plugin command run from another folder reaches the server with an absolute path.
        let file = try directory.write("elsewhere/f.txt", "abc")
        let digest = try run(["--json", "digest", "f.txt"], cwd: directory.file("elsewhere"), socket: socket)
        XCTAssertEqual(digest.status, 0, digest.stderr)
        XCTAssertEqual(try json(digest)["digest"], .string(try sha256(file)))

        server.terminate() // SIGTERM
        server.waitUntilExit()
        XCTAssertEqual(server.terminationStatus, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: socket), "the socket is removed on shutdown")
    }

    func testASIGTERMTheMomentServeIsReadyStopsItCleanly() throws {
        // The signal handlers are armed before the ready line: a supervisor (or a test) that
        // stops a server as soon as it is up gets a clean stop, never the default action.
        let empty = try directory.write("empty.json", #"{"schema": 1, "features": []}"#)
        for attempt in 0..<5 {
            let server = try ServeProcess(directory: directory, arguments: ["--registry", empty])
            server.process.signal(SIGTERM)
            XCTAssertEqual(server.process.wait(), 0, "attempt \(attempt): serve ends with status 0")
            XCTAssertFalse(FileManager.default.fileExists(atPath: server.socketPath), "attempt \(attempt): the socket is removed")
        }
    }

    func testBootShapingEnvironmentRunsInProcessEvenWithAServerRunning() throws {
        let empty = try registry("")
        let server = try ServeProcess(directory: directory, arguments: ["--registry", empty])
        defer { server.stop() }
        let served = try run(["--json", "features"], socket: server.socketPath)
        XCTAssertEqual(try json(served)["server"], .bool(true))
        let unknown = try run(["features"], socket: server.socketPath, extra: ["TERMIND_FEATURES": "nope", "TERMIND_REGISTRY": empty])
        XCTAssertEqual(unknown.status, 2, unknown.stdout + unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("Unknown feature 'nope'"), unknown.stderr)
        let withPlugins = try run(["--json", "features"], socket: server.socketPath, extra: ["TERMIND_PLUGINS": plugins, "TERMIND_REGISTRY": empty])
        XCTAssertEqual(withPlugins.status, 0, withPlugins.stderr)
        XCTAssertEqual(try json(withPlugins)["server"], .bool(false), "the environment's plugins, not the server's set")
        XCTAssertTrue(withPlugins.stdout.contains("\"id\" : \"digest\""), withPlugins.stdout)
    }

    func testHelpListsPluginCommandsAndCommandArgumentsAreUnambiguous() throws {
        let empty = try registry("")
        let help = try run(["--registry", empty, "--plugins", plugins, "help"])
        XCTAssertEqual(help.status, 0, help.stderr)
        XCTAssertTrue(help.stdout.contains("Plugin digest (digest):"), help.stdout)
        XCTAssertTrue(help.stdout.contains("  digest PATH"), help.stdout)
        XCTAssertTrue(help.stdout.contains("  wol TARGET"), help.stdout)
        XCTAssertTrue(help.stdout.contains("Wake a machine"), help.stdout)
        let none = try run(["--registry", empty, "--help"])
        XCTAssertTrue(none.stdout.contains("(none loaded; add plugins with --plugins DIR)"), none.stdout)

        // A field given as a positional and as an option is an error, not silently dropped.
        let twice = try run(["--registry", empty, "--plugins", plugins, "wol", "00:11:22:33:44:55", "--target", "aa:bb:cc:dd:ee:ff"])
        XCTAssertEqual(twice.status, 2)
        XCTAssertTrue(twice.stderr.contains("wol: TARGET is given twice, as an argument ('00:11:22:33:44:55') and as --target"), twice.stderr)
        // After `--`, everything is positional: a file named --weird is a path.
        let weird = try directory.write("data/--weird", "abc")
        let digest = try run(["--registry", empty, "--plugins", plugins, "--json", "digest", "--", "--weird"], cwd: directory.file("data"))
        XCTAssertEqual(digest.status, 0, digest.stderr)
        XCTAssertEqual(try json(digest)["digest"], .string(try sha256(weird)))
        // A contract id that is not one is a usage error.
        let bad = try run(["--registry", empty, "call", "not a contract"])
        XCTAssertEqual(bad.status, 2)
        XCTAssertTrue(bad.stderr.contains("'not a contract' is not a contract id"), bad.stderr)
    }

    func testTheVaultRunsOnAnIsolatedStoreAndTheSecretStoreCanChangeProtection() throws {
        let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
        let log = directory.file("debug.log")
        let added = try run(store + ["--debug", "--log-file", log, "--json", "vault", "identity", "add", "deploy", "--password", "-"], stdin: "s3cret-pw\n")
        XCTAssertEqual(added.status, 0, added.stderr)
        let logged = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(logged.contains("kernel.secrets.opened"), "debug logging was on:\n\(logged)")
        XCTAssertFalse(logged.contains("s3cret"), "the password reached the log")
        XCTAssertEqual(try json(added)["hasPassword"], .bool(true))
        let onCommandLine = try run(store + ["vault", "identity", "add", "other", "--password", "hunter2"])
        XCTAssertEqual(onCommandLine.status, 2)
        XCTAssertTrue(onCommandLine.stderr.contains("never on the command line"), onCommandLine.stderr)

        let protect = try run(store + ["secrets", "protect", "--passphrase", "-"], stdin: "correct horse battery\n")
        XCTAssertEqual(protect.status, 0, protect.stderr)
        XCTAssertTrue(protect.stdout.contains("passphrase (scrypt)"), protect.stdout)
        let withoutPassphrase = try run(store + ["vault", "identity", "list"])
        XCTAssertEqual(withoutPassphrase.status, 3)
        XCTAssertTrue(withoutPassphrase.stderr.contains("protected by a passphrase"), withoutPassphrase.stderr)
        let wrong = try directory.write("wrong.txt", "wrong one\n")
        let rejected = try run(store + ["--secrets-passphrase-file", wrong, "vault", "identity", "list"])
        XCTAssertEqual(rejected.status, 3)
        XCTAssertTrue(rejected.stderr.contains("Wrong passphrase"), rejected.stderr)
        let right = try directory.write("right.txt", "correct horse battery\n")
        let listed = try run(store + ["--secrets-passphrase-file", right, "--json", "vault", "identity", "list"])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue(listed.stdout.contains("deploy"))
        XCTAssertFalse(listed.stdout.contains("s3cret") || listed.stderr.contains("s3cret"), "no secret in output")
        let back = try run(store + ["--secrets-passphrase-file", right, "secrets", "protect", "--key-file"])
        XCTAssertEqual(back.status, 0, back.stderr)
        XCTAssertEqual(try run(store + ["vault", "identity", "list"]).status, 0)
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            let bytes = FileManager.default.contents(atPath: directory.file(file)) ?? Data()
            XCTAssertNil(bytes.range(of: Data("s3cret-pw".utf8)), "plaintext secret in \(file)")
        }
    }

    func testAnEmptySecretOnStandardInputIsRefusedAndNothingIsSaved() throws {
        let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
        let empty = try run(store + ["vault", "identity", "add", "deploy", "--password", "-"], stdin: "")
        XCTAssertEqual(empty.status, 2, empty.stderr)
        XCTAssertTrue(empty.stderr.contains("--password -: the password read from standard input is empty; nothing was changed"), empty.stderr)
        let listed = try run(store + ["--json", "vault", "identity", "list"])
        XCTAssertEqual(try json(listed)["identities"], .array([]), "no identity without its password was created")
        // The contract refuses it too, for scripts and socket clients.
        let direct = try run(store + ["call", "vault.identity.add@1", #"{"username": "deploy", "password": ""}"#])
        XCTAssertEqual(direct.status, 2, direct.stderr)
        XCTAssertTrue(direct.stderr.contains("an empty password cannot be saved"), direct.stderr)
    }

    func testProtectingWithAPassphraseRemovesTheKeyFileAndStatusSaysWhenTheKeyWasMade() throws {
        let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
        XCTAssertEqual(try run(store + ["vault", "identity", "add", "deploy", "--password", "-"], stdin: "s3cret-pw\n").status, 0)
        let status = try run(store + ["--json", "secrets", "status"])
        let made = try XCTUnwrap(try json(status)["keyRotatedAt"]?.stringValue, status.stdout)
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.file("secrets.key")))
        let protect = try run(store + ["secrets", "protect", "--passphrase", "-"], stdin: "correct horse battery\n")
        XCTAssertEqual(protect.status, 0, protect.stderr)
        XCTAssertTrue(protect.stdout.contains("key made"), protect.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("secrets.key")), "the key file given up is removed")
        let passphrase = try directory.write("pass.txt", "correct horse battery\n")
        let after = try run(store + ["--secrets-passphrase-file", passphrase, "--json", "secrets", "status"])
        XCTAssertNotEqual(try json(after)["keyRotatedAt"]?.stringValue, made)
    }

    /// Structured request fields from the command line: the ssh_config import commit takes
    /// the preview's digests (`--files @preview.json`) and fails closed when the file changed.
    func testImportCommitTakesThePreviewsDigestsFromItsReportAndFailsClosedOnAChange() throws {
        let config = try directory.write("ssh_config", "Host gpu\n  HostName 10.0.0.5\n  User ml\nHost db\n  HostName 10.0.0.6\n")
        let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
        let preview = try run(store + ["--json", "vault", "import", "preview", config])
        XCTAssertEqual(preview.status, 0, preview.stderr)
        let report = try directory.write("preview.json", preview.stdout)

        // The file changed after the preview: nothing is imported.
        try "Host gpu\n  HostName 10.6.6.6\n  User ml\nHost db\n  HostName 10.0.0.6\n".write(toFile: config, atomically: true, encoding: .utf8)
        let changed = try run(store + ["vault", "import", "commit", config, "--select", "gpu", "--files", "@" + report])
        XCTAssertEqual(changed.status, 1, changed.stderr)
        XCTAssertTrue(changed.stderr.contains("changed since the preview"), changed.stderr)
        XCTAssertEqual(try json(try run(store + ["--json", "vault", "host", "list"]))["hosts"], .array([]))

        // Previewed again, the digests match: the selected host is imported. The same digests
        // work inline as JSON.
        let again = try run(store + ["--json", "vault", "import", "preview", config])
        _ = try directory.write("preview.json", again.stdout)
        let committed = try run(store + ["--json", "vault", "import", "commit", config, "--select", "gpu", "--files", "@" + report])
        XCTAssertEqual(committed.status, 0, committed.stderr)
        guard case .array(let created)? = try json(committed)["created"] else { return XCTFail(committed.stdout) }
        XCTAssertEqual(created.map { $0["address"] }, [.string("10.6.6.6")])
        let files = try XCTUnwrap(try json(again)["files"])
        let inline = try run(store + ["--json", "vault", "import", "commit", config, "--select", "db",
                                      "--files", String(decoding: try JSONCoding.encode(files), as: UTF8.self)])
        XCTAssertEqual(inline.status, 0, inline.stderr)

        // Wrong shapes name the field and what is wrong; nothing is imported.
        let notJSON = try run(store + ["vault", "import", "commit", config, "--select", "db", "--files", "{nope"])
        XCTAssertEqual(notJSON.status, 2, notJSON.stderr)
        XCTAssertTrue(notJSON.stderr.contains("--files takes JSON"), notJSON.stderr)
        let wrongShape = try run(store + ["vault", "import", "commit", config, "--select", "db", "--files", #"[{"path": 1}]"#])
        XCTAssertEqual(wrongShape.status, 2, wrongShape.stderr)
        XCTAssertTrue(wrongShape.stderr.contains("body.files[0].path: expected string"), wrongShape.stderr)
    }

    private func readLine(_ handle: FileHandle) throws -> Data {
        var line = Data()
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { return line }
            line += byte
        }
    }

    private func sha256(_ path: String) throws -> String {
        let result = try ProcessRunner.run("/usr/bin/sha256sum", [path])
        return String(result.stdout.prefix(64))
    }

    func testTablesShowWhatARowIsFirstTimesInLocalTimeAndFitTheTerminal() throws {
        XCTAssertEqual(try run(["vault", "host", "add", "10.0.0.5", "--label", "gpu-box", "--user", "ml", "--tags", "gpu,prod"]).status, 0)
        XCTAssertEqual(try run(["vault", "host", "add", "db.example.com", "--label", "db", "--port", "2222"]).status, 0)
        // The command's declared columns: the label first, the long id last.
        let listed = try run(["vault", "host", "list"])
        let header = try XCTUnwrap(listed.stdout.split(separator: "\n").first)
        XCTAssertTrue(header.hasPrefix("LABEL  "), listed.stdout)
        XCTAssertTrue(header.hasSuffix("  ID"), listed.stdout)
        // --json keeps every field, as the contract has them.
        let hosts = try json(try run(["--json", "vault", "host", "list"]))["hosts"]?.arrayValue ?? []
        XCTAssertEqual(hosts.count, 2)
        XCTAssertNotNil(hosts.first?["createdAt"]?.stringValue)
        // A time is shown in local time, not as RFC 3339.
        XCTAssertEqual(try run(["workspace", "save", "dev", "h(gpu-box 60%, db)"]).status, 0)
        let shown = try run(["workspace", "show", "dev"]).stdout
        let updated = try XCTUnwrap(shown.split(separator: "\n").first { $0.hasPrefix("updatedAt") }, shown)
        XCTAssertNotNil(updated.range(of: #"^updatedAt  \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"#, options: .regularExpression), shown)
        // On a terminal 30 columns wide, each line is cut to fit.
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["XDG_DATA_HOME"] = directory.file("home/data")
        environment["XDG_CONFIG_HOME"] = directory.file("home/config")
        environment["TERMIND_SOCKET"] = directory.file("no-server.sock")
        let report = try PseudoTerminal.run([termind, "vault", "host", "list"], steps: [.expect("gpu-box")], environment: environment, rows: 24, columns: 30)
        XCTAssertEqual(report.status, 0, report.output)
        let lines = report.output.replacingOccurrences(of: "\r", with: "").split(separator: "\n").filter { $0.contains("gpu-box") || $0.contains("LABEL") }
        XCTAssertEqual(lines.count, 2, report.output)
        for line in lines {
            XCTAssertLessThanOrEqual(line.count, 30, report.output)
            XCTAssertTrue(line.hasSuffix("…"), report.output)
        }
    }

    func testInputAFeatureRefusesIsAUsageErrorExitingTwo() throws {
        XCTAssertEqual(try run(["vault", "host", "add", "10.0.0.5", "--label", "box"]).status, 0)
        for (arguments, says) in [(["workspace", "save", "x", "h(box 60%"], "layout"),
                                  (["vault", "host", "add", "10.0.0.6", "--port", "99999"], "port"),
                                  (["vault", "host", "edit", "box", "--shellIntegration", "maybe"], "shellIntegration"),
                                  (["vault", "connect", "resolve", "ssh -p nope box"], "nope")] {
            let result = try run(arguments)
            XCTAssertEqual(result.status, 2, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(says), result.stderr)
        }
        // An operation that failed is still 1.
        XCTAssertEqual(try run(["vault", "host", "show", "nowhere"]).status, 1)
    }

    func testTheGeneralHelpNamesEveryFeatureCommandGroupedAndVersionWorks() throws {
        let help = try run(["--help"])
        XCTAssertEqual(help.status, 0, help.stderr)
        let lines = help.stdout.split(separator: "\n").map(String.init)
        // Each command a person starts with, at the start of a row of its group.
        for command in ["exec TARGET", "ssh TARGET", "attach SESSION", "sessions", "sessions close SESSION", "workspace save|list|show|rm|open", "broadcast",
                        "snippet run", "history HOST", "serial DEVICE", "sftp TARGET", "get SOURCES... DESTINATION", "put SOURCES... DESTINATION",
                        "cp SOURCES... DESTINATION", "edit TARGET", "transfers", "forward run HOST", "metrics watch", "vault host list|show|add|edit|delete",
                        "settings set KEY VALUE"] {
            XCTAssertTrue(lines.contains { $0.hasPrefix("  " + command) }, "\(command) is not named: \(help.stdout)")
        }
        for title in ["Terminals and commands on your hosts (workspaces):", "Files (sftp):", "Port forwards (forwarding):", "Server and GPU metrics (metrics):",
                      "Hosts, identities, keys and trusted host keys (vault):", "Settings (settings):", "termind itself:"] {
            XCTAssertTrue(lines.contains(title), "no group \(title): \(help.stdout)")
        }
        // No row sends a person to a command that only says what it needs.
        XCTAssertFalse(help.stdout.contains("lists them"), help.stdout)
        let version = try run(["--version"])
        XCTAssertEqual(version.status, 0, version.stderr)
        XCTAssertTrue(version.stdout.hasPrefix("termind 0."), version.stdout)
    }

    func testAnArgumentThatIsNotUTF8IsRefusedNotRepaired() throws {
        // Swift would turn the byte into U+FFFD, and a path would name another file.
        let shell = try ProcessRunner.run("/bin/sh", ["-c", #""$0" vault host show "$(printf 'caf\351')"; echo "[$?]""#, termind],
                                          environment: ["HOME": directory.file("home"), "TERMIND_SOCKET": directory.file("no-server.sock"), "PATH": "/usr/bin:/bin"])
        XCTAssertTrue(shell.stdout.hasSuffix("[2]\n"), shell.stdout + shell.stderr)
        XCTAssertTrue(shell.stderr.contains("argument 4 is not valid UTF-8 (caf\\xe9)"), shell.stderr)
    }
}
