import Foundation
import TermindCore
import VaultAPI
import TermindCrypto
import TermindHarness
import TermindSSH
import XCTest

/// Many channels over one session against a real sshd: independence, backpressure,
/// keepalive, cancellation, PTY shells, tunnels, remote listeners, sharing (SFTP itself: Tests/SFTPTests).
final class SSHChannelTests: XCTestCase {
    private var bed: SSHTestbed!
    private var directory: TemporaryDirectory { bed.directory }
    private var server: SSHServerFixture { bed.server }
    private var clientKey: String { bed.clientKey }
    private let user = NSUserName()
    private var trust: any HostKeyTrust { bed.trust! }

    override func setUp() async throws {
        bed = try await SSHTestbed(extraConfig: ["LogLevel DEBUG1"])
    }

    override func tearDown() async throws {
        await bed?.stop()
    }

    private var target: SSHTarget { bed.target }

    private func connect(keepalive: SSHKeepalive = SSHKeepalive()) async throws -> SSHConnection {
        try await SSHConnection.open(target, credentials: bed.credentials, trust: trust,
                                     keepalive: keepalive) { _ in .acceptOnce }
    }

    /// Reads a channel to its end, concatenating stdout.
    private func drain(_ channel: SSHChannel) async throws -> Data {
        var out = Data()
        while let (stream, chunk) = try await channel.next() {
            if stream == .stdout { out += chunk }
        }
        return out
    }

    func testChannelsRunConcurrentlyAndClosingOneLeavesTheOthers() async throws {
        let connection = try await connect()
        // An interactive cat waits for input while other channels start, run and finish.
        let cat = try await connection.openChannel(.exec("cat"))
        try await cat.write(Data("first\n".utf8))
        let started = Date()
        async let slow = connection.exec("sleep 1; echo slow")
        async let counted = connection.exec("seq 1 200000 | wc -l")
        async let many = withThrowingTaskGroup(of: String.self) { group in
            // sshd allows 10 sessions per connection (MaxSessions): cat, slow, counted and six.
            for index in 0..<6 { group.addTask { String(decoding: try await connection.exec("echo \(index)").stdout, as: UTF8.self) } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        let (slowResult, countResult, manyResults) = try await (slow, counted, many)
        XCTAssertEqual(String(decoding: slowResult.stdout, as: UTF8.self), "slow\n")
        XCTAssertEqual(String(decoding: countResult.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines), "200000")
        XCTAssertEqual(Set(manyResults), Set((0..<6).map { "\($0)\n" }))
        // The six quick commands did not queue behind the one-second one.
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)

        // cat is still open and echoes what it got; closing it leaves another channel running.
        let firstEcho = try await cat.next()
        let (stream, echoed) = try XCTUnwrap(firstEcho)
        XCTAssertEqual(stream, .stdout)
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "first\n")
        let other = try await connection.openChannel(.exec("cat"))
        cat.close()
        let value1 = try await cat.next()
        XCTAssertNil(value1, "a closed channel ends")
        try await other.write(Data("still here\n".utf8))
        other.closeInput()
        let drained = try await drain(other)
        XCTAssertEqual(String(decoding: drained, as: UTF8.self), "still here\n")
        XCTAssertEqual(other.exit?.status, 0)
        let after = try await connection.exec("echo after")
        XCTAssertEqual(after.stdout, Data("after\n".utf8))
        await connection.close()
    }

    func testAnUnreadChannelHoldsTheServerBackWithoutBlockingOthers() async throws {
        let connection = try await connect()
        let marker = directory.file("streamed")
        // 64 MiB that nobody reads yet: the window closes and the remote writer blocks.
        let flood = try await connection.openChannel(.exec("head -c 67108864 /dev/zero; echo done > \(marker)"), bufferLimit: 1 << 20)
        flood.closeInput()
        try await Task.sleep(nanoseconds: 1_500_000_000)
        // Meanwhile other channels work normally.
        for index in 0..<5 {
            let result = try await connection.exec("echo ping \(index)")
            XCTAssertEqual(String(decoding: result.stdout, as: UTF8.self), "ping \(index)\n")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the remote writer must be held back while nobody reads")
        var total = 0
        while let (_, chunk) = try await flood.next() { total += chunk.count }
        XCTAssertEqual(total, 64 << 20)
        XCTAssertEqual(flood.exit?.status, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker))
        await connection.close()
    }

