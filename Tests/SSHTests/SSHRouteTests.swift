import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindSSH
import XCTest

/// Jump routes against sshd processes in a chain of network namespaces: from the test's own
/// namespace only the first jump host is reachable; each later host only from the one
/// before it. Each hop has its own key, and trust is decided per hop by the real Vault.
final class SSHRouteTests: XCTestCase {
    private var vault: HarnessSession!
    private var directory: TemporaryDirectory!
    private var chain: NetworkChain!
    private var servers: [SSHServerFixture] = []
    private var keys: [String] = []
    private var trust: (any HostKeyTrust)!

    override func setUp() async throws {
        try XCTSkipUnless(NetworkChain.isAvailable, "network namespaces need root and iproute2")
        directory = try TemporaryDirectory()
        chain = try NetworkChain(count: 3)
        for hop in 1...3 {
            let path = directory.file("key\(hop)")
            XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", path]).status, 0)
            keys.append(try String(contentsOfFile: path, encoding: .utf8))
            // Each server accepts only its own hop's key: every hop authenticates on its own.
            servers.append(try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: path + ".pub", encoding: .utf8)],
                                                namespace: chain.name(of: hop), listenAddress: "0.0.0.0"))
        }
        vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
    }

    override func tearDown() async throws {
        for server in servers { server.stop() }
        chain?.teardown()
        await vault?.shutdown()
        directory?.remove()
    }

    private func hop(_ index: Int) -> SSHTarget {
        SSHTarget(host: chain.address(of: index), port: servers[index - 1].port, username: NSUserName())
    }

    private func policy(asked: AskedLog? = nil, keyFor: (@Sendable (SSHTarget) -> String?)? = nil) -> SSHOpenPolicy {
        let keys = self.keys
        let hops = (1...3).map(hop)
        return SSHOpenPolicy(trust: trust, credentials: { target in
            let index = hops.firstIndex(of: target)!
            return SSHCredentials(privateKey: Secret(keyFor?(target) ?? keys[index]), agentSocket: "")
        }) { question in
            asked?.append(question)
            return .acceptAndSave
        }
    }

    func testATargetReachableOnlyThroughTwoJumpsIsVerifiedAndAuthenticatedHopByHop() async throws {
        XCTAssertFalse(chain.canConnect(from: 0, to: chain.address(of: 3), port: servers[2].port), "the target must not be reachable directly")
        XCTAssertFalse(chain.canConnect(from: 0, to: chain.address(of: 2), port: servers[1].port))
        let asked = AskedLog()
        let route = SSHRoute(jumps: [hop(1), hop(2)], target: hop(3))
        let connection = try await SSHConnection.open(route: route, policy: policy(asked: asked))
        // Three host keys were asked about, each for its own endpoint, and each was saved.
        XCTAssertEqual(asked.questions.map { "\($0.host):\($0.port)" }, (1...3).map { "\(hop($0).host):\(hop($0).port)" })
        var cursor: SSHConnection? = connection
        for index in stride(from: 3, through: 1, by: -1) {
            let current = try XCTUnwrap(cursor)
            XCTAssertEqual(current.target, hop(index))
            let verdict = try await trust.verdict(host: hop(index).host, port: hop(index).port, key: current.hostKey)
            XCTAssertEqual(verdict, .trusted)
            cursor = current.via
        }
        // The command runs in the target's namespace.
        let result = try await connection.exec("ip -o -4 addr show")
        XCTAssertTrue(String(decoding: result.stdout, as: UTF8.self).contains(chain.address(of: 3) + "/"), String(decoding: result.stdout, as: UTF8.self))
        // Several channels through the tunnel at once.
        async let a = connection.exec("head -c 3000000 /dev/zero | wc -c")
        async let b = connection.exec("echo b")
        let (big, small) = try await (a, b)
        XCTAssertEqual(String(decoding: big.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines), "3000000")
        XCTAssertEqual(small.stdout, Data("b\n".utf8))
        await connection.closeRoute()
        XCTAssertFalse(connection.via?.isAlive ?? true, "closing the route closes its jumps")

        // Saved trust: the same route again asks nothing.
        let again = AskedLog()
        let second = try await SSHConnection.open(route: route, policy: policy(asked: again))
        XCTAssertEqual(again.questions.count, 0)
        await second.closeRoute()
    }

    func testAHopThatRejectsItsKeyIsNamedAndNothingStaysOpen() async throws {
        let wrong = keys[0]
        let target = hop(3)
        let route = SSHRoute(jumps: [hop(1), hop(2)], target: target)
        do {
            _ = try await SSHConnection.open(route: route, policy: policy(keyFor: { $0 == target ? wrong : nil }))
            XCTFail("the target does not accept the first hop's key")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed")
            XCTAssertTrue(error.message.hasPrefix("Hop 3 of 3 (\(target.username)@\(target.host):\(target.port))"), error.message)
        }
        // The jump connections opened for the attempt were closed again.
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertEqual(servers[0].acceptedConnections(), 0)
    }

    func testAJumpHostDroppedMidCommandEndsTheTargetSessionWithAClearError() async throws {
        let route = SSHRoute(jumps: [hop(1), hop(2)], target: hop(3))
        let connection = try await SSHConnection.open(route: route, policy: policy())
        let started = Date()
        Task.detached { [servers] in
            try await Task.sleep(nanoseconds: 500_000_000)
            servers[1].kill()   // the second jump host dies
        }
        do {
            _ = try await connection.exec("sleep 30", timeout: 25)
            XCTFail("the route is broken; the command cannot finish")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.connection_lost", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertFalse(connection.isAlive)
        XCTAssertTrue(connection.via?.via?.isAlive ?? false, "the first jump host is still fine")
        await connection.closeRoute()
    }

    func testThePoolSharesJumpConnectionsBetweenRoutes() async throws {
        let pool = SSHConnectionPool()
        let policy = self.policy()
        let full = try await pool.connection(for: SSHRoute(jumps: [hop(1), hop(2)], target: hop(3)), policy: policy)
        let middle = try await pool.connection(for: SSHRoute(jumps: [hop(1)], target: hop(2)), policy: policy)
        XCTAssertTrue(full.via === middle, "the route to hop 2 is the prefix of the route to hop 3")
        XCTAssertEqual(servers[1].acceptedConnections(), 1)
        let first = try await middle.exec("echo jump")
        XCTAssertEqual(first.stdout, Data("jump\n".utf8))
        let second = try await full.exec("echo target")
        XCTAssertEqual(second.stdout, Data("target\n".utf8))
        await pool.closeAll()
        XCTAssertFalse(full.isAlive)
        XCTAssertFalse(middle.isAlive)
    }
}

