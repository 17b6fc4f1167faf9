import Foundation
import TermindCore
import XCTest

/// The termind command line as a test runs it: the built binary with an environment, each
/// run's status checked (the failure shows what termind printed), `--json` output parsed,
/// and the usual set-up of a saved host for an sshd fixture.
public struct TermindCLI: Sendable {
    public let environment: [String: String]
    /// Options every run starts with (`--store PATH --secrets-key PATH`, `--socket PATH`).
    public let leading: [String]
    public var program: String { FeatureHarness.buildDirectory + "/termind" }

    public init(environment: [String: String], leading: [String] = []) {
        self.environment = environment
        self.leading = leading
    }

    /// Runs `termind ARGUMENTS`, failing the test when the exit status is not `status`.
    @discardableResult
    public func run(_ arguments: [String], status: Int32 = 0, stdin: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try ProcessRunner.run(program, leading + arguments, environment: environment, stdin: stdin)
        XCTAssertEqual(result.status, status, "termind \(arguments.joined(separator: " ")): \(result.stdout)\(result.stderr)", file: file, line: line)
        return result
    }

    /// `termind --json ARGUMENTS`, parsed.
    public func json(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        try JSONCoding.parse(Data(try run(["--json"] + arguments, file: file, line: line).stdout.utf8), source: "termind's output")
    }

    /// Saved hosts `labels` for `server`, logging in as this user with the key at `key`
    /// (the fixture's `id`), its ed25519 host key trusted.
    public func saveHosts(_ labels: [String], server: SSHServerFixture, key: String) throws {
        try run(["vault", "key", "import", key, "--label", "ci"])
        try run(["vault", "identity", "add", NSUserName(), "--key", "ci"])
        for label in labels {
            try run(["vault", "host", "add", "127.0.0.1", "--label", label, "--port", "\(server.port)", "--identity", NSUserName()])
        }
        guard let hostKey = server.hostKeys["ssh-ed25519"] else { throw TermindError(code: "test.fixture", message: "the sshd fixture has no ed25519 host key") }
        try run(["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(server.port)"])
    }
}
