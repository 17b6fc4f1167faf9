import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindSSH
import XCTest

/// A person's terminal moved by the SSH engine itself (`TerminalLink`), against a real
/// sshd, with a pseudo-terminal pair standing in for the person's terminal: the test types
/// into its master end and reads the screen from it, the link holds the slave end.
final class TerminalLinkTests: XCTestCase {
    private var bed: SSHTestbed!

    override func setUp() async throws {
        bed = try await SSHTestbed()
    }

    override func tearDown() async throws {
        await bed?.stop()
    }

    /// A shell on a remote terminal whose output goes through `tap` (everything, by default).
    private func shell(tap: TerminalTap = TerminalTap(output: { $0 })) async throws -> (SSHConnection, SSHChannel) {
        let trust = try XCTUnwrap(bed.trust)
        let connection = try await SSHConnection.open(bed.target, credentials: bed.credentials, trust: trust) { _ in .acceptOnce }
        // A plain prompt, so that what the test types and reads is easy to tell apart.
        let channel = try await connection.openChannel(.exec("PS1='$ ' exec /bin/sh -i"), pty: PTYRequest(term: "dumb", columns: 80, rows: 24), terminal: tap)
        return (connection, channel)
    }

    /// A shell with a fresh terminal linked to it (resumed unless asked otherwise).
    private func linkedShell(detachable: Bool = false, resumed: Bool = true) async throws -> (FakeTerminal, SSHConnection, SSHChannel, TerminalLink) {
        let terminal = try FakeTerminal()
        let (connection, channel) = try await shell()
        let link = try TerminalLink(input: terminal.slave, output: terminal.slave, detachable: detachable)
        try await channel.link(link)
        if resumed { link.resume() }
        return (terminal, connection, channel, link)
    }

    func testNothingMovesUntilResumeAndThePrefixComesBeforeWhatWasHeld() async throws {
        let (terminal, connection, channel, link) = try await linkedShell(resumed: false)
        terminal.type("echo TYPED-$((40+2))\r")
        // Held: the keys wait in the terminal, the shell's prompt waits in the link.
        XCTAssertEqual(terminal.read(for: 0.8), "", "a held link wrote to the terminal")
        link.resume(prefix: Data("PREFIX\r\n".utf8))
        let screen = terminal.read(until: "TYPED-42\r\n")
        XCTAssertTrue(screen.hasPrefix("PREFIX\r\n"), "the prefix goes before the held output: \(screen.debugDescription)")
        channel.close()
        await connection.close()
    }

    func testEscapesAreReadOnTheEngineAndHoldTheKeysUntilTheNextResume() async throws {
        let (terminal, connection, channel, link) = try await linkedShell(detachable: true)
        var events = link.events.makeAsyncIterator()
        terminal.type("echo UP-$((1+1))\r")
        _ = terminal.read(until: "UP-2\r\n")
        // ~? is answered on the terminal itself and never reaches the shell.
        terminal.type("~?")
        XCTAssertTrue(terminal.read(until: "detach").contains("Supported escape sequences"))
        // Mid-line a tilde is just typed.
        terminal.type("echo A~.B\r")
        XCTAssertTrue(terminal.read(until: "A~.B\r\n").contains("A~.B"))
        // ~^Z in the middle of one read: the keys before it go, the output and the keys after
        // it wait for the next resume (the terminal is the local shell's meanwhile).
        terminal.type("echo BEFORE-$((1+1))\r~\u{1A}echo AFTER-$((2+3))\r")
        let suspend = await events.next()
        XCTAssertEqual(suspend, .suspend)
        XCTAssertFalse(terminal.read(for: 0.8).contains("BEFORE-2"), "output went on after ~^Z")
        link.resume()
        let resumed = terminal.read(until: "AFTER-5\r\n")
        let before = try XCTUnwrap(resumed.range(of: "BEFORE-2"), resumed), after = try XCTUnwrap(resumed.range(of: "AFTER-5"), resumed)
        XCTAssertLessThan(before.lowerBound, after.lowerBound)
        // ~d: the client detaches; no key is read again, resumed or not.
        terminal.type("\r~d")
        let detach = await events.next()
        XCTAssertEqual(detach, .detach)
        terminal.type("echo GONE-$((3+3))\r")
        link.resume()
        XCTAssertFalse(terminal.read(for: 0.8).contains("GONE-6"), "keys went on after ~d")
        channel.close()
        await connection.close()
    }

