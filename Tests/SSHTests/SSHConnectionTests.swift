import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
@testable import TermindSSH
import XCTest

/// The SSH transport against a real OpenSSH sshd started by the test, with the real Vault
/// (loaded from its .so) deciding host-key trust.
final class SSHConnectionTests: XCTestCase {
    private var bed: SSHTestbed!
    /// A server started by a test in place of the testbed's.
    private var replacement: SSHServerFixture?
    private var directory: TemporaryDirectory { bed.directory }
    private var server: SSHServerFixture { replacement ?? bed.server }
    private var clientKey: String { bed.clientKey }   // private key text
    private var trust: any HostKeyTrust { bed.trust! }
    private var user: String { bed.user }
    private var vault: HarnessSession { bed.vault! }

    override func setUp() async throws {
        bed = try await SSHTestbed()
    }

    override func tearDown() async throws {
        replacement?.stop()
        await bed?.stop()
    }

    private func makeKey(_ type: String, _ name: String) throws -> String {
        let path = directory.file(name)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", type, "-N", "", "-f", path] + (type == "rsa" ? ["-b", "3072"] : [])).status, 0)
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    private func connect(key: String? = nil, answer: HostKeyAnswer = .acceptAndSave, deadlines: SSHDeadlines = SSHDeadlines(),
                         asked: AskedLog? = nil) async throws -> SSHConnection {
        try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: user),
                                     credentials: SSHCredentials(privateKey: Secret(key ?? clientKey)), trust: trust, deadlines: deadlines) { question in
            asked?.append(question)
            return answer
        }
    }

    func testAnUnknownHostKeyIsAskedAboutInsideTheHandshakeAndSaved() async throws {
        let asked = AskedLog()
        let connection = try await connect(asked: asked)
        XCTAssertEqual(connection.authenticatedWith, "publickey")
        XCTAssertEqual(asked.questions.count, 1)
        // The key we were asked about is one of the server's own host keys.
        let serverLine = try XCTUnwrap(server.hostKeys[connection.hostKey.algorithm], connection.hostKey.algorithm)
        XCTAssertEqual(serverLine, "\(connection.hostKey.algorithm) \(connection.hostKey.blob.base64EncodedString())")
        let listed = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", server.directory.file("ssh_host_\(connection.hostKey.algorithm == "ssh-ed25519" ? "ed25519" : connection.hostKey.algorithm.hasPrefix("ecdsa") ? "ecdsa" : "rsa")_key.pub")])
        XCTAssertTrue(listed.stdout.contains(asked.questions[0].fingerprint), listed.stdout)
        await connection.close()
        // Saved: the next connection asks nothing.
        let again = AskedLog()
        let second = try await connect(asked: again)
        XCTAssertEqual(again.questions.count, 0)
        await second.close()
    }

    func testRejectedAndOnceOnlyHostKeysAreNeverSaved() async throws {
        do {
            _ = try await connect(answer: .reject)
            XCTFail("a rejected host key must stop the connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.host_key_rejected")
        }
        let once = try await connect(answer: .acceptOnce)
        let verdict = try await trust.verdict(host: "127.0.0.1", port: server.port, key: once.hostKey)
        XCTAssertEqual(verdict, .unknown, "once-only trust is not saved")
        await once.close()
    }

    func testAChangedHostKeyFailsClosedWithBothFingerprints() async throws {
        // Another key saved for this host:port: whatever key the server presents has changed.
        _ = try makeKey("ed25519", "impostor")
        let fake = try String(contentsOfFile: directory.file("impostor.pub"), encoding: .utf8)
        _ = try await vault.call(KnownHostContracts.Add.self, .init(host: "127.0.0.1", port: server.port, key: fake))
        let asked = AskedLog()
        do {
            _ = try await connect(asked: asked)
            XCTFail("a changed host key must fail closed")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.host_key_changed", error.message)
            XCTAssertTrue(error.message.contains("has CHANGED"), error.message)
            XCTAssertTrue(error.message.contains("termind vault knownhost remove"), error.message)
        }
        XCTAssertEqual(asked.questions.count, 0, "a changed key is never offered for acceptance")
    }

    func testExecKeepsStreamsApartPassesInputAndReturnsTheExitStatus() async throws {
        let connection = try await connect()
        let result = try await connection.exec("echo to-out; echo to-err >&2; exit 3")
        XCTAssertEqual(String(decoding: result.stdout, as: UTF8.self), "to-out\n")
        XCTAssertTrue(String(decoding: result.stderr, as: UTF8.self).hasSuffix("to-err\n"), String(decoding: result.stderr, as: UTF8.self))  // (stderr ends with the command's own: the account's shell start-up files may print first)
        XCTAssertEqual(result.exitStatus, 3)
        let echoed = try await connection.exec("cat", stdin: Data("from stdin\n".utf8))
        XCTAssertEqual(String(decoding: echoed.stdout, as: UTF8.self), "from stdin\n")
        XCTAssertEqual(echoed.exitStatus, 0)
        let big = try await connection.exec("head -c 300000 /dev/zero", outputLimit: 100_000)
        XCTAssertEqual(big.stdout.count, 100_000)
        XCTAssertTrue(big.truncated)
        let killed = try await connection.exec("kill -TERM $$")
        XCTAssertEqual(killed.exitSignal, "TERM")
        XCTAssertNil(killed.exitStatus)
        await connection.close()
    }

    /// Work submitted to a closed connection is told so (ssh.closed), never run on the
    /// caller's thread against a freed session, however many come at once.
    func testWorkAfterTheConnectionClosedFailsWithTheReasonAndRunsNothing() async throws {
        let connection = try await connect()
        let first = try await connection.exec("true")
        XCTAssertEqual(first.exitStatus, 0)
        await connection.close()
        XCTAssertFalse(connection.isAlive)
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<32 {
                group.addTask {
                    do {
                        _ = try await connection.exec("true")
                        return "ran"
                    } catch let error as TermindError {
                        return error.code
                    } catch {
                        return "\(error)"
                    }
                }
            }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        XCTAssertEqual(Set(outcomes), ["ssh.closed"], "\(outcomes)")
    }

    /// Engine-confined state is checked, not promised: the check knows the engine's thread
    /// from any other (debug builds stop where `EngineBound` is touched elsewhere), a handed-
    /// off value is taken once, and the engine's own operations use what they confine.
    func testEngineConfinementKnowsTheEngineThreadFromAnyOther() async throws {
        let connection = try await connect()
        let engine = connection.engine
        XCTAssertFalse(engine.isOnEngineThread, "a test task is not the engine thread")
        let detached = await Task.detached { engine.isOnEngineThread }.value
        XCTAssertFalse(detached)
        XCTAssertFalse(DispatchQueue.global().sync { engine.isOnEngineThread })
        let bound = EngineBound(0, engine: engine)
        let seen = try await engine.run("Counting on the engine") { _ -> Bool? in
            bound.value += 41
            bound.value += 1
            return engine.isOnEngineThread && bound.value == 42
        }
        XCTAssertTrue(seen, "inside an operation the engine's thread is recognised and the bound value used")
        // Another connection's engine is another thread.
        let other = try await connect()
        let crossed = try await other.engine.run("Asking from the other engine") { _ -> Bool? in engine.isOnEngineThread }
        XCTAssertFalse(crossed)
        let handOff = HandOff("token")
        XCTAssertEqual(handOff.take(), "token")
        await other.close()
        await connection.close()
    }

    /// The connection's engine thread is named (top -H, perf) and runs at the process's own
    /// priority, as ssh(1) does, even when opened from user-initiated work: it started at
    /// that Dispatch worker's nice -2, under its name. (The priority part can only fail where
    /// Dispatch may raise a worker's priority, i.e. as root; the name part fails anywhere.)
    func testTheEngineThreadIsNamedAndRunsAtTheProcessPriority() async throws {
        let (port, key, trust, user) = (server.port, clientKey, trust, user)
        let connection = try await Task(priority: .userInitiated) {
            try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: port, username: user), credentials: SSHCredentials(privateKey: Secret(key)),
                                         trust: trust, deadlines: SSHDeadlines()) { _ in .acceptAndSave }
        }.value
        _ = try await connection.exec("true")  // the engine has run
        func nice(_ stat: String) -> Int? {
            // Fields after "(comm)": state is the first, nice the 17th.
            guard let close = stat.lastIndex(of: ")") else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 16 ? Int(fields[16]) : nil
        }
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")
        let engines = tasks.filter { (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8))?.hasPrefix("termind.ssh") ?? false }
        XCTAssertFalse(engines.isEmpty, "no thread named termind.ssh")
        let processNice = nice(try String(contentsOfFile: "/proc/self/stat", encoding: .utf8))
        XCTAssertNotNil(processNice)
        for engine in engines {
            XCTAssertEqual(nice(try String(contentsOfFile: "/proc/self/task/\(engine)/stat", encoding: .utf8)), processNice)
        }
        await connection.close()
    }

    /// Short reads are acknowledged at once only until a session's process started: sshd
    /// then turns Nagle off, and an acknowledgement per echo would be CPU for nothing.
    func testShortReadsAreAcknowledgedOnlyUntilASessionStarted() async throws {
        let connection = try await connect()
        let before = try await connection.acknowledgesShortReads()
        XCTAssertTrue(before, "a connection with no session yet acknowledges short reads (forwards alone keep sshd's Nagle on)")
        _ = try await connection.exec("true")
        let after = try await connection.acknowledgesShortReads()
        XCTAssertFalse(after, "after an exec started, sshd has TCP_NODELAY on")
        await connection.close()
    }

    /// Channels set up at once on one connection each wait for the answers to their own
    /// requests (env, pty-req, exec): an answer meant for another channel must not fail
    /// them (libssh2 did, until termind's patch 0004: about one run in six of three
    /// terminals at once lost a pty-req). Refused env requests put FAILUREs among them.
    func testChannelsSetUpTogetherEachGetTheirOwnAnswers() async throws {
        let connection = try await connect()
        for round in 1...12 {
            try await withThrowingTaskGroup(of: (Int, String, Int32?).self) { group in
                for index in 1...6 {
                    group.addTask {
                        let channel = try await connection.openChannel(.exec("echo ready-\(round)-\(index)"), pty: PTYRequest(term: "xterm", columns: 80, rows: 24),
                                                                       environment: ["LANG": "C.UTF-8", "TERMIND_REFUSED_\(index)": "x"])
                        var output = Data()
                        while let (_, data) = try await channel.next() { output += data }
                        return (index, String(decoding: output, as: UTF8.self), channel.exit?.status)
                    }
                }
                for try await (index, output, status) in group {
                    XCTAssertTrue(output.contains("ready-\(round)-\(index)"), "round \(round), channel \(index): \(output)")
                    XCTAssertEqual(status, 0)
                }
            }
        }
        await connection.close()
    }

    /// `ssh -A`: with the local agent's socket given, the remote side reaches that agent (its
    /// key listed by `ssh-add -l` there, several times, from sessions asking at once); a
    /// session before any asked has no agent.
    func testAgentForwardingReachesTheLocalAgentOnlyWhereAsked() async throws {
        let socket = directory.file("agent.sock")
        let agent = try SpawnedProcess("/usr/bin/ssh-agent", ["-D", "-a", socket], captureOutput: false)
        defer { agent.signal(SIGTERM); agent.wait() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socket), Date() < deadline { usleep(20_000) }
        _ = try makeKey("ed25519", "agent-key")
        let added = try ProcessRunner.run("/usr/bin/ssh-add", [directory.file("agent-key")], environment: ["SSH_AUTH_SOCK": socket])
        XCTAssertEqual(added.status, 0, added.stderr)
        let fingerprint = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-lf", directory.file("agent-key.pub")]).stdout.split(separator: " ")[1]
        // The agent holds the key here before anything is forwarded.
        let listed = try ProcessRunner.run("/usr/bin/ssh-add", ["-l"], environment: ["SSH_AUTH_SOCK": socket])
        XCTAssertTrue(listed.stdout.contains(String(fingerprint)), listed.stdout + listed.stderr)

        let connection = try await connect()
        func run(_ command: String, agent: String?) async throws -> (String, Int32?, Bool) {
            let channel = try await connection.openChannel(.exec(command), forwardAgent: agent)
            var output = Data()
            while let (_, data) = try await channel.next() { output += data }
            return (String(decoding: output, as: UTF8.self), channel.exit?.status, channel.agentForwarded)
        }
        let plain = try await run("ssh-add -l 2>&1; echo \"[$SSH_AUTH_SOCK]\"", agent: nil)
        XCTAssertTrue(plain.0.contains("[]"), plain.0)
        XCTAssertFalse(plain.2)
        try await withThrowingTaskGroup(of: (String, Int32?, Bool).self) { group in
            for _ in 1...3 { group.addTask { try await run("ssh-add -l && ssh-add -l", agent: socket) } }
            for try await (output, status, forwarded) in group {
                XCTAssertTrue(forwarded)
                XCTAssertEqual(status, 0, output)
                XCTAssertEqual(output.components(separatedBy: String(fingerprint)).count - 1, 2, output)
            }
        }
        // OpenSSH's sshd keeps one agent socket per connection: once a session asked, later
        // sessions of that connection have it too. (So termind keeps sessions that forward
        // the agent on connections of their own: WorkspaceTemplateTests… no, TerminalSessionTests.)
        let after = try await run("test -n \"$SSH_AUTH_SOCK\" && echo shared", agent: nil)
        XCTAssertEqual(after.0, "shared\n")
        await connection.close()

        // The agent gone: each agent channel is closed at once; the remote side is told no.
        agent.signal(SIGTERM)
        agent.wait()
        let again = try await connect()
        let channel = try await again.openChannel(.exec("ssh-add -l; echo \"status $?\""), forwardAgent: socket)
        var output = Data()
        while let (_, data) = try await channel.next() { output += data }
        let text = String(decoding: output, as: UTF8.self)
        XCTAssertTrue(text.contains("status 2") || text.contains("status 1"), text)
        await again.close()
    }

    func testLargeInputAndOutputFlowTogetherWithoutDeadlock() async throws {
        // More than the 2 MiB channel window each way: writing all input before reading any
        // output would stall once the remote's output filled our window.
        let connection = try await connect()
        let payload = Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let echoed = try await connection.exec("cat", stdin: payload, outputLimit: 8 << 20, timeout: 60)
        XCTAssertEqual(echoed.stdout.count, payload.count)
        XCTAssertTrue(echoed.stdout == payload, "the bytes came back unchanged")
        await connection.close()
    }

    func testACommandOutlivingTheChannelDeadlineStillSucceeds() async throws {
        var deadlines = SSHDeadlines()
        deadlines.channel = 1
        let connection = try await connect(deadlines: deadlines)
        let result = try await connection.exec("sleep 2; echo done", timeout: 30)
        XCTAssertEqual(String(decoding: result.stdout, as: UTF8.self), "done\n")
        XCTAssertEqual(result.exitStatus, 0)
        await connection.close()
    }

    func testRSAAndECDSAKeysAuthenticateAgainstSshdDefaults() async throws {
        let rsa = try makeKey("rsa", "rsa-client")
        let ecdsa = try makeKey("ecdsa", "ecdsa-client")
        bed.server.stop()
        replacement = try SSHServerFixture(authorizedKeys: ["rsa-client", "ecdsa-client"].map { try! String(contentsOfFile: directory.file("\($0).pub"), encoding: .utf8) })
        for key in [rsa, ecdsa] {
            let connection = try await connect(key: key)
            XCTAssertEqual(connection.authenticatedWith, "publickey")
            let whoami = try await connection.exec("id -un")
            XCTAssertEqual(String(decoding: whoami.stdout, as: UTF8.self), "\(user)\n")
            await connection.close()
        }
    }

    func testRejectedAuthenticationNamesTheOfferedMethods() async throws {
        let stranger = try makeKey("ed25519", "stranger")
        do {
            _ = try await connect(key: stranger)
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed")
            XCTAssertTrue(error.message.contains("the server offers publickey"), error.message)
            XCTAssertTrue(error.message.contains("the public key was rejected"), error.message)
        }
    }

    func testAServerThatNeverAnswersHitsTheHandshakeDeadline() async throws {
        // A TCP listener that accepts and then says nothing.
        let port = try SSHServerFixture.freePort()
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(listener, 4)
        var deadlines = SSHDeadlines()
        deadlines.handshake = 1
        let start = Date()
        do {
            _ = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: port, username: user), credentials: SSHCredentials(),
                                             trust: trust, deadlines: deadlines) { _ in .reject }
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.timeout", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "the deadline bounds the wait")
    }

    func testAServerKilledMidCommandGivesAClearErrorNotAHang() async throws {
        let connection = try await connect()
        let start = Date()
        Task.detached { [server] in
            try await Task.sleep(nanoseconds: 500_000_000)
            server.kill()
        }
        do {
            _ = try await connection.exec("sleep 30", timeout: 20)
            XCTFail("the command cannot finish")
        } catch let error as TermindError {
            XCTAssertTrue(["ssh.connection_lost", "ssh.socket"].contains(error.code), "\(error.code): \(error.message)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 10)
        await connection.close()
    }
}

/// Password authentication needs a real account with a password: as root, the test creates
/// a throwaway user with a random password and removes it afterwards.
final class PasswordAuthenticationTests: XCTestCase {
    func testPasswordAuthenticationAndAWrongPasswordAgainstSshd() async throws {
        try XCTSkipUnless(getuid() == 0, "needs root to create a throwaway account")
        let password = "pw-\(UUID().uuidString)"
        let account = try ThrowawayAccount(password: .value(password))
        defer { account.remove() }
        let name = account.name
        let server = try SSHServerFixture(authorizedKeys: [], extraConfig: ["PasswordAuthentication yes", "PermitEmptyPasswords no"])
        defer { server.stop() }
        let vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        let trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
        let target = SSHTarget(host: "127.0.0.1", port: server.port, username: name)

        let connection = try await SSHConnection.open(target, credentials: SSHCredentials(password: Secret(password)), trust: trust) { _ in .acceptOnce }
        XCTAssertEqual(connection.authenticatedWith, "password")
        let whoami = try await connection.exec("id -un")
        XCTAssertEqual(String(decoding: whoami.stdout, as: UTF8.self), "\(name)\n")
        await connection.close()

        do {
            _ = try await SSHConnection.open(target, credentials: SSHCredentials(password: Secret("not-the-password")), trust: trust) { _ in .acceptOnce }
            XCTFail("a wrong password must be rejected")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed")
            XCTAssertTrue(error.message.contains("password was rejected"), error.message)
            XCTAssertFalse(error.message.contains("not-the-password"), "the password is never echoed")
        }
        await vault.shutdown()
    }
}

/// A username-only identity: "none" goes first, and a server that accepts it (an account
/// with an empty password and PermitEmptyPasswords) needs nothing more.
final class NoneAuthenticationTests: XCTestCase {
    func testAUsernameOnlyIdentityLogsInWithNone() async throws {
        try XCTSkipUnless(getuid() == 0, "needs root to create a throwaway account")
        let account = try ThrowawayAccount(password: .empty)
        defer { account.remove() }
        let name = account.name
        let server = try SSHServerFixture(authorizedKeys: [], extraConfig: ["PasswordAuthentication yes", "PermitEmptyPasswords yes"])
        defer { server.stop() }
        let vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        let trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
        let connection = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: name),
                                                      credentials: SSHCredentials(agentSocket: ""), trust: trust) { _ in .acceptOnce }
        XCTAssertEqual(connection.authenticatedWith, "none")
        let whoami = try await connection.exec("id -un")
        XCTAssertEqual(String(decoding: whoami.stdout, as: UTF8.self), "\(name)\n")
        await connection.close()
        await vault.shutdown()
    }
}

