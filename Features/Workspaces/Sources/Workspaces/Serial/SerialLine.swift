import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import WorkspacesAPI

/// A local serial line opened for one session: raw, at the speed and framing asked for, its
/// previous settings put back by `close()`. Reading happens on a thread of its own that waits
/// for the consumer (at most four chunks outstanding), writing on a queue of its own, so no
/// task of the cooperative pool ever blocks on the device.
final class SerialLine: Sendable {
    static let speeds: [Int: speed_t] = [
        50: speed_t(B50), 75: speed_t(B75), 110: speed_t(B110), 134: speed_t(B134), 150: speed_t(B150), 200: speed_t(B200), 300: speed_t(B300),
        600: speed_t(B600), 1200: speed_t(B1200), 1800: speed_t(B1800), 2400: speed_t(B2400), 4800: speed_t(B4800), 9600: speed_t(B9600),
        19200: speed_t(B19200), 38400: speed_t(B38400), 57600: speed_t(B57600), 115200: speed_t(B115200), 230400: speed_t(B230400),
        460800: speed_t(B460800), 500000: speed_t(B500000), 576000: speed_t(B576000), 921600: speed_t(B921600), 1000000: speed_t(B1000000),
        1152000: speed_t(B1152000), 1500000: speed_t(B1500000), 2000000: speed_t(B2000000), 2500000: speed_t(B2500000),
        3000000: speed_t(B3000000), 3500000: speed_t(B3500000), 4000000: speed_t(B4000000),
    ]

    let device: String
    private let fd: Int32
    private let saved: termios
    private let writes = DispatchQueue(label: "termind.workspaces.serial.write")
    private let flags = Mutex((closed: false, closedForGood: false, reading: false))
    /// A pipe whose write end wakes the reader from poll().
    private let wake: [Int32]
    /// Chunks the reader handed over and the consumer has not yet said it handled, and
    /// whether the reader has stopped.
    private let pace = ConditionLock((outstanding: 0, readerDone: false))

    /// Opens and configures `request.device`; throws naming the device and what is wrong.
    init(_ request: WorkspacesStreams.Serial.Request) throws {
        device = request.device
        let baud = request.baud ?? 115_200
        guard let speed = Self.speeds[baud] else {
            throw TermindError.badRequest("--baud \(baud) is not a speed this system sets; use one of \(Self.speeds.keys.sorted().map(String.init).joined(separator: ", ")).")
        }
        let stop = request.stop ?? 1, data = request.data ?? 8
        guard stop == 1 || stop == 2 else { throw TermindError.badRequest("--stop must be 1 or 2, not \(stop).") }
        guard (5...8).contains(data) else { throw TermindError.badRequest("--data must be from 5 to 8 bits, not \(data).") }
        let fd = open(request.device, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw TermindError(.workspacesSerialFailed, "Cannot open \(request.device): \(String(cString: strerror(errno)))"
                + (errno == EACCES ? " (your account may need the 'dialout' group)." : "."))
        }
        var settings = termios()
        guard isatty(fd) == 1, tcgetattr(fd, &settings) == 0 else {
            Glibc.close(fd)
            throw TermindError(.workspacesSerialFailed, "\(request.device) is not a serial line (a terminal device); termind serial opens those only.")
        }
        saved = settings
        cfmakeraw(&settings)
        settings.c_cflag |= tcflag_t(CLOCAL | CREAD)
        settings.c_cflag &= ~tcflag_t(CSIZE)
        settings.c_cflag |= tcflag_t([5: CS5, 6: CS6, 7: CS7, 8: CS8][data]!)
        settings.c_cflag &= ~(tcflag_t(PARENB) | tcflag_t(PARODD) | tcflag_t(CSTOPB) | tcflag_t(CRTSCTS))
        switch request.parity ?? .none {
        case .none: break
        case .even: settings.c_cflag |= tcflag_t(PARENB)
        case .odd: settings.c_cflag |= tcflag_t(PARENB | PARODD)
        }
        if stop == 2 { settings.c_cflag |= tcflag_t(CSTOPB) }
        settings.c_iflag &= ~tcflag_t(IXON | IXOFF | IXANY)
        switch request.flow ?? .none {
        case .none: break
        case .rtscts: settings.c_cflag |= tcflag_t(CRTSCTS)
        case .xonxoff: settings.c_iflag |= tcflag_t(IXON | IXOFF)
        }
        cfsetispeed(&settings, speed)
        cfsetospeed(&settings, speed)
        guard tcsetattr(fd, TCSANOW, &settings) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw TermindError(.workspacesSerialFailed, "\(request.device) refused the settings (\(baud) baud, \(data) data bits, \(stop) stop bits): \(reason).")
        }
        self.fd = fd
        var wake: [Int32] = [-1, -1]
        guard pipe(&wake) == 0 else {
            Glibc.close(fd)
            throw TermindError.internalFailure("Cannot make a pipe for the serial line.")
        }
        for end in wake { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        self.wake = wake
    }

