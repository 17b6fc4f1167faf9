import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind exec` hands its own stdin, stdout and stderr over (SCM_RIGHTS inside `serve`,
/// copies in-process), so the SSH channel's bytes go straight between the server and them:
/// a stopped client does not stop its output, the client's pipe is never left
/// non-blocking, a reader that goes away ends the command as SIGPIPE would, and a regular
/// file as standard input reaches the command whole.
final class DescriptorHandOverTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: ServeProcess!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        server = try SSHServerFixture.withNewKey(in: directory)
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_DEBUG": "1", "TERMIND_LOG_FILE": directory.file("serve.log")])
    }

    override func tearDown() {
        serve?.stop()
        server?.stop()
        directory?.remove()
    }

    /// `termind exec` as a shell command line: on the server's socket, or in-process.
    private func exec(_ command: String, inProcess: Bool = false) -> String {
        let target = "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1"
        let socket = inProcess ? ["--local", "--store", directory.file("local.sqlite"), "--secrets-key", directory.file("local.key")] : ["--socket", serve.socketPath]
        return Shell.quoted([FeatureHarness.buildDirectory + "/termind"] + socket + ["exec", target, "--accept-host-key", "once", "--", command])
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] { environment.removeValue(forKey: name) }
        return environment
    }

    private func shell(_ script: String) throws -> ProcessResult {
        try ProcessRunner.run("/bin/bash", ["-c", script], environment: environment)
    }

    func testAStoppedClientsOutputKeepsFlowingBecauseTheServerWritesItsPipeItself() throws {
        // The command writes 1 MiB, waits for a gate file (the remote side is this machine),
        // writes another. The client is stopped after the first and the gate opened after
        // that; the second still arrives only if the server writes the client's own pipe.
        // Meanwhile the pipe's description (shared with the client) stays blocking.
        let gate = directory.file("gate")
        let script = """
        mkfifo \(directory.file("fifo"))
        cat \(directory.file("fifo")) > \(directory.file("out")) &
        reader=$!
        \(exec("head -c 1048576 /dev/zero; while [ ! -e \(gate) ]; do sleep 0.05; done; head -c 1048576 /dev/zero")) > \(directory.file("fifo")) 2> \(directory.file("err")) &
        pid=$!
        size() { stat -c %s \(directory.file("out")); }
        for i in $(seq 300); do [ "$(size)" -ge 1048576 ] && break; sleep 0.05; done
        kill -STOP $pid
        touch \(gate)
        for i in $(seq 200); do [ "$(size)" -ge 2097152 ] && break; sleep 0.05; done
        echo "size $(size)"
        echo "state $(ps -o stat= -p $pid)"
        echo "flags $(awk '/^flags/ {print $2}' /proc/$pid/fdinfo/1)"
        kill -CONT $pid
        wait $pid; echo "status $?"
        wait $reader
        echo "final $(size)"
        """
        let result = try shell(script)
        let report = Dictionary(result.stdout.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }, uniquingKeysWith: { $1 })
        let errors = (try? String(contentsOfFile: directory.file("err"), encoding: .utf8)) ?? ""
        XCTAssertEqual(report["size"], "2097152", "output stopped with the client: \(result.stdout) \(errors)")
        XCTAssertTrue(report["state"]?.hasPrefix("T") == true, "the client was not stopped meanwhile: \(result.stdout)")
        let flags = Int(report["flags"] ?? "", radix: 8)
        XCTAssertNotNil(flags, result.stdout)
        XCTAssertEqual((flags ?? 0) & Int(O_NONBLOCK), 0, "the client's pipe was made non-blocking: \(result.stdout)")
        XCTAssertEqual(report["status"], "0", errors)
        XCTAssertEqual(report["final"], "2097152")
        XCTAssertEqual(server.acceptedConnections(), 1, "the client did not run inside serve")
        let log = (try? String(contentsOfFile: directory.file("serve.log"), encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("socket.stream.descriptors"), "serve did not log receiving the descriptors")
    }

    func testAReaderThatGoesAwayEndsTheCommandAsSIGPIPEInProcessAndThroughServe() throws {
        for inProcess in [true, false] {
            let marker = "termind-pipe-\(UUID().uuidString.prefix(8))"
            let script = """
            \(exec("exec yes \(marker)", inProcess: inProcess)) 2> \(directory.file("err")) | head -c 5
            echo " ${PIPESTATUS[0]}"
            for i in $(seq 100); do pgrep -f "^yes \(marker)" > /dev/null || break; sleep 0.05; done
            pgrep -f "^yes \(marker)" > /dev/null && echo still-running || echo gone
            """
            let result = try shell(script)
            let errors = (try? String(contentsOfFile: directory.file("err"), encoding: .utf8)) ?? ""
            XCTAssertEqual(result.stdout, "\(marker.prefix(5)) 141\ngone\n", "in-process \(inProcess): \(errors)")
            XCTAssertEqual(errors, "", "in-process \(inProcess): nothing is said of a SIGPIPE, as a shell says nothing")
        }
    }

    func testARegularFileAsStandardInputReachesTheCommandWhole() throws {
        let file = directory.file("input.bin")
        XCTAssertEqual(try shell("head -c 5000000 /dev/urandom > \(file)").status, 0)
        let expected = try shell("sha256sum < \(file)").stdout
        for inProcess in [true, false] {
            let result = try shell("\(exec("sha256sum", inProcess: inProcess)) < \(file)")
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(result.stdout, expected, "in-process \(inProcess)")
        }
    }
}
