import Foundation
import TermindCore

/// A folder under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ prefix: String = "termind-test") throws {
        try self.init(under: NSTemporaryDirectory(), prefix)
    }

    /// A folder under `parent` (a tmpfs such as /dev/shm, for a benchmark that must not
    /// measure the disk).
    public init(under parent: String, _ prefix: String) throws {
        var template = Array((parent as NSString).appendingPathComponent("\(prefix)-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw TermindError(code: "test.tmpdir", message: "mkdtemp failed: \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        let target = file(name)
        try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: target))
        return target
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs a program to completion, capturing its output.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
    /// Its peak resident memory in MiB, when it was run `measured` (see SpawnedProcess);
    /// nil otherwise.
    public var peakResidentMiB: Double?
    /// The CPU seconds it and the descendants it reaped used (user + system).
    public var cpuSeconds: Double = 0

    public init(status: Int32, stdout: String, stderr: String, peakResidentMiB: Double? = nil, cpuSeconds: Double = 0) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
        self.peakResidentMiB = peakResidentMiB
        self.cpuSeconds = cpuSeconds
    }
}

/// A program's environment with Swift's crash backtraces printed at once: one that crashes
/// on a terminal otherwise waits 20 s for a key before it prints anything.
public func printingBacktraces(_ environment: [String: String]) -> [String: String] {
    var environment = environment
    if environment["SWIFT_BACKTRACE"] == nil { environment["SWIFT_BACKTRACE"] = "interactive=no,color=no" }
    return environment
}

/// Deterministic pseudo-random bytes (xorshift64 from a nonzero state), written a word at a
/// time so that a test's bulk data is quick to make in a debug build too. `state` carries on
/// from one call to the next.
public enum PseudoRandomBytes {
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer, state: inout UInt64) {
        let words = buffer.count / 8
        for word in 0..<words {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            buffer.storeBytes(of: state.littleEndian, toByteOffset: word * 8, as: UInt64.self)
        }
        guard buffer.count > words * 8 else { return }
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        for j in 0..<(buffer.count - words * 8) { buffer[words * 8 + j] = UInt8(truncatingIfNeeded: state >> (8 * UInt64(j))) }
    }

    public static func make(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed | 1
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { fill($0, state: &state) }
        return bytes
    }
}

/// Asks `condition` every tenth of a second until it holds or `seconds` have passed, and
/// says whether it held (a test's wait for something another process does, in place of a
/// fixed sleep).
public func waitUntil(seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.1)
    }
    return try condition()
}

/// Asks `condition` every `every` seconds until it holds or `seconds` have passed, and says
/// whether it held: a test's wait for an event, in place of a fixed sleep or a loop whose
/// count a slow machine could run out. The limit is generous on purpose — on a fast
/// machine the wait ends as soon as the event happens.
public func eventually(seconds: Double = 30, every: Double = 0.05, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: UInt64(every * 1e9))
    }
    return try await condition()
}

/// Words for `/bin/sh -c` (or bash's): each single-quoted, so that spaces and quotes in them
/// stay literal.
public enum Shell {
    public static func quoted(_ words: [String]) -> String {
        words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
    }
}

/// Runs programs with posix_spawn and reaps them with waitpid. (Foundation's Process on
/// Linux can miss a child's exit while another child runs — seen here with an sshd
/// fixture alive — and then waits forever on a zombie.)
public enum ProcessRunner {
    /// `measured`: its peak resident memory is taken (see SpawnedProcess).
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                           stdin: String? = nil, currentDirectory: String? = nil, measured: Bool = false) throws -> ProcessResult {
        let child = try SpawnedProcess(executable, arguments, environment: environment, currentDirectory: currentDirectory,
                                       captureOutput: true, measured: measured)
        if let stdin { child.writeInput(Data(stdin.utf8)) }
        child.closeInput()
        let (output, error) = child.readAll()
        let status = child.wait()
        return ProcessResult(status: status, stdout: String(decoding: output, as: UTF8.self), stderr: String(decoding: error, as: UTF8.self),
                             peakResidentMiB: child.peakResidentMiB, cpuSeconds: child.cpuSeconds)
    }
}

/// A child process started with posix_spawn: pipes for its standard streams (or /dev/null),
/// `wait()` reaps it, `signal()` sends it a signal.
public final class SpawnedProcess: @unchecked Sendable {
    public let pid: pid_t
    private var inputFD: Int32 = -1
    private var outputFD: Int32 = -1
    private var errorFD: Int32 = -1
    private var reaped: Int32?
    private var usage = rusage()
    private let lock = NSLock()
    /// Where GNU time writes the peak of a `measured` process.
    private let peakFile: String?

