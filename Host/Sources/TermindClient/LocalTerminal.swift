import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// This process's own terminal (`Console.process`): raw mode on standard input, prompts on
/// `/dev/tty` or standard input, the editor, and stopping as a shell's job.
final class LocalTerminal: ConsoleTerminal, Sendable {
    /// Standard input's settings before the first raw mode, and whether it is raw now.
    private let mode = Mutex<(saved: termios?, raw: Bool)>((nil, false))

    /// The terminal in raw mode, for paths that end the process at once.
    private static let active = Mutex<LocalTerminal?>(nil)

    func setRaw(_ on: Bool) {
        mode.withLock { mode in
            if on {
                var settings = termios()
                if mode.saved == nil, tcgetattr(STDIN_FILENO, &settings) == 0 { mode.saved = settings }
                guard var settings = mode.saved else { return }
                cfmakeraw(&settings)
                // Output post-processing off too (the remote terminal sends its own CRs).
                tcsetattr(STDIN_FILENO, TCSADRAIN, &settings)
                mode.raw = true
            } else if mode.raw, var settings = mode.saved {
                tcsetattr(STDIN_FILENO, TCSADRAIN, &settings)
                mode.raw = false
            }
        }
        if on { Self.active.withLock { $0 = self } }
    }

    /// For a path about to end the process: the terminal as it was found.
    static func restoreActive() {
        active.withLock { $0 }?.setRaw(false)
    }

    func readLine(_ prompt: String, echo: Bool, controllingTerminal: Bool) -> String? {
        let input: Int32, output: Int32
        var opened: Int32 = -1
        if controllingTerminal {
            opened = open("/dev/tty", O_RDWR | O_CLOEXEC)
            guard opened >= 0 else { return nil }
            (input, output) = (opened, opened)
        } else {
            guard isatty(STDIN_FILENO) == 1 else { return nil }
            (input, output) = (STDIN_FILENO, STDERR_FILENO)
        }
        defer { if opened >= 0 { close(opened) } }
        var before = termios()
        tcgetattr(input, &before)
        TerminalPrompt.begin(input, saved: before)
        // Echo goes off before the prompt shows (as OpenSSH's readpassphrase does): a secret
        // typed or pasted the moment the prompt appears is never shown.
        if !echo {
            var quiet = before
            quiet.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(input, TCSANOW, &quiet)
        }
        _ = prompt.withCString { write(output, $0, strlen($0)) }
        defer {
            if !echo {
                tcsetattr(input, TCSANOW, &before)
                _ = write(output, "\n", 1)
            }
            TerminalPrompt.end()
        }
        var bytes: [UInt8] = []
        defer { bytes.withUnsafeMutableBufferPointer { buffer in for index in buffer.indices { buffer[index] = 0 } } }
        var byte: UInt8 = 0
        var ended = true
        while bytes.count < 64 << 10, Glibc.read(input, &byte, 1) == 1 {
            if byte == 10 { ended = false; break }
            bytes.append(byte)
        }
        // End of input (Ctrl-D) before anything was typed: no answer, not an empty one.
        if ended && bytes.isEmpty {
            if echo { _ = write(output, "\n", 1) }  // the next output starts on a line of its own, as after Enter
            return nil
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    func show(_ text: String) {
        let tty = open("/dev/tty", O_WRONLY | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else { return }
        defer { close(tty) }
        _ = text.withCString { write(tty, $0, strlen($0)) }
    }

    /// Runs the editor on the controlling terminal and waits for it; its exit status, or -1
    /// when it did not start or was killed. It starts as every child of termind does
    /// (`ChildProcess`: default signals, only the terminal as its descriptors).
    func edit(_ path: String, command: String) -> Int32 {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        defer { if tty >= 0 { close(tty) } }
        // No terminal: the editor gets our standard streams.
        guard let pid = try? ChildProcess.spawn(["/bin/sh", "-c", command + " \"$1\"", "termind-edit", path],
                                                stdin: tty >= 0 ? tty : 0, stdout: tty >= 0 ? tty : 1, stderr: tty >= 0 ? tty : 2) else { return -1 }
        return ChildProcess.wait(pid).status ?? -1
    }

    func suspend() {
        kill(getpid(), SIGTSTP)
    }
}