    /// What the line delivers, chunk by chunk, until it closes or hangs up. The reader
    /// waits while four chunks are not yet `consumed()`.
    func output() -> AsyncStream<Data> {
        let (stream, feed) = AsyncStream.makeStream(of: Data.self)
        let fd = self.fd, wakeFD = wake[0]
        flags.withLock { $0.reading = true }
        let thread = SystemThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                var descriptors = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
                if poll(&descriptors, 2, -1) < 0 && errno != EINTR { break }
                if descriptors[1].revents != 0 { break }
                let n = read(fd, &buffer, buffer.count)
                if n > 0 {
                    feed.yield(Data(buffer[0..<n]))
                    pace.withLock { $0.outstanding += 1 }
                    pace.withLock(whenever: { $0.outstanding < 4 || flags.withLock({ $0.closed }) }) { _ in }
                } else if n < 0 && (errno == EAGAIN || errno == EINTR) {
                    continue
                } else {
                    break  // hang-up or error
                }
            }
            feed.finish()
            pace.withLock { $0.readerDone = true }
            pace.broadcast()
        }
        thread.start()
        return stream
    }

    /// The consumer handled a chunk of `output()`.
    func consumed() {
        pace.withLock { $0.outstanding = max(0, $0.outstanding - 1) }
        pace.signal()
    }

    /// Ends the reading (its stream finishes) without waiting: for a cancellation.
    func stop() {
        flags.withLock { $0.closed = true }
        var one: UInt8 = 1
        _ = Glibc.write(wake[1], &one, 1)
        // Under `pace`'s lock: the reader checks `closed` (another lock's) while it holds
        // `pace`, so a broadcast outside it could fall between that check and its wait.
        pace.withLock { _ in pace.broadcast() }
    }

    /// Writes `data` whole (waiting while the line's buffer is full); false once closed.
    func write(_ data: Data) async -> Bool {
        await withCheckedContinuation { continuation in
            writes.async { [self] in
                guard !flags.withLock({ $0.closed }) else { return continuation.resume(returning: false) }
                let ok = data.withUnsafeBytes { raw -> Bool in
                    var offset = 0
                    while offset < raw.count {
                        let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                        if n > 0 { offset += n; continue }
                        if n < 0 && errno == EINTR { continue }
                        guard n < 0 && errno == EAGAIN else { return false }
                        var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&descriptor, 1, 1000)
                        if flags.withLock({ $0.closed }) { return false }
                    }
                    return true
                }
                continuation.resume(returning: ok)
            }
        }
    }

    /// Puts the line's settings back and closes it (once), after its reader has stopped.
    func close() {
        let first: Bool = flags.withLock { flags in
            defer { flags.closedForGood = true }
            return !flags.closedForGood
        }
        guard first else { return }
        stop()
        if flags.withLock({ $0.reading }) {
            let deadline = Date().addingTimeInterval(2)
            pace.wait { pace, _ in
                let left = deadline.timeIntervalSinceNow
                return pace.readerDone || left <= 0 ? .done(()) : .waitAtMost(seconds: left)
            }
        }
        writes.sync {
            var settings = saved
            tcsetattr(fd, TCSANOW, &settings)
            Glibc.close(fd)
        }
        Glibc.close(wake[0])
        Glibc.close(wake[1])
    }
}
