import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The control socket against real clients on a real Unix socket.
/// A booted kernel (no features) and a control server on a private socket: what the
/// socket tests share. A subclass adds streams of its own in `registerStreams`.
class ControlServerTestCase: XCTestCase {
    var directory: TemporaryDirectory!
    var kernel: Kernel!
    var server: ControlServer!
    var path: String { directory.file("run/control.sock") }

    /// Called before the server starts.
    func registerStreams(_ server: ControlServer) {}

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        kernel = Kernel(configuration: KernelConfiguration(registryPath: nil), sink: .disabled())
        try await kernel.boot()
        server = ControlServer(path: path, kernel: kernel, logger: kernel.logger)
        registerStreams(server)
        try server.start()
    }

    override func tearDown() async throws {
        server?.stop()
        await kernel?.shutdown()
        directory?.remove()
    }
}

final class ControlServerTests: ControlServerTestCase {

    private func ping(_ client: ControlClient, _ payload: String) throws -> String? {
        let reply = try client.call("kernel.ping@1", body: JSONCoding.encode(KernelContracts.Ping.Request(payload: payload)))
        return try JSONDecoder().decode(KernelContracts.Ping.Response.self, from: reply).payload
    }

    func testSocketAndFolderAreOwnerOnly() throws {
        var info = stat()
        XCTAssertEqual(lstat(path, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFSOCK)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(stat(directory.file("run"), &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o700)
    }

    func testManyConcurrentClientsAllGetTheirOwnReplies() async throws {
        let failures = SendableCounter()
        await withTaskGroup(of: Void.self) { group in
            for clientIndex in 0..<24 {
                group.addTask { [path] in
                    await blocking {
                        guard let client = try? ControlClient(path: path) else { failures.add(); return }
                        for call in 0..<50 {
                            let payload = "client-\(clientIndex)-call-\(call)"
                            let reply = try? client.call("kernel.ping@1", body: JSONCoding.encode(KernelContracts.Ping.Request(payload: payload)))
                            let echoed = reply.flatMap { try? JSONDecoder().decode(KernelContracts.Ping.Response.self, from: $0) }
                            if echoed?.payload != payload { failures.add() }
                        }
                    }
                }
            }
        }
        XCTAssertEqual(failures.value, 0)
    }

    func testBadEnvelopesGetAnErrorAndTheConnectionKeepsServing() throws {
        let client = try ControlClient(path: path)
        let cases: [(String, String)] = [
            ("this is not json\n", "envelope.malformed"),
            ("[1, 2]\n", "envelope.malformed"),
            (#"{"id": 9, "body": {}}"# + "\n", "envelope.malformed"),
            (#"{"id": 9, "contract": "nope.nothing@1", "body": {}}"# + "\n", "contract.unknown"),
            (#"{"id": 9, "contract": "kernel.ping@1", "body": {"payload": 1}}"# + "\n", "request.invalid"),
        ]
        for (line, code) in cases {
            XCTAssertTrue(client.sendRaw(Data(line.utf8)))
            let reply = try client.readEnvelope()
            XCTAssertThrowsError(try reply.result.get(), line) { XCTAssertEqual(($0 as? TermindError)?.code, code, line) }
        }
        XCTAssertEqual(try ping(client, "still here"), "still here")
    }

    func testAnOversizedEnvelopeIsSkippedAndTheNextOneIsServed() throws {
        let client = try SocketClientForTest(path: path)
        var big = Data(#"{"id": 1, "contract": "kernel.ping@1", "body": {"payload": ""#.utf8)
        big.append(Data(repeating: UInt8(ascii: "a"), count: Envelope.maximumBytes + 10))
        big.append(Data("\"}}\n".utf8))
        let line = big
        // Send from another thread: the server answers before the line ends.
        let sent = DispatchSemaphore(value: 0)
        Thread { client.send(line); sent.signal() }.start()
        let first = try XCTUnwrap(client.readLine())
        XCTAssertTrue(first.contains("envelope.too_large"), String(first.prefix(300)))
        sent.wait()
        client.send(#"{"id": 2, "contract": "kernel.ping@1", "body": {"payload": "after"}}"# + "\n")
        let after = try XCTUnwrap(client.readLine())
        XCTAssertTrue(after.contains(#""payload":"after""#), after)
    }

    func testPipelinedRequestsAreAnsweredByID() throws {
        let client = try ControlClient(path: path)
        for id in 1...20 {
            XCTAssertTrue(client.sendRaw(Envelope.encodeRequest(id: .integer(Int64(id)), contract: "kernel.ping@1", body: Data(#"{"payload":"p\#(id)"}"#.utf8))))
        }
        var seen: [Int64: String] = [:]
        for _ in 1...20 {
            let reply = try client.readEnvelope()
            guard case .integer(let id) = reply.id else { return XCTFail("reply without id") }
            seen[id] = try JSONCoding.parse(try reply.result.get(), source: "t")["payload"]?.stringValue
        }
        XCTAssertEqual(seen.count, 20)
        for id in 1...20 { XCTAssertEqual(seen[Int64(id)], "p\(id)") }
    }

    func testAClientThatVanishesOrStopsReadingDoesNotDisturbOthers() async throws {
        // One client sends half an envelope and disappears; another floods requests and never reads.
        let vanishing = try SocketClientForTest(path: path)
        vanishing.send(#"{"id": 1, "contract": "kernel.pi"#)
        vanishing.close()
        let flooder = try SocketClientForTest(path: path)
        let flood = Thread {
            let line = Envelope.encodeRequest(id: .integer(1), contract: "kernel.ping@1", body: Data(#"{"payload":"\#(String(repeating: "x", count: 4096))"}"#.utf8))
            for _ in 0..<3000 { if !flooder.send(line) { break } }
        }
        flood.start()
        try await Task.sleep(nanoseconds: 300_000_000)
        let client = try ControlClient(path: path)
        for i in 0..<100 { XCTAssertEqual(try ping(client, "ok\(i)"), "ok\(i)") }
        flooder.close()
    }

    func testASecondServerOnTheSamePathIsRefused() {
        let second = ControlServer(path: path, kernel: kernel, logger: kernel.logger)
        XCTAssertThrowsError(try second.start()) { XCTAssertEqual(($0 as? TermindError)?.code, "socket.in_use") }
    }

    func testAStaleSocketIsReplacedAndAPlainFileIsNot() throws {
        server.stop()
        // Leave a socket file behind with nobody listening, as a killed server would.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: Array(path.utf8)); raw[path.utf8.count] = 0 }
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(stale)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        server = ControlServer(path: path, kernel: kernel, logger: kernel.logger)
        try server.start()
        XCTAssertEqual(try ping(try ControlClient(path: path), "fresh"), "fresh")
        server.stop()

        try Data("not a socket".utf8).write(to: URL(fileURLWithPath: path))
        let blocked = ControlServer(path: path, kernel: kernel, logger: kernel.logger)
        XCTAssertThrowsError(try blocked.start()) { XCTAssertEqual(($0 as? TermindError)?.code, "socket.path_in_use") }
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "not a socket", "the file is left untouched")
        server = nil
    }

    func testASocketFolderOthersCanEnterIsRefused() throws {
        let open = directory.file("open")
        try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let server = ControlServer(path: open + "/control.sock", kernel: kernel, logger: kernel.logger)
        XCTAssertThrowsError(try server.start()) { XCTAssertEqual(($0 as? TermindError)?.code, "socket.directory_unsafe") }
    }

    func testTheClientRefusesAServerRunningAsAnotherUser() throws {
        guard getuid() == 0 else { throw XCTSkip("needs root to run a server as another user") }
        let shared = directory.file("shared")
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o777])
        chmod(directory.path, 0o755)
        let impostorPath = shared + "/control.sock"
        let script = """
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(1)
        print("ready", flush=True)
        c, _ = s.accept()
        data = c.recv(4096)
        sys.exit(3 if data else 0)
        """
        let impostor = try SpawnedProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, impostorPath],
                                          captureOutput: true)
        // "ready" comes after listen(): the socket file exists from bind() on, and a client
        // connecting between the two was refused, leaving the impostor waiting forever.
        XCTAssertNotNil(impostor.readOutput(until: "ready", timeout: 10), "the impostor listens")
        XCTAssertThrowsError(try ControlClient(path: impostorPath)) { XCTAssertEqual(($0 as? TermindError)?.code, "socket.peer_rejected") }
        impostor.closeInput()
        _ = impostor.readAll()
        XCTAssertEqual(impostor.wait(), 0, "the impostor received nothing")
    }

    func testAPeerWithAnotherUIDIsRejected() throws {
        guard getuid() == 0 else { throw XCTSkip("needs root to run a client as another user") }
        // Open the folder and socket to everyone so that only the peer-credential check stands.
        chmod(directory.path, 0o755)
        chmod(directory.file("run"), 0o755)
        chmod(path, 0o666)
        let script = """
        import socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        # The server answers a foreign uid at once and closes: read, don't write.
        print(s.recv(4096).decode())
        """
        let result = try ProcessRunner.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, path])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdout.contains("socket.peer_rejected"), result.stdout)
        XCTAssertFalse(result.stdout.contains("\"ok\":true"), result.stdout)
        // Our own uid is still served.
        XCTAssertEqual(try ping(try ControlClient(path: path), "me"), "me")
    }
}

/// A raw client that can misbehave (half-sent lines, never reading).
final class SocketClientForTest: @unchecked Sendable {
    let fd: Int32
    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: Array(path.utf8)); raw[path.utf8.count] = 0 }
        let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        guard ok == 0 else { throw TermindError(code: "test.connect", message: "cannot connect") }
    }
    @discardableResult func send(_ text: String) -> Bool { send(Data(text.utf8)) }
    @discardableResult func send(_ data: Data) -> Bool {
        data.withUnsafeBytes { Foundation.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) == $0.count }
    }
    func close() { shutdown(fd, Int32(SHUT_RDWR)); Foundation.close(fd) }

    /// Reads one reply line (byte by byte; test-sized replies only).
    func readLine() -> String? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return nil
    }
}

final class SendableCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

private final class BlockingOutcome<T>: @unchecked Sendable { var value: Result<T, Error>? }

/// Runs blocking client code on its own thread and returns what it returned or threw.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    let outcome = BlockingOutcome<T>()
    await blocking { outcome.value = Result { try body() } }
    return try outcome.value!.get()
}

/// Runs blocking client code on its own thread, off the cooperative pool the server uses.
func blocking(_ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { continuation in
        Thread { body(); continuation.resume() }.start()
    }
}
