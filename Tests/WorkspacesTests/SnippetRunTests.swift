import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind snippet run`: one command on five saved hosts (four reach a real sshd, one a
/// closed port), in parallel; grouped output, the summary, exit codes and `--json`.
final class SnippetRunTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("termind-snippet")
        server = try SSHServerFixture.withNewKey(in: directory)
        try run(["vault", "key", "import", directory.file("id"), "--label", "ci"])
        try run(["vault", "identity", "add", NSUserName(), "--key", "ci"])
        for index in 1...4 {
            try run(["vault", "host", "add", "127.0.0.1", "--label", "box\(index)", "--port", "\(server.port)", "--identity", NSUserName(), "--tags", "gpu"])
        }
        try run(["vault", "host", "add", "127.0.0.1", "--label", "box5", "--port", "\(try SSHServerFixture.freePort())", "--identity", NSUserName(), "--tags", "gpu"])
        // Trust the server's key once, saved, so runs ask nothing.
        try run(["exec", "box1", "--accept-host-key", "save", "--", "true"])
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] { ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock")) }
    private var store: [String] { ["--local", "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] }

    @discardableResult
    private func run(_ arguments: [String], status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", store + arguments, environment: environment)
        XCTAssertEqual(result.status, status, "termind \(arguments.joined(separator: " ")): \(result.stdout) \(result.stderr)", file: file, line: line)
        return result
    }

    func testACommandOnFiveHostsGroupsOutputAndSaysWhichFailed() throws {
        // Each host says when its sleep began and ended (the hosts are this machine: one clock).
        let result = try run(["snippet", "run", "--tag", "gpu", "--parallel", "5", "--connect-timeout", "3", "--",
                              "s=$(date +%s.%N); sleep 1; echo on-$((6*7))-$(id -un) $s $(date +%s.%N)"], status: 3)
        let spans = result.stdout.split(separator: "\n").filter { $0.hasPrefix("on-42-") }.compactMap { line -> (Double, Double)? in
            let words = line.split(separator: " ")
            guard words.count == 3, let start = Double(words[1]), let end = Double(words[2]) else { return nil }
            return (start, end)
        }
        XCTAssertEqual(spans.count, 4, result.stdout)
        XCTAssertLessThan(spans.map(\.0).max() ?? .infinity, spans.map(\.1).min() ?? 0, "the four hosts were all sleeping at one moment: they ran at once")
        for index in 1...4 {
            XCTAssertTrue(result.stdout.contains("── box\(index) · exit 0"), result.stdout)
        }
        XCTAssertEqual(result.stdout.components(separatedBy: "on-42-\(NSUserName())").count - 1, 4, result.stdout)
        XCTAssertTrue(result.stdout.contains("── box5 · could not run"), result.stdout)
        XCTAssertTrue(result.stdout.contains("4 of 5 hosts succeeded"), result.stdout)

        // --json: every host's outcome; exit 1 when none succeeded.
        let json = try run(["--json", "snippet", "run", "--hosts", "box2,box5,box3", "--", "echo err >&2; exit 2"], status: 1)
        let report = try JSONCoding.parse(Data(json.stdout.utf8), source: "snippet run")
        let hosts = report["hosts"]?.arrayValue ?? []
        XCTAssertEqual(hosts.map { $0["host"]?.stringValue }, ["box2", "box5", "box3"], "in the order given")
        XCTAssertEqual(hosts.map { $0["state"]?.stringValue }, ["failed", "error", "failed"])
        XCTAssertEqual(hosts.first?["exitStatus"]?.intValue, 2)
        // The command's own error output comes last: what the account's shell start-up files
        // print before it (here root's pyenv, which complains when two shells rehash at once)
        // is the host's, and termind passes it on as it came.
        XCTAssertTrue(hosts.first?["stderr"]?.stringValue?.hasSuffix("err\n") == true, "\(hosts.first?["stderr"] ?? .null)")
        XCTAssertNotNil(hosts[1]["errorCode"]?.stringValue)
        XCTAssertEqual(report["exitStatus"]?.intValue, 1)
    }

    func testASavedSnippetRunsByNameAndBadRequestsSayWhatIsWrong() throws {
        try run(["vault", "snippet", "add", "uname -s; echo snip-$((1+1))", "--label", "check"])
        let result = try run(["snippet", "run", "check", "--hosts", "box1,box2", "--parallel", "1"])
        XCTAssertEqual(result.stdout.components(separatedBy: "snip-2").count - 1, 2, result.stdout)
        XCTAssertTrue(result.stdout.contains("2 of 2 hosts succeeded"), result.stdout)
        XCTAssertTrue(try run(["snippet", "run", "nope", "--hosts", "box1"], status: 1).stderr.contains("no snippet 'nope'"))
        XCTAssertTrue(try run(["snippet", "run", "--hosts", "box1"], status: 2).stderr.contains("Name a saved snippet"))
        XCTAssertTrue(try run(["snippet", "run", "check"], status: 2).stderr.contains("--hosts"))
        // Options after -- are the command's words: the error says so.
        let misplaced = try run(["snippet", "run", "--", "uptime", "--hosts", "box1"], status: 2).stderr
        XCTAssertTrue(misplaced.contains("The --hosts after -- went into the command"), misplaced)
        XCTAssertTrue(try run(["snippet", "run", "check", "--tag", "nothing"], status: 2).stderr.contains("tag 'nothing'"))
        XCTAssertTrue(try run(["snippet", "run", "check", "--hosts", "box1", "--parallel", "0"], status: 2).stderr.contains("--parallel"))
    }
}
