import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindSSH
import XCTest

/// The pool as its users meet it, against a real sshd: callers with different policies
/// sharing one opening, leases and open SFTP sessions against the idle sweep, cancelled waiters.
final class SSHConnectionPoolTests: XCTestCase {
    private var bed: SSHTestbed!
    private var directory: TemporaryDirectory { bed.directory }
    /// The testbed's sshd, or one a test started in its place.
    private var server: SSHServerFixture!
    private var clientKey: String { bed.clientKey }
    private var route: SSHRoute { SSHRoute([SSHTarget(host: "127.0.0.1", port: server.port, username: NSUserName())]) }
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

    /// Answers the host-key question with `answer`, after noting it in `asked` and waiting
    /// `delay` milliseconds (a caller that takes its time, or never answers).
    private func policy(answer: HostKeyAnswer, asked: AskedLog? = nil, delay milliseconds: UInt64 = 0) -> SSHOpenPolicy {
        let key = clientKey
        return SSHOpenPolicy(trust: trust, credentials: { _ in SSHCredentials(privateKey: Secret(key), agentSocket: "") }) { question in
            asked?.append(question)
            if milliseconds > 0 { try? await Task.sleep(nanoseconds: milliseconds * 1_000_000) }
            return answer
        }
    }

    func testANonInteractiveCallerSharingAnOpeningNeverFailsAnInteractiveOne() async throws {
        let pool = SSHConnectionPool()
        // A sampler that cannot ask anyone opens first; a person asks for the same route meanwhile.
        let route = self.route
        let asked = AskedLog()
        let samplerPolicy = policy(answer: .unanswered(reason: "a sampler cannot ask."), asked: asked, delay: 500)
        let personPolicy = policy(answer: .acceptOnce)
        let sampler = Task { try await pool.connection(for: route, policy: samplerPolicy) }
        // The person comes while the sampler's opening waits on its host-key question.
        _ = await eventually { !asked.questions.isEmpty }
        XCTAssertEqual(asked.questions.count, 1, "the sampler's opening reached the host-key question")
        let person = Task { try await pool.connection(for: route, policy: personPolicy) }
        do {
            _ = try await sampler.value
            XCTFail("the sampler could not accept the unknown key")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.host_key_unknown", error.message)
        }
        let connection = try await person.value
        let result = try await connection.exec("echo person")
        XCTAssertEqual(result.stdout, Data("person\n".utf8))
        await pool.closeAll()
    }

