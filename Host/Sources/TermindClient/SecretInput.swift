import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// Reads secrets from a person: on a terminal with echo off (restored on every path), or
/// the first line of standard input when it is not a terminal.
enum SecretInput {
    /// From the console's standard input: the terminal (prompting on standard error), or its
    /// first line.
    static func read(prompt: String, console: Console) throws -> String {
        if console.isTerminal(console.input) {
            return console.terminal.readLine(TerminalText.escaped(prompt), echo: false, controllingTerminal: false) ?? ""
        }
        return console.readFirstLine()
    }
}

/// The terminal prompt a person is answering right now in this process, if any, with the
/// terminal's settings from before it: a Ctrl-C or SIGTERM then restores them (echo back
/// on) and ends termind at once (SignalCatcher), instead of waiting for Enter or leaving the
/// terminal silent.
enum TerminalPrompt {
    private static let active = Mutex<(fd: Int32, saved: termios)?>(nil)

    static func begin(_ fd: Int32, saved: termios) { active.withLock { $0 = (fd, saved) } }
    static func begin(_ fd: Int32) {
        var current = termios()
        tcgetattr(fd, &current)
        begin(fd, saved: current)
    }
    static func end() { active.withLock { $0 = nil } }

    /// Restores the terminal of a prompt in progress; true when there was one.
    static func restore() -> Bool {
        active.withLock { active in
            guard var prompt = active else { return false }
            tcsetattr(prompt.fd, TCSANOW, &prompt.saved)
            _ = write(prompt.fd, "\n", 1)
            active = nil
            return true
        }
    }
}
