import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The C example plugin, loaded through the harness exactly as termind loads it.
final class DigestPluginTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        let manifest = try FeatureHarness.manifest(pluginJSON: Repository.path("Plugins/Examples/Digest/plugin.json"))
        session = try await FeatureHarness.boot(manifest)
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    private func openssl(_ algorithm: String, _ path: String) throws -> String {
        let out = try ProcessRunner.run("/usr/bin/openssl", ["dgst", "-\(algorithm)", "-r", path]).stdout
        return String(out.prefix { $0 != " " })
    }

    func testFileDigestsMatchOpenSSLForEveryAlgorithm() async throws {
        // Larger than the plugin's 64 KiB read buffer, not a multiple of it.
        let bytes = (0..<200_003).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let path = directory.file("blob.bin")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        for algorithm in ["sha256", "sha384", "sha512", "sha1", "md5"] {
            let reply = try JSONCoding.parse(try await session.call("digest.file@1", json: #"{"path": "\#(path)", "algorithm": "\#(algorithm)"}"#), source: "reply")
            XCTAssertEqual(reply["digest"]?.stringValue, try openssl(algorithm, path), algorithm)
            XCTAssertEqual(reply["bytes"], .integer(200_003))
        }
        let defaulted = try JSONCoding.parse(try await session.call("digest.file@1", json: #"{"path": "\#(path)"}"#), source: "reply")
        XCTAssertEqual(defaulted["algorithm"], .string("sha256"))
    }

    func testBadRequestsGetClearErrors() async throws {
        await assertError(#"{}"#, code: "request.invalid", contains: "field \"path\" is required")
        await assertError(#"{"path": "/etc/hostname", "algorithm": "crc64"}"#, code: "request.invalid", contains: "'crc64' is not one of")
        await assertError(#"{"path": "\#(directory.file("missing"))"}"#, code: "plugin.failed", contains: "No such file or directory")
    }

    private func assertError(_ body: String, code: String, contains text: String, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            _ = try await session.call("digest.file@1", json: body)
            XCTFail("expected \(code)", file: file, line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, code, file: file, line: line)
            XCTAssertTrue(error.message.contains(text), error.message, file: file, line: line)
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }

    func testLibffiBoundFunctionsComputeTheSameAsReferenceTools() async throws {
        let crc = try JSONCoding.parse(try await session.call("digest.fn.crc32@1", json: #"{"args": ["The quick brown fox jumps over the lazy dog"]}"#), source: "r")
        XCTAssertEqual(crc["result"], .integer(0x414F_A339), "CRC-32 check value of the classic pangram")
        let sha = try JSONCoding.parse(try await session.call("digest.fn.sha256@1", json: #"{"args": ["abc"]}"#), source: "r")
        XCTAssertEqual(sha["result"], .string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
    }

    func testLibffiArgumentsAreCheckedAgainstTheDeclaredSignature() async throws {
        for (body, expected) in [
            (#"{"args": []}"#, "takes 1 argument, got 0"),
            (#"{"args": [1]}"#, "argument 1: expected string, got integer"),
            (#"{"args": ["a", "b"]}"#, "takes 1 argument, got 2"),
            (#"{"arguments": ["a"]}"#, "body.arguments: unknown field"),
        ] {
            do {
                _ = try await session.call("digest.fn.crc32@1", json: body)
                XCTFail(body)
            } catch let error as TermindError {
                XCTAssertEqual(error.code, "request.invalid", body)
                XCTAssertTrue(error.message.contains(expected), "\(body): \(error.message)")
            }
        }
    }

    func testConcurrentCallsFromManyTasks() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<64 {
                group.addTask { [session] in
                    let text = "payload-\(i)"
                    let reply = try JSONCoding.parse(try await session!.call("digest.fn.sha256@1", json: #"{"args": ["\#(text)"]}"#), source: "r")
                    let expected = try ProcessRunner.run("/usr/bin/sh", ["-c", "printf %s '\(text)' | sha256sum"]).stdout.prefix(64)
                    XCTAssertEqual(reply["result"]?.stringValue, String(expected))
                }
            }
            try await group.waitForAll()
        }
    }
}
