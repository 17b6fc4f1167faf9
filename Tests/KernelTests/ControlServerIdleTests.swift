import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// Idle connections are closed after the idle timeout, so 128 idle clients cannot lock
/// everyone out; a full server's `socket.busy` reply reaches the user.
final class ControlServerIdleTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var kernel: Kernel!
    private var server: ControlServer!
    private var path: String { directory.file("run/control.sock") }

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        kernel = Kernel(configuration: KernelConfiguration(registryPath: nil), sink: .disabled())
        try await kernel.boot()
    }

    /// A server whose idle timeout is `idle` seconds, with a stream that runs 2.5 s.
    private func start(idle: TimeInterval) throws {
        server = ControlServer(path: path, kernel: kernel, logger: kernel.logger, idleTimeout: idle)
        server.register(stream: "test.sleep@1") { _, _ in
            try await Task.sleep(nanoseconds: 2_500_000_000)
            return Data(#"{"slept": true}"#.utf8)
        }
        try server.start()
    }

    override func tearDown() async throws {
        server?.stop()
        await kernel?.shutdown()
        directory?.remove()
    }

    private func cli(_ arguments: [String]) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET"] { environment.removeValue(forKey: name) }
        return try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["--socket", path] + arguments, environment: environment)
    }

    private func waitFor(_ condition: () -> Bool, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline { if condition() { return true }; usleep(20_000) }
        return condition()
    }

    func testAFullServerSaysBusyAndIdleClientsAreClosedSoOthersGetIn() throws {
        // Long enough for the CLI to meet a full server on a loaded machine.
        try start(idle: 4)
        var idle: [SocketClientForTest] = []
        for _ in 0..<ControlServer.maximumClients { idle.append(try SocketClientForTest(path: path)) }
        XCTAssertTrue(waitFor({ server.connectionCount == ControlServer.maximumClients }, seconds: 5), "\(server.connectionCount) connected")

        let busy = try cli(["--json", "features"])
        XCTAssertEqual(busy.status, 1, busy.stdout + busy.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(busy.stdout.utf8), source: "stdout")["error"]?["code"], .string("socket.busy"), busy.stdout)
        let human = try cli(["features"])
        XCTAssertTrue(human.stderr.contains("The termind server has 128 clients already; try again shortly."), human.stderr)

        // The idle ones are told and closed after the idle timeout; then others get in.
        XCTAssertTrue(waitFor({ server.connectionCount == 0 }, seconds: 15), "\(server.connectionCount) still connected")
        let notice = try XCTUnwrap(idle[0].readLine())
        XCTAssertTrue(notice.contains("socket.idle"), notice)
        XCTAssertNil(idle[0].readLine(), "the idle connection is closed after the notice")
        let served = try cli(["--json", "features"])
        XCTAssertEqual(served.status, 0, served.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(served.stdout.utf8), source: "stdout")["server"], .bool(true))
        for client in idle { client.close() }
    }

    func testAConnectionWithWorkInFlightIsNotIdleAndAClientReconnectsAfterAnIdleClose() throws {
        try start(idle: 1)
        // A stream that runs longer than the idle timeout while its client sends nothing.
        let client = try ControlClient(path: path)
        let body = try client.stream("test.sleep@1", body: Data("{}".utf8)) { _ in nil }
        XCTAssertEqual(try JSONCoding.parse(body, source: "reply")["slept"], .bool(true))
        // Left idle, the connection is closed; the next call connects again.
        XCTAssertTrue(waitFor({ server.connectionCount == 0 }, seconds: 5))
        let reply = try client.call("kernel.ping@1", body: Data(#"{"payload": "again"}"#.utf8))
        XCTAssertEqual(try JSONCoding.parse(reply, source: "reply")["payload"], .string("again"))
    }
}
