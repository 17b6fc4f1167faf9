import Dispatch
import Foundation
import TermindCore
import TermindHarness

// termind-forward-bench [--mib N] [--runs R] [--streams K] [--connections C] [--skip-recovery]
//
// termind's forwards against OpenSSH's on the same sshd (one cipher forced on both,
// chacha20-poly1305), both as whole processes: `termind forward run HOST --local-forward …
// --dynamic-forward …` (in-process, its own store) and `ssh -N -L … -D …`. The target is a
// traffic server in this process (threads: 'D' sends N bytes, 'U' counts what it reads, 'P'
// answers one byte), the clients are threads here too, runs alternate termind/ssh and the
// medians are compared (ratio = termind over ssh, > 1: termind is faster):
//   one stream through -L, download and upload (target >= 0.9x)
//   K streams at once through -L, aggregate (target >= 1.5x: ssh funnels every flow through one process)
//   SOCKS connections opened per second through -D (C connections, 16 at a time)
//   time from sshd's restart until a new connection flows again: termind's supervisor vs autossh
// Each row also carries both sides' peak resident memory (PEAK RSS / PEER RSS): for the
// forwards, the running `termind forward run` and `ssh -N` processes' VmHWM from /proc, set
// back to their current size (clear_refs) as the row starts; for recovery, each run's
// `termind forward run` and autossh (the largest of it and the ssh it runs) just before they
// are stopped, the largest of the runs.
// Everything runs on this machine (sshd, both clients, the traffic): say so when quoting.

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: termind-forward-bench [--mib N] [--runs R] [--streams K] [--connections C] [--skip-recovery]\n".utf8))
    exit(2)
}
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("termind-forward-bench: \(message)\n".utf8))
    exit(1)
}
func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

var mib = 512
var runs = 3
var streams = 8
var connections = 500
var recovery = true
var args = CommandLine.arguments.dropFirst()
while let arg = args.popFirst() {
    switch arg {
    case "--mib": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; mib = v
    case "--runs": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; runs = v
    case "--streams": guard let v = args.popFirst().flatMap(Int.init), v > 1 else { usage() }; streams = v
    case "--connections": guard let v = args.popFirst().flatMap(Int.init), v > 0 else { usage() }; connections = v
    case "--skip-recovery": recovery = false
    default: usage()
    }
}

// MARK: - Sockets

func connectTCP(_ port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard ok == 0 else { close(fd); throw TermindError(code: "bench.connect", message: "port \(port): \(String(cString: strerror(errno)))") }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    var timeout = timeval(tv_sec: 60, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return fd
}

func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
        if n <= 0 { if n < 0 && errno == EINTR { continue }; return false }
        offset += n
    }
    return true
}

func readExactly(_ fd: Int32, _ count: Int) -> [UInt8]? {
    var bytes = [UInt8](repeating: 0, count: count)
    var got = 0
    while got < count {
        let n = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, count - got, 0) }
        if n <= 0 { if n < 0 && errno == EINTR { continue }; return nil }
        got += n
    }
    return bytes
}

let block = [UInt8](repeating: 0x5A, count: 1 << 20)

/// The target of every forward: 'D' + 8 bytes N → N bytes; 'U' → counts until EOF, answers 8 bytes; 'P' → 'P'.
final class TrafficServer: @unchecked Sendable {
    let port: Int
    private let fd: Int32
    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(fd, 1024)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        let listener = fd
        Thread {
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { if errno == EINTR || errno == ECONNABORTED { continue }; return }
                Thread { TrafficServer.serve(client) }.start()
            }
        }.start()
    }

    static func serve(_ fd: Int32) {
        defer { close(fd) }
        guard let command = readExactly(fd, 1)?.first else { return }
        switch command {
        case UInt8(ascii: "D"):
            guard let header = readExactly(fd, 8) else { return }
            var left = header.reduce(0) { $0 << 8 | Int($1) }
            while left > 0 {
                let count = min(left, block.count)
                guard block.withUnsafeBytes({ sendAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<count])) }) else { return }
                left -= count
            }
        case UInt8(ascii: "U"):
            var total = 0
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                total += n
            }
            let answer = (0..<8).map { UInt8(truncatingIfNeeded: total >> (56 - 8 * $0)) }
            _ = answer.withUnsafeBytes { sendAll(fd, $0) }
        case UInt8(ascii: "P"):
            _ = [UInt8(ascii: "P")].withUnsafeBytes { sendAll(fd, $0) }
        default:
            return
        }
    }
}