    func testKeepaliveNoticesAServerThatStoppedAnswering() async throws {
        let connection = try await connect(keepalive: SSHKeepalive(interval: 1, countMax: 2))
        let reason = UncheckedSendableBox<TermindError?>(nil)
        connection.onClose { reason.value = $0 }
        let started = Date()
        // Freeze sshd and its session processes: the TCP connection stays up, nothing answers.
        server.signalAll(SIGSTOP)
        defer { server.signalAll(SIGCONT) }
        do {
            _ = try await connection.exec("sleep 60", timeout: 30)
            XCTFail("a frozen server cannot finish the command")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.connection_lost", error.message)
            XCTAssertTrue(error.message.contains("keepalive"), error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 15)
        XCTAssertFalse(connection.isAlive)
        XCTAssertEqual(reason.value?.code, "ssh.connection_lost")
    }

    func testCancellingACommandClosesOnlyItsChannelAndSignalsTheCommand() async throws {
        // sshd delivers signal requests only to sessions of unprivileged users (for root it
        // refuses: "session signalling requires privilege separation"), so as root the test
        // logs in as a throwaway account; the fixture's authorized_keys serves every user.
        let throwaway = getuid() == 0 ? try ThrowawayAccount() : nil
        defer { throwaway?.remove() }
        let account = throwaway?.name ?? user
        if throwaway != nil { chmod(server.directory.file("authorized_keys"), 0o644) }  // sshd reads it as that user
        let connection = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: account),
                                                      credentials: bed.credentials,
                                                      trust: trust) { _ in .acceptOnce }
        let task = Task { try await connection.exec("sleep 31.5; echo never") }
        try await Task.sleep(nanoseconds: 500_000_000)
        let started = Date()
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("a cancelled command cannot succeed")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.cancelled", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertTrue(connection.isAlive)
        // The remote command was told to stop (a TERM signal request to its process group).
        let stopped = try await eventually { try ProcessRunner.run("/usr/bin/pgrep", ["-u", account, "-f", "sleep 31.5"]).status != 0 }
        XCTAssertTrue(stopped, "the cancelled command still runs on the server; sshd said:\n\(server.log)")
        let alive = try await connection.exec("echo alive")
        XCTAssertEqual(alive.stdout, Data("alive\n".utf8))
        await connection.close()
    }

    func testAShellWithATerminalFollowsWindowChanges() async throws {
        let connection = try await connect()
        let shell = try await connection.openChannel(.shell, pty: PTYRequest(term: "xterm", columns: 80, rows: 24))
        try await shell.write(Data("stty size; echo TERM=$TERM\n".utf8))
        var seen = try await read(shell, until: "TERM=xterm")
        XCTAssertTrue(seen.contains("24 80"), seen)
        try await shell.resize(columns: 132, rows: 43)
        try await shell.write(Data("stty size\n".utf8))
        seen = try await read(shell, until: "43 132")
        XCTAssertTrue(seen.contains("43 132"), seen)
        do {
            try await shell.resize(columns: 0, rows: 10)
            XCTFail("a zero-width terminal is refused")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.bad_size")
        }
        try await shell.write(Data("exit 7\n".utf8))
        while try await shell.next() != nil {}
        XCTAssertEqual(shell.exit?.status, 7)
        await connection.close()
    }

    private func read(_ channel: SSHChannel, until marker: String) async throws -> String {
        var text = ""
        while !text.contains(marker) {
            guard let (_, chunk) = try await channel.next() else { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        return text
    }

    func testDirectTCPIPAndABridgedSocketReachAServerBehindSshd() async throws {
        let echo = try EchoServer()
        defer { echo.stop() }
        let connection = try await connect()
        let tunnel = try await connection.openDirectTCPIP(host: "127.0.0.1", port: echo.port)
        try await tunnel.write(Data("over the tunnel\n".utf8))
        let echoedBack = try await tunnel.next()
        let (_, back) = try XCTUnwrap(echoedBack)
        XCTAssertEqual(String(decoding: back, as: UTF8.self), "over the tunnel\n")
        tunnel.close()

        // A local socket bridged through the server, with 4 MiB each way.
        var pair: [Int32] = [-1, -1]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair), 0)
        try await connection.forward(pair[0], to: "127.0.0.1", port: echo.port)
        let payload = Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let local = pair[1]
        let writer = Thread { payload.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = send(local, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n <= 0 { break }
                offset += n
            }
            shutdown(local, Int32(SHUT_WR))
        } }
        writer.start()
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = Foundation.read(local, &buffer, buffer.count)
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
        }
        close(local)
        XCTAssertEqual(received.count, payload.count)
        XCTAssertTrue(received == payload)

        do {
            _ = try await connection.openDirectTCPIP(host: "127.0.0.1", port: try SSHServerFixture.freePort())
            XCTFail("nothing listens there")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.tunnel_refused", error.message)
        }
        let value3 = try await connection.exec("echo fine").stdout
        XCTAssertEqual(value3, Data("fine\n".utf8), "a refused tunnel leaves the session usable")
        await connection.close()
    }

    func testARemoteListenerHandsConnectionsToTheClient() async throws {
        // Keepalives run first: their answers must not be taken for the listen request's.
        let connection = try await connect(keepalive: SSHKeepalive(interval: 1, countMax: 3))
        try await Task.sleep(nanoseconds: 2_500_000_000)
        XCTAssertTrue(connection.isAlive, "an idle connection that answers keepalives stays up")
        let listener = try await connection.listen(host: "127.0.0.1", port: 0)
        XCTAssertGreaterThan(listener.boundPort, 0)
        async let accepted = listener.accept()
        // A client on the server's side connects to the remote port.
        let remote = Task.detached { try ProcessRunner.run("/usr/bin/python3", ["-c", """
            import socket
            s = socket.create_connection(("127.0.0.1", \(listener.boundPort)))
            s.sendall(b"hello from the far side\\n")
            print(s.recv(100).decode(), end="")
            """]) }
        let channel = try await accepted
        let first = try await channel.next()
        let (_, greeting) = try XCTUnwrap(first)
        XCTAssertEqual(String(decoding: greeting, as: UTF8.self), "hello from the far side\n")
        try await channel.write(Data("and back".utf8))
        channel.closeInput()
        let result = try await remote.value
        XCTAssertEqual(result.stdout, "and back", result.stderr)
        channel.close()
        try await listener.cancel()
        await connection.close()
    }

    func testStoppingAListenerEndsAPendingAcceptAndTheServerStopsListening() async throws {
        let connection = try await connect()
        let listener = try await connection.listen(host: "127.0.0.1", port: 0)
        let port = listener.boundPort
        let accepting = Task { try await listener.accept() }
        try await Task.sleep(nanoseconds: 300_000_000)  // the accept waits on the listener's lane
        let started = Date()
        try await listener.cancel()
        do {
            _ = try await accepting.value
            XCTFail("a stopped listener accepts nothing")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.closed", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "the accept did not keep the stop waiting")
        let refused = try await eventually(every: 0.1) {
            try ProcessRunner.run("/usr/bin/python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 1)"]).status != 0
        }
        XCTAssertTrue(refused, "the server stopped listening on \(port)")
        await connection.close()
    }

    func testThePoolSharesOneConnectionPerRoute() async throws {
        let pool = SSHConnectionPool()
        let key = clientKey
        let policy = SSHOpenPolicy(trust: trust, credentials: { _ in SSHCredentials(privateKey: Secret(key), agentSocket: "") }) { _ in .acceptOnce }
        let route = SSHRoute([target])
        async let first = pool.connection(for: route, policy: policy)
        async let second = pool.connection(for: route, policy: policy)
        let (a, b) = try await (first, second)
        XCTAssertTrue(a === b, "concurrent requests share one opening")
        let shell = try await a.openChannel(.exec("cat"))
        shell.close()
        let value8 = try await b.exec("echo shared").stdout
        XCTAssertEqual(value8, Data("shared\n".utf8))
        XCTAssertEqual(server.acceptedConnections(), 1, "one TCP connection and one authentication for the route")
        await a.close()
        // A closed connection leaves the pool; the next request opens a new generation.
        let c = try await pool.connection(for: route, policy: policy)
        XCTAssertFalse(c === a)
        XCTAssertNotEqual(c.generation, a.generation)
        await pool.closeAll()
        XCTAssertFalse(c.isAlive)
    }

    func testKeysHeldByAnSSHAgentAuthenticate() async throws {
        let agentDirectory = try TemporaryDirectory("termind-agent")
        defer { agentDirectory.remove() }
        let socket = agentDirectory.file("agent.sock")
        let agent = try SpawnedProcess("/usr/bin/ssh-agent", ["-D", "-a", socket], captureOutput: false)
        defer { agent.signal(SIGKILL); agent.wait() }
        agent.closeInput()
        _ = waitUntil { FileManager.default.fileExists(atPath: socket) }
        // A stranger key first, then the authorized one: the agent's keys are offered in turn.
        let stranger = agentDirectory.file("stranger")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ecdsa", "-N", "", "-f", stranger]).status, 0)
        let keyFile = agentDirectory.file("authorized")
        try clientKey.write(toFile: keyFile, atomically: true, encoding: .utf8)
        chmod(keyFile, 0o600)
        for file in [stranger, keyFile] {
            let added = try ProcessRunner.run("/usr/bin/ssh-add", ["-q", file], environment: ["SSH_AUTH_SOCK": socket])
            XCTAssertEqual(added.status, 0, added.stderr)
        }
        let connection = try await SSHConnection.open(target, credentials: SSHCredentials(agentSocket: socket), trust: trust) { _ in .acceptOnce }
        XCTAssertEqual(connection.authenticatedWith, "agent")
        let who = try await connection.exec("echo agent-ok")
        XCTAssertEqual(who.stdout, Data("agent-ok\n".utf8))
        await connection.close()

        // Only the stranger left: rejected, and the error says the agent's key was tried.
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-add", ["-D"], environment: ["SSH_AUTH_SOCK": socket]).status, 0)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-add", ["-q", stranger], environment: ["SSH_AUTH_SOCK": socket]).status, 0)
        do {
            _ = try await SSHConnection.open(target, credentials: SSHCredentials(agentSocket: socket), trust: trust) { _ in .acceptOnce }
            XCTFail("the stranger key is not authorized")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.auth_failed")
            XCTAssertTrue(error.message.contains("1 ssh-agent key was rejected"), error.message)
        }
    }

    func testAPassphraseProtectedKeyAuthenticatesAndAWrongPassphraseIsNamed() async throws {
        let path = directory.file("protected")
        let passphrase = "correct horse battery"
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ecdsa", "-b", "384", "-N", passphrase, "-f", path]).status, 0)
        let authorized = server.directory.file("authorized_keys")
        let lines = try String(contentsOfFile: authorized, encoding: .utf8) + (try String(contentsOfFile: path + ".pub", encoding: .utf8))
        try lines.write(toFile: authorized, atomically: true, encoding: .utf8)
        let key = Secret(try String(contentsOfFile: path, encoding: .utf8))
        let connection = try await SSHConnection.open(target, credentials: SSHCredentials(privateKey: key, passphrase: Secret(passphrase), agentSocket: ""),
                                                      trust: trust) { _ in .acceptOnce }
        XCTAssertEqual(connection.authenticatedWith, "publickey")
        await connection.close()
        do {
            _ = try await SSHConnection.open(target, credentials: SSHCredentials(privateKey: key, passphrase: Secret("wrong horse"), agentSocket: ""),
                                             trust: trust) { _ in .acceptOnce }
            XCTFail("a wrong passphrase cannot open the key")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "key.wrong_passphrase")
            XCTAssertFalse(error.message.contains("horse"), "passphrases never appear in errors")
        }
        do {
            _ = try await SSHConnection.open(target, credentials: SSHCredentials(privateKey: key, agentSocket: ""), trust: trust) { _ in .acceptOnce }
            XCTFail("an encrypted key needs its passphrase")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "key.passphrase_required")
        }
    }

    func testConcurrentUploadsOnSeveralChannelsArriveIntact() async throws {
        // Every channel sends at once, so libssh2's sends meet a full socket often; each
        // packet must still go out exactly once and in order.
        let connection = try await connect()
        let payloads = (0..<4).map { seed in Data((0..<(6 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 7 &+ seed &* 17) }) }
        let digests = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for (index, payload) in payloads.enumerated() {
                group.addTask {
                    let result = try await connection.exec("sha256sum | cut -d' ' -f1", stdin: payload)
                    return (index, String(decoding: result.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
                }
            }
            return try await group.reduce(into: [Int: String]()) { $0[$1.0] = $1.1 }
        }
        for (index, payload) in payloads.enumerated() {
            XCTAssertEqual(digests[index], Digest.sha256(payload).hexEncoded, "channel \(index)")
        }
        await connection.close()
    }

    func testWaitingReadersAndAcceptsCanBeCancelled() async throws {
        let connection = try await connect()
        // A reader waiting on a quiet shell.
        let shell = try await connection.openChannel(.shell, pty: PTYRequest())
        let reader = Task { () -> Bool in
            do {
                while try await shell.next() != nil {}
                return false
            } catch {
                return true
            }
        }
        try await Task.sleep(nanoseconds: 1_000_000_000)
        reader.cancel()
        let readerEnded = await reader.value
        XCTAssertTrue(readerEnded, "a cancelled reader ends with an error")
        shell.close()

        // An accept nobody satisfies, cancelled; the listener still works afterwards.
        let listener = try await connection.listen(host: "127.0.0.1", port: 0)
        let waiting = Task { try await listener.accept() }
        try await Task.sleep(nanoseconds: 300_000_000)
        waiting.cancel()
        do {
            _ = try await waiting.value
            XCTFail("nothing connected")
        } catch {}
        async let next = listener.accept()
        let port = listener.boundPort
        let client = Task.detached { try ProcessRunner.run("/usr/bin/python3", ["-c", """
            import socket
            s = socket.create_connection(("127.0.0.1", \(port))); s.sendall(b"x"); s.close()
            """]) }
        let channel = try await next
        let first = try await channel.next()
        XCTAssertEqual(first?.1, Data("x".utf8), "the connection after a cancelled accept is not lost")
        _ = try await client.value
        channel.close()
        try await listener.cancel()
        await connection.close()
    }

    func testThePoolClosesConnectionsNobodyUses() async throws {
        let pool = SSHConnectionPool(idleTimeout: 2)
        let key = clientKey
        let policy = SSHOpenPolicy(trust: trust, credentials: { _ in SSHCredentials(privateKey: Secret(key), agentSocket: "") }) { _ in .acceptOnce }
        let connection = try await pool.connection(for: SSHRoute([target]), policy: policy)
        // Busy for 3 s (longer than the timeout): kept.
        let busy = try await connection.exec("sleep 3; echo done")
        XCTAssertEqual(busy.stdout, Data("done\n".utf8))
        XCTAssertTrue(connection.isAlive, "a connection in use is never idle")
        // Then idle: closed within a couple of sweeps, and the pool forgets it.
        let swept = await eventually { !connection.isAlive }
        XCTAssertTrue(swept, "an idle connection is closed")
        let routes = await pool.routes
        XCTAssertEqual(routes, [])
        await pool.closeAll()
    }

    func testManyCancelledCommandsLeaveTheSessionSound() async throws {
        // Cancellation at every stage of opening (queued, opening, starting, running):
        // late channels are closed after their queued requests, never used after free.
        let connection = try await connect()
        for round in 0..<4 {
            var tasks: [Task<ExecResult, Error>] = []
            for _ in 0..<8 { tasks.append(Task { try await connection.exec("echo hi") }) }
            try await Task.sleep(nanoseconds: UInt64(round) * 5_000_000)
            for (index, task) in tasks.enumerated() where index % 2 == 0 { task.cancel() }
            for task in tasks { _ = try? await task.value }
        }
        let after = try await connection.exec("echo sound")
        XCTAssertEqual(after.stdout, Data("sound\n".utf8))
        XCTAssertTrue(connection.isAlive)
        await connection.close()
    }

    func testCancellingEndsAWaitForTheAgentsConfirmation() async throws {
        // The key needs confirmation (ssh-add -c) and the agent's askpass never answers.
        let agentDirectory = try TemporaryDirectory("termind-agent")
        defer { agentDirectory.remove() }
        let askpass = try agentDirectory.write("askpass.sh", "#!/bin/sh\ntouch \(agentDirectory.file("asked"))\nexec sleep 60\n")
        chmod(askpass, 0o755)
        var environment = ProcessInfo.processInfo.environment
        environment["SSH_ASKPASS"] = askpass
        environment["SSH_ASKPASS_REQUIRE"] = "force"
        environment["DISPLAY"] = ":0"
        let socket = agentDirectory.file("agent.sock")
        let agent = try SpawnedProcess("/usr/bin/ssh-agent", ["-D", "-a", socket], environment: environment, captureOutput: false)
        defer {
            agent.signal(SIGKILL)
            agent.wait()
            _ = try? ProcessRunner.run("/usr/bin/pkill", ["-f", askpass])
        }
        agent.closeInput()
        _ = waitUntil { FileManager.default.fileExists(atPath: socket) }
        let keyFile = agentDirectory.file("confirm")
        try clientKey.write(toFile: keyFile, atomically: true, encoding: .utf8)
        chmod(keyFile, 0o600)
        let added = try ProcessRunner.run("/usr/bin/ssh-add", ["-q", "-c", keyFile], environment: ["SSH_AUTH_SOCK": socket])
        XCTAssertEqual(added.status, 0, added.stderr)

        let (target, trust) = (self.target, self.trust)
        let attempt = Task {
            try await SSHConnection.open(target, credentials: SSHCredentials(agentSocket: socket), trust: trust) { _ in .acceptOnce }
        }
        let asked = await eventually { FileManager.default.fileExists(atPath: agentDirectory.file("asked")) }
        XCTAssertTrue(asked, "the agent is waiting for its confirmation")
        let cancelled = Date()
        attempt.cancel()
        do {
            _ = try await attempt.value
            XCTFail("nobody confirmed")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "ssh.cancelled", error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(cancelled), 3, "cancelling ends the wait for the agent")
    }

    func testRoutesAreCheckedBeforeAnythingConnects() async throws {
        let hop = { (host: String, port: Int) in SSHTarget(host: host, port: port, username: "u") }
        XCTAssertThrowsError(try SSHRoute([hop("a", 22), hop("b", 22), hop("A", 22)]).validate()) { error in
            XCTAssertEqual((error as? TermindError)?.code, "ssh.route_cycle")
        }
        XCTAssertThrowsError(try SSHRoute((1...9).map { hop("h\($0)", 22) }).validate()) { error in
            XCTAssertEqual((error as? TermindError)?.code, "ssh.route_too_long")
        }
        XCTAssertNoThrow(try SSHRoute((1...8).map { hop("h\($0)", 22) }).validate())
        XCTAssertNoThrow(try SSHRoute([hop("a", 22), hop("a", 2222)]).validate(), "same host, other port is another endpoint")
        XCTAssertThrowsError(try SSHRoute([]).validate())
        XCTAssertThrowsError(try SSHRoute([hop("a", 0)]).validate())
    }
}

final class UncheckedSendableBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

