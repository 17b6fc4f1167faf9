import Foundation
import Synchronization

/// The client's terminal, bridged to a stream that declares one (a shell): raw mode while
/// the stream runs — every key, Ctrl-C included, goes to the remote side — and the
/// terminal's settings restored on every way out: the stream's end, an error, a signal
/// (SIGTERM, SIGHUP), the server going away. Window changes (SIGWINCH) are sent as
/// `resize` controls, the latest size winning.
final class TerminalBridge: @unchecked Sendable {
    let fd: Int32
    private let saved: termios
    private let lock = NSLock()
    private var raw = false

    /// The bridge in use, for paths that end the process at once.
    private static let active = Mutex<TerminalBridge?>(nil)

    /// nil when `fd` is not a terminal.
    init?(fd: Int32 = STDIN_FILENO) {
        var settings = termios()
        guard isatty(fd) == 1, tcgetattr(fd, &settings) == 0 else { return nil }
        self.fd = fd
        saved = settings
    }

    static func size(_ fd: Int32) -> (columns: Int, rows: Int)? {
        var size = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return nil }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    func enterRaw() {
        lock.withLock {
            guard !raw else { return }
            var settings = saved
            cfmakeraw(&settings)
            // Keep output post-processing off too (the remote terminal sends its own CRs).
            tcsetattr(fd, TCSADRAIN, &settings)
            raw = true
        }
        Self.active.withLock { $0 = self }
    }

    /// Puts the terminal back as it was; safe to call more than once, from any thread.
    func restore() {
        lock.withLock {
            guard raw else { return }
            var settings = saved
            tcsetattr(fd, TCSADRAIN, &settings)
            raw = false
        }
    }

    /// For a path about to end the process: the terminal as it was found.
    static func restoreActive() {
        active.withLock { $0 }?.restore()
    }
}