    /// Once reaped, for a process started `measured`: its peak resident memory in MiB (the
    /// largest of it and the descendants it reaped); nil otherwise.
    ///
    /// Not wait4's ru_maxrss of a process this one started: posix_spawn starts the child in
    /// this process's memory (vfork), and Linux keeps the larger of that memory's peak and
    /// the program's own, so a 7 MiB `ssh` run by a 40 MiB benchmark reads 40 MiB. A
    /// `measured` process is started by GNU time, a small process that forks it and reports
    /// the program's own ru_maxrss.
    public var peakResidentMiB: Double? {
        lock.withLock {
            if reaped != nil, let peakFile, measuredPeak == nil { measuredPeak = ProcessMemory.peakMiB(in: peakFile) }
            return measuredPeak
        }
    }
    private var measuredPeak: Double?
    /// Once reaped: the CPU seconds it and the descendants it reaped used; 0 before.
    public var cpuSeconds: Double {
        lock.withLock {
            Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        }
    }

    /// `output`: without `captureOutput`, the descriptor its standard output goes to (else
    /// /dev/null). `measured`: its peak resident memory is taken (`peakResidentMiB`), for a
    /// process that runs to its end (`pid` is then GNU time's, which passes no signal on).
    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                currentDirectory: String? = nil, captureOutput: Bool, output: Int32? = nil, measured: Bool = false) throws {
        let (executable, arguments, peakFile) = measured ? ProcessMemory.measuredCommand(executable, arguments) : (executable, arguments, nil)
        self.peakFile = peakFile
        var inPipe: [Int32] = [-1, -1], outPipe: [Int32] = [-1, -1], errPipe: [Int32] = [-1, -1]
        // The pipes are close-on-exec and made under one lock with the spawn: a child another
        // thread spawns meanwhile must not inherit them (a test's second thread running
        // `termind forward list` waited for its output's end until the other thread's child
        // exited). The child gets each end only as 0, 1 or 2, nothing else of ours, and
        // starts with default signals (ChildProcess): a descendant that outlives it (tmux's
        // server) holds no pipe this process reads to its end, and an ssh-agent it starts
        // does not inherit a signal a test thread blocked.
        Self.spawning.lock()
        defer { Self.spawning.unlock() }
        guard Self.pipe(&inPipe) else { throw TermindError(code: "test.spawn", message: "pipe failed") }
        if captureOutput {
            guard Self.pipe(&outPipe), Self.pipe(&errPipe) else { throw TermindError(code: "test.spawn", message: "pipe failed") }
        }
        // A working directory goes through coreutils' `env -C` (posix_spawn's chdir action
        // is not visible to Swift here).
        let program = currentDirectory == nil ? executable : "/usr/bin/env"
        let fullArguments = currentDirectory.map { ["-C", $0, executable] + arguments } ?? arguments
        let spawned = Result {
            try ChildProcess.spawn([program] + fullArguments, environment: environment, stdin: inPipe[0],
                                   stdout: captureOutput ? outPipe[1] : output, stderr: captureOutput ? errPipe[1] : nil)
        }
        close(inPipe[0])
        if captureOutput { close(outPipe[1]); close(errPipe[1]) }
        switch spawned {
        case .success(let child):
            pid = child
        case .failure(let error):
            close(inPipe[1])
            if captureOutput { close(outPipe[0]); close(errPipe[0]) }
            throw TermindError(code: "test.spawn", message: "Cannot start \(executable): \(TermindError.from(error).message)")
        }
        inputFD = inPipe[1]
        if captureOutput { outputFD = outPipe[0]; errorFD = errPipe[0] }
    }

    deinit {
        for fd in [inputFD, outputFD, errorFD] where fd >= 0 { close(fd) }
        if let peakFile { unlink(peakFile) }  // when nobody read it
    }

    private static let spawning = NSLock()

    /// A close-on-exec pipe (Glibc does not show Swift `pipe2`; the lock around the spawns
    /// covers the moment between the two calls).
    private static func pipe(_ fds: inout [Int32]) -> Bool {
        guard Glibc.pipe(&fds) == 0 else { return false }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return true
    }

    public func writeInput(_ data: Data) {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(inputFD, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { return }
                offset += n
            }
        }
    }

    public func closeInput() {
        if inputFD >= 0 { close(inputFD); inputFD = -1 }
    }

    /// Reads standard output as it arrives until what was read contains `marker` (returned),
    /// or nil after `timeout` seconds. What it read is not returned again by `readAll`.
    public func readOutput(until marker: String, timeout: Double) -> String? {
        var collected = Data()
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while Date() < deadline {
            var descriptor = pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 100) > 0 else { continue }
            let n = read(outputFD, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            collected.append(contentsOf: buffer[0..<n])
            let text = String(decoding: collected, as: UTF8.self)
            if text.contains(marker) { return text }
        }
        return nil
    }

    /// Reads standard output and error to their ends (concurrently, so neither pipe fills).
    public func readAll() -> (Data, Data) {
        let errorData = SendableBox<Data>(Data())
        let done = DispatchSemaphore(value: 0)
        let errFD = errorFD
        Thread {
            errorData.value = Self.drain(errFD)
            done.signal()
        }.start()
        let output = Self.drain(outputFD)
        done.wait()
        return (output, errorData.value)
    }

    private static func drain(_ fd: Int32) -> Data {
        guard fd >= 0 else { return Data() }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return data }
            data.append(contentsOf: buffer[0..<n])
        }
    }

    public func signal(_ number: Int32) { Foundation.kill(pid, number) }

    /// A server (sshd, `termind serve`) that must not outlive this process: it gets SIGTERM
    /// when the process ends by `exit()` — a benchmark's `fail`, which skips main.swift's
    /// defers — unless it was reaped before. (A server left running skews every later
    /// measurement on the machine.)
    public func stopAtExit() { ExitReaper.add(pid) }

    /// Reaps the child and returns its exit status (128 + signal when killed).
    @discardableResult
    public func wait() -> Int32 {
        lock.lock()
        defer { lock.unlock() }
        if let reaped { return reaped }
        var status: Int32 = 0
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        let code = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        reaped = code
        ExitReaper.remove(pid)
        return code
    }

    /// Whether it still runs (reaps it if it ended).
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        if reaped != nil { return false }
        var status: Int32 = 0
        let result = wait4(pid, &status, WNOHANG, &usage)
        if result == pid {
            reaped = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
            ExitReaper.remove(pid)
            return false
        }
        return result == 0
    }
}