/// Keyboard-interactive against sshd with PAM (a test module asks scripted rounds).
final class KeyboardInteractiveTests: XCTestCase {
    private var vault: HarnessSession!
    private var trust: (any HostKeyTrust)!

    override func setUp() async throws {
        try XCTSkipUnless(KeyboardInteractiveFixture.isAvailable, "needs root, cc and the PAM headers")
        vault = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
        trust = try XCTUnwrap(vault.kernel.port(.hostKeyTrust))
    }

    override func tearDown() async throws {
        await vault?.shutdown()
    }

    private func open(_ fixture: KeyboardInteractiveFixture, deadlines: SSHDeadlines = SSHDeadlines(),
                      responder: @escaping KeyboardInteractiveResponder) async throws -> SSHConnection {
        try await Self.open(port: fixture.port, trust: trust, deadlines: deadlines, responder: responder)
    }

    /// A connect whose responder never answers (until cancelled).
    private static func unansweredAttempt(port: Int, trust: any HostKeyTrust, log: ChallengeLog) -> Task<SSHConnection, Error> {
        let responder: KeyboardInteractiveResponder = { challenge in
            log.append(challenge)
            while !Task.isCancelled { try? await Task.sleep(nanoseconds: 50_000_000) }
            return nil
        }
        return Task { try await open(port: port, trust: trust, responder: responder) }
    }