final class AskedLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [HostKeyQuestion] = []
    func append(_ q: HostKeyQuestion) { lock.withLock { items.append(q) } }
    var questions: [HostKeyQuestion] { lock.withLock { items } }
}

/// `termind exec` as a user runs it, against a real sshd.
final class ExecCommandTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("id")]).status, 0)
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)])
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("none.sock")
        return try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                                     ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments,
                                     environment: environment, stdin: stdin)
    }

    func testExecOnASavedHostStreamsSeparatelyAndExitsWithTheRemoteStatus() throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)

        // Without a terminal an unknown host key is refused, and nothing runs.
        let refused = try termind(["exec", "box", "--", "touch \(directory.file("ran"))"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("there is no terminal to ask whether to trust it"), refused.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("ran")))

        let result = try termind(["exec", "box", "--accept-host-key", "save", "--", "echo out; echo err >&2; cat; exit 7"], stdin: "piped\n")
        XCTAssertEqual(result.status, 7)
        XCTAssertEqual(result.stdout, "out\npiped\n")
        XCTAssertTrue(result.stderr.hasSuffix("err\n"), result.stderr)  // (stderr ends with the command's own: the account's shell start-up files may print first)
        // The key was saved: no flag needed any more.
        let json = try termind(["--json", "exec", "box", "--", "printf", "%s", "'two  words'"])
        XCTAssertEqual(json.status, 0, json.stderr)
        let report = try JSONCoding.parse(Data(json.stdout.utf8), source: "stdout")
        XCTAssertEqual(report["stdout"], .string("two  words"), "the words are joined into one line the remote shell reads, as ssh does")
        XCTAssertEqual(report["exitStatus"], .integer(0))
    }

    func testExecOnAQuickConnectTargetWithAKeyFile() throws {
        let result = try termind(["exec", "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1", "--accept-host-key", "once", "--", "id", "-un"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout, "\(NSUserName())\n")
        // A key file written with ~ (unexpanded inside the quoted line) is the home folder's.
        try FileManager.default.createDirectory(atPath: directory.file("home/.ssh"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory.file("id"), toPath: directory.file("home/.ssh/id_test"))
        let tilde = try termind(["exec", "ssh -p \(server.port) -i ~/.ssh/id_test \(NSUserName())@127.0.0.1", "--accept-host-key", "once", "--", "echo tilde"])
        XCTAssertEqual(tilde.status, 0, tilde.stderr)
        XCTAssertEqual(tilde.stdout, "tilde\n")
        // A command ended by a signal exits as a shell reports it: 128 + the signal's number.
        let killed = try termind(["exec", "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1", "--accept-host-key", "once", "--", "kill -KILL $$"])
        XCTAssertEqual(killed.status, 128 + 9, killed.stderr)
        XCTAssertTrue(killed.stderr.contains("SIGKILL"), killed.stderr)
        let usage = try termind(["exec", "box"])
        XCTAssertEqual(usage.status, 2)
    }
}

/// `termind exec` inside a running `termind serve`: the server's pool keeps the connection
/// between invocations, and questions come back to the client over the control socket.
final class ExecInServerTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: SpawnedProcess?

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("id")]).status, 0)
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)])
    }

    override func tearDown() {
        serve?.signal(SIGTERM)
        serve?.wait()
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("control.sock")
        environment["SSH_AUTH_SOCK"] = nil
        return environment
    }

    private func termind(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                              ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments,
                              environment: environment, stdin: stdin)
    }

    private func startServer() throws -> ControlClient {
        serve = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind",
                                   ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "serve", "--json"],
                                   environment: environment, captureOutput: false)
        serve?.closeInput()
        for _ in 0..<200 {
            if let client = try? ControlClient(path: directory.file("control.sock")) { return client }
            usleep(25_000)
        }
        throw TermindError(code: "test.serve", message: "termind serve did not start")
    }

    private var acceptedLogins: Int { server.log.components(separatedBy: "Accepted publickey").count - 1 }

    func testExecRunsInsideTheServerAndReusesItsConnection() throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
        _ = try startServer()

        // No terminal to ask on: the unknown key the server asks about is refused here.
        let refused = try termind(["exec", "box", "--", "true"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("there is no terminal to ask whether to trust it"), refused.stderr)

        let first = try termind(["exec", "box", "--accept-host-key", "save", "--", "echo out; echo err >&2; cat; exit 5"], stdin: "through the server\n")
        XCTAssertEqual(first.status, 5, first.stderr)
        XCTAssertEqual(first.stdout, "out\nthrough the server\n")
        XCTAssertTrue(first.stderr.hasSuffix("err\n"), first.stderr)  // (stderr ends with the command's own: the account's shell start-up files may print first)
        let second = try termind(["--json", "exec", "box", "--", "printf", "%s", "'two words'"])
        XCTAssertEqual(second.status, 0, second.stderr)
        let report = try JSONCoding.parse(Data(second.stdout.utf8), source: "stdout")
        XCTAssertEqual(report["stdout"], .string("two words"))
        // Two invocations, one login: the server kept the connection.
        XCTAssertEqual(acceptedLogins, 1, server.log)
        // --local still runs in-process, with its own connection.
        let local = try termind(["--local", "exec", "box", "--", "true"])
        XCTAssertEqual(local.status, 0, local.stderr)
        XCTAssertEqual(acceptedLogins, 2)
    }

    func testHostKeyQuestionsTravelOverTheSocket() throws {
        let client = try startServer()
        let target = "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1"
        let body = try JSONCoding.encode(JSONValue.object(["target": .string(target), "command": .string("echo asked")]))
        var questions: [JSONValue] = []
        var output = Data()
        let reply = try client.stream("workspaces.exec@1", body: body, onOpen: { id in
            client.streamMessage(id: id, ["inputEnd": .bool(true)])
        }) { event in
            switch event["event"]?.stringValue {
            case "ask"?:
                questions.append(event["ask"] ?? .null)
                guard case .integer(let askID)? = event["askID"] else { return nil }
                return .object(["askID": .integer(askID), "answer": .string("once")])
            case "stdout"?:
                output += event.data ?? Data()
                return nil
            default:
                return nil
            }
        }
        XCTAssertEqual(questions.count, 1)
        // A generic question a person can answer, with details a program can decide on.
        XCTAssertEqual(questions.first?["kind"], .string("choice"))
        XCTAssertTrue(questions.first?["text"]?.stringValue?.contains("The authenticity of host [127.0.0.1]:\(server.port) can't be established") ?? false)
        XCTAssertEqual(questions.first?["details"]?["hostKey"]?["port"], .integer(Int64(server.port)))
        XCTAssertTrue(questions.first?["details"]?["hostKey"]?["fingerprint"]?.stringValue?.hasPrefix("SHA256:") ?? false)
        XCTAssertEqual(String(decoding: output, as: UTF8.self), "asked\n")
        XCTAssertEqual(try JSONCoding.parse(reply, source: "reply")["exitStatus"], .integer(0))

        // Declined over the socket: fails closed, nothing runs.
        do {
            // Another way of writing the target is another context: a new connection, asked again.
            let other = "ssh -l \(NSUserName()) -p \(server.port) -i \(directory.file("id")) 127.0.0.1"
            _ = try client.stream("workspaces.exec@1", body: try JSONCoding.encode(JSONValue.object(["target": .string(other),
                                                                                              "command": .string("touch \(directory.file("ran"))")]))) { event in
                guard case .integer(let askID)? = event["askID"] else { return nil }
                return .object(["askID": .integer(askID), "answer": .string("reject")])
            }
            XCTFail("a rejected host key must stop the command")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.host_key_rejected", error.message)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("ran")))
        do {
            _ = try client.stream("ssh.nope@1", body: Data("{}".utf8)) { _ in nil }
            XCTFail("unknown stream")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "stream.unknown")
        }
    }
}
