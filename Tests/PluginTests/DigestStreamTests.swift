import Foundation
import TermindCore
import TermindHarness
import XCTest

/// A C plugin serves a stream through the host API table's stream_* calls: the Digest
/// example's `digest.hash@1` (the `digest` command) reports progress on a large file and
/// hashes standard input for "-" — in-process and through `termind serve`, where its input
/// and events go through the socket's credit and grants.
final class DigestStreamTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var plugins: String { FeatureHarness.buildDirectory + "/plugins" }
    private var termind: String { FeatureHarness.buildDirectory + "/termind" }

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET", "TERMIND_STORE"] { environment.removeValue(forKey: name) }
        return environment
    }

    private var store: [String] { ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] }

    private func sha256(_ path: String) throws -> String {
        String(try ProcessRunner.run("/usr/bin/sha256sum", [path]).stdout.prefix(64))
    }

    /// 24 MiB of pseudo-random bytes.
    private func bigFile() throws -> String {
        let path = directory.file("big.bin")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/openssl", ["rand", "-out", path, String(24 << 20)]).status, 0)
        return path
    }

    func testTheStreamListsItselfAndReportsProgressOnALargeFile() throws {
        let contracts = try ProcessRunner.run(termind, store + ["--plugins", plugins, "--socket", directory.file("none.sock"), "--json", "contracts", "digest.hash@1"],
                                              environment: environment)
        let info = try XCTUnwrap(try JSONCoding.parse(Data(contracts.stdout.utf8), source: "contracts")["contracts"].flatMap { if case .array(let a) = $0 { a.first } else { nil } })
        XCTAssertEqual(info["stream"], .bool(true))
        XCTAssertEqual(info["acceptsInput"], .bool(true))
        XCTAssertEqual(info["owner"], .string("digest"))

        let path = try bigFile()
        let result = try ProcessRunner.run(termind, store + ["--plugins", plugins, "--socket", directory.file("none.sock"), "--json", "digest", path],
                                           environment: environment, stdin: "")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(result.stdout.utf8), source: "result")["digest"], .string(try sha256(path)))
        // With --json, the plugin's progress events are JSON lines on standard error: every 4 MiB.
        let progress = try result.stderr.split(separator: "\n").map { try JSONCoding.parse(Data($0.utf8), source: "progress") }
        XCTAssertEqual(progress.map { $0["done"] }, (1...6).map { .integer(Int64($0 << 22)) }, result.stderr)
        XCTAssertEqual(progress.last?["total"], .integer(24 << 20))
        XCTAssertEqual(progress.first?["item"], .string(path))
    }

    func testStandardInputIsHashedThroughTheStreamInProcessAndThroughServe() throws {
        let path = try bigFile()
        let expected = try sha256(path)
        let local = try ProcessRunner.run("/bin/bash", ["-c", "cat '\(path)' | '\(termind)' --local --plugins '\(plugins)' --store '\(directory.file("db.sqlite"))' --secrets-key '\(directory.file("k"))' --json digest -"],
                                          environment: environment)
        XCTAssertEqual(local.status, 0, local.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(local.stdout.utf8), source: "local")["digest"], .string(expected))

        let serve = try ServeProcess(directory: directory, arguments: ["--plugins", plugins])
        defer { serve.stop() }
        let served = try ProcessRunner.run("/bin/bash", ["-c", "cat '\(path)' | '\(termind)' --socket '\(serve.socketPath)' --json digest -"], environment: environment)
        XCTAssertEqual(served.status, 0, served.stderr)
        let reply = try JSONCoding.parse(Data(served.stdout.utf8), source: "served")
        XCTAssertEqual(reply["digest"], .string(expected), "24 MiB through the socket's input grants")
        XCTAssertEqual(reply["bytes"], .integer(24 << 20))
    }
}
