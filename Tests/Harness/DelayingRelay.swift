import Foundation
import TermindCore

/// A TCP relay on loopback that holds every byte for `oneWayDelay` seconds in each
/// direction before passing it on, so a client through it sees a round trip of twice that
/// (this kernel has no netem).
///
/// What it lets through, so that a figure measured behind it can be trusted (issue 40):
/// - **A window per round trip** (`window`, 4 MiB by default): each direction of a connection
///   has at most that many bytes read and not yet "acknowledged" — a byte counts from when
///   the relay reads it until one delay after it was delivered (a round trip when the
///   receiver keeps up), as a TCP sender's byte counts until its ACK comes back. So one
///   connection moves at most `window` per round trip (200 MiB/s at 20 ms), as one TCP
///   connection over a real 20 ms path does: the sender's unacknowledged bytes are bounded
///   by its send buffer, whose default maximum here is 4 MiB (`net.ipv4.tcp_wmem`). Before
///   this, the relay read everything at once (up to 256 MiB per direction), so a connection
///   behind it was never limited by TCP, only by SSH's windows, and a client with more SSH
///   windows gained without bound: one termind build (324806a) measured 2.58× (get) and
///   2.20× (put) `sftp` at 20 ms behind the old relay, and 2.06× and 1.96× behind this
///   window in its first form, which counted a byte from its read (`sftp`, bound by its
///   2 MiB channel window, moved 83 MiB/s behind both; 2026-12-07).
/// - **Queues** of at most `bufferLimit` bytes per direction (256 MiB by default, so only the
///   window limits; a test passes a small one to slow a transfer down).
/// - Reads of up to 256 KiB, each passed on whole once due; `TCP_NODELAY` on both legs, so
///   the relay adds no Nagle delay of its own. The loopback legs' own socket buffers (the
///   kernel's autotuning) are not delayed; the window gates what the relay reads from them.
///
/// It also counts the bytes it carried (`bytesRelayed`: what crossed "the network") and can
/// hold new connections (`holdNewConnections`): accepted, but not passed on, so a client's
/// handshake hangs until `releaseHeld()`. `freeze()` stops passing bytes on (both ways,
/// every connection) until `thaw()`: what a client has seen stays where it is, whatever the
/// server does meanwhile.
public final class DelayingRelay: @unchecked Sendable {
    public let port: Int
    private let listener: Int32
    private let targetPort: Int
    private let delay: Double
    private let bufferLimit: Int
    private let window: Int
    private let lock = NSLock()
    private var sockets: [Int32] = []
    private var stopped = false
    private var holding = false
    private var held: [Int32] = []
    private let counter = Counter()
    private let valve = Valve()

    /// Bytes stop moving on (they queue) until `thaw()`.
    public func freeze() { valve.set(open: false) }

    /// Bytes move on again, the queued ones first.
    public func thaw() { valve.set(open: true) }

    /// Bytes carried so far, both directions together.
    public var bytesRelayed: Int { counter.value }

    /// Connections accepted from now on wait, unanswered, until `releaseHeld()`.
    public func holdNewConnections() { lock.withLock { holding = true } }

    /// How many connections are being held.
    public var heldCount: Int { lock.withLock { held.count } }

    /// How many held connections their client has closed (given up on).
    public var heldAbandoned: Int {
        lock.withLock { held }.filter(Self.abandoned).count
    }

    /// Stops holding: a held connection whose client is still there is passed on; one whose
    /// client gave up (closed it) is closed, and never reaches the server.
    public func releaseHeld() {
        let waiting: [Int32] = lock.withLock {
            holding = false
            defer { held = [] }
            return held
        }
        for client in waiting {
            if Self.abandoned(client) { close(client) } else { relay(client) }
        }
    }

    /// Whether the client closed its end (it may have sent bytes first, unread here).
    private static func abandoned(_ client: Int32) -> Bool {
        var probe = pollfd(fd: client, events: Int16(0x2000 /* POLLRDHUP, which Glibc does not export to Swift */), revents: 0)
        return poll(&probe, 1, 0) == 1 && probe.revents & Int16(0x2000 | POLLHUP) != 0
    }

    /// A connection's bytes per round trip in each direction by default (see above).
    public static let defaultWindow = 4 << 20

