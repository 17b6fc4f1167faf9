import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind serial` on one end of a pseudo-terminal pair (socat), the test playing the
/// device on the other: bytes both ways through a real terminal (tmux), the line's settings
/// while the session runs and after it, and clear errors for what cannot be a serial line.
final class SerialSessionTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var socat: SpawnedProcess?
    private var tmux: TmuxTerminal!

    override func setUpWithError() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/socat") else { throw XCTSkip("socat is not installed (scripts/lib.sh installs it)") }
        directory = try TemporaryDirectory("termind-serial")
        socat = try SpawnedProcess("/usr/bin/socat", ["pty,raw,echo=0,link=\(directory.file("line"))", "pty,raw,echo=0,link=\(directory.file("board"))"],
                                   captureOutput: false)
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: directory.file("board")) { usleep(50_000) }
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        environment["TERM"] = "xterm-256color"
        tmux = TmuxTerminal(directory: directory, environment: environment)
    }

    override func tearDown() {
        tmux?.stop()
        socat?.signal(SIGTERM)
        socat?.wait()
        directory?.remove()
    }

    private var termind: [String] {
        [FeatureHarness.buildDirectory + "/termind", "--local", "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
    }

    /// `stty -a`'s words (the speed among them).
    private func flags(_ path: String) throws -> Set<String> {
        Set(try ProcessRunner.run("/bin/stty", ["-F", path, "-a"]).stdout.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == ";" }).map(String.init))
    }

    func testBytesCrossTheLineBothWaysWithTheSettingsAskedForAndTheLineIsPutBack() throws {
        let board = open(directory.file("board"), O_RDWR | O_NOCTTY | O_NONBLOCK)
        XCTAssertGreaterThanOrEqual(board, 0)
        defer { close(board) }
        try tmux.open("s", termind + ["serial", directory.file("line"), "--baud", "9600", "--parity", "even", "--stop", "2", "--data", "7"])
        // A pseudo-terminal keeps what it is given of the speed and stop bits (Linux's pty
        // driver ignores parity and data bits, so those cannot be checked here). They are
        // looked at until termind has started and set them (or 20 s have passed).
        var during = Set<String>()
        _ = try waitUntil(seconds: 20) {
            during = try flags(directory.file("line"))
            return during.contains("9600") && during.contains("cstopb")
        }
        XCTAssertTrue(during.contains("9600") && during.contains("cstopb"), "\(during)")

        // The board prints; the terminal shows it.
        _ = "U-Boot 2024.01 ready\r\n=> ".withCString { write(board, $0, strlen($0)) }
        XCTAssertTrue(try tmux.wait("s", for: "U-Boot 2024.01 ready").found)
        // Keys typed go to the board, Ctrl-C included.
        try tmux.send("s", "printenv\r\u{3}")
        var received = Data()
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, !(String(decoding: received, as: UTF8.self).contains("printenv\r\u{3}")) {
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = read(board, &buffer, buffer.count)
            if n > 0 { received += buffer[0..<n] } else { usleep(20_000) }
        }
        XCTAssertTrue(String(decoding: received, as: UTF8.self).contains("printenv\r\u{3}"),
                      "\(received as NSData); the terminal: \((try? tmux.screen("s").joined(separator: "\n")) ?? "gone")")

        // ~. after a newline ends it (as ssh's); the line's settings are as they were.
        try tmux.send("s", "\r~.")
        XCTAssertEqual(try tmux.waitForExit("s"), 255)
        let after = try flags(directory.file("line"))
        XCTAssertTrue(!after.contains("9600") && after.contains("-cstopb"), "\(after)")
    }

    func testWhatCannotBeASerialLineIsRefusedByName() throws {
        let environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        let notATTY = try ProcessRunner.run(termind[0], Array(termind.dropFirst()) + ["serial", "/dev/null"], environment: environment)
        XCTAssertEqual(notATTY.status, 1)
        XCTAssertTrue(notATTY.stderr.contains("/dev/null is not a serial line"), notATTY.stderr)
        let missing = try ProcessRunner.run(termind[0], Array(termind.dropFirst()) + ["serial", directory.file("nothing")], environment: environment)
        XCTAssertTrue(missing.stderr.contains("Cannot open \(directory.file("nothing"))"), missing.stderr)
        let speed = try ProcessRunner.run(termind[0], Array(termind.dropFirst()) + ["serial", directory.file("line"), "--baud", "12345"], environment: environment)
        XCTAssertTrue(speed.stderr.contains("--baud 12345") && speed.stderr.contains("115200"), speed.stderr)
        let stop = try ProcessRunner.run(termind[0], Array(termind.dropFirst()) + ["serial", directory.file("line"), "--stop", "3"], environment: environment)
        XCTAssertTrue(stop.stderr.contains("--stop must be 1 or 2"), stop.stderr)
    }
}
