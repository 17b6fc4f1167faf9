import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindSSH
import XCTest

/// Liveness that local activity cannot fake: only bytes from the server count, and a request
/// the server never answers cannot wedge the session — against a real sshd frozen with SIGSTOP.
final class SSHLivenessTests: XCTestCase {
    private var bed: SSHTestbed!
    private var directory: TemporaryDirectory { bed.directory }
    /// The testbed's sshd, or one a test started in its place.
    private var server: SSHServerFixture!
    private var trust: any HostKeyTrust { bed.trust! }

    override func setUp() async throws {
        bed = try await SSHTestbed()
        server = bed.server
    }

    override func tearDown() async throws {
        if let server, server !== bed?.server {
            server.signalAll(SIGCONT)
            server.stop()
        }
        await bed?.stop()
    }

    private func connect(keepalive: SSHKeepalive = SSHKeepalive(), deadlines: SSHDeadlines = SSHDeadlines()) async throws -> SSHConnection {
        try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: NSUserName()),
                                     credentials: bed.credentials, trust: trust,
                                     deadlines: deadlines, keepalive: keepalive) { _ in .acceptOnce }
    }

    func testAFrozenServerIsFoundLostWhileACallerKeepsSubmittingWork() async throws {
        let connection = try await connect(keepalive: SSHKeepalive(interval: 1, countMax: 2))
        let shell = try await connection.openChannel(.shell, pty: PTYRequest())
        let reason = UncheckedSendableBox<TermindError?>(nil)
        connection.onClose { reason.value = $0 }
        server.signalAll(SIGSTOP)
        let started = Date()
        // A window change needs no answer: it completes locally, every second, forever.
        while connection.isAlive && Date().timeIntervalSince(started) < 20 {
            try? await shell.resize(columns: 80 + Int.random(in: 0..<40), rows: 24)
            try await Task.sleep(nanoseconds: 1_000_000_000)
        }
        XCTAssertFalse(connection.isAlive, "busy local work kept a frozen server alive")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "lost within the keepalive bound (3 s), with slack for a loaded machine")
        // isAlive turns false just before the engine thread tells the observers why.
        _ = await eventually(every: 0.01) { reason.value != nil }
        XCTAssertEqual(reason.value?.code, "ssh.connection_lost")
        XCTAssertTrue(reason.value?.message.contains("keepalive") ?? false, reason.value?.message ?? "")
        server.signalAll(SIGCONT)
        let fresh = try await connect()
        let result = try await fresh.exec("echo back")
        XCTAssertEqual(result.stdout, Data("back\n".utf8))
        await fresh.close()
    }

    func testProbesAndOpensDuringTheServersKeyReExchangesKeepTheConnection() async throws {
        // The SSHRouteTests flake ended a healthy connection with "lost during keepalive:
        // Unable to send channel-open request": libssh2 says so when sending the open fails,
        // and with termind's send callback (it never fails) that leaves the re-exchange it
        // runs first when the server started one. Here the server re-keys every second while
        // probes (1 s interval, idle in between) and channel opens keep coming.
        server.stop()
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("client.pub"), encoding: .utf8)],
                                      extraConfig: ["RekeyLimit default 1s", "LogLevel DEBUG1"], hostKeyTypes: ["ed25519"])
        let logFile = directory.file("engine.log")
        let connection = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: NSUserName()),
                                                      credentials: bed.credentials, trust: trust,
                                                      keepalive: SSHKeepalive(interval: 1, countMax: 3),
                                                      logger: Logger(label: "ssh", sink: try .file(at: logFile, level: .debug))) { _ in .acceptOnce }
        let reason = UncheckedSendableBox<TermindError?>(nil)
        connection.onClose { reason.value = $0 }
        let started = Date()
        var commands = 0
        while Date().timeIntervalSince(started) < 12 {
            let result = try await connection.exec("echo \(commands)")
            XCTAssertEqual(result.stdout, Data("\(commands)\n".utf8))
            commands += 1
            // Idle long enough now and then for a probe to go out.
            try await Task.sleep(nanoseconds: commands % 4 == 0 ? 1_500_000_000 : 150_000_000)
        }
        XCTAssertTrue(connection.isAlive, "the connection ended: \(reason.value?.message ?? "no reason")")
        let rekeys = server.log.components(separatedBy: "kex: client->server cipher:").count - 1
        XCTAssertGreaterThan(rekeys, 5, "sshd re-keyed about once a second")
        let probes = (try String(contentsOfFile: logFile, encoding: .utf8)).components(separatedBy: "ssh.keepalive.probe").count - 1
        XCTAssertGreaterThan(probes, 2, "keepalive probes went out meanwhile")
        await connection.close()
    }

    func testAnOpenGivenUpBehindAnUnansweredProbeEndsTheConnectionAfterTheGrace() async throws {
        // A probe holds the session lane until the server answers it. With the server frozen,
        // an open behind it never starts and is given up at its deadline; the probe then counts
        // as given up too, so the grace ends the connection — long before keepalive silence
        // would (here (100 + 1) × 1 s).
        var deadlines = SSHDeadlines()
        deadlines.channel = 1
        deadlines.abandonedGrace = 2
        let connection = try await connect(keepalive: SSHKeepalive(interval: 1, countMax: 100), deadlines: deadlines)
        defer { server.signalAll(SIGCONT) }
        try await assertAGivenUpOpenEndsTheConnection(connection, "the unanswered probe held the session lane with no end") {
            try await Task.sleep(nanoseconds: 1_600_000_000)  // silent for the interval: a probe goes out, unanswered
        }
    }

    /// Freezes the server, runs `meanwhile`, gives up an open (its 1 s deadline), and asserts
    /// that the connection then ends, lost, within the grace.
    private func assertAGivenUpOpenEndsTheConnection(_ connection: SSHConnection, _ failure: String,
                                                     meanwhile: () async throws -> Void = {}) async throws {
        let reason = UncheckedSendableBox<TermindError?>(nil)
        connection.onClose { reason.value = $0 }
        server.signalAll(SIGSTOP)
        try await meanwhile()
        do {
            _ = try await connection.openChannel(.exec("true"))
            XCTFail("a frozen server cannot open a channel")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.timeout", error.message)
        }
        let started = Date()
        while connection.isAlive && Date().timeIntervalSince(started) < 15 { try await Task.sleep(nanoseconds: 100_000_000) }
        XCTAssertFalse(connection.isAlive, failure)
        // isAlive turns false just before the engine thread tells the observers why.
        _ = await eventually(every: 0.01) { reason.value != nil }
        XCTAssertEqual(reason.value?.code, "ssh.connection_lost")
        XCTAssertTrue(reason.value?.message.contains("after it was given up") ?? false, reason.value?.message ?? "")
    }

    func testAChannelOpenTheServerNeverAnswersCannotWedgeTheSession() async throws {
        var deadlines = SSHDeadlines()
        deadlines.channel = 1
        deadlines.abandonedGrace = 2
        // Keepalive off: only the abandoned open can end this session.
        let connection = try await connect(keepalive: SSHKeepalive(interval: 0), deadlines: deadlines)
        try await assertAGivenUpOpenEndsTheConnection(connection, "the given-up open held the session lane with no end")
        do {
            _ = try await connection.openChannel(.exec("true"))
            XCTFail("the closed connection cannot open more")
        } catch let error as TermindError {
            XCTAssertNotEqual(error.code, "ssh.timeout", "later opens fail at once instead of waiting behind it: \(error.message)")
        }
        server.signalAll(SIGCONT)
        let fresh = try await connect()
        let ok = try await fresh.exec("echo ok")
        XCTAssertEqual(ok.exitStatus, 0)
        await fresh.close()
    }

    /// A direct-tcpip open is answered only once sshd's own connect ends (minutes, for a target
    /// that drops SYNs): waiting for it blocks the probe, and that silence must not end the
    /// connection — while a frozen server under an ordinary open still does (SSHChannelTests).
    func testATunnelToATargetThatNeverAnswersDoesNotEndTheConnection() async throws {
        let (listener, port, fillers) = try Self.listenerThatDropsConnections()
        defer { ([listener] + fillers).forEach { _ = Glibc.close($0) } }
        var deadlines = SSHDeadlines()
        deadlines.channel = 8
        let connection = try await connect(keepalive: SSHKeepalive(interval: 1, countMax: 1), deadlines: deadlines)
        let reason = UncheckedSendableBox<TermindError?>(nil)
        connection.onClose { reason.value = $0 }
        let started = Date()
        do {
            _ = try await connection.openDirectTCPIP(host: "127.0.0.1", port: port)
            XCTFail("a target that drops every SYN cannot be reached")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.timeout", error.message)
        }
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 6, "the open ran to its own deadline, well past the 2 s keepalive bound")
        XCTAssertTrue(connection.isAlive, "silence while sshd connects is not a dead server: \(reason.value?.message ?? "")")
        XCTAssertNil(reason.value)
        await connection.close()
    }

    /// A loopback listener whose accept queue is full, so the kernel drops further SYNs and a
    /// connect to it waits out its retries.
    private static func listenerThatDropsConnections() throws -> (Int32, Int, [Int32]) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Bool in
                Glibc.bind(listener, raw, length) == 0 && listen(listener, 0) == 0 && getsockname(listener, raw, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRNOTAVAIL) }
        var fillers: [Int32] = []
        for _ in 0..<2 {
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            _ = fcntl(filler, F_SETFL, O_NONBLOCK)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(filler, $0, length) } }
            fillers.append(filler)
        }
        usleep(300_000)
        return (listener, Int(UInt16(bigEndian: address.sin_port)), fillers)
    }
}
