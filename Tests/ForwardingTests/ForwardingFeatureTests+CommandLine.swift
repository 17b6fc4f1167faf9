import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind forward …` as a person types it: ssh's flags and specs (IPv6 in brackets).
extension ForwardingFeatureTests {
    /// Issue 34: `forward run HOST -L … -R … -D …` was refused ("takes 1 argument") although
    /// the docs call it "like ssh -N": the command declared no one-letter options. It takes
    /// ssh's flags now, as `termind ssh` does, and so do `forward add` and `forward edit`.
    func testForwardRunAddAndEditTakeSshsFlags() throws {
        try saveHost()
        let local = try SSHServerFixture.freePort()
        let remote = try SSHServerFixture.freePort()
        let socks = try SSHServerFixture.freePort()
        let run = try spawn(["forward", "run", "box", "--accept-host-key", "once", "-L", "\(local):127.0.0.1:\(echo.port)",
                             "-R", "\(remote):127.0.0.1:\(echo.port)", "-D\(socks)"])
        try waitFor("the forwards") { !run.isRunning || (Self.canConnect(local) && Self.canConnect(remote) && Self.canConnect(socks)) }
        XCTAssertTrue(run.isRunning, String(decoding: run.readAll().1, as: UTF8.self))
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(local), bytes: 64 << 10))
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(remote), bytes: 64 << 10))
        XCTAssertNil(try Self.echoRoundTrip(Self.socks5(socks, host: "127.0.0.1", port: echo.port), bytes: 64 << 10))
        run.signal(SIGINT)
        XCTAssertEqual(run.wait(), 130)

        let added = try json(["forward", "add", "db", "box", "-L", "15432:db.internal:5432"])
        XCTAssertEqual(added["kind"]?.stringValue, "local")
        XCTAssertEqual(added["bindPort"], .integer(15432))
        let edited = try json(["forward", "edit", "db", "-D", "[::1]:11080"])
        XCTAssertEqual(edited["rule"]?["kind"]?.stringValue, "dynamic")
        XCTAssertEqual(edited["rule"]?["bindAddress"]?.stringValue, "::1")
        let help = try termind(["forward", "run", "--help"])
        XCTAssertTrue(help.stdout.contains("-L VALUE  --localForward VALUE"), help.stdout)
    }

    /// Issue 34: a value starting with `[` for a list option was read as JSON, so an IPv6
    /// spec could not be given to `forward run --local-forward`. A JSON array of the items'
    /// type is still a list; anything else is text, split at commas outside brackets.
    func testAListOptionTakesABracketedValueAsTextAndAJSONArrayAsAList() throws {
        try saveHost()
        let listed = try json(["forward", "add", "listed", "box", "--local-forward", "1:x:1", "--tags", #"["a","b"]"#])
        XCTAssertEqual(listed["tags"], .array([.string("a"), .string("b")]))
        let text = try json(["forward", "add", "text", "box", "--local-forward", "2:x:1", "--tags", "[x],y"])
        XCTAssertEqual(text["tags"], .array([.string("[x]"), .string("y")]))
        // JSON, but not a list of strings: one item, which the rule then refuses by its own words.
        let numbers = try termind(["forward", "add", "numbers", "box", "--local-forward", "3:x:1", "--tags", "[1,2]"])
        XCTAssertNotEqual(numbers.status, 0)
        XCTAssertTrue(numbers.stderr.contains("(got '[1,2]')"), numbers.stderr)

        // The IPv6 spec reaches the rule (here refused for its port, before anything connects).
        let spec = "[::1]:99999:[fd00::5]:80"
        let run = try termind(["forward", "run", "box", "--local-forward", spec])
        XCTAssertNotEqual(run.status, 0)
        XCTAssertTrue(run.stderr.contains("-L '\(spec)': the listening port '99999' is not a port"), run.stderr)
    }

    /// An IPv6 forward end to end on ::1: sshd listens there, the forward listens there and
    /// its target is an echo server there, each written as ssh writes IPv6 (in brackets).
    func testAnIPv6ForwardCarriesBytesOnTheIPv6Loopback() throws {
        server.stop()
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)], listenAddress: "::1",
                                      hostKeyTypes: ["ed25519"])
        let echo6 = try EchoServer(host: "::1")
        defer { echo6.stop() }
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        let added = try termind(["vault", "host", "add", "::1", "--label", "six", "--port", "\(server.port)", "--identity", NSUserName()])
        XCTAssertEqual(added.status, 0, added.stderr)
        let local = try SSHServerFixture.freePort()
        let run = try spawn(["forward", "run", "six", "--accept-host-key", "once", "--local-forward", "[::1]:\(local):[::1]:\(echo6.port)"])
        try waitFor("the IPv6 listener") { !run.isRunning || (try? EchoServer.connect(host: "::1", port: local)).map { close($0); return true } ?? false }
        XCTAssertTrue(run.isRunning, String(decoding: run.readAll().1, as: UTF8.self))
        XCTAssertNil(try Self.echoRoundTrip(EchoServer.connect(host: "::1", port: local), bytes: 4 << 20))
        XCTAssertFalse(Self.canConnect(local), "it listens on ::1 only, as asked")
        run.signal(SIGINT)
        XCTAssertEqual(run.wait(), 130)
    }

    /// Issue 34: `forward list` showed no rule names or specs and epoch times; start, stop,
    /// edit (and add, rm), the end of `forward run` and of `status --watch` printed the
    /// raw record: the rule as JSON, the host as its id. They say it in words now: the
    /// rule's name, the host's label, the forward as ssh writes it, the state, ages.
    func testTheCommandsSayWhatTheyDidByRuleHostAndSpec() throws {
        try startServe()
        try saveHost()
        try trustServer()
        let web = try SSHServerFixture.freePort()
        let spec = "-L 127.0.0.1:\(web):127.0.0.1:\(echo.port)"
        func words(_ arguments: [String], _ expected: String..., file: StaticString = #filePath, line: UInt = #line) throws {
            let result = try termind(arguments)
            XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
            for text in expected { XCTAssertTrue(result.stdout.contains(text), "\(arguments.joined(separator: " ")): no '\(text)' in:\n\(result.stdout)", file: file, line: line) }
            // Never the record itself: no JSON, no host id, no epoch time.
            XCTAssertFalse(result.stdout.contains("{") || result.stdout.contains("host_"), result.stdout, file: file, line: line)
            XCTAssertNil(result.stdout.range(of: #"\d{9,}\.\d"#, options: .regularExpression), result.stdout, file: file, line: line)
        }
        try words(["forward", "add", "web", "box", "-L", "\(web):127.0.0.1:\(echo.port)", "--tags", "site"], "Saved web (\(spec) through box), not started")
        try words(["forward", "list"], "web", "box", spec, "stopped")
        try words(["forward", "start", "web"], "web (\(spec) through box) is running", "127.0.0.1:\(web) → 127.0.0.1:\(echo.port)")
        try words(["forward", "list", "--tag", "site"], "web", "box", spec, "running", " s")
        try words(["forward", "edit", "web", "--tags", "site,prod"], "Changed web. web (\(spec) through box) is running")
        try words(["forward", "status", "--watch", "true", "--count", "2"], "Forwarding rules", "web", spec, "running")
        try words(["forward", "stop", "web"], "Stopped web (\(spec) through box)")
        try words(["forward", "rm", "web"], "Deleted web (\(spec) through box)")
        // --json keeps the whole record.
        XCTAssertEqual(try termind(["forward", "add", "db", "box", "-L", "1:db:5432"]).status, 0)
        let listed = try json(["forward", "list"])
        XCTAssertEqual(rule(listed, "db")?["rule"]?["host"]?.stringValue?.hasPrefix("host_"), true, "\(listed)")
        XCTAssertEqual(rule(listed, "db")?["hostLabel"]?.stringValue, "box")

        // The end of a run: a table of its forwards, not the record.
        let run = try termind(["forward", "run", "box", "-L", "\(try SSHServerFixture.freePort()):127.0.0.1:\(echo.port)", "--seconds", "1"])
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertTrue(run.stdout.contains("Forwards through box, now ended") && run.stdout.contains("running"), run.stdout)
        XCTAssertFalse(run.stdout.contains("{") || run.stdout.contains("host_"), run.stdout)
    }

    /// Issue 34: with several forwards, one that could not bind ended them all. As with
    /// ssh -N, it is reported by name with the reason and the others go on; the run says
    /// which one failed, and ends with exit 3 (some failed). --exit-on-forward-failure
    /// true is ssh's ExitOnForwardFailure: the run ends at once.
    func testAForwardThatCannotBindLeavesTheOthersRunning() throws {
        try saveHost()
        try trustServer()
        let taken = try Self.occupy()
        defer { close(taken.fd) }
        let free = try SSHServerFixture.freePort()
        let clash = "-L 127.0.0.1:\(taken.port):127.0.0.1:\(echo.port)"
        let run = try spawn(["forward", "run", "box", "-L", "\(taken.port):127.0.0.1:\(echo.port)", "-L", "\(free):127.0.0.1:\(echo.port)", "--seconds", "6"])
        try waitFor("the forward that could bind") { !run.isRunning || Self.canConnect(free) }
        XCTAssertNil(try Self.echoRoundTrip(Self.connect(free), bytes: 256 << 10), "the other forward carries bytes")
        XCTAssertEqual(run.wait(), 3, "ended by --seconds with a forward that never ran")
        let (stdout, stderr) = run.readAll()
        let said = String(decoding: stderr, as: UTF8.self)
        XCTAssertTrue(said.contains("warning: \(clash) through box did not start: Rule '\(clash)' cannot listen on 127.0.0.1:\(taken.port)"), said)
        XCTAssertTrue(said.contains("1 of 2 running; \(clash) did not start"), said)
        let table = String(decoding: stdout, as: UTF8.self)
        XCTAssertTrue(table.contains("failed") && table.contains("in use"), table)

        let strict = try termind(["forward", "run", "box", "-L", "\(free):127.0.0.1:\(echo.port)", "-L", "\(taken.port):127.0.0.1:\(echo.port)",
                                  "--exit-on-forward-failure", "true"])
        XCTAssertEqual(strict.status, 1, strict.stderr)
        XCTAssertTrue(strict.stderr.contains("Rule '\(clash)' cannot listen on 127.0.0.1:\(taken.port)"), strict.stderr)
        XCTAssertFalse(Self.canConnect(free), "every forward ended with the run")
    }

    /// Issue 34: a rule that needs attention says how to try it again, by its name:
    /// `termind forward retry NAME` (the deleted host's text said "RULE").
    func testARuleThatNeedsAttentionSaysHowToRetryItByName() throws {
        try startServe()
        try saveHost()
        let web = try SSHServerFixture.freePort()
        XCTAssertEqual(try termind(["forward", "add", "my web", "box", "-L", "\(web):127.0.0.1:\(echo.port)"]).status, 0)
        let unasked = try termind(["forward", "start", "my web"])
        XCTAssertNotEqual(unasked.status, 0, "nobody to ask about the unknown key")
        XCTAssertTrue(unasked.stderr.contains("To try again: termind forward retry 'my web'."), unasked.stderr)
        let listed = rule(try json(["forward", "list"]), "my web")
        XCTAssertEqual(listed?["state"]?.stringValue, "needs-attention")
        XCTAssertTrue(listed?["lastError"]?.stringValue?.hasSuffix("To try again: termind forward retry 'my web'.") == true, "\(String(describing: listed))")
        let shown = try termind(["forward", "list"])
        XCTAssertTrue(shown.stdout.contains("termind forward retry 'my web'"), shown.stdout)

        XCTAssertEqual(try termind(["forward", "retry", "my web", "--accept-host-key", "once"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "delete", "box"]).status, 0)
        try waitFor("needs-attention once the host is gone") { try state("my web") == "needs-attention" }
        let gone = rule(try json(["forward", "list"]), "my web")?["lastError"]?.stringValue ?? ""
        XCTAssertTrue(gone.contains("termind forward edit 'my web' --host HOST), then termind forward retry 'my web'."), gone)
    }

    /// Issue 34 (point 13): a bad forward spec is a usage error, as the README's exit codes
    /// say: exit 2, the message naming the spec and what is wrong, nothing stored or started.
    /// The feature reports it as `forwarding.bad_spec`; the client turns that code into 2.
    func testABadForwardSpecIsAUsageErrorNamingTheSpec() throws {
        try saveHost()
        XCTAssertEqual(try termind(["forward", "add", "db", "box", "-L", "15432:db:5432"]).status, 0)
        let cases: [([String], String)] = [
            (["forward", "add", "web", "box", "--local-forward", "8080:web"], "-L '8080:web': write [BIND:]PORT:HOST:HOSTPORT."),
            (["forward", "add", "web", "box", "-D", "1080:x:1"], "-D '1080:x:1': write [BIND:]PORT."),
            (["forward", "add", "web", "box", "-R", "0"], "-R '0': a SOCKS proxy on the server (-R [BIND:]PORT alone) is not supported"),
            (["forward", "edit", "db", "-L", "15432:db:99999"], "-L '15432:db:99999': the target port '99999' is not a port"),
            (["forward", "run", "box", "-L", "8080:web:80", "-L", "[::1]:8080:db"], "-L '[::1]:8080:db': the listening port '::1' is not a port"),
            (["forward", "run", "box"], "Name at least one forward: -L [BIND:]PORT:HOST:HOSTPORT"),
        ]
        for (arguments, message) in cases {
            let result = try termind(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments.joined(separator: " ")): a usage error (needs the client to exit 2 on forwarding.bad_spec): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments.joined(separator: " ")): \(result.stderr)")
        }
        let listed = try json(["forward", "list"])
        guard case .array(let rules)? = listed["rules"] else { return XCTFail("\(listed)") }
        XCTAssertEqual(rules.compactMap { $0["rule"]?["name"]?.stringValue }, ["db"], "nothing stored")
        XCTAssertEqual(rule(listed, "db")?["rule"]?["bindPort"], .integer(15432), "the bad edit changed nothing")
    }
}
