import Foundation
import ForwardingRules
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// Port forwarding end to end: `termind forward …` against a real sshd on loopback, with
/// a TCP echo server as every forward's target, so each flow's bytes can be checked by
/// SHA-256 both ways.
final class ForwardingFeatureTests: XCTestCase {
    var directory: TemporaryDirectory!
    var server: SSHServerFixture!
    var echo: EchoServer!
    var serve: ServeProcess?
    var spawned: [SpawnedProcess] = []

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        server = try SSHServerFixture.withNewKey(in: directory)
        echo = try EchoServer()
    }

    override func tearDown() {
        for process in spawned where process.isRunning {
            process.signal(SIGKILL)
            process.wait()
        }
        _ = serve?.stop()
        echo?.stop()
        server?.stop()
        directory?.remove()
    }

    var environment: [String: String] {
        ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
    }

    var location: [String] {
        serve.map { ["--socket", $0.socketPath] } ?? ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
    }

    func termind(_ arguments: [String]) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment)
    }

    func json(_ arguments: [String]) throws -> JSONValue {
        let result = try termind(["--json"] + arguments)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "termind's output")
    }

    func spawn(_ arguments: [String]) throws -> SpawnedProcess {
        let process = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment, captureOutput: true)
        spawned.append(process)
        return process
    }

    /// A saved host "box" for the fixture's sshd with its key.
    func saveHost() throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
    }

    func trustServer() throws {
        let key = try XCTUnwrap(server.hostKeys["ssh-ed25519"])
        let added = try termind(["vault", "knownhost", "add", "127.0.0.1", key, "--port", "\(server.port)"])
        XCTAssertEqual(added.status, 0, added.stderr)
    }

    func startServe() throws {
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_SOCKET": directory.file("serve/control.sock")])
    }

    func rule(_ list: JSONValue, _ name: String) -> JSONValue? {
        guard case .array(let rules)? = list["rules"] else { return nil }
        return rules.first { $0["rule"]?["name"]?.stringValue == name }
    }

    func state(_ name: String) throws -> String? {
        rule(try json(["forward", "list"]), name)?["state"]?.stringValue
    }

    func waitFor(_ what: String, timeout: Double = 30, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return }
            usleep(100_000)
        }
        XCTFail("timed out waiting for \(what)")
    }

    // MARK: - Rules as records

    func testRulesAreRecordsOfTheirOwnAndBadInputChangesNothing() throws {
        try saveHost()
        let added = try json(["forward", "add", "db", "box", "--local-forward", "15432:db.internal:5432", "--tags", "prod,db", "--color", "#ff8800"])
        XCTAssertEqual(added["kind"]?.stringValue, "local")
        XCTAssertEqual(added["bindAddress"]?.stringValue, "127.0.0.1")
        XCTAssertEqual(added["targetHost"]?.stringValue, "db.internal")
        XCTAssertEqual(try termind(["forward", "add", "socks", "box", "--dynamic-forward", "[::1]:11080"]).status, 0)
        XCTAssertEqual(try termind(["forward", "add", "back", "box", "--remote-forward", "0:localhost:3000"]).status, 0)

        // The rule keeps the host's id: a rename shows through, the rule is untouched.
        XCTAssertEqual(try termind(["vault", "host", "edit", "box", "--label", "prod-box"]).status, 0)
        let list = try json(["forward", "list"])
        XCTAssertEqual(rule(list, "db")?["hostLabel"]?.stringValue, "prod-box")
        XCTAssertEqual(rule(list, "db")?["state"]?.stringValue, "stopped")
        XCTAssertEqual(rule(list, "socks")?["rule"]?["bindAddress"]?.stringValue, "::1")
        XCTAssertEqual(rule(list, "back")?["rule"]?["bindPort"], .integer(0))
        let tagged = try json(["forward", "list", "--tag", "prod"])
        guard case .array(let only)? = tagged["rules"] else { return XCTFail("\(tagged)") }
        XCTAssertEqual(only.count, 1)

        // Bad input: named, nothing stored.
        let duplicate = try termind(["forward", "add", "DB", "box", "--local-forward", "1:x:1"])
        XCTAssertNotEqual(duplicate.status, 0)
        XCTAssertTrue(duplicate.stderr.contains("already has that name"), duplicate.stderr)
        let badSpec = try termind(["forward", "add", "web", "box", "--local-forward", "8080:web"])
        XCTAssertNotEqual(badSpec.status, 0)
        XCTAssertTrue(badSpec.stderr.contains("-L '8080:web'"), badSpec.stderr)
        let two = try termind(["forward", "add", "web", "box", "--local-forward", "8080:web:80", "--dynamic-forward", "1080"])
        XCTAssertTrue(two.stderr.contains("one of --local-forward, --remote-forward or --dynamic-forward"), two.stderr)
        guard case .array(let all)? = try json(["forward", "list"])["rules"] else { return XCTFail() }
        XCTAssertEqual(all.count, 3)

        // Edit and remove.
        let edited = try json(["forward", "edit", "db", "--local-forward", "25432:db.internal:5432", "--name", "database", "--color", ""])
        XCTAssertEqual(edited["rule"]?["bindPort"], .integer(25432))
        XCTAssertEqual(edited["rule"]?["name"]?.stringValue, "database")
        XCTAssertNil(edited["rule"]?["color"]?.stringValue)
        XCTAssertEqual(try termind(["forward", "rm", "database"]).status, 0)
        let missing = try termind(["forward", "rm", "database"])
        XCTAssertNotEqual(missing.status, 0)
        XCTAssertTrue(missing.stderr.contains("No forwarding rule is named 'database'"), missing.stderr)

        // A saved rule runs only where something keeps it alive.
        let start = try termind(["forward", "start", "socks"])
        XCTAssertNotEqual(start.status, 0)
        XCTAssertTrue(start.stderr.contains("termind serve") && start.stderr.contains("termind forward run"), start.stderr)
        // The run it suggests names the host as the person knows it (issue 34), not the rule's id for it.
        XCTAssertTrue(start.stderr.contains("termind forward run prod-box -D '[::1]:11080'"), start.stderr)
    }

    func testSshConfigForwardsAreRuleCandidatesSavedOnlyWhenSelectedAndNeverStarted() throws {
        let config = try directory.write("ssh_config", """
            Host web
                HostName 127.0.0.1
                Port \(server.port)
                LocalForward 18080 db.internal:5432
                DynamicForward [::1]:11080
                LocalForward /tmp/web.sock localhost:80
                RemoteForward 19000
                RemoteForward 0 localhost:3000
            """)
        let preview = try json(["vault", "import", "preview", config])
        guard case .array(let hosts)? = preview["candidates"], case .array(let candidates)? = hosts.first?["forwardCandidates"] else {
            return XCTFail("\(preview)")
        }
        XCTAssertEqual(candidates.compactMap { $0["id"]?.stringValue }, ["web:1", "web:2", "web:3", "web:4", "web:5"])
        XCTAssertEqual(candidates[0]["spec"]?.stringValue, "--local-forward 18080:[db.internal]:5432")
        XCTAssertEqual(candidates[0]["name"]?.stringValue, "web-L18080")
        XCTAssertEqual(candidates[1]["spec"]?.stringValue, "--dynamic-forward [::1]:11080")
        XCTAssertTrue(candidates[2]["problem"]?.stringValue?.contains("Unix socket") == true, "\(candidates[2])")
        XCTAssertTrue(candidates[3]["problem"]?.stringValue?.contains("SOCKS proxy on the server") == true, "\(candidates[3])")

        // A candidate termind cannot run refuses the whole commit.
        let refused = try termind(["vault", "import", "commit", config, "--select", "web", "--forwards", "web:1,web:3"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("'web:3' cannot be imported") && refused.stderr.contains("Nothing was imported"), refused.stderr)
        XCTAssertEqual(try termind(["vault", "host", "show", "web"]).status == 0, false)
        // A forward of a host neither selected nor saved is refused too.
        let orphan = try termind(["vault", "import", "commit", config, "--select", "", "--forwards", "web:1"])
        XCTAssertNotEqual(orphan.status, 0, orphan.stdout)

        let committed = try json(["vault", "import", "commit", config, "--select", "web", "--forwards", "web:1,web:2,web:5"])
        guard case .array(let rules)? = committed["rules"] else { return XCTFail("\(committed)") }
        XCTAssertEqual(rules.compactMap { $0["name"]?.stringValue }, ["web-L18080", "web-D11080", "web-R0"])
        let list = try json(["forward", "list"])
        let local = try XCTUnwrap(rule(list, "web-L18080"))
        XCTAssertEqual(local["state"]?.stringValue, "stopped", "imported, never started")
        XCTAssertEqual(local["rule"]?["targetHost"]?.stringValue, "db.internal")
        XCTAssertEqual(local["hostLabel"]?.stringValue, "web")
        XCTAssertEqual(rule(list, "web-D11080")?["rule"]?["bindAddress"]?.stringValue, "::1")
        XCTAssertEqual(rule(list, "web-R0")?["rule"]?["bindPort"], .integer(0))

        // Importing again: the host exists (skipped), the rules' names are taken: said so, nothing lost.
        let again = try json(["vault", "import", "commit", config, "--select", "web", "--forwards", "web:1"])
        guard case .array(let skipped)? = again["skippedForwards"] else { return XCTFail("\(again)") }
        XCTAssertTrue(skipped.first?["reason"]?.stringValue?.contains("already has that name") == true, "\(again)")
        guard case .array(let all)? = try json(["forward", "list"])["rules"] else { return XCTFail() }
        XCTAssertEqual(all.count, 3)
    }

    // MARK: - Data

    func testRunCarriesBytesIntactThroughLocalRemoteAndSocks() throws {
        try saveHost()
        let local = try SSHServerFixture.freePort()
        let remote = try SSHServerFixture.freePort()
        let socks = try SSHServerFixture.freePort()
        let run = try spawn(["forward", "run", "box", "--accept-host-key", "once", "--local-forward", "\(local):127.0.0.1:\(echo.port)",
                             "--remote-forward", "\(remote):127.0.0.1:\(echo.port)", "--dynamic-forward", "\(socks)"])
        try waitFor("the forwards") { Self.canConnect(local) && Self.canConnect(remote) && Self.canConnect(socks) }

        // 32 MiB each way through each kind in one flow (many times a channel's window and
        // the flow's buffers, so nothing fits in flight at once); then many at once.
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(local), bytes: 32 << 20))
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(remote), bytes: 32 << 20))
        XCTAssertNil(try Self.echoRoundTrip(Self.socks5(socks, host: "localhost", port: echo.port), bytes: 32 << 20), "SOCKS5 by name")
        XCTAssertNil(try Self.echoRoundTrip(Self.socks5(socks, ipv4: [127, 0, 0, 1], port: echo.port), bytes: 1 << 20), "SOCKS5 by address")
        XCTAssertNil(try Self.echoRoundTrip(Self.socks4a(socks, host: "localhost", port: echo.port), bytes: 1 << 20), "SOCKS4a")
        let failures = Self.concurrently(24) { index in
            let port = [local, remote][index % 2]
            return try Self.echoRoundTrip(Self.connect(port), bytes: 2 << 20)
        }
        XCTAssertEqual(failures, [], "concurrent flows")

        // A SOCKS target that refuses: the client hears so in SOCKS5's own reply.
        let closed = try SSHServerFixture.freePort()
        XCTAssertThrowsError(try Self.socks5(socks, host: "127.0.0.1", port: closed)) { error in
            XCTAssertTrue("\(error)".contains("reply 5"), "\(error)")
        }
        run.signal(SIGINT)
        let status = run.wait()
        let (_, stderr) = run.readAll()
        XCTAssertEqual(status, 130, String(decoding: stderr, as: UTF8.self))
        XCTAssertFalse(Self.canConnect(local), "the listener closed with the command")
    }

    func testTwoHundredSocksClientsAtOnceAndAStalledReaderStallsNobodyElse() throws {
        try saveHost()
        let socks = try SSHServerFixture.freePort()
        _ = try spawn(["forward", "run", "box", "--accept-host-key", "once", "--dynamic-forward", "\(socks)"])
        try waitFor("the SOCKS listener") { Self.canConnect(socks) }

        // A flow whose local reader stops: it fills its own buffers and window only.
        let stalled = try Self.socks5(socks, host: "127.0.0.1", port: echo.port)
        let junk = [UInt8](repeating: 0x55, count: 1 << 20)
        var written = 0
        _ = fcntl(stalled, F_SETFL, fcntl(stalled, F_GETFL) | O_NONBLOCK)
        let stallDeadline = Date().addingTimeInterval(20)
        while Date() < stallDeadline {
            let n = junk.withUnsafeBytes { send(stalled, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { written += n; continue }
            if errno == EAGAIN { usleep(50_000); if Self.sendBlocked(stalled) { break } } else { break }
        }
        XCTAssertGreaterThan(written, 1 << 20, "the stalled flow took some bytes before backpressure")

        let target = echo.port
        let failures = Self.concurrently(200) { _ in
            try Self.echoRoundTrip(Self.socks5(socks, host: "127.0.0.1", port: target), bytes: 16 << 10)
        }
        XCTAssertEqual(failures, [], "200 SOCKS clients at once, one flow stalled meanwhile")
        close(stalled)
    }

    // MARK: - The supervisor

    func testAStartedRuleComesBackAfterSshdRestartsAndOnlyItsRuleFailsOnAPortInUse() throws {
        try startServe()
        try saveHost()
        try trustServer()
        let web = try SSHServerFixture.freePort()
        let socksPort = try SSHServerFixture.freePort()
        let taken = try Self.occupy()
        XCTAssertEqual(try termind(["forward", "add", "web", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        XCTAssertEqual(try termind(["forward", "add", "socks", "box", "--dynamic-forward", "\(socksPort)"]).status, 0)
        XCTAssertEqual(try termind(["forward", "add", "clash", "box", "--local-forward", "\(taken.port):127.0.0.1:\(echo.port)"]).status, 0)
        XCTAssertEqual(try termind(["forward", "add", "back", "box", "--remote-forward", "0:127.0.0.1:\(echo.port)"]).status, 0)
        let fixedRemote = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "fixed", "box", "--remote-forward", "\(fixedRemote):127.0.0.1:\(echo.port)"]).status, 0)
        for name in ["web", "socks", "back", "fixed"] {
            let started = try termind(["forward", "start", name])
            XCTAssertEqual(started.status, 0, started.stderr)
        }
        let clash = try termind(["forward", "start", "clash"])
        XCTAssertNotEqual(clash.status, 0)
        XCTAssertTrue(clash.stderr.contains("Rule 'clash' cannot listen on 127.0.0.1:\(taken.port)") && clash.stderr.contains("in use"), clash.stderr)
        XCTAssertEqual(try state("clash"), "failed")
        XCTAssertEqual(try state("web"), "running", "a peer's failure is its own")
        close(taken.fd)

        // The remote rule's port is the one the server chose; bytes flow through every rule.
        let list = try json(["forward", "list"])
        let bound = try XCTUnwrap(rule(list, "back")?["bound"]?.stringValue, "\(list)")
        let remotePort = try XCTUnwrap(Int(bound.split(separator: ":").last ?? ""))
        XCTAssertGreaterThan(remotePort, 0)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 4 << 20))
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(remotePort), bytes: 1 << 20))
        let counted = try json(["forward", "list"])
        XCTAssertEqual(rule(counted, "web")?["bytesSent"], .integer(4 << 20))
        XCTAssertEqual(rule(counted, "web")?["bytesReceived"], .integer(4 << 20))
        XCTAssertEqual(rule(counted, "web")?["flows"], .integer(1))

        // A flow open across the crash ends; it is never replayed.
        let open = try Self.connect(web)
        XCTAssertNil(try Self.echoRoundTrip(open, bytes: 1024, keepOpen: true))
        server.kill()
        try waitFor("recovering") { try state("web") == "recovering" }
        XCTAssertEqual(Self.readToEnd(open, timeout: 10), 0, "the old flow ended")
        close(open)
        let recovering = rule(try json(["forward", "list"]), "web")
        XCTAssertNotNil(recovering?["nextRetryAt"], "\(String(describing: recovering))")
        // A remote port someone else took while the server was down: that rule alone fails.
        let squat = try Self.occupy(port: fixedRemote)
        try server.restart()
        // 1, 2, 5 s … after the loss: back well within 20 s.
        try waitFor("recovered", timeout: 25) { try state("web") == "running" && state("socks") == "running" && state("back") == "running" }
        try waitFor("the squatted rule failed") { try state("fixed") == "failed" }
        XCTAssertTrue(rule(try json(["forward", "list"]), "fixed")?["lastError"]?.stringValue?.contains("refused to listen") == true)
        close(squat.fd)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 4 << 20), "new connections flow after recovery")
        XCTAssertNil(try Self.echoRoundTrip(Self.socks5(socksPort, host: "127.0.0.1", port: echo.port), bytes: 1 << 20))
        let again = try XCTUnwrap(rule(try json(["forward", "list"]), "back")?["bound"]?.stringValue)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(Int(again.split(separator: ":").last ?? "") ?? 0), bytes: 1 << 20), "the remote listener was asked for again")

        // Editing one rule restarts it alone: a flow of its peer stays up.
        let peerFlow = try Self.socks5(socksPort, host: "127.0.0.1", port: echo.port)
        let newWeb = try SSHServerFixture.freePort()
        let edited = try json(["forward", "edit", "web", "--local-forward", "\(newWeb):127.0.0.1:\(echo.port)"])
        XCTAssertEqual(edited["state"]?.stringValue, "running", "\(edited)")
        XCTAssertFalse(Self.canConnect(web), "the old listener closed")
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(newWeb), bytes: 1 << 20))
        XCTAssertNil(try Self.echoRoundTrip(peerFlow, bytes: 64 << 10), "the peer's flow survived the edit")

        // Stopping one rule leaves the others running.
        XCTAssertEqual(try json(["forward", "stop", "web"])["state"]?.stringValue, "stopped")
        XCTAssertFalse(Self.canConnect(newWeb))
        XCTAssertEqual(try state("socks"), "running")

        let status = try termind(["forward", "status"])
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("socks") && status.stdout.contains("running") && status.stdout.contains("-D 127.0.0.1:\(socksPort)"), status.stdout)
        // The live view: one JSON object per redraw with --json, for as many redraws as asked.
        let watched = try termind(["--json", "forward", "status", "socks", "--watch", "true", "--count", "2"])
        XCTAssertEqual(watched.status, 0, watched.stderr)
        let redraws = watched.stdout.split(separator: "\n").compactMap { try? JSONCoding.parse(Data($0.utf8), source: "redraw") }
        XCTAssertGreaterThanOrEqual(redraws.count, 2, watched.stdout)
        guard case .array(let shown)? = redraws.first?["rules"] else { return XCTFail(watched.stdout) }
        XCTAssertEqual(shown.compactMap { $0["rule"]?["name"]?.stringValue }, ["socks"], "one rule named, one rule shown")
        XCTAssertEqual(shown.first?["state"]?.stringValue, "running")
    }

    /// Issue 34: a loss soon after a recovery is an outage of its own, retried 1, 2, 5 s …
    /// apart like the first (the supervisor had gone on from the first outage's schedule,
    /// so its attempts came 5, 10, 30 s apart). The attempts are seen where sshd was: a
    /// listener on its port that takes each connection and drops it.
    func testALossSoonAfterARecoveryIsRetriedAfter1Then2Then5Seconds() throws {
        try saveHost()
        try trustServer()
        let web = try SSHServerFixture.freePort()
        let run = try spawn(["forward", "run", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"])
        try waitFor("the forward") { Self.canConnect(web) }
        server.kill()
        try server.restart()
        try waitFor("recovered") { (try? Self.echoRoundTrip(Self.connect(web), bytes: 1024)) == .some(nil) }
        // The new connection holds (one the server drops at once goes on with the delays).
        Thread.sleep(forTimeInterval: RetrySchedule.holdSeconds + 0.5)

        server.kill()
        let attempts = try AttemptRecorder(port: server.port)
        defer { attempts.stop() }
        try waitFor("three attempts", timeout: 40) { attempts.times.count >= 3 }
        let times = attempts.times
        guard times.count >= 3 else {
            run.signal(SIGINT)
            run.wait()
            return XCTFail("attempts at \(times): \(String(decoding: run.readAll().1, as: UTF8.self))")
        }
        let gaps = [times[1] - times[0], times[2] - times[1]]
        XCTAssertTrue(gaps[0] >= 1.8 && gaps[0] < 4, "the second attempt 2 s after the first: \(gaps)")
        XCTAssertTrue(gaps[1] >= 4.8 && gaps[1] < 8.5, "the third 5 s after the second: \(gaps)")
        XCTAssertTrue(run.isRunning, "still trying")
        run.signal(SIGINT)
        XCTAssertEqual(run.wait(), 130)
    }

    func testAHostKeyTrustedOnceNeverAuthorizesASilentReconnect() throws {
        try startServe()
        try saveHost()
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        let unasked = try termind(["forward", "start", "web"])
        XCTAssertNotEqual(unasked.status, 0, "nobody to ask about the unknown key")
        XCTAssertEqual(try state("web"), "needs-attention")
        let started = try termind(["forward", "retry", "web", "--accept-host-key", "once"])
        XCTAssertEqual(started.status, 0, started.stderr)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10))
        server.kill()
        try server.restart()
        try waitFor("needs-attention after the reconnect was refused", timeout: 20) { try state("web") == "needs-attention" }
        let shown = rule(try json(["forward", "list"]), "web")
        XCTAssertTrue(shown?["lastError"]?.stringValue?.contains("no terminal to ask") == true, "\(String(describing: shown))")
        XCTAssertTrue(shown?["lastError"]?.stringValue?.hasSuffix("To try again: termind forward retry web.") == true, "\(String(describing: shown))")
        XCTAssertFalse(Self.canConnect(web), "a rule that needs attention does not listen")
        let accepted = (try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8))?.components(separatedBy: "Accepted publickey").count ?? 0
        XCTAssertEqual(accepted - 1, 1, "only the person's start authenticated; the reconnect stopped at the host key")
    }

    /// A saved host edited (how it connects) moves its running rules to a new connection; a
    /// label alone changes nothing; a deleted host's rules need attention.
    func testEditingTheSavedHostReconnectsItsRulesAndALabelChangesNothing() throws {
        try startServe()
        try saveHost()
        try trustServer()
        let key = try XCTUnwrap(server.hostKeys["ssh-ed25519"])
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "localhost", key, "--port", "\(server.port)"]).status, 0)
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        XCTAssertEqual(try termind(["forward", "start", "web"]).status, 0)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10))
        func logins() -> Int {
            ((try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
        }
        XCTAssertEqual(logins(), 1)

        XCTAssertEqual(try termind(["vault", "host", "edit", "box", "--label", "renamed"]).status, 0)
        usleep(1_500_000)
        XCTAssertEqual(try state("web"), "running")
        XCTAssertEqual(logins(), 1, "a new label is not a new connection")

        XCTAssertEqual(try termind(["vault", "host", "edit", "renamed", "--address", "localhost"]).status, 0)
        try waitFor("the rule on its new connection") { try logins() == 2 && state("web") == "running" }
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10))

        XCTAssertEqual(try termind(["vault", "host", "delete", "renamed"]).status, 0)
        try waitFor("needs-attention once the host is gone") { try state("web") == "needs-attention" }
        XCTAssertFalse(Self.canConnect(web))
    }

    /// `forward run` inside the server follows an edit of its host as saved rules do.
    func testARunInsideTheServerFollowsAnEditOfItsHost() throws {
        try startServe()
        try saveHost()
        try trustServer()
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "localhost", try XCTUnwrap(server.hostKeys["ssh-ed25519"]), "--port", "\(server.port)"]).status, 0)
        let web = try SSHServerFixture.freePort()
        let run = try spawn(["forward", "run", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"])
        try waitFor("the forward") { Self.canConnect(web) }
        func logins() -> Int {
            ((try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
        }
        XCTAssertEqual(logins(), 1)
        XCTAssertEqual(try termind(["vault", "host", "edit", "box", "--address", "localhost"]).status, 0)
        try waitFor("the run on a new connection") { logins() == 2 }
        try waitFor("flowing again") { (try? Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10)) == .some(nil) }
        XCTAssertTrue(run.isRunning)
        run.signal(SIGINT)
        XCTAssertEqual(run.wait(), 130)
    }

    /// The stop cancels the start's connecting; an answer typed afterwards authorizes
    /// nothing. (The client shows the question until a key is pressed: a question the
    /// server withdraws is not taken off the terminal yet.) The answer is typed only after
    /// the stop has returned, so the order does not depend on how fast the machine is.
    func testAStopWhileAStartWaitsForAnAnswerCancelsItsConnecting() throws {
        try startServe()
        try saveHost()
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        // Another client stops the rule once its start waits on the host-key question.
        let (program, location, environment) = (FeatureHarness.buildDirectory + "/termind", self.location, self.environment)
        let stopped = directory.file("stopped")
        let stopper = Thread {
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                let list = try? ProcessRunner.run(program, location + ["--json", "forward", "list"], environment: environment)
                if list?.stdout.contains("\"starting\"") == true { break }
                usleep(100_000)
            }
            let stop = try? ProcessRunner.run(program, location + ["forward", "stop", "web"], environment: environment)
            if stop?.status == 0 { _ = FileManager.default.createFile(atPath: stopped, contents: Data()) }
        }
        stopper.start()
        let report = try PseudoTerminal.run([FeatureHarness.buildDirectory + "/termind"] + location + ["forward", "start", "web"],
                                            steps: [.expect("Trust it?"), .waitForFile(stopped, seconds: 60), .send("o\n"),
                                                    .expect("stopped while it was starting", seconds: 30)],
                                            environment: environment)
        XCTAssertEqual(report.met, [true, true, true], report.output)
        XCTAssertNotEqual(report.status, 0)
        XCTAssertEqual(try state("web"), "stopped")
        XCTAssertFalse(Self.canConnect(web))
        let log = (try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? ""
        XCTAssertFalse(log.contains("Accepted publickey"), "the answer that came after the stop authorized nothing")
    }

    /// A server that no longer takes the key: recovery ends at the first refusal, it does
    /// not go on knocking.
    func testAnAuthenticationFailureEndsRecoveryAtOnce() throws {
        try startServe()
        try saveHost()
        try trustServer()
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "box", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        XCTAssertEqual(try termind(["forward", "start", "web"]).status, 0)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10))
        server.kill()
        try "\n".write(toFile: server.directory.file("authorized_keys"), atomically: true, encoding: .utf8)
        let log = server.directory.file("sshd.log")
        let before = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").utf8.count
        try server.restart()
        try waitFor("needs-attention after the refusal", timeout: 20) { try state("web") == "needs-attention" }
        let shown = rule(try json(["forward", "list"]), "web")
        XCTAssertTrue(shown?["lastError"]?.stringValue?.contains("did not accept termind's credentials") == true, "\(String(describing: shown))")
        // Later attempts would have come 2 and 5 s after the first.
        sleep(8)
        let after = String(decoding: Data(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").utf8).dropFirst(before), as: UTF8.self)
        // restart()'s own probe that sshd listens, and one attempt.
        XCTAssertEqual(after.components(separatedBy: "Connection from 127.0.0.1").count - 1, 2, after)
        XCTAssertEqual(try state("web"), "needs-attention")
        XCTAssertFalse(Self.canConnect(web))
    }

    /// Keyboard-interactive answers a person gave at the start never answer a reconnect:
    /// the prompt comes again, nobody is there, the rule needs attention.
    func testKeyboardInteractiveAnswersNeverAuthorizeAReconnect() throws {
        try XCTSkipUnless(KeyboardInteractiveFixture.isAvailable, "the PAM fixture needs root, cc and libpam0g-dev")
        let pam = try KeyboardInteractiveFixture(rounds: [PAMRound(.prompt("Code: ", answer: "42"))])
        defer { pam.stop() }
        try startServe()
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "mfa", "--port", "\(pam.port)", "--user", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "127.0.0.1", try XCTUnwrap(pam.server.hostKeys["ssh-ed25519"]), "--port", "\(pam.port)"]).status, 0)
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "mfa", "--local-forward", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        let book = try directory.write("answers.json", #"{"ssh.keyboardInteractive": ["42"]}"#)
        chmod(book, 0o600)
        let started = try termind(["--answers", book, "forward", "start", "web"])
        XCTAssertEqual(started.status, 0, started.stderr)
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(web), bytes: 64 << 10))
        pam.kill()
        try pam.server.restart()
        try waitFor("needs-attention: nobody answers the prompt now", timeout: 20) { try state("web") == "needs-attention" }
        XCTAssertFalse(Self.canConnect(web))
        let retried = try termind(["--answers", book, "forward", "retry", "web"])
        XCTAssertEqual(retried.status, 0, "a person's retry answers again: \(retried.stderr)")
        XCTAssertEqual(try state("web"), "running")
    }

    /// The network drops (a veth link inside a namespace pair goes down) and comes back:
    /// the keepalive notices the dead link, the rule recovers once the link is up.
    func testARuleRecoversAfterTheNetworkDropsAndComesBack() throws {
        try XCTSkipUnless(NetworkChain.isAvailable, "network namespaces need root and iproute2")
        let chain = try NetworkChain(count: 1)
        defer { chain.teardown() }
        server.stop()
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)],
                                      namespace: chain.name(of: 1), listenAddress: chain.address(of: 1), hostKeyTypes: ["ed25519"])
        let address = chain.address(of: 1)
        try startServe()
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", address, "--label", "far", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["vault", "knownhost", "add", address, try XCTUnwrap(server.hostKeys["ssh-ed25519"]), "--port", "\(server.port)"]).status, 0)
        // The target is the far side's own sshd, seen from there: its banner proves a flow.
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "web", "far", "--local-forward", "\(web):\(address):\(server.port)"]).status, 0)
        let started = try termind(["forward", "start", "web"])
        XCTAssertEqual(started.status, 0, started.stderr)
        XCTAssertTrue(try Self.banner(web).hasPrefix("SSH-2.0-"))

        try chain.setLink(1, up: false)
        // Keepalives every 5 s, three unanswered: lost within about 15 s.
        try waitFor("the lost link noticed", timeout: 40) { try state("web") == "recovering" }
        XCTAssertThrowsError(try Self.banner(web), "while the link is down a client is closed at once, not held")
        try chain.setLink(1, up: true)
        try waitFor("recovered", timeout: 40) { try state("web") == "running" }
        XCTAssertTrue(try Self.banner(web).hasPrefix("SSH-2.0-"), "new connections flow after the link came back")
    }

    /// The first line a forward to an SSH server brings back.
    static func banner(_ port: Int) throws -> String {
        let fd = try connect(port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = recv(fd, &buffer, buffer.count, 0)
        guard n > 0 else { throw TermindError(code: "test.banner", message: "no banner through port \(port)") }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }

    // MARK: - Sockets

    static func canConnect(_ port: Int) -> Bool {
        guard let fd = try? connect(port) else { return false }
        close(fd)
        return true
    }

    static func connect(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else {
            close(fd)
            throw TermindError(code: "test.connect", message: "cannot connect to port \(port): \(String(cString: strerror(errno)))")
        }
        // Both ways: a flow that stalls fails its test (saying how far it got) instead of
        // leaving a writer blocked for ever.
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// A listening socket on `port` (0: a free one): a port in use for a rule that wants it.
    static func occupy(port: Int = 0, backlog: Int32 = 1) throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw TermindError(code: "test.bind", message: "cannot listen on port \(port): \(reason)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    static func readExactly(_ fd: Int32, _ count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, count - got, 0) }
            guard n > 0 else { throw TermindError(code: "test.socks", message: "the SOCKS server closed after \(got) of \(count) bytes") }
            got += n
        }
        return bytes
    }

    static func socks5(_ port: Int, host: String? = nil, ipv4: [UInt8]? = nil, port target: Int) throws -> Int32 {
        let fd = try connect(port)
        let request: [UInt8]
        if let ipv4 {
            request = [5, 1, 0, 1] + ipv4 + [UInt8(target >> 8), UInt8(target & 0xFF)]
        } else {
            let name = Array((host ?? "").utf8)
            request = [5, 1, 0, 3, UInt8(name.count)] + name + [UInt8(target >> 8), UInt8(target & 0xFF)]
        }
        _ = [UInt8]([5, 1, 0]).withUnsafeBytes { send(fd, $0.baseAddress!, 3, 0) }
        let method = try readExactly(fd, 2)
        guard method == [5, 0] else { close(fd); throw TermindError(code: "test.socks", message: "method reply \(method)") }
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, 0) }
        let reply = try readExactly(fd, 10)
        guard reply[1] == 0 else { close(fd); throw TermindError(code: "test.socks", message: "reply \(reply[1])") }
        return fd
    }

    static func socks4a(_ port: Int, host: String, port target: Int) throws -> Int32 {
        let fd = try connect(port)
        let request: [UInt8] = [4, 1, UInt8(target >> 8), UInt8(target & 0xFF), 0, 0, 0, 1] + Array("me".utf8) + [0] + Array(host.utf8) + [0]
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, 0) }
        let reply = try readExactly(fd, 8)
        guard reply[1] == 0x5A else { close(fd); throw TermindError(code: "test.socks", message: "SOCKS4 reply \(reply[1])") }
        return fd
    }

    /// Sends `bytes` of pseudo-random data through `fd` (to an echo server) while reading
    /// what comes back; nil when both directions' SHA-256 and counts match, else why not.
    /// Closes `fd` unless `keepOpen` (then only `bytes` are read back, nothing is shut).
    static func echoRoundTrip(_ fd: Int32, bytes: Int, keepOpen: Bool = false) throws -> String? {
        let sent = SendableResult()
        let writer = Thread {
            let digest = IncrementalDigest(.sha256)
            var state: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(bytes)
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            var left = bytes
            while left > 0 {
                let count = min(left, chunk.count)
                chunk.withUnsafeMutableBytes { PseudoRandomBytes.fill(UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), state: &state) }
                digest.update(chunk[0..<count])
                var offset = 0
                while offset < count {
                    let n = chunk.withUnsafeBytes { send(fd, $0.baseAddress! + offset, count - offset, Int32(MSG_NOSIGNAL)) }
                    if n <= 0 { sent.set(nil); return }
                    offset += n
                }
                left -= count
            }
            if !keepOpen { shutdown(fd, Int32(SHUT_WR)) }
            sent.set(digest.finish())
        }
        writer.start()
        let digest = IncrementalDigest(.sha256)
        var received = 0
        var ending = "the end of the stream"
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while keepOpen ? received < bytes : true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, keepOpen ? min($0.count, bytes - received) : $0.count, 0) }
            if n < 0 { ending = errno == EAGAIN ? "nothing for 30 s" : String(cString: strerror(errno)) }
            if n <= 0 { break }
            digest.update(buffer[0..<n])
            received += n
        }
        let sentDigest = sent.wait()
        if !keepOpen { close(fd) }
        guard received == bytes else {
            return "received \(received) of \(bytes) bytes, then \(ending)\(sentDigest == nil ? "; sending failed too" : "")"
        }
        guard let sentDigest else { return "sending failed" }
        return sentDigest == digest.finish() ? nil : "the bytes came back changed"
    }

    /// Reads until EOF or an error; returns the last recv's result (0 at EOF).
    static func readToEnd(_ fd: Int32, timeout: Int) -> Int {
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 { continue }
            return n < 0 && errno == ECONNRESET ? 0 : n
        }
    }

    static func sendBlocked(_ fd: Int32) -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        return poll(&poller, 1, 500) == 0
    }

    /// Runs `body` for 0..<count on threads at once; the failures (nil results are successes).
    static func concurrently(_ count: Int, _ body: @escaping @Sendable (Int) throws -> String?) -> [String] {
        let failures = Failures()
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    if let failure = try body(index) { failures.add("#\(index): \(failure)") }
                } catch {
                    failures.add("#\(index): \(error)")
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        return failures.all
    }
}

/// A listener on a port a client reconnects to: it notes when each connection arrives
/// (monotonic seconds) and closes it at once.
final class AttemptRecorder: @unchecked Sendable {
    private let fd: Int32
    private let lock = NSLock()
    private var arrivals: [Double] = []
    private var thread: Thread?

    init(port: Int) throws {
        fd = try ForwardingFeatureTests.occupy(port: port, backlog: 16).fd
        let listener = fd
        thread = Thread { [weak self] in
            while true {
                let client = accept(listener, nil, nil)
                guard client >= 0 else { return }
                let now = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
                close(client)
                guard let self else { return }
                self.lock.withLock { self.arrivals.append(now) }
            }
        }
        thread?.start()
    }

    var times: [Double] { lock.withLock { arrivals } }

    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }
}

/// A value one thread sets and another waits for.
final class SendableResult: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: Data??

    func set(_ new: Data?) { condition.withLock { value = .some(new); condition.broadcast() } }

    func wait() -> Data? {
        condition.withLock {
            while value == nil { condition.wait() }
            return value!
        }
    }
}

final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func add(_ failure: String) { lock.withLock { list.append(failure) } }
    var all: [String] { lock.withLock { list } }
}
