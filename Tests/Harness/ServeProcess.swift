import Foundation
import TermindCore
import TermindKernel
import XCTest

/// A `termind serve` child process on a private socket, for tests that need the real
/// server: its own cooperative pool and threads, its memory read from /proc.
public final class ServeProcess: @unchecked Sendable {
    public let socketPath: String
    public let process: SpawnedProcess
    /// Where its standard error goes.
    private let errorLog: String
    private let outputFD: Int32

    /// Starts `termind serve --json` with `arguments` (e.g. --registry, --plugins) and
    /// waits for its ready line.
    /// `arguments` go before `serve` (termind's own options), `serveArguments` after it
    /// (features' serve options: `--mcp-listen 127.0.0.1:0`). `namespace`: a network
    /// namespace it runs in (`ip netns exec`, which also mounts /etc/netns/NAME's files over
    /// /etc's: a resolv.conf of its own); its control socket is a path, reachable from here.
    public init(directory: TemporaryDirectory, arguments: [String], serveArguments: [String] = [], environment extra: [String: String] = [:],
                namespace: String? = nil) throws {
        socketPath = directory.file("serve/control.sock")
        errorLog = directory.file("serve-stderr.log")
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["XDG_RUNTIME_DIR"] = directory.file("home/run")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_STORE", "TERMIND_SECRETS",
                     "TERMIND_SECRETS_KEY", "TERMIND_SECRETS_PASSPHRASE_FILE", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] {
            environment.removeValue(forKey: name)
        }
        // A blocking primitive on Swift's cooperative pool ends the server, so the test fails
        // (debug builds: BlockingCheck).
        environment["TERMIND_BLOCKING_CHECK"] = "abort"
        for (key, value) in extra { environment[key] = value }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TermindError(code: "test.pipe", message: "pipe failed") }
        // The ready line arrives on standard output: the pipe's write end.
        let all = arguments + ["--socket", socketPath, "--store", directory.file("serve/db.sqlite"),
                               "--secrets-key", directory.file("serve/secrets.key"), "serve", "--json"] + serveArguments
        let inNamespace = namespace.map { "\(NetworkChain.command(namespace: $0, "").executable) netns exec \($0) " } ?? ""
        let script = "exec \(inNamespace)\"$0\" \"$@\" 2>>\(directory.file("serve-stderr.log"))"
        process = try SpawnedProcess("/bin/bash", ["-c", script, FeatureHarness.buildDirectory + "/termind"] + all,
                                     environment: environment, captureOutput: false, output: fds[1])
        process.stopAtExit()
        close(fds[1])
        outputFD = fds[0]
        var line = Data()
        var byte: UInt8 = 0
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            // Never wait past the deadline on a server that neither writes nor exits.
            var descriptor = pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 1000) != 0 else { continue }
            let n = read(outputFD, &byte, 1)
            if n <= 0 { break }
            if byte == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        guard let ready = try? JSONCoding.parse(line, source: "the ready line"), ready["event"] == .string("ready") else {
            process.signal(SIGKILL)
            process.wait()
            let stderr = (try? String(contentsOfFile: directory.file("serve-stderr.log"), encoding: .utf8)) ?? ""
            throw TermindError(code: "test.serve", message: "termind serve did not become ready: \(String(decoding: line, as: UTF8.self)) \(stderr)")
        }
    }

    deinit { close(outputFD) }

    /// Resident memory of the server now (VmRSS), in bytes.
    public func residentBytes() -> Int { Int((ProcessMemory.field("VmRSS", of: process.pid) ?? 0) * 1_048_576) }
    /// Peak resident memory so far (VmHWM), in bytes.
    public func peakResidentBytes() -> Int { Int((ProcessMemory.peakMiB(of: process.pid) ?? 0) * 1_048_576) }

    /// SIGTERM, then the exit status.
    @discardableResult
    public func stop(file: StaticString = #filePath, line: UInt = #line) -> Int32 {
        process.signal(SIGTERM)
        let status = process.wait()
        // The blocking check ended it (at any time, stopping included): the test fails with
        // what it said, whether or not the test looks at the status.
        if status == 128 + SIGABRT, let log = try? String(contentsOfFile: errorLog, encoding: .utf8), log.contains("blocking work") {
            XCTFail("termind serve ended on the blocking check:\n\(log.suffix(4000))", file: file, line: line)
        }
        return status
    }
}