    private static func open(port: Int, trust: any HostKeyTrust, deadlines: SSHDeadlines = SSHDeadlines(),
                             responder: @escaping KeyboardInteractiveResponder) async throws -> SSHConnection {
        try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: port, username: "root"),
                                     credentials: SSHCredentials(agentSocket: ""), trust: trust, deadlines: deadlines,
                                     keyboardInteractive: responder) { _ in .acceptOnce }
    }

    func testLiteralPromptsWithEchoFlagsAcrossRoundsAndAnEmptyAnswer() async throws {
        let fixture = try KeyboardInteractiveFixture(rounds: [
            PAMRound(.prompt("Password: ", answer: "correct horse"), .prompt("Token (visible): ", echo: true, answer: "123456")),
            PAMRound(.info("Second round."), .prompt("Anything else? ", echo: true, answer: "")),
        ])
        defer { fixture.stop() }
        let seen = ChallengeLog()
        let answers = ["Password: ": "correct horse", "Token (visible): ": "123456", "Second round.\nAnything else? ": ""]
        let connection = try await open(fixture) { challenge in
            seen.append(challenge)
            return challenge.prompts.map { Secret(answers[$0.text] ?? "?") }
        }
        XCTAssertEqual(connection.authenticatedWith, "keyboard-interactive")
        let prompts = seen.all.flatMap(\.prompts)
        XCTAssertEqual(prompts.map(\.text), ["Password: ", "Token (visible): ", "Second round.\nAnything else? "])
        XCTAssertEqual(prompts.map(\.echo), [false, true, true])
        XCTAssertFalse(seen.all.contains { $0.prompts.isEmpty }, "a round without prompts needs no form")
        XCTAssertEqual(Set(seen.all.map(\.requestID)).count, seen.all.count, "each round has its own request id")
        XCTAssertTrue(seen.all.allSatisfy { $0.host == "127.0.0.1:\(fixture.port)" })
        XCTAssertTrue(fixture.log.contains("auth success"), fixture.log.joined(separator: "\n"))
        let result = try await connection.exec("echo in")
        XCTAssertEqual(result.stdout, Data("in\n".utf8))
        await connection.close()
    }

    func testAWrongAnswerIsRejectedAndGivingUpSendsNothingMore() async throws {
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Code: ", answer: "42"))])
        defer { fixture.stop() }
        do {
            _ = try await open(fixture) { challenge in challenge.prompts.map { _ in Secret("zq-wrong-answer") } }
            XCTFail("a wrong code must not authenticate")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed", error.message)
            XCTAssertTrue(error.message.contains("keyboard-interactive"), error.message)
            XCTAssertFalse(error.message.contains("zq-wrong"), "answers never appear in errors")
        }
        XCTAssertTrue(fixture.log.contains { $0.contains("wrong") }, fixture.log.joined(separator: "\n"))
        do {
            _ = try await open(fixture) { _ in nil }
            XCTFail("giving up cannot authenticate")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_cancelled", error.message)
        }
    }

    func testWaitingForAPersonIsNotNetworkTimeAndCancellationInterruptsIt() async throws {
        let fixture = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Code: ", answer: "42"))])
        defer { fixture.stop() }
        var quick = SSHDeadlines()
        quick.authentication = 1
        // The person takes 2.5 s, longer than the 1 s authentication deadline: still fine.
        let connection = try await open(fixture, deadlines: quick) { challenge in
            try? await Task.sleep(nanoseconds: 2_500_000_000)
            return challenge.prompts.map { _ in Secret("42") }
        }
        XCTAssertEqual(connection.authenticatedWith, "keyboard-interactive")
        await connection.close()

        // Nobody answers; cancelling the connect ends the wait and the attempt at once.
        let waiting = ChallengeLog()
        let attempt = Self.unansweredAttempt(port: fixture.port, trust: trust, log: waiting)
        for _ in 0..<100 where waiting.all.isEmpty { try await Task.sleep(nanoseconds: 50_000_000) }
        XCTAssertEqual(waiting.all.count, 1, "the prompt reached the responder")
        let cancelled = Date()
        attempt.cancel()
        do {
            _ = try await attempt.value
            XCTFail("a cancelled connect cannot succeed")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.cancelled", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(cancelled), 3)
    }
}

final class ChallengeLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [KeyboardInteractiveChallenge] = []
    func append(_ challenge: KeyboardInteractiveChallenge) { lock.withLock { items.append(challenge) } }
    var all: [KeyboardInteractiveChallenge] { lock.withLock { items } }
}