    public init(to targetPort: Int, oneWayDelay: Double, bufferLimit: Int = 256 << 20, window: Int = DelayingRelay.defaultWindow) throws {
        self.targetPort = targetPort
        delay = oneWayDelay
        self.bufferLimit = bufferLimit
        self.window = max(1, window)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw TermindError(code: "fixture.relay", message: "cannot listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// Closes the listener and every relayed connection.
    public func stop() {
        let (open, waiting): ([Int32], [Int32]) = lock.withLock {
            guard !stopped else { return ([], []) }
            stopped = true
            defer { held = [] }
            return (sockets, held)
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        for fd in waiting { close(fd) }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { close(listener); return }  // shut down by stop()
            let hold = lock.withLock { () -> Bool in
                if holding { held.append(client) }
                return holding
            }
            if !hold { relay(client) }
        }
    }

    /// Connects `client` to the target and starts passing bytes both ways.
    private func relay(_ client: Int32) {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(port: targetPort)
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let keep = lock.withLock { () -> Bool in
            guard !stopped, connected == 0 else { return false }
            sockets += [client, server]
            return true
        }
        guard keep else { close(client); close(server); return }
        for fd in [client, server] {
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        let closer = Closer(client, server)
        for (from, to) in [(client, server), (server, client)] {
            let line = DelayLine(delay: delay, limit: bufferLimit, window: window, counter: counter, valve: valve)
            Thread.detachNewThread { line.read(from: from); closer.done() }
            Thread.detachNewThread { line.write(to: to); closer.done() }
        }
    }

    private final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var total = 0
        var value: Int { lock.withLock { total } }
        func add(_ n: Int) { lock.withLock { total += n } }
    }

    /// Open or shut for every line at once; a line's writer waits while it is shut.
    private final class Valve: @unchecked Sendable {
        private let condition = NSCondition()
        private var open = true
        func set(open: Bool) {
            condition.withLock { self.open = open }
            condition.broadcast()
        }
        func waitOpen() { condition.withLock { while !open { condition.wait() } } }
    }

    /// Closes a relayed pair once all four of its pumps have ended.
    private final class Closer: @unchecked Sendable {
        private let lock = NSLock()
        private var left = 4
        private let fds: [Int32]
        init(_ a: Int32, _ b: Int32) { fds = [a, b] }
        func done() {
            let last = lock.withLock { () -> Bool in left -= 1; return left == 0 }
            if last { fds.forEach { close($0) } }
        }
    }

    /// One direction: what was read waits until its due time, then is written.
    private final class DelayLine: @unchecked Sendable {
        private let condition = NSCondition()
        private var queue: [(due: Double, data: Data)] = []
        private var queued = 0
        /// Bytes read and not yet acknowledged (the window's use), and when the delivered
        /// ones will be (one delay after the writer sent them).
        private var unacknowledged = 0
        private var acknowledgements: [(at: Double, bytes: Int)] = []
        private var readerEnded = false
        private var writerFailed = false
        private let delay: Double
        private let limit: Int
        private let window: Int
        private let counter: Counter
        private let valve: Valve

        init(delay: Double, limit: Int, window: Int, counter: Counter, valve: Valve) {
            self.delay = delay; self.limit = limit; self.window = window; self.counter = counter; self.valve = valve
        }

        private static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

        func read(from fd: Int32) {
            var buffer = [UInt8](repeating: 0, count: 256 * 1024)
            while true {
                // Wait, as a TCP sender does for ACKs, until the window has room: a byte counts
                // from its read until one delay after the writer delivered it (its ACK's trip
                // back), so a slow receiver closes the window too.
                var room = window
                condition.lock()
                while !writerFailed {
                    let now = Self.now()
                    while let first = acknowledgements.first, first.at <= now {
                        unacknowledged -= first.bytes
                        acknowledgements.removeFirst()
                    }
                    room = window - unacknowledged
                    if room > 0 { break }
                    if let first = acknowledgements.first {
                        _ = condition.wait(until: Date(timeIntervalSinceNow: first.at - now))
                    } else {
                        condition.wait()
                    }
                }
                condition.unlock()
                let n = recv(fd, &buffer, min(buffer.count, max(room, 1)), 0)
                condition.lock()
                if n <= 0 || writerFailed {
                    readerEnded = true
                    condition.broadcast()
                    condition.unlock()
                    return
                }
                while queued >= limit && !writerFailed { condition.wait() }
                counter.add(n)
                queue.append((Self.now() + delay, Data(buffer[0..<n])))
                queued += n
                unacknowledged += n
                condition.broadcast()
                condition.unlock()
            }
        }

        func write(to fd: Int32) {
            while true {
                condition.lock()
                while queue.isEmpty && !readerEnded { condition.wait() }
                guard let (due, data) = queue.first else {
                    condition.unlock()
                    valve.waitOpen()  // the end, too, waits for a thaw
                    shutdown(fd, Int32(SHUT_WR))  // the reading side ended: pass the end on
                    return
                }
                condition.unlock()
                let wait = due - Self.now()
                if wait > 0 { usleep(UInt32(wait * 1e6)) }
                valve.waitOpen()
                let sent = data.withUnsafeBytes { raw -> Bool in
                    var offset = 0
                    while offset < raw.count {
                        let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                        if n <= 0 { return false }
                        offset += n
                    }
                    return true
                }
                condition.lock()
                queue.removeFirst()
                queued -= data.count
                acknowledgements.append((Self.now() + delay, data.count))
                if !sent { writerFailed = true; queue.removeAll(); queued = 0 }
                condition.broadcast()
                condition.unlock()
                if !sent { return }
            }
        }
    }
}
