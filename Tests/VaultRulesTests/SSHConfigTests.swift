import Foundation
import TermindCore
import TermindHarness
@testable import VaultRules
import XCTest

final class SSHConfigTests: XCTestCase {
    // MARK: - Helpers

    /// Parses `text` as "cfg" with an in-memory file system for Includes (fnmatch globs, sorted).
    private func parse(_ text: String, files: [String: String] = [:], origin: SSHConfig.Origin = .user) -> SSHConfig {
        SSHConfig.parse(text, path: "cfg", origin: origin) { pattern, _ in
            files.keys.filter { fnmatch(pattern, $0, 0) == 0 }.sorted().map { ($0, files[$0]!) }
        }
    }

    private func messages(_ config: SSHConfig) -> [String] { config.errors.map(\.message) }

    // MARK: - Grammar

    func testKeywordsAreCaseInsensitiveAndAcceptEqualsForms() {
        let config = parse("HOST a\n  hostNAME=one.example\n  User = bob\n  PORT\t2200\n")
        XCTAssertEqual(config.errors, [])
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.hostname, "one.example")
        XCTAssertEqual(host.user, "bob")
        XCTAssertEqual(host.port, 2200)
    }

    func testQuotedArgumentsAndTrailingCommentsAreReadLikeOpenSSH() {
        let config = parse("""
        # leading comment

        Host a # comment after pattern
          IdentityFile "/keys/my key"
          User 'single quoted'
          HostName x#not-a-comment
        """)
        XCTAssertEqual(config.errors, [])
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.identityFiles, ["/keys/my key"])
        XCTAssertEqual(host.user, "single quoted")
        XCTAssertEqual(host.hostname, "x#not-a-comment")
    }

    func testUnterminatedQuoteIsAnErrorNamingFileAndLine() {
        let config = parse("Host a\n  User \"bob\n")
        XCTAssertEqual(config.errors, [TermindError(code: "ssh_config.bad_quotes", message: "cfg line 2: invalid quotes.")])
    }

    // MARK: - Resolution rules

    func testOptionsBeforeAnyHostApplyToEveryHostAndWinOverLaterBlocks() {
        let config = parse("User first\nHost a\n  User second\n  Port 2\n")
        XCTAssertEqual(config.resolve(alias: "a").user, "first")
        XCTAssertEqual(config.resolve(alias: "a").port, 2)
        XCTAssertEqual(config.resolve(alias: "b").port, 22)
    }

    func testFirstObtainedValueWinsAcrossIncludedFiles() {
        let config = parse("Host a\n  Include /inc/*.conf\n  Port 3\nHost *\n  User last\n  Port 4\n",
                           files: ["/inc/1.conf": "User from1\nPort 1\n", "/inc/2.conf": "User from2\nHostName two\n"])
        XCTAssertEqual(config.errors, [])
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.user, "from1")
        XCTAssertEqual(host.port, 1)
        XCTAssertEqual(host.hostname, "two")
    }

    func testHostNegationExcludesTheBlockWhateverItsPosition() {
        let config = parse("Host !bad.example *.example\n  User ex\nHost *.example !bad.example\n  Port 99\n")
        XCTAssertEqual(config.resolve(alias: "good.example").user, "ex")
        XCTAssertEqual(config.resolve(alias: "good.example").port, 99)
        XCTAssertNil(config.resolve(alias: "bad.example").user)
        XCTAssertEqual(config.resolve(alias: "bad.example").port, 22)
    }

    func testHostPatternsAreCaseSensitiveButMatchHostIsNot() {
        let config = parse("Host FOO\n  User upper\nMatch host foo\n  Port 7\nHost ?b\n  HostName q\n")
        XCTAssertEqual(config.resolve(alias: "FOO").user, "upper")
        XCTAssertNil(config.resolve(alias: "foo").user)
        XCTAssertEqual(config.resolve(alias: "FOO").port, 7)
        XCTAssertEqual(config.resolve(alias: "FOO").hostname, "foo", "the host name is lowercased like ssh does")
        XCTAssertEqual(config.resolve(alias: "ab").hostname, "q")
        XCTAssertEqual(config.resolve(alias: "abb").hostname, "abb")
    }

    func testMatchHostSeesTheHostNameObtainedSoFar() {
        let config = parse("Host a\n  HostName real.example\nMatch host real.example originalhost a\n  User matched\nMatch !host a,b\n  Port 5\n")
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.user, "matched")
        XCTAssertEqual(host.port, 5)
    }

    func testMatchUserComparesTheConfiguredUserThenTheLocalUser() {
        let config = parse("Host a\n  User bob\nMatch user bob\n  Port 2\nMatch localuser alice\n  IdentityFile /lu\nMatch user alice\n  HostName viaLocal\n")
        let a = config.resolve(alias: "a", localUser: "alice")
        XCTAssertEqual(a.port, 2)
        XCTAssertEqual(a.identityFiles, ["/lu"])
        XCTAssertEqual(a.hostname, "a")
        XCTAssertEqual(config.resolve(alias: "b", localUser: "alice").hostname, "vialocal")
    }

    func testMatchFinalRereadsMatchingHostLinesAgainstTheResolvedHostName() {
        let config = parse("Host a\n  HostName b\nMatch final\n  User fin\nHost b\n  Port 77\nMatch canonical\n  IdentityFile /c\n")
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.user, "fin")
        XCTAssertEqual(host.port, 77)
        XCTAssertEqual(host.identityFiles, ["/c"], "canonical matches in the final pass, as in OpenSSH")
        let withoutFinal = parse("Match canonical\n  User never\n").resolve(alias: "a")
        XCTAssertNil(withoutFinal.user, "without a final pass Match canonical never matches")
    }

    func testMatchAllAppliesAndMustStandAlone() {
        XCTAssertEqual(parse("Match all\n  User everyone\n").resolve(alias: "x").user, "everyone")
        let bad = parse("Match all host x\n  User never\n")
        XCTAssertEqual(messages(bad), ["cfg line 1: Bad Match condition: 'all' cannot be combined with other Match attributes."])
        XCTAssertNil(bad.resolve(alias: "x").user, "lines under a bad Match apply to no host")
    }

    func testBadMatchAttributesAreErrors() {
        XCTAssertEqual(messages(parse("Match tagged x\n")), ["cfg line 1: Bad Match condition: Unsupported Match attribute tagged."])
        XCTAssertEqual(messages(parse("Match\n")), ["cfg line 1: no argument after keyword \"match\"."])
        XCTAssertEqual(messages(parse("Match host\n")), ["cfg line 1: Bad Match condition: Missing Match criteria for host."])
        XCTAssertEqual(messages(parse("Match user a host\n")), ["cfg line 1: Bad Match condition: Missing Match criteria for host."])
    }

    func testIdentityFilesAccumulateInOrderWithoutDuplicates() {
        let config = parse("Host a\n  IdentityFile ~/k1\n  IdentityFile /k2\n  IdentityFile ~/k1\nHost *\n  IdentityFile %d/k3\n")
        XCTAssertEqual(config.resolve(alias: "a").identityFiles, ["~/k1", "/k2", "%d/k3"])
        XCTAssertEqual(config.resolve(alias: "z").identityFiles, ["%d/k3"])
    }

    func testMoreThanAHundredIdentityFilesAreCappedWithAWarning() {
        let lines = (0...100).map { "IdentityFile /k\($0)" }.joined(separator: "\n")
        let host = parse(lines).resolve(alias: "a")
        XCTAssertEqual(host.identityFiles.count, 100)
        XCTAssertEqual(host.warnings.map(\.description), ["cfg line 101: Too many identity files specified (max 100); /k100 is ignored"])
    }

    func testProxyJumpChainIsParsedIntoHopsAndNoneBlocksLaterValues() {
        let config = parse("Host a\n  ProxyJump u@b:2,[::1]:22,ssh://v@c:2200 # comment\nHost n\n  ProxyJump none\nHost *\n  ProxyJump late\n")
        XCTAssertEqual(config.errors, [])
        XCTAssertEqual(config.resolve(alias: "a").proxyJump,
                       [SSHJumpHop(user: "u", host: "b", port: 2), SSHJumpHop(host: "::1", port: 22), SSHJumpHop(user: "v", host: "c", port: 2200)])
        XCTAssertEqual(config.resolve(alias: "n").proxyJump, [])
        XCTAssertEqual(config.resolve(alias: "other").proxyJump, [SSHJumpHop(host: "late")])
    }

    func testInvalidProxyJumpIsAnError() {
        XCTAssertEqual(messages(parse("ProxyJump u@b:2, c\n")),
                       ["cfg line 1: Invalid ProxyJump \"u@b:2, c\": 'ProxyJump u@b:2, c': ' c': jump host ' c' is not a valid host name (letters, digits, '-' and '_' in dot-separated labels), IPv4 address or [IPv6] address."])
    }

    func testProxyCommandObtainedFirstDisablesProxyJumpAndIsNeverRun() {
        let config = parse("Host a\n  ProxyCommand nc %h %p\n  ProxyJump b\n")
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.proxyJump, [])
        XCTAssertEqual(host.warnings.map(\.description), [
            "cfg line 2: ProxyCommand is not executed by termind; use ProxyJump",
            "cfg line 3: ProxyJump is ignored because ProxyCommand (cfg line 2) was obtained first, as in OpenSSH",
        ])
    }

    func testCommandsAreNeverRunAndEachIsReportedWithFileAndLine() {
        let config = parse("""
        Host a
          ProxyCommand touch /tmp/termind-must-not-exist
          LocalCommand touch /tmp/termind-must-not-exist
          PermitLocalCommand yes
          KnownHostsCommand /bin/false
        Match exec "touch /tmp/termind-must-not-exist"
          User exec
        Host b
          ProxyCommand none
        """)
        XCTAssertEqual(config.warnings.map(\.description), [
            "cfg line 2: ProxyCommand is not executed by termind; use ProxyJump",
            "cfg line 3: LocalCommand is not executed by termind",
            "cfg line 4: PermitLocalCommand has no effect: termind never runs LocalCommand",
            "cfg line 5: KnownHostsCommand is not executed by termind; host keys are checked against known_hosts files",
            "cfg line 6: Match exec is not executed by termind; this Match block is treated as not matching",
            "cfg line 9: ProxyCommand is not executed by termind; use ProxyJump",
        ])
        let a = config.resolve(alias: "a")
        XCTAssertNil(a.user, "a Match exec block never applies")
        XCTAssertEqual(a.warnings.count, 5)
        XCTAssertEqual(config.resolve(alias: "b").warnings.map(\.line), [6, 9])
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/tmp/termind-must-not-exist"))
    }

    func testForwardsAreKeptAsStructuredValuesWithoutDuplicates() {
        let config = parse("""
        Host a
          LocalForward 127.0.0.1:8080 db:5432
          LocalForward /tmp/s [::1]:22
          LocalForward 8080 db:5432
          LocalForward 8080 db:5432
          RemoteForward 9000
          RemoteForward 0.0.0.0:9001 localhost:22
          DynamicForward localhost:1080
        """)
        XCTAssertEqual(config.errors, [])
        XCTAssertEqual(config.resolve(alias: "a").forwards, [
            SSHForward(kind: .local, listen: .tcp(host: "127.0.0.1", port: 8080), connect: .tcp(host: "db", port: 5432)),
            SSHForward(kind: .local, listen: .socket(path: "/tmp/s"), connect: .tcp(host: "::1", port: 22)),
            SSHForward(kind: .local, listen: .tcp(host: nil, port: 8080), connect: .tcp(host: "db", port: 5432)),
            SSHForward(kind: .remote, listen: .tcp(host: nil, port: 9000), connect: nil),
            SSHForward(kind: .remote, listen: .tcp(host: "0.0.0.0", port: 9001), connect: .tcp(host: "localhost", port: 22)),
            SSHForward(kind: .dynamic, listen: .tcp(host: "localhost", port: 1080), connect: nil),
        ])
    }

    func testBadForwardsAreErrors() {
        XCTAssertEqual(messages(parse("DynamicForward 0\nLocalForward 8080\nLocalForward 8080 db:99999\n")), [
            "cfg line 1: Bad forwarding specification '0'.",
            "cfg line 2: Missing target argument for localforward.",
            "cfg line 3: Bad forwarding specification '8080 db:99999'.",
        ])
    }

    func testHostNameExpandsPercentHAndPercentPercentAndReportsOtherTokens() {
        let config = parse("Host a\n  HostName x%%y.%h.Example\nHost b\n  HostName %h.%p.%r\nHost c\n  HostName Up.%h\nHost d\n  HostName FE80::AB\n")
        XCTAssertEqual(config.resolve(alias: "c").hostname, "up.c")
        XCTAssertEqual(config.resolve(alias: "d").hostname, "FE80::AB")
        XCTAssertEqual(config.resolve(alias: "a").hostname, "x%y.a.Example", "names with '%' keep their case, as in ssh")
        let b = config.resolve(alias: "b")
        XCTAssertEqual(b.hostname, "b.%p.%r")
        XCTAssertEqual(b.warnings.map(\.description),
                       ["cfg line 4: HostName token %p, %r is not expanded (only %h and %% are); OpenSSH refuses this HostName"])
    }

    func testOtherKnownOptionsAreKeptRawWhereTheyApply() {
        let config = parse("Host a\n  ServerAliveInterval 30\n  SendEnv LANG LC_*\nHost b\n  Compression yes\n")
        XCTAssertEqual(config.resolve(alias: "a").otherOptions,
                       [SSHConfigOption(keyword: "serveraliveinterval", arguments: ["30"], file: "cfg", line: 2),
                        SSHConfigOption(keyword: "sendenv", arguments: ["LANG", "LC_*"], file: "cfg", line: 3)])
    }

    // MARK: - Errors and bounds

    func testInvalidPortIsAnErrorNamingFileAndLine() {
        let config = parse("Host a\n  Port 70000\n  User kept\n")
        XCTAssertEqual(config.errors, [TermindError(code: "ssh_config.bad_port", message: "cfg line 2: Bad port '70000' (ports are numbers from 1 to 65535).")])
        XCTAssertEqual(messages(parse("Port 0\nPort 0x16\nPort ssh\n")).count, 3)
    }

    func testMissingArgumentIsAnError() {
        XCTAssertEqual(parse("Host a\n  HostName\n").errors,
                       [TermindError(code: "ssh_config.missing_argument", message: "cfg line 2: no argument after keyword \"hostname\".")])
        XCTAssertEqual(messages(parse("User # only a comment\n")), ["cfg line 1: keyword user is missing its argument."])
    }

    func testExtraArgumentsAreAnError() {
        XCTAssertEqual(parse("IdentityFile a b\n").errors,
                       [TermindError(code: "ssh_config.extra_arguments", message: "cfg line 1: keyword identityfile extra arguments at end of line.")])
    }

    func testUnknownKeywordIsRejectedLikeOpenSSH() {
        XCTAssertEqual(parse("Host a\n  Frobnicate yes\n").errors,
                       [TermindError(code: "ssh_config.bad_option", message: "cfg line 2: Bad configuration option: frobnicate.")])
    }

    func testIgnoreUnknownSkipsTheKeywordsItNames() {
        let config = parse("IgnoreUnknown UseKeychain,Foo*\nUseKeychain yes\nFoobar 1\nOther 2\n")
        XCTAssertEqual(messages(config), ["cfg line 4: Bad configuration option: other."])
    }

    func testErrorsKeepWhatWasParsedElsewhereAndValidateRefusesLikeOpenSSH() throws {
        let config = parse("Host a\n  Port 70000\n  User kept\n  Bogus 1\n  HostName h\n")
        let host = config.resolve(alias: "a")
        XCTAssertEqual(host.user, "kept")
        XCTAssertEqual(host.hostname, "h")
        XCTAssertEqual(host.port, 22)
        XCTAssertThrowsError(try config.validate()) { error in
            XCTAssertEqual(error as? TermindError, TermindError(code: "ssh_config.bad_port",
                message: "cfg line 2: Bad port '70000' (ports are numbers from 1 to 65535). (and 1 more bad line)"))
        }
        XCTAssertNoThrow(try parse("Host a\n  User ok\n").validate())
    }

    func testLongLineIsRejectedAndTheNextLineStillRead() {
        let config = parse("User " + String(repeating: "x", count: 4100) + "\nPort 2\n")
        XCTAssertEqual(messages(config), ["cfg line 1: the line is 4105 bytes; lines longer than 4096 bytes are not read."])
        XCTAssertEqual(config.resolve(alias: "a").port, 2)
    }

    func testOversizedFileIsNotRead() {
        let config = parse("Include /big\nPort 3\n", files: ["/big": String(repeating: "# filler\n", count: 120_000)])
        XCTAssertEqual(config.errors, [TermindError(code: "ssh_config.file_too_large",
            message: "/big is 1080000 bytes; ssh_config files larger than 1048576 bytes are not read.")])
        XCTAssertEqual(config.resolve(alias: "a").port, 3)
    }

    // MARK: - Include

    func testIncludeDeeperThanSixteenLevelsIsRejected() {
        var files: [String: String] = [:]
        for level in 1...17 { files["/l\(level)"] = "Include /l\(level + 1)\nHost d\(level)\n" }
        files["/l17"] = "User deepest\n"
        let config = parse("Include /l1\n", files: files)
        XCTAssertEqual(config.errors, [TermindError(code: "ssh_config.include_depth",
            message: "/l16 line 1: Too many recursive configuration includes (more than 16 levels) at Include /l17.")])
        XCTAssertEqual(parse("Include /l2\n", files: files).errors, [], "sixteen levels below the top file are allowed")
    }

    func testIncludeCyclesStopAtTheBounds() {
        let config = parse("Include /self\n", files: ["/self": "Include /self /self\n"])
        XCTAssertFalse(config.errors.isEmpty)
        XCTAssertTrue(config.errors.allSatisfy { ["ssh_config.include_depth", "ssh_config.too_many_files"].contains($0.code) })
    }

    func testRelativeIncludeIsAnchoredInDotSSHForUserConfigsAndEtcSSHForSystem() {
        var asked: [String] = []
        _ = SSHConfig.parse("Include config.d/*\nInclude ~/x /abs\n", path: "u") { pattern, from in
            asked.append("\(from):\(pattern)"); return []
        }
        _ = SSHConfig.parse("Include ssh_config.d/*.conf\n", path: "s", origin: .system) { pattern, from in
            asked.append("\(from):\(pattern)"); return []
        }
        XCTAssertEqual(asked, ["u:~/.ssh/config.d/*", "u:~/x", "u:/abs", "s:/etc/ssh/ssh_config.d/*.conf"])
        XCTAssertEqual(messages(parse("Include ~/x\n", origin: .system)),
                       ["cfg line 1: bad include path ~/x: system configuration files cannot use '~'."])
    }

    func testIncludeResolverFailureIsReportedAtTheIncludeLine() {
        let config = SSHConfig.parse("User a\nInclude /denied\n", path: "cfg") { _, _ in
            throw TermindError(code: "io", message: "permission denied")
        }
        XCTAssertEqual(config.errors, [TermindError(code: "ssh_config.include_failed", message: "cfg line 2: cannot read Include /denied: permission denied")])
        XCTAssertEqual(config.resolve(alias: "x").user, "a")
    }

    func testFilesIncludedUnderAnInactiveHostNeverActivate() {
        let config = parse("Host b\n  Include /inc\nHost a\n  User later\n", files: ["/inc": "User fromInc\nHost a\n  Port 5\n"])
        let a = config.resolve(alias: "a")
        XCTAssertEqual(a.user, "later")
        XCTAssertEqual(a.port, 22, "Host lines in a file included while inactive never match")
        XCTAssertEqual(config.resolve(alias: "b").user, "fromInc")
    }

    func testHostInIncludedFileDoesNotLeakToTheIncludingFile() {
        let config = parse("Host b\n  Include /p1 /p2\n", files: ["/p1": "Host zzz\n", "/p2": "Port 6\n"])
        XCTAssertEqual(config.resolve(alias: "b").port, 6)
    }

    // MARK: - Compared with the real OpenSSH client (`ssh -G` prints without connecting)

    /// Real files, real glob(3) with `~` expanded, like OpenSSH's Include.
    private func parseFile(_ path: String) throws -> SSHConfig {
        func glob(_ pattern: String, _: String) throws -> [(path: String, text: String)] {
            var found = glob_t()
            defer { globfree(&found) }
            guard Glibc.glob(pattern, GLOB_TILDE, nil, &found) == 0 else { return [] }
            return try (0..<Int(found.gl_pathc)).map { index in
                let file = String(cString: found.gl_pathv[index]!)
                return (file, try String(contentsOfFile: file, encoding: .utf8))
            }
        }
        return SSHConfig.parse(try String(contentsOfFile: path, encoding: .utf8), path: path, include: glob)
    }

    private func sshG(_ configPath: String, _ alias: String) throws -> (status: Int32, values: [String: [String]], stderr: String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/ssh") else { throw XCTSkip("/usr/bin/ssh is not installed") }
        let result = try ProcessRunner.run("/usr/bin/ssh", ["-G", "-F", configPath, alias])
        var values: [String: [String]] = [:]
        for line in result.stdout.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            values[String(line[..<space]), default: []].append(String(line[line.index(after: space)...]))
        }
        return (result.status, values, result.stderr)
    }

    /// Asserts `resolve(alias)` equals what `ssh -G` prints for the values termind uses.
    private func assertMatchesOpenSSH(_ config: SSHConfig, _ configPath: String, _ alias: String,
                                      file: StaticString = #filePath, line: UInt = #line) throws {
        let ssh = try sshG(configPath, alias)
        XCTAssertEqual(ssh.status, 0, "ssh -G failed: \(ssh.stderr)", file: file, line: line)
        let home = NSHomeDirectory()
        func expandHome(_ path: String) -> String { path.hasPrefix("~/") ? home + path.dropFirst() : path }
        let ours = config.resolve(alias: alias)
        let context = "alias \(alias)"
        XCTAssertEqual(ours.hostname, ssh.values["hostname"]?.first, context, file: file, line: line)
        XCTAssertEqual(ours.user ?? ProcessInfo.processInfo.userName, ssh.values["user"]?.first, context, file: file, line: line)
        XCTAssertEqual(String(ours.port), ssh.values["port"]?.first, context, file: file, line: line)
        var theirKeys = (ssh.values["identityfile"] ?? []).map(expandHome)
        if ours.identityFiles.isEmpty { // ssh -G lists its default keys when none are configured
            theirKeys.removeAll { $0.hasPrefix(home + "/.ssh/id_") }
        }
        XCTAssertEqual(ours.identityFiles.map(expandHome), theirKeys, context, file: file, line: line)
        let theirJump = try ssh.values["proxyjump"]?.first.map { try QuickConnect.parseJumpList($0, in: "ssh -G") } ?? []
        XCTAssertEqual(ours.proxyJump, theirJump, context, file: file, line: line)
        let ourForwards = [SSHForward.Kind.dynamic, .local, .remote].flatMap { kind in
            ours.forwards.filter { $0.kind == kind }.map(\.description)
        }
        let theirForwards = ["dynamicforward", "localforward", "remoteforward"].flatMap { key in
            (ssh.values[key] ?? []).map { "\(key) \($0)" }
        }
        XCTAssertEqual(ourForwards, theirForwards, context, file: file, line: line)
    }

    func testResolutionMatchesSSHGForIncludesMatchNegationKeysJumpsTokensAndForwards() throws {
        let dir = try TemporaryDirectory("termind-sshconfig")
        defer { dir.remove() }
        try dir.write("conf.d/10-web.conf", """
        Host web web-*
          HostName %h.internal.example
          User deploy
          IdentityFile ~/.ssh/web_ed25519
          ProxyJump bastion-user@bastion.example:2222,jump2
        """)
        try dir.write("conf.d/20-db.conf", """
        Host db
          HostName 10.0.0.5
          Port 5432
          LocalForward 127.0.0.1:15432 localhost:5432
          LocalForward /tmp/termind-db.sock [::1]:5432
          DynamicForward 1080
          RemoteForward 9000
          RemoteForward 0.0.0.0:9001 localhost:22
          Include \(dir.path)/conf.d/nested/*.conf
        """)
        try dir.write("conf.d/nested/deeper.conf", "IdentityFile /keys/nested\nUser nesteduser\n")
        let main = try dir.write("config", """
        # termind comparison fixture
        IgnoreUnknown UseKeychain
        UseKeychain yes
        Include \(dir.path)/conf.d/*.conf

        Host *.example.com !secret.example.com
          User example
          IdentityFile "\(dir.path)/keys/with space"
        Host MiXeD
          HostName Upper%%Case.%h
          ProxyCommand nc %h %p
          ProxyJump ignored-because-proxycommand-came-first
        Host chain
          ProxyJump ssh://u1@h1.example:2201,[::1]:22,u3@h3
          IdentityFile ~/.ssh/one
          IdentityFile ~/.ssh/two
          IdentityFile ~/.ssh/one
        Host nojump
          ProxyJump none
        Host v6
          HostName FE80::AB
        Host upper
          HostName Up.%h
          LocalForward 8022 [fe80::1]:22
        Host renamed
          HostName target.example
        Match host target.example
          Port 2022
          User matched
        Match originalhost renamed user matched
          IdentityFile /keys/matched
        Match user deploy
          Port 2200
        Host finalcase
          HostName final-target
        Match final host final-target
          IdentityFile /keys/final
        Host final-target
          Port 2999
        Host *
          IdentityFile ~/.ssh/fallback
          ProxyJump default-jump
          Port 2345
          User catchall
        """)
        let config = try parseFile(main)
        XCTAssertEqual(config.errors, [])
        let aliases = ["web", "web-2", "db", "a.example.com", "secret.example.com", "MiXeD", "mixed", "chain",
                       "nojump", "v6", "upper", "renamed", "finalcase", "unlisted"]
        for alias in aliases { try assertMatchesOpenSSH(config, main, alias) }
        // Spot checks so the comparison cannot pass by both sides being empty.
        XCTAssertEqual(config.resolve(alias: "web").hostname, "web.internal.example")
        XCTAssertEqual(config.resolve(alias: "db").forwards.count, 5)
        XCTAssertEqual(config.resolve(alias: "chain").proxyJump.count, 3)
        XCTAssertEqual(config.resolve(alias: "finalcase").identityFiles, ["~/.ssh/fallback", "/keys/final"])
        XCTAssertEqual(config.resolve(alias: "final-target").port, 2999)
        XCTAssertEqual(config.resolve(alias: "MiXeD").hostname, "Upper%Case.MiXeD")
        XCTAssertEqual(config.importCandidates().map(\.alias), ["web", "db", "MiXeD", "chain", "nojump", "v6", "upper", "renamed", "finalcase", "final-target"])
    }

    func testBadLinesAreErrorsExactlyWhereSSHGRefusesTheFile() throws {
        let dir = try TemporaryDirectory("termind-sshconfig")
        defer { dir.remove() }
        let refused = [
            "Host a\n  Port 70000\n", "Host a\n  Port 0\n", "Host a\n  HostName\n", "Frobnicate yes\n",
            "IdentityFile a b\n", "User \"unterminated\n", "ProxyJump a, b\n", "DynamicForward 0\n",
            "LocalForward 8080\n", "Match all host a\n", "Match tagged x\n", "Match host\n",
        ]
        let accepted = [
            "Host a\n  User=bob\n", "host a\n Port = 22\n", "Host a # c\n  HostName \"x y\"\n",
            "IgnoreUnknown Foo*\nFoobar 1\n", "RemoteForward 9000\n", "ProxyJump none\n", "Protocol 2\n",
            "Match all\n  User x\n", "Match !host b,c user *\n",
        ]
        for (index, text) in (refused + accepted).enumerated() {
            let path = try dir.write("c\(index)", text)
            let ssh = try sshG(path, "a")
            let ours = try parseFile(path)
            XCTAssertEqual(ours.errors.isEmpty, ssh.status == 0, "\(text.debugDescription): ssh says \(ssh.stderr), we say \(messages(ours))")
            if ssh.status == 0 { try assertMatchesOpenSSH(ours, path, "a") }
        }
    }

    // MARK: - Import candidates

    func testImportCandidatesListConcreteAliasesInFileOrderOnce() {
        // The Include sits inside the first Host block, so its Host lines never match (as in
        // OpenSSH) but still name candidates.
        let config = parse("Host web db *.corp !bad\n  User u\nInclude /more\nHost db ?x\n  Port 2\nMatch all\nInclude /more\n",
                           files: ["/more": "Host cache\n  HostName cache.internal\n"])
        let candidates = config.importCandidates(localUser: "me")
        XCTAssertEqual(candidates.map(\.alias), ["web", "db", "cache"])
        XCTAssertEqual(candidates.map(\.hostname), ["web", "db", "cache.internal"])
        XCTAssertEqual(candidates[1].port, 2)
        XCTAssertEqual(candidates[0].user, "u")
    }

    func testAHostWhoseBlockHasARejectedLineIsNotImportableAndSaysWhy() {
        let config = parse("Host good\n  Port 2200\nHost bad\n  Port 99999\nHost word\n  Port notanumber\n  User kept\nHost *\n  User all\n")
        let candidates = Dictionary(uniqueKeysWithValues: config.importCandidates(localUser: "me").map { ($0.alias, $0) })
        XCTAssertEqual(candidates["good"]?.problems, [])
        XCTAssertEqual(candidates["good"]?.port, 2200)
        XCTAssertEqual(candidates["bad"]?.problems, ["cfg line 4: Bad port '99999' (ports are numbers from 1 to 65535)."])
        XCTAssertEqual(candidates["word"]?.problems, ["cfg line 6: Bad port 'notanumber' (ports are numbers from 1 to 65535)."])
        XCTAssertEqual(candidates["word"]?.user, "kept", "the rest of the block is still read, for the preview")
        // A rejected line before any Host applies to every host, as OpenSSH refuses the file.
        let everyone = parse("Ciphers\nHost a\n  User u\n").importCandidates(localUser: "me")
        XCTAssertEqual(everyone.first?.problems.count, 1)
    }

    func testACommaInAHostLineIsNotASeparatorAndSuchANameIsNotAHost() {
        let candidates = parse("Host x1,x2\n  User u\nHost ok other\n").importCandidates(localUser: "me")
        XCTAssertEqual(candidates.map(\.alias), ["x1,x2", "ok", "other"])
        XCTAssertEqual(candidates[0].problems.count, 1)
        XCTAssertTrue(candidates[0].problems[0].hasPrefix("cfg line 1: Host 'x1,x2' is not a valid host name"), candidates[0].problems[0])
        XCTAssertTrue(candidates[0].problems[0].contains("Host a b"), candidates[0].problems[0])
        XCTAssertEqual(candidates[1].problems, [])
        XCTAssertNotNil(SSHConfig.invalidHostName("a;b"))
        XCTAssertNotNil(SSHConfig.invalidHostName("-oProxyCommand=x"))
        XCTAssertNil(SSHConfig.invalidHostName("gpu-01.example.com"))
    }

    func testOptionsTermindDoesNotActOnAreWarnedAboutWhereTheyApply() {
        let config = parse("""
            Host a
              PKCS11Provider /usr/lib/opensc-pkcs11.so
              SecurityKeyProvider /usr/lib/sk.so
              RemoteCommand tmux attach
              ForwardAgent yes
              StrictHostKeyChecking no
              UserKnownHostsFile /dev/null
            Host b
              ForwardAgent no
              StrictHostKeyChecking accept-new
              RemoteCommand none
            Host *
              ForwardAgent yes
            """)
        let candidates = Dictionary(uniqueKeysWithValues: config.importCandidates(localUser: "me").map { ($0.alias, $0) })
        let a = candidates["a"]!.warnings.map(\.message)
        XCTAssertEqual(a.count, 6, "\(a)")
        for word in ["PKCS11Provider", "SecurityKeyProvider", "RemoteCommand", "ForwardAgent", "StrictHostKeyChecking no", "UserKnownHostsFile /dev/null"] {
            XCTAssertTrue(a.contains { $0.hasPrefix(word) }, "\(word) in \(a)")
        }
        XCTAssertEqual(candidates["b"]!.warnings, [], "ForwardAgent no comes first for b, so Host *'s yes does not apply")
    }

    func testWarningsAndProblemsKeepTheirTextForTheTerminalToEscape() {
        let config = parse("Host esc\n  HostName \u{1B}]0;owned\u{07}\n  Port \u{1B}[2J\n")
        let candidate = config.importCandidates(localUser: "me")[0]
        XCTAssertEqual(candidate.hostname, "\u{1B}]0;owned\u{07}")
        XCTAssertEqual(TerminalText.escaped(candidate.problems[0]), "cfg line 3: Bad port '\\x1b[2J' (ports are numbers from 1 to 65535).")
        XCTAssertEqual(TerminalText.escaped("a\u{202E}b\rc\td\ne"), "a\\u202eb\\x0dc\td\ne")
        XCTAssertEqual(TerminalText.escaped("a\tb\nc", singleLine: true), "a\\x09b\\x0ac")
        XCTAssertEqual(TerminalText.escaped("caf\u{E9} \u{1F600}"), "caf\u{E9} \u{1F600}", "printable text is untouched")
    }

    func testSeventyFiveThousandMatchExecLinesWarnOnceEachAndListAHundredThenACount() {
        // 975 KB, under the 1 MiB limit: every line warns for the file and again for the host.
        let text = "Host box\n  HostName 10.0.0.1\n" + String(repeating: "Match exec a\n", count: 75_000)
        let config = parse(text)
        let host = config.importCandidates(localUser: "me")[0]
        for warnings in [config.warnings, host.warnings] {
            XCTAssertEqual(warnings.count, WarningList.limit + 1)
            XCTAssertEqual(warnings.first?.line, 3)
            XCTAssertEqual(warnings.first?.message, SSHConfig.matchExecWarning)
            XCTAssertEqual(warnings.last?.description, "cfg line \(3 + WarningList.limit): 74900 more warnings from this line on are not listed")
        }
        // A warning met twice (the final pass walks the file again) is listed once.
        let twice = parse("Host final-box\n  ForwardAgent yes\nMatch final\n  User x\n").importCandidates(localUser: "me")[0]
        XCTAssertEqual(twice.warnings.map(\.line), [2])
    }
}
