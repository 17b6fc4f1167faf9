import TermindCore
@testable import VaultRules
import XCTest

final class QuickConnectTests: XCTestCase {
    private func assertRejected(_ input: String, code: String, message: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try QuickConnect.parse(input), input, file: file, line: line) { error in
            XCTAssertEqual(error as? TermindError, TermindError(code: code, message: message), input, file: file, line: line)
        }
    }

    // MARK: - Address forms

    func testBareHostDefaultsToPort22() throws {
        XCTAssertEqual(try QuickConnect.parse("  web.example.com "), QuickConnectTarget(host: "web.example.com"))
    }

    func testUserHostAndPort() throws {
        XCTAssertEqual(try QuickConnect.parse("alice@web:2222"),
                       QuickConnectTarget(host: "web", user: "alice", port: 2222, portIsExplicit: true))
        XCTAssertEqual(try QuickConnect.parse("10.0.0.5"), QuickConnectTarget(host: "10.0.0.5"))
    }

    func testBracketedIPv6WithPortAndZone() throws {
        XCTAssertEqual(try QuickConnect.parse("[::1]:2222"), QuickConnectTarget(host: "::1", port: 2222, portIsExplicit: true))
        XCTAssertEqual(try QuickConnect.parse("root@[fe80::1%eth0]:22"),
                       QuickConnectTarget(host: "fe80::1%eth0", user: "root", port: 22, portIsExplicit: true))
        XCTAssertEqual(try QuickConnect.parse("[2001:db8::2]"), QuickConnectTarget(host: "2001:db8::2"))
        XCTAssertEqual(try QuickConnect.parse("ssh ::1"), QuickConnectTarget(host: "::1"), "a bare IPv6 address has no port")
    }

    func testSSHURI() throws {
        XCTAssertEqual(try QuickConnect.parse("ssh://bob@host.example:2200"),
                       QuickConnectTarget(host: "host.example", user: "bob", port: 2200, portIsExplicit: true))
        XCTAssertEqual(try QuickConnect.parse("ssh://host.example/"), QuickConnectTarget(host: "host.example"))
        assertRejected("ssh://host/path", code: "quick_connect.bad_host", message: "'ssh://host/path': an ssh:// address cannot have a path.")
    }

    // MARK: - ssh command form

    func testSSHCommandWithEverySupportedFlag() throws {
        let target = try QuickConnect.parse("ssh -p 2222 -l alice -i ~/.ssh/id_ed25519 -i '/keys/my key' -J hop1,bob@hop2:2200 -o Port=2222 -o 'User alice' web")
        XCTAssertEqual(target, QuickConnectTarget(host: "web", user: "alice", port: 2222, portIsExplicit: true,
                                                  identityFiles: ["~/.ssh/id_ed25519", "/keys/my key"],
                                                  jumpRoute: [SSHJumpHop(host: "hop1"), SSHJumpHop(user: "bob", host: "hop2", port: 2200)]))
    }

    func testAttachedFlagFormsAndOptionsAfterTheHost() throws {
        XCTAssertEqual(try QuickConnect.parse("ssh -p2222 -lalice -ikey -Jhop web"),
                       QuickConnectTarget(host: "web", user: "alice", port: 2222, portIsExplicit: true, identityFiles: ["key"], jumpRoute: [SSHJumpHop(host: "hop")]))
        XCTAssertEqual(try QuickConnect.parse("ssh carol@web -p 2022"),
                       QuickConnectTarget(host: "web", user: "carol", port: 2022, portIsExplicit: true))
        XCTAssertEqual(try QuickConnect.parse("ssh -oPort=23 -- web"), QuickConnectTarget(host: "web", port: 23, portIsExplicit: true))
    }

    func testQuotedWordsAreNeitherExpandedNorRun() throws {
        let target = try QuickConnect.parse(#"ssh -i "$HOME/`whoami`/*" -i ~/k\ 1 -l 'al''ice' web"#)
        XCTAssertEqual(target.identityFiles, ["$HOME/`whoami`/*", "~/k 1"])
        XCTAssertEqual(target.user, "alice")
    }

    func testRemoteCommandIsRejectedNamingTheToken() {
        assertRejected("ssh web uptime", code: "quick_connect.unexpected_argument",
                       message: "Unexpected 'uptime' after the host: remote commands and extra arguments are not supported.")
        assertRejected("web extra", code: "quick_connect.unexpected_argument",
                       message: "Unexpected 'extra' after 'web': enter one host, or an 'ssh ...' command.")
    }

    func testUnsupportedFlagsAreRejectedNamingTheToken() {
        assertRejected("ssh -A web", code: "quick_connect.unsupported_option",
                       message: "'-A' is not supported; use -p PORT, -l USER, -i KEYFILE, -J HOPS, -o Port=N or -o User=NAME.")
        assertRejected("ssh -L 8080:db:5432 web", code: "quick_connect.unsupported_option",
                       message: "'-L' is not supported; use -p PORT, -l USER, -i KEYFILE, -J HOPS, -o Port=N or -o User=NAME.")
        assertRejected("ssh -o ProxyCommand=nc web", code: "quick_connect.unsupported_option",
                       message: "'-o ProxyCommand=nc' is not supported; only -o Port=N and -o User=NAME are.")
    }

    func testHostPortInTheSSHFormIsRejectedWithAHint() {
        assertRejected("ssh web:22", code: "quick_connect.bad_host", message: "'web:22': ssh does not take host:port; use -p 22 or ssh://web:22.")
    }

    func testMissingValuesAndMissingHostAreReported() {
        assertRejected("ssh web -p", code: "quick_connect.missing_argument", message: "'-p' needs a value.")
        assertRejected("ssh -p 22", code: "quick_connect.missing_host", message: "The ssh command names no host; add [user@]host.")
        assertRejected("   ", code: "quick_connect.empty", message: "Enter a host to connect to, such as 'user@host:22' or 'ssh -p 2222 host'.")
    }

    func testConflictingValuesAreRejectedAndOnlyOneJumpFlagIsAllowed() {
        assertRejected("ssh -l alice bob@web", code: "quick_connect.conflict", message: "'-l alice' and 'bob@web' name different users; give one.")
        assertRejected("ssh -p 22 -o Port=23 web", code: "quick_connect.conflict", message: "'-p 22' and '-o Port=23' name different ports; give one.")
        assertRejected("ssh -J a -J b web", code: "quick_connect.conflict", message: "'-J b': only one -J is allowed; list hops separated by commas.")
    }

    func testUnterminatedQuotesAreRejected() {
        assertRejected("ssh -l 'alice web", code: "quick_connect.bad_quotes", message: "'ssh -l 'alice web' has an unterminated ' quote.")
        assertRejected("ssh web\\", code: "quick_connect.bad_quotes", message: "'ssh web\\' ends with a backslash that escapes nothing.")
    }

    // MARK: - Validation

    func testPortsOutsideOneTo65535AreRejected() {
        for port in ["0", "65536", "22a", "-1", "999999"] {
            assertRejected("web:\(port)", code: "quick_connect.bad_port", message: "'web:\(port)': port '\(port)' is not a number from 1 to 65535.")
        }
        XCTAssertEqual(try QuickConnect.parse("web:65535").port, 65535)
        XCTAssertEqual(try QuickConnect.parse("web:1").port, 1)
    }

    func testInvalidHostsAreRejected() {
        let why = "is not a valid host name (letters, digits, '-' and '_' in dot-separated labels), IPv4 address or [IPv6] address"
        assertRejected("a..b", code: "quick_connect.bad_host", message: "'a..b': host 'a..b' \(why).")
        assertRejected("ssh -- -oProxyCommand=x", code: "quick_connect.bad_host", message: "'-oProxyCommand=x': host '-oProxyCommand=x' \(why).")
        assertRejected("ho\u{7}st", code: "quick_connect.bad_host", message: "'ho\u{7}st': host 'ho\u{7}st' \(why).")
        assertRejected("999.1.1.1", code: "quick_connect.bad_host", message: "'999.1.1.1': host '999.1.1.1' is not a valid IPv4 address.")
        assertRejected("[zz::1]:22", code: "quick_connect.bad_host", message: "'[zz::1]:22': host 'zz::1' is not a valid IPv6 address.")
        assertRejected("[fe80::1%]:22", code: "quick_connect.bad_host", message: "'[fe80::1%]:22': host 'fe80::1%' has an invalid zone.")
        assertRejected("[web]:22", code: "quick_connect.bad_host", message: "'[web]:22': brackets are only for IPv6 addresses.")
        assertRejected("user@", code: "quick_connect.bad_host", message: "'user@': host '' is empty.")
        XCTAssertEqual(try QuickConnect.parse("my_box.local.").host, "my_box.local.")
    }

    func testInvalidUsersAreRejected() {
        for user in ["-oops", "a b", "x$(id)", "a;b"] {
            assertRejected("ssh -l '\(user)' web", code: "quick_connect.bad_user",
                           message: "'-l \(user)': user name '\(user)' is empty, starts with '-', or has spaces, control or shell characters.")
        }
        assertRejected("@web", code: "quick_connect.bad_user",
                       message: "'@web': user name '' is empty, starts with '-', or has spaces, control or shell characters.")
    }

    // MARK: - Routes

    func testRouteOfEightHostsIsAcceptedAndNineIsRejected() throws {
        let seven = (1...7).map { "h\($0)" }.joined(separator: ",")
        XCTAssertEqual(try QuickConnect.parse("ssh -J \(seven) target").jumpRoute.count, 7)
        assertRejected("ssh -J \(seven),h8 target", code: "quick_connect.route_too_long",
                       message: "The route has 9 hosts (h1 -> h2 -> h3 -> h4 -> h5 -> h6 -> h7 -> h8 -> target:22); at most 8 are allowed, including the target.")
    }

    func testRouteCyclesAreRejectedComparingHostsCaseInsensitively() {
        assertRejected("ssh -J bastion,BASTION:22 web", code: "quick_connect.route_cycle",
                       message: "The route visits BASTION:22 twice ('bastion' and 'BASTION:22'); remove the repeated hop.")
        assertRejected("ssh -J web -p 22 alice@Web", code: "quick_connect.route_cycle",
                       message: "The route visits Web:22 twice ('web' and 'alice@Web:22'); remove the repeated hop.")
    }

    func testTheSameHostOnAnotherPortIsNotACycle() throws {
        let target = try QuickConnect.parse("ssh -J bastion,bastion:2222 web")
        XCTAssertEqual(target.jumpRoute, [SSHJumpHop(host: "bastion"), SSHJumpHop(host: "bastion", port: 2222)])
        XCTAssertNoThrow(try QuickConnect.validateRoute([SSHJumpHop(host: "a", port: 2)], to: SSHJumpHop(host: "a")))
    }

    func testBadJumpHopIsRejectedNamingTheFlag() {
        assertRejected("ssh -J a,,b web", code: "quick_connect.bad_jump", message: "'-J a,,b': '': jump host '' is empty.")
        assertRejected("ssh -J a:0 web", code: "quick_connect.bad_jump", message: "'-J a:0': 'a:0': port '0' is not a number from 1 to 65535.")
    }

    func testHopsPrintAsTheyAreWritten() throws {
        for text in ["host", "u@host:2", "[::1]:22", "u@[fe80::1%eth0]"] {
            XCTAssertEqual(try SSHJumpHop.parse(text).description, text)
        }
        XCTAssertEqual(try SSHJumpHop.parse("ssh://u@h:7"), SSHJumpHop(user: "u", host: "h", port: 7))
    }
}