/// The children `SpawnedProcess.stopAtExit` named, told to stop when this process exits.
/// A child leaves the list once reaped, so a number the kernel reused is never signalled.
private enum ExitReaper {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var pids: Set<pid_t> = []
    nonisolated(unsafe) private static var installed = false

    static func add(_ pid: pid_t) {
        lock.withLock {
            if !installed {
                installed = true
                atexit { ExitReaper.stopAll() }
            }
            pids.insert(pid)
        }
    }

    static func remove(_ pid: pid_t) { _ = lock.withLock { pids.remove(pid) } }

    private static func stopAll() {
        for pid in lock.withLock({ pids }) { kill(pid, SIGTERM) }
    }
}

final class SendableBox<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}

/// Paths in the source checkout, for tests that read sources or example manifests.
public enum Repository {
    /// The checkout root: walks up from the build folder to the folder holding
    /// Package.swift and Core/Package.swift.
    /// (A relative TERMIND_BUILD_DIR such as ".build/debug" is taken from the current
    /// folder: walking up a relative path ends at "", never at "/", and once spun a test
    /// process for an hour.)
    public static var root: String {
        var dir = URL(fileURLWithPath: FeatureHarness.buildDirectory).standardizedFileURL.path
        while true {
            if FileManager.default.fileExists(atPath: dir + "/Package.swift"),
               FileManager.default.fileExists(atPath: dir + "/Core/Package.swift") { return dir }
            let parent = (dir as NSString).deletingLastPathComponent
            if parent == dir || parent.isEmpty { break }
            dir = parent
        }
        return FileManager.default.currentDirectoryPath
    }

    public static func path(_ relative: String) -> String { (root as NSString).appendingPathComponent(relative) }
}

/// A UDP socket on 127.0.0.1 with a free port, to catch what a plugin sends.
public final class UDPReceiver {
    private let fd: Int32
    public let port: UInt16

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else {
            Foundation.close(fd)
            throw TermindError(code: "test.udp", message: "cannot bind a UDP socket on 127.0.0.1")
        }
        port = UInt16(bigEndian: address.sin_port)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The next datagram, or nil after five seconds without one.
    public func receive() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 2048)
        let n = recv(fd, &buffer, buffer.count, 0)
        return n > 0 ? Array(buffer[0..<n]) : nil
    }

    public func close() { Foundation.close(fd) }
}

extension JSONValue {
    /// The elements of an array, else nil (for tests reading JSON output).
    public var arrayValue: [JSONValue]? { if case .array(let items) = self { items } else { nil } }
    /// An integer's value, else nil.
    public var intValue: Int? {
        switch self {
        case .integer(let value): Int(exactly: value)
        case .unsignedInteger(let value): Int(exactly: value)
        default: nil
        }
    }
}

extension ProcessInfo {
    /// This process's environment for a termind CLI run of a test: HOME in `home`, the control
    /// socket at `socket` (a path where no server listens keeps a command in-process), and
    /// none of the TERMIND_* settings a developer's shell may carry.
    public static func termindEnvironment(home: String, socket: String) -> [String: String] {
        var environment = processInfo.environment
        environment["HOME"] = home
        environment["TERMIND_SOCKET"] = socket
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_DEBUG", "TERMIND_LOG_FILE"] { environment.removeValue(forKey: name) }
        return environment
    }
}