/// Seconds to move `bytes` down (or up) through `port`.
func transfer(_ port: Int, bytes: Int, upload: Bool) throws -> Double {
    let fd = try connectTCP(port)
    defer { close(fd) }
    let started = now()
    if upload {
        guard [UInt8(ascii: "U")].withUnsafeBytes({ sendAll(fd, $0) }) else { throw TermindError(code: "bench", message: "send failed") }
        var left = bytes
        while left > 0 {
            let count = min(left, block.count)
            guard block.withUnsafeBytes({ sendAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<count])) }) else { throw TermindError(code: "bench", message: "upload cut") }
            left -= count
        }
        shutdown(fd, Int32(SHUT_WR))
        guard let answer = readExactly(fd, 8), answer.reduce(0, { $0 << 8 | Int($1) }) == bytes else { throw TermindError(code: "bench", message: "upload count wrong") }
    } else {
        let header = [UInt8(ascii: "D")] + (0..<8).map { UInt8(truncatingIfNeeded: bytes >> (56 - 8 * $0)) }
        guard header.withUnsafeBytes({ sendAll(fd, $0) }) else { throw TermindError(code: "bench", message: "send failed") }
        var got = 0
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while got < bytes {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { throw TermindError(code: "bench", message: "download cut at \(got) of \(bytes)") }
            got += n
        }
    }
    return now() - started
}

/// Aggregate MiB/s of `count` streams at once, each `bytes`.
func parallel(_ port: Int, count: Int, bytes: Int, upload: Bool) throws -> Double {
    let group = DispatchGroup()
    let failures = Failures()
    let started = now()
    for _ in 0..<count {
        group.enter()
        Thread {
            defer { group.leave() }
            do { _ = try transfer(port, bytes: bytes, upload: upload) } catch { failures.add("\(error)") }
        }.start()
    }
    group.wait()
    if let first = failures.all.first { throw TermindError(code: "bench", message: first) }
    return Double(count * bytes) / 1_048_576 / (now() - started)
}

/// Each SOCKS connection's time from connect to its echo (seconds), for the slowest.
final class Latencies: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [Double] = []
    func add(_ value: Double) { lock.withLock { list.append(value) } }
    var sorted: [Double] { lock.withLock { list.sorted() } }
}

/// Hands out `total` tickets, one per call, to any thread.
final class Tickets: @unchecked Sendable {
    private let lock = NSLock()
    private var left: Int
    init(_ total: Int) { left = total }
    func take() -> Bool { lock.withLock { guard left > 0 else { return false }; left -= 1; return true } }
}

final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func add(_ s: String) { lock.withLock { list.append(s) } }
    var all: [String] { lock.withLock { list } }
}

/// One SOCKS5 connection to the traffic server's 'P': connected, answered, closed.
func socksPing(_ socks: Int, target: Int) throws {
    let fd = try connectTCP(socks)
    defer { close(fd) }
    let request: [UInt8] = [5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, UInt8(target >> 8), UInt8(target & 0xFF)]
    guard request.withUnsafeBytes({ sendAll(fd, $0) }), readExactly(fd, 2) == [5, 0], let reply = readExactly(fd, 10), reply[1] == 0 else {
        throw TermindError(code: "bench", message: "SOCKS handshake failed")
    }
    guard [UInt8(ascii: "P")].withUnsafeBytes({ sendAll(fd, $0) }), readExactly(fd, 1) == [UInt8(ascii: "P")] else {
        throw TermindError(code: "bench", message: "SOCKS flow failed")
    }
}

/// SOCKS connections per second: `total`, 16 at a time.
func socksRate(_ socks: Int, target: Int, total: Int, peer: String) throws -> Double {
    let next = Failures()
    let latencies = Latencies()
    let tickets = Tickets(total)
    let group = DispatchGroup()
    let started = now()
    for _ in 0..<16 {
        group.enter()
        Thread {
            defer { group.leave() }
            while true {
                guard tickets.take() else { return }
                let began = now()
                do { try socksPing(socks, target: target) } catch { next.add("\(error)") }
                latencies.add(now() - began)
            }
        }.start()
    }
    group.wait()
    if let first = next.all.first { throw TermindError(code: "bench", message: "\(next.all.count) SOCKS connections failed: \(first)") }
    let rate = Double(total) / (now() - started)
    let times = latencies.sorted
    if let slowest = times.last {
        print("  SOCKS, \(peer): " + String(format: "%.0f conn/s, connect-to-echo median %.2f ms, p99 %.2f ms, slowest %.1f ms", rate,
                     times[times.count / 2] * 1000, times[times.count * 99 / 100] * 1000, slowest * 1000))
    }
    return rate
}

