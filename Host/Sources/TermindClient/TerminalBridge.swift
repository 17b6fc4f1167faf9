import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// The person's terminal, bridged to a stream that declares one (a shell): raw mode while
/// the stream runs — every key, Ctrl-C included, goes to the remote side — and the
/// terminal's settings restored on every way out: the stream's end, an error, a signal
/// (SIGTERM, SIGHUP), the server going away. Window changes are sent as `resize` controls,
/// the latest size winning. The modes are set by the terminal's foreground process
/// (`Console.terminal`): this one, or the launcher whose command a server runs.
final class TerminalBridge: Sendable {
    let fd: Int32
    private let terminal: any ConsoleTerminal
    private let raw = Mutex(false)

    /// nil when the console's standard input is not a terminal.
    init?(console: Console) {
        guard console.isTerminal(console.input) else { return nil }
        fd = console.input
        terminal = console.terminal
    }

    static func size(_ fd: Int32) -> (columns: Int, rows: Int)? {
        var size = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return nil }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    func enterRaw() {
        raw.withLock { raw in
            guard !raw else { return }
            terminal.setRaw(true)
            raw = true
        }
    }

    /// Whether the terminal is raw now (a line written to it needs its own carriage return).
    var isRaw: Bool { raw.withLock { $0 } }

    /// Puts the terminal back as it was; safe to call more than once, from any thread.
    func restore() {
        raw.withLock { raw in
            guard raw else { return }
            terminal.setRaw(false)
            raw = false
        }
    }
}