/// `termind exec` through a saved host's jump route, and its connect deadline against a name
/// server that never answers — both inside network namespaces the test creates.
final class ExecRouteCommandTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        try XCTSkipUnless(NetworkChain.isAvailable, "network namespaces need root and iproute2")
        directory = try TemporaryDirectory()
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file("id")]).status, 0)
    }

    override func tearDown() {
        directory?.remove()
    }

    private func termind(_ arguments: [String], namespace: String? = nil, stdin: String? = nil) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("none.sock")
        environment["SSH_AUTH_SOCK"] = nil
        let (program, args) = NetworkChain.command(namespace: namespace, FeatureHarness.buildDirectory + "/termind",
                                                   ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] + arguments)
        return try ProcessRunner.run(program, args, environment: environment, stdin: stdin)
    }

    /// A name server on 127.0.0.1 inside `chain`'s namespace that reads and never answers,
    /// listening once this returns (asked earlier, a lookup fails at once).
    private func silentNameServer(in chain: NetworkChain) throws -> SpawnedProcess {
        let bound = directory.file("dns-bound")
        try? FileManager.default.removeItem(atPath: bound)
        // It says how many queries it has taken (and answers none).
        let silent = try chain.spawn(in: 1, "/usr/bin/python3", ["-c", """
            import socket, time
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 53))
            open("\(bound)", "w").close()
            queries = 0
            while True:
                s.recvfrom(4096)
                queries += 1
                print(f"query {queries}", flush=True)
            """], captureOutput: true)
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: bound) }, "the silent name server started")
        return silent
    }

    /// One network namespace whose resolver `resolvConf` configures (`ip netns exec` puts
    /// /etc/netns/NAME/resolv.conf over /etc/resolv.conf); `cleanup` removes both.
    private func namespace(resolvConf: String) throws -> (NetworkChain, cleanup: () -> Void) {
        let chain = try NetworkChain(count: 1)
        let netns = "/etc/netns/\(chain.name(of: 1))"
        let cleanup = {
            try? FileManager.default.removeItem(atPath: netns)
            chain.teardown()
        }
        do {
            try FileManager.default.createDirectory(atPath: netns, withIntermediateDirectories: true)
            try resolvConf.write(toFile: netns + "/resolv.conf", atomically: true, encoding: .utf8)
        } catch {
            cleanup()
            throw error
        }
        return (chain, cleanup)
    }

    func testExecFollowsASavedHostsJumpRoute() throws {
        let chain = try NetworkChain(count: 2)
        defer { chain.teardown() }
        let key = try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)
        let jump = try SSHServerFixture(authorizedKeys: [key], namespace: chain.name(of: 1), listenAddress: "0.0.0.0")
        let target = try SSHServerFixture(authorizedKeys: [key], namespace: chain.name(of: 2), listenAddress: chain.address(of: 2))
        defer { target.stop(); jump.stop() }
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", chain.address(of: 1), "--label", "bastion", "--port", "\(jump.port)", "--identity", NSUserName()]).status, 0)
        let added = try termind(["vault", "host", "add", chain.address(of: 2), "--label", "inner", "--port", "\(target.port)",
                                 "--identity", NSUserName(), "--jump", "bastion"])
        XCTAssertEqual(added.status, 0, added.stderr)

        let result = try termind(["exec", "inner", "--accept-host-key", "save", "--", "ip -o -4 addr show; echo err >&2; exit 3"])
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertTrue(result.stdout.contains(chain.address(of: 2) + "/"), result.stdout)
        XCTAssertTrue(result.stderr.hasSuffix("err\n"), result.stderr)  // (stderr ends with the command's own: the account's shell start-up files may print first)
        // Both hops' keys were saved under their own endpoints.
        let known = try termind(["--json", "vault", "knownhost", "list"])
        XCTAssertTrue(known.stdout.contains("[\(chain.address(of: 1))]:\(jump.port)"), known.stdout)
        XCTAssertTrue(known.stdout.contains("[\(chain.address(of: 2))]:\(target.port)"), known.stdout)
    }

    /// `termind exec prdo` for the saved host prod: the name is no saved host and no host
    /// name either, and the error says both (a user@host target is plainly a host name).
    func testANameThatIsNoSavedHostAndDoesNotResolveSaysBoth() throws {
        // Inside the namespace the name server is 127.0.0.1, where nothing listens: every
        // lookup fails at once.
        let (chain, cleanup) = try namespace(resolvConf: "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        defer { cleanup() }
        /// `exec TARGET` fails to resolve (the host part of TARGET); its stderr.
        func unresolved(_ target: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
            let result = try termind(["exec", target, "--connect-timeout", "5", "--", "true"], namespace: chain.name(of: 1))
            XCTAssertEqual(result.status, 1, result.stderr, file: file, line: line)
            XCTAssertTrue(result.stderr.contains("Cannot resolve prdo"), result.stderr, file: file, line: line)
            return result.stderr
        }
        let bare = try unresolved("prdo")
        XCTAssertTrue(bare.contains("No saved host is named prdo either"), bare)
        let quick = try unresolved("someone@prdo")
        XCTAssertFalse(quick.contains("No saved host"), quick)
        // A saved host whose address is its own label is still a saved host.
        XCTAssertEqual(try termind(["vault", "host", "add", "prdo", "--label", "prdo"]).status, 0)
        let saved = try unresolved("prdo")
        XCTAssertFalse(saved.contains("No saved host"), saved)
        // ... and so is its label with another port; an unsaved name with a port is not.
        let otherPort = try unresolved("prdo:2222")
        XCTAssertFalse(otherPort.contains("No saved host"), otherPort)
        let unsavedPort = try unresolved("prdo2:2222")
        XCTAssertTrue(unsavedPort.contains("No saved host is named prdo2:2222 either"), unsavedPort)
    }

    func testConnectTimeoutBoundsANameServerThatNeverAnswers() throws {
        // Inside the namespace, /etc/resolv.conf names a server on 127.0.0.1 that reads and
        // never answers; glibc alone would wait 2 × 30 s.
        let (chain, cleanup) = try namespace(resolvConf: "nameserver 127.0.0.1\noptions timeout:30 attempts:2\n")
        defer { cleanup() }
        let silent = try silentNameServer(in: chain)
        defer { silent.signal(SIGKILL); silent.wait() }
        let started = Date()
        let result = try termind(["exec", "someone@build-box.termind-test.invalid", "--connect-timeout", "2", "--", "true"], namespace: chain.name(of: 1))
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("Resolving build-box.termind-test.invalid took longer than 2 s"), result.stderr)
        XCTAssertLessThan(elapsed, 20, "the deadline, not glibc's 60 s, ends the wait")
    }

    /// A DNS outage parks lookups only: with 64 connections inside serve waiting on a name
    /// server that never answers (each lookup holds a thread for glibc's 60 s), the store still
    /// answers at once, and so does a connect to an address (no lookup at all).
    func testANameServerThatNeverAnswersParksLookupsNeverTheStoreOrAConnectToAnAddress() throws {
        let (chain, cleanup) = try namespace(resolvConf: "nameserver 127.0.0.1\noptions timeout:30 attempts:2\n")
        defer { cleanup() }
        let silent = try silentNameServer(in: chain)
        defer { silent.signal(SIGKILL); silent.wait() }
        let socket = directory.file("outage.sock")
        let serve = try chain.spawn(in: 1, FeatureHarness.buildDirectory + "/termind",
                                    ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "--socket", socket, "serve"])
        defer { serve.signal(SIGTERM); serve.wait() }
        XCTAssertTrue(waitUntil(seconds: 30) { FileManager.default.fileExists(atPath: socket) }, "serve started")
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        func viaServe(_ arguments: [String]) throws -> ProcessResult {
            try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["--socket", socket] + arguments, environment: environment)
        }
        XCTAssertEqual(try viaServe(["vault", "host", "add", "10.255.255.1", "--label", "box"]).status, 0)
        let waiting = try (0..<64).map { n in
            try SpawnedProcess(FeatureHarness.buildDirectory + "/termind",
                               ["--socket", socket, "exec", "someone@box-\(n).termind-test.invalid", "--connect-timeout", "30", "--", "true"],
                               environment: environment, captureOutput: true)
        }
        defer { for process in waiting { process.signal(SIGKILL); _ = process.wait() } }
        // The lookups reach the name server and wait: it has taken 16 queries (an A and an
        // AAAA for each lookup, so half the resolver's threads at least are held by then).
        XCTAssertNotNil(silent.readOutput(until: "query 16\n", timeout: 30), "the lookups reach the name server")
        var started = Date()
        let list = try viaServe(["--json", "vault", "host", "list"])
        let listed = Date().timeIntervalSince(started)
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertTrue(list.stdout.contains("box"))
        started = Date()
        XCTAssertEqual(try viaServe(["settings", "get", "sftp.limits"]).status, 0)
        let read = Date().timeIntervalSince(started)
        // Before lookups had executors of their own they held all 16 of the store's threads
        // for a minute; the bound here leaves room for a loaded machine.
        XCTAssertLessThan(listed, 2, "vault host list took \(listed) s")
        XCTAssertLessThan(read, 2, "settings get took \(read) s")
        print("during the outage: vault host list \(Int(listed * 1000)) ms, settings get \(Int(read * 1000)) ms")
        // A saved host by address is connected to without a lookup: refused at once here (the
        // namespace has no route to it), not queued behind the lookups.
        started = Date()
        let direct = try viaServe(["exec", "box", "--connect-timeout", "10", "--", "true"])
        XCTAssertNotEqual(direct.status, 0)
        XCTAssertFalse(direct.stderr.contains("Resolving"), direct.stderr)
        XCTAssertTrue(direct.stderr.contains("Cannot connect"), direct.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertTrue(waiting.allSatisfy { $0.isRunning }, "the lookups are still waiting")
    }
}