func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Double? {
    let started = now()
    while now() - started < seconds {
        if condition() { return now() - started }
        usleep(20_000)
    }
    return nil
}

func canPing(_ port: Int) -> Bool {
    guard let fd = try? connectTCP(port) else { return false }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 2, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return [UInt8(ascii: "P")].withUnsafeBytes({ sendAll(fd, $0) }) && readExactly(fd, 1) == [UInt8(ascii: "P")]
}

// MARK: - Set-up

let scratch = try TemporaryDirectory("termind-bench-forward")
defer { scratch.remove() }
let keygen = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", scratch.file("id")])
guard keygen.status == 0 else { fail("ssh-keygen: \(keygen.stderr)") }
let cipher = "chacha20-poly1305@openssh.com"
let sshd = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: scratch.file("id.pub"), encoding: .utf8)],
                                extraConfig: ["Ciphers \(cipher)", "LogLevel ERROR", "MaxStartups 1000:30:1000"], hostKeyTypes: ["ed25519"])
defer { sshd.stop() }
let traffic = try TrafficServer()
let hostKey = sshd.hostKeys["ssh-ed25519"] ?? ""
try "[127.0.0.1]:\(sshd.port) \(hostKey)\n".write(toFile: scratch.file("known_hosts"), atomically: true, encoding: .utf8)

let environment: [String: String] = {
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = scratch.file("home")
    for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_DEBUG", "TERMIND_LOG_FILE", "SSH_AUTH_SOCK"] { environment.removeValue(forKey: name) }
    environment["TERMIND_SOCKET"] = scratch.file("none.sock")
    return environment
}()
let termind = FeatureHarness.buildDirectory + "/termind"
let store = ["--store", scratch.file("db.sqlite"), "--secrets-key", scratch.file("k")]
for step in [["vault", "key", "import", scratch.file("id"), "--label", "bench"], ["vault", "identity", "add", NSUserName(), "--key", "bench"],
             ["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(sshd.port)", "--identity", NSUserName()],
             ["vault", "knownhost", "add", "127.0.0.1", hostKey, "--port", "\(sshd.port)"]] {
    let result = try ProcessRunner.run(termind, store + step, environment: environment)
    guard result.status == 0 else { fail("termind \(step.joined(separator: " ")): \(result.stderr)") }
}
let sshOptions = ["-i", scratch.file("id"), "-o", "UserKnownHostsFile=\(scratch.file("known_hosts"))", "-o", "StrictHostKeyChecking=yes",
                  "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-F", "/dev/null", "-c", cipher, "-p", "\(sshd.port)"]

struct Peer {
    let name: String
    let local: Int
    let socks: Int
    let process: SpawnedProcess
}

@MainActor
func startTermind() throws -> Peer {
    let local = try SSHServerFixture.freePort(), socks = try SSHServerFixture.freePort()
    let process = try SpawnedProcess(termind, store + ["forward", "run", "box", "--local-forward", "\(local):127.0.0.1:\(traffic.port)",
                                                       "--dynamic-forward", "\(socks)"], environment: environment, captureOutput: false)
    return Peer(name: "termind", local: local, socks: socks, process: process)
}

@MainActor
func startSSH(_ program: String = "/usr/bin/ssh", extra: [String] = [], environment: [String: String]? = nil) throws -> Peer {
    let local = try SSHServerFixture.freePort(), socks = try SSHServerFixture.freePort()
    let process = try SpawnedProcess(program, extra + sshOptions + ["-N", "-L", "\(local):127.0.0.1:\(traffic.port)", "-D", "\(socks)",
                                                                     "\(NSUserName())@127.0.0.1"], environment: environment, captureOutput: false)
    return Peer(name: program.hasSuffix("autossh") ? "autossh" : "ssh", local: local, socks: socks, process: process)
}

@MainActor
func ready(_ peer: Peer) {
    guard waitUntil(30, { canPing(peer.local) }) != nil else { fail("\(peer.name)'s forward did not come up") }
}

let peers = [try startTermind(), try startSSH()]
defer { for peer in peers { peer.process.signal(SIGTERM); peer.process.wait() } }
for peer in peers { ready(peer) }

// MARK: - Runs