    func testTildeDotEndsKeysAndOutputForGood() async throws {
        let (terminal, connection, channel, link) = try await linkedShell()
        var events = link.events.makeAsyncIterator()
        terminal.type("while :; do echo tick; sleep 0.1; done\r")
        XCTAssertTrue(terminal.read(until: "tick\r\ntick\r\n").contains("tick"))
        terminal.type("\r~.")
        let disconnect = await events.next()
        XCTAssertEqual(disconnect, .disconnect)
        _ = terminal.read(for: 0.3)  // what was on its way
        link.resume()  // a late ready (the client continued) changes nothing
        XCTAssertEqual(terminal.read(for: 0.8), "", "output went on after ~.")
        channel.close()
        await connection.close()
    }

    func testPauseHoldsTheOutputAndATerminalThatGoesAwayIsReported() async throws {
        let (terminal, connection, channel, link) = try await linkedShell()
        terminal.type("while :; do echo tick; sleep 0.1; done\r")
        XCTAssertTrue(terminal.read(until: "tick\r\ntick\r\n").contains("tick"))
        link.pause()
        _ = terminal.read(for: 0.3)  // what was on its way
        XCTAssertEqual(terminal.read(for: 0.8), "", "a paused link wrote to the terminal")
        link.resume()
        XCTAssertTrue(terminal.read(until: "tick\r\n").contains("tick"), "output resumes")
        // The window closes: the next write fails with EIO, and the link says so.
        var events = link.events.makeAsyncIterator()
        terminal.closeMaster()
        let hungUp = await events.next()
        XCTAssertEqual(hungUp, .hungUp)
        channel.close()
        await connection.close()
    }

    func testUnlinkingHandsTheOutputOnAndTheTapSeesItAll() async throws {
        let seen = SeenOutput()
        let (connection, channel) = try await shell(tap: TerminalTap(output: { seen.add($0); return $0 }))
        let first = try FakeTerminal()
        let firstLink = try TerminalLink(input: first.slave, output: first.slave, detachable: true)
        try await channel.link(firstLink)
        firstLink.resume()
        first.type("echo ONE-$((0+1))\r")
        _ = first.read(until: "ONE-1\r\n")
        await channel.unlink(firstLink)
        // Nothing linked: the tap still sees the output, the old terminal does not.
        try await channel.write(Data("echo TWO-$((1+1))\r".utf8))
        let deadline = Date().addingTimeInterval(10)
        while !seen.text.contains("TWO-2\r\n"), Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        XCTAssertTrue(seen.text.contains("TWO-2\r\n"), seen.text)
        let second = try FakeTerminal()
        let secondLink = try TerminalLink(input: second.slave, output: second.slave, detachable: true)
        try await channel.link(secondLink)
        secondLink.resume()
        second.type("echo THREE-$((1+2))\r")
        XCTAssertTrue(second.read(until: "THREE-3\r\n").contains("THREE-3"))
        XCTAssertFalse(first.read(for: 0.3).contains("THREE"), "an unlinked terminal got output")
        channel.close()
        await connection.close()
    }
}

/// A pseudo-terminal pair: the test is the person at the master end; the slave end, set
/// raw, is the terminal a link takes.
private final class FakeTerminal {
    private(set) var master: Int32
    let slave: Int32

    init() throws {
        var master: Int32 = -1, slave: Int32 = -1
        guard openpty(&master, &slave, nil, nil, nil) == 0 else { throw TermindError.badRequest("openpty failed: \(String(cString: strerror(errno)))") }
        var modes = termios()
        tcgetattr(slave, &modes)
        cfmakeraw(&modes)
        tcsetattr(slave, TCSANOW, &modes)
        self.master = master
        self.slave = slave
    }

    deinit {
        if master >= 0 { close(master) }
        close(slave)
    }

    func type(_ text: String) { _ = text.withCString { write(master, $0, strlen($0)) } }

    func closeMaster() {
        close(master)
        master = -1
    }

    /// What arrives within `seconds`.
    func read(for seconds: Double) -> String { read(until: nil, timeout: seconds) }

    /// What arrives until `marker` has (or 10 s have passed).
    func read(until marker: String?, timeout: Double = 10) -> String {
        var seen = Data()
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            if let marker, String(decoding: seen, as: UTF8.self).contains(marker) { break }
            var ready = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 50) > 0 else { continue }
            let n = Glibc.read(master, &buffer, buffer.count)
            guard n > 0 else { break }
            seen.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: seen, as: UTF8.self)
    }
}

private final class SeenOutput: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func add(_ chunk: Data) { lock.withLock { data.append(chunk) } }
    var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
}