    func testAFeatureSharesAConnectionOnlyWithRequestsThatPresentTheSameCredentials() async throws {
        // A second key the server also accepts.
        let otherPath = directory.file("other")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", otherPath]).status, 0)
        server.stop()
        server = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("client.pub"), encoding: .utf8),
                                                       try String(contentsOfFile: otherPath + ".pub", encoding: .utf8)])
        let pool = SSHConnectionPool()
        let view = SSHConnectionsView(pool: pool)
        let otherKey = try String(contentsOfFile: otherPath, encoding: .utf8)
        let mine = policy(answer: .acceptOnce)
        let theirs = SSHOpenPolicy(trust: trust, credentials: { _ in SSHCredentials(privateKey: Secret(otherKey), agentSocket: "") }) { _ in .acceptOnce }
        let first = try await view.connection(for: route, policy: mine)
        let again = try await view.connection(for: route, policy: mine)
        XCTAssertTrue(first === again, "the same credentials share the route's connection")
        let other = try await view.connection(for: route, policy: theirs)
        XCTAssertFalse(first === other, "other credentials never get a connection the first ones authenticated")
        let output = try await other.exec("echo other").stdout
        XCTAssertEqual(output, Data("other\n".utf8))
        await pool.closeAll()
    }

    func testLeasesAndOpenChannelsKeepAConnectionFromTheIdleSweep() async throws {
        let pool = SSHConnectionPool(idleTimeout: 0.5)
        let lease = try await pool.lease(for: route, policy: policy(answer: .acceptOnce))
        let leasedCount = await pool.leases(for: route)
        XCTAssertEqual(leasedCount, 1)
        try await Task.sleep(nanoseconds: 1_500_000_000)  // three sweeps
        XCTAssertTrue(lease.connection.isAlive, "a leased connection is never swept")
        // An open channel (an SFTP subsystem, say) holds the connection on its own.
        let channel = try await lease.connection.openChannel(.subsystem("sftp"))
        lease.release()
        try await Task.sleep(nanoseconds: 1_500_000_000)
        XCTAssertTrue(lease.connection.isAlive, "an open channel keeps its connection")
        channel.close()
        let swept = await eventually { !lease.connection.isAlive }
        XCTAssertTrue(swept, "unleased and idle: swept")
        let routes = await pool.routes
        XCTAssertEqual(routes, [])
        await pool.closeAll()
    }

    func testACancelledWaiterStopsWaitingAtOnceAndAnOpeningNobodyWantsIsCancelled() async throws {
        let pool = SSHConnectionPool()
        let asked = AskedLog()
        let slow = policy(answer: .reject, asked: asked, delay: 30_000)  // a person who never answers
        let route = self.route
        let waiter = Task { try await pool.connection(for: route, policy: slow) }
        _ = await eventually { !asked.questions.isEmpty }
        XCTAssertEqual(asked.questions.count, 1, "the opening reached the host-key question")
        let started = Date()
        waiter.cancel()
        do {
            _ = try await waiter.value
            XCTFail("a cancelled waiter gets no connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.cancelled", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "no wait for the person's 30 s")
        // The next caller starts afresh and is asked again.
        let connection = try await pool.connection(for: route, policy: policy(answer: .acceptOnce))
        XCTAssertTrue(connection.isAlive)
        await pool.closeAll()
    }

    /// closeAll cancels an opening still in its handshake and returns only once it has
    /// ended, its socket closed: nothing of the pool is left running (on an engine thread, in
    /// OpenSSL) when the process goes on to exit.
    func testClosingThePoolWaitsForTheOpeningsItCancels() async throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0)
        defer { relay.stop() }
        relay.holdNewConnections()
        let pool = SSHConnectionPool()
        let route = SSHRoute([SSHTarget(host: "127.0.0.1", port: relay.port, username: NSUserName())])
        let accepting = policy(answer: .acceptOnce)
        let waiter = Task { try await pool.connection(for: route, policy: accepting) }
        _ = await eventually { relay.heldCount > 0 }
        XCTAssertEqual(relay.heldCount, 1, "the opening connected and waits for the server's banner")
        XCTAssertEqual(relay.heldAbandoned, 0)
        let started = Date()
        await pool.closeAll()
        XCTAssertEqual(relay.heldAbandoned, 1, "closeAll returned while its cancelled opening still held its socket")
        XCTAssertLessThan(Date().timeIntervalSince(started), 2, "cancelled at once, not after the handshake deadline")
        do {
            _ = try await waiter.value
            XCTFail("the waiter of a closed pool gets no connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.closed", error.message)
        }
    }

    func testARouteNobodyAnswersOnRestsBetweenAttemptsAWaitingCallerCanLeaveAndAClosedPoolOpensNothing() async throws {
        let pool = SSHConnectionPool()
        // A port nothing listens on: every opening is refused, for every caller.
        let refused = SSHRoute([SSHTarget(host: "127.0.0.1", port: try SSHServerFixture.freePort(), username: NSUserName())])
        let answer = policy(answer: .acceptOnce)
        var failedAt: [Double] = []
        for _ in 0..<3 {
            do {
                _ = try await pool.connection(for: refused, policy: answer)
                return XCTFail("nothing listens there")
            } catch let error as TermindError {
                XCTAssertNotEqual(error.code, "ssh.cancelled", error.message)
                failedAt.append(Date().timeIntervalSince1970)
            }
        }
        // The second attempt waited for the first rest (0.25 s), the third for the second (0.5 s).
        XCTAssertGreaterThanOrEqual(failedAt[1] - failedAt[0], 0.24)
        XCTAssertGreaterThanOrEqual(failedAt[2] - failedAt[1], 0.49)
        // A caller resting behind the third failure (1 s) leaves at once when cancelled.
        let waiting = Task { try await pool.connection(for: refused, policy: answer) }
        try await Task.sleep(nanoseconds: 100_000_000)
        let cancelledAt = Date()
        waiting.cancel()
        do {
            _ = try await waiting.value
            XCTFail("the cancelled caller got a connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.cancelled", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(cancelledAt), 0.5, "the rest does not hold a cancelled caller")
        // The live server's route is another route: it opens at once.
        let live = try await pool.connection(for: route, policy: answer)
        let said = try await live.exec("echo ok")
        XCTAssertEqual(said.stdout, Data("ok\n".utf8))
        // One more failure (a rest of 2 s follows): a caller resting behind it hears at once that the pool closed.
        _ = try? await pool.connection(for: refused, policy: answer)
        let resting = Task { try await pool.connection(for: refused, policy: answer) }
        try await Task.sleep(nanoseconds: 100_000_000)
        let closedAt = Date()
        await pool.closeAll()
        do {
            _ = try await resting.value
            XCTFail("a closed pool opened a connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.closed", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(closedAt), 0.5, "closing does not wait out a caller's rest")
        XCTAssertFalse(live.isAlive)
        do {
            _ = try await pool.connection(for: route, policy: answer)
            XCTFail("a closed pool opened a connection")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.closed", error.message)
        }
    }
}