let bytes = mib << 20
var figures: [BenchmarkFigure] = []
@MainActor
func compare(_ name: String, unit: String, _ measure: (Peer) throws -> Double) throws {
    var values: [String: [Double]] = [:]
    for peer in peers { ProcessMemory.resetPeak(of: peer.process.pid) }
    for _ in 0..<runs {
        for peer in peers { values[peer.name, default: []].append(try measure(peer)) }
    }
    var peaks: [String: Double] = [:]
    for peer in peers { peaks[peer.name] = ProcessMemory.peakMiB(of: peer.process.pid) }
    let ours = median(values["termind"]!), theirs = median(values["ssh"]!)
    figures.append(BenchmarkFigure(name: name, value: ours, unit: unit, baseline: theirs, resident: peaks["termind"], peerResident: peaks["ssh"]))
    print("\(name): termind \(values["termind"]!.map(BenchmarkFigure.format)) ssh \(values["ssh"]!.map(BenchmarkFigure.format))")
}

try compare("-L one stream down (MiB/s)", unit: "MiB/s") { Double(mib) / (try transfer($0.local, bytes: bytes, upload: false)) }
try compare("-L one stream up (MiB/s)", unit: "MiB/s") { Double(mib) / (try transfer($0.local, bytes: bytes, upload: true)) }
try compare("-L \(streams) streams down (MiB/s)", unit: "MiB/s") { try parallel($0.local, count: streams, bytes: bytes / streams, upload: false) }
try compare("-L \(streams) streams up (MiB/s)", unit: "MiB/s") { try parallel($0.local, count: streams, bytes: bytes / streams, upload: true) }
try compare("-D SOCKS opens (conn/s)", unit: "conn/s") { try socksRate($0.socks, target: traffic.port, total: connections, peer: $0.name) }

if recovery {
    // termind's supervisor against autossh (ssh restarted as soon as it exits; it exits once
    // the dead connection is noticed: ServerAliveInterval 1). Fresh forwards each run, up
    // for a moment before sshd goes: termind's first retry is 1 s after the loss (the seed's
    // 1, 2, 5, 10, 30 s schedule, from the start at each outage).
    let autosshPath = "/usr/bin/autossh"
    let haveAutossh = FileManager.default.isExecutableFile(atPath: autosshPath)
    if !haveAutossh { print("autossh is not installed (apt-get install autossh): termind's recovery time is shown alone") }
    var recoveries: [String: [Double]] = [:]
    var peaks: [String: Double] = [:]
    for _ in 0..<runs {
        var contenders = [try startTermind()]
        if haveAutossh {
            var env = ProcessInfo.processInfo.environment
            env["AUTOSSH_GATETIME"] = "0"
            env["AUTOSSH_POLL"] = "1"
            contenders.append(try startSSH(autosshPath, extra: ["-M", "0", "-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=1",
                                                                "-o", "ExitOnForwardFailure=yes"], environment: env))
        }
        for peer in contenders { ready(peer) }
        sleep(1)
        sshd.kill()
        try sshd.restart()
        var pending = Set(contenders.map(\.name))
        let started = now()
        while !pending.isEmpty, now() - started < 120 {
            for peer in contenders where pending.contains(peer.name) && canPing(peer.local) {
                recoveries[peer.name, default: []].append(now() - started)
                pending.remove(peer.name)
            }
            usleep(20_000)
        }
        for peer in contenders {
            // Before it ends: its peak, or its largest process's (autossh and the ssh it runs).
            peaks[peer.name] = max(peaks[peer.name] ?? 0, ProcessMemory.treePeakMiB(of: peer.process.pid) ?? 0)
            peer.process.signal(SIGTERM)
            peer.process.wait()
        }
        if !pending.isEmpty { fail("\(pending.sorted().joined(separator: ", ")) did not recover within 120 s") }
    }
    print("recovery (s): termind \((recoveries["termind"] ?? []).map(BenchmarkFigure.format)) autossh \((recoveries["autossh"] ?? []).map(BenchmarkFigure.format))")
    figures.append(BenchmarkFigure(name: "recovery after sshd restarts (s)", value: median(recoveries["termind"] ?? [0]), unit: "s",
                                   baseline: recoveries["autossh"].map(median), resident: peaks["termind"], peerResident: peaks["autossh"]))
}

print("termind-forward-bench: \(mib) MiB per run, \(runs) runs alternated, \(cipher), sshd \(sshd.port) on loopback; the ratio is termind over the peer (for recovery, lower is better)")
for line in BenchmarkFigure.table(figures) { print(line) }
