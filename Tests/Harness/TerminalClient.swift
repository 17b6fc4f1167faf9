import Foundation
import TermindCore

/// A client on a new pseudo-terminal (24 rows × 80 columns) whose master end this holds.
public final class TerminalClient {
    /// The process started on the terminal: the program, or GNU time running it (`measured`).
    public let pid: pid_t
    public let master: Int32
    /// Once finished: the program's peak resident memory in MiB (from GNU time when measured;
    /// 0 when GNU time is not installed).
    public private(set) var peakResidentMiB = 0.0
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)
    private let peakFile: String?

    /// `measured`: run through GNU time (`ProcessMemory.measuredCommand`), whose figure is the
    /// program's own. Not wait4's ru_maxrss: a forked child's high-water mark includes the
    /// pages it shared with this process at the fork, and Linux carries it across exec.
    public init(_ argv: [String], environment: [String: String], measured: Bool = true) throws {
        var argv = argv
        if measured {
            let command = ProcessMemory.measuredCommand(argv[0], Array(argv.dropFirst()))
            argv = [command.program] + command.arguments
            peakFile = command.peakFile
        } else {
            peakFile = nil
        }
        var master: Int32 = -1
        var size = winsize(ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0)
        let cArgv = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        let pid = forkpty(&master, nil, nil, &size)
        if pid == 0 {
            execve(cArgv[0]!, cArgv, cEnv)
            _exit(127)
        }
        (cArgv + cEnv).forEach { free($0) }
        guard pid > 0 else { throw TermindError(code: "test.forkpty", message: "forkpty failed: \(String(cString: strerror(errno)))") }
        self.pid = pid
        self.master = master
    }

    /// Reads what is there within `timeout` seconds (nil: the terminal closed).
    public func read(timeout: Double) -> ArraySlice<UInt8>? {
        var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(timeout * 1000)) > 0 else { return [] }
        let n = Glibc.read(master, &buffer, buffer.count)
        return n > 0 ? buffer[0..<n] : nil
    }

    /// Reads until `marker` has arrived; false after `timeout`.
    public func waitFor(_ marker: String, timeout: Double = 30) -> Bool {
        let wanted = Array(marker.utf8)
        var seen: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard let chunk = read(timeout: 0.2) else { return false }
            seen += chunk
            if seen.count > 1 << 16 { seen.removeFirst(seen.count - (1 << 15)) }
            if seen.firstRange(of: wanted) != nil { return true }
        }
        return false
    }

    public func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { Glibc.write(master, $0.baseAddress, $0.count) } }

    /// Drains until the terminal closes; the exit status.
    public func finish() -> Int32 {
        while read(timeout: 1) != nil {}
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        peakResidentMiB = peakFile.flatMap { ProcessMemory.peakMiB(in: $0) } ?? 0
        close(master)
        return status
    }

    /// The program's own process: `pid`, or GNU time's child once it has started (for its
    /// CPU clock).
    public var programPID: pid_t {
        guard peakFile != nil else { return pid }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8),
               let child = text.split(separator: " ").first.flatMap({ pid_t($0) }) { return child }
            usleep(1_000)
        }
        return pid
    }
}
