import Foundation
import TermindCore

/// Reads secrets from a person: on a terminal with echo off (restored on every path), or
/// the first line of standard input when it is not a terminal.
enum SecretInput {
    /// From standard input: the terminal (prompting on standard error), or its first line.
    static func read(prompt: String) throws -> String {
        if isatty(STDIN_FILENO) == 1 {
            return hidden(input: STDIN_FILENO, output: STDERR_FILENO, prompt: prompt).withPlaintext { $0 }
        }
        let data = FileHandle.standardInput.readDataToEndOfFile()
        let text = String(decoding: data, as: UTF8.self)
        return text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
    }

    /// One line from the terminal `input` with echo off, after `prompt` (escaped: it may hold
    /// a server's text) on `output`; the read buffer is wiped.
    static func hidden(input: Int32, output: Int32, prompt: String) -> Secret {
        _ = TerminalText.escaped(prompt).withCString { write(output, $0, strlen($0)) }
        var saved = termios()
        tcgetattr(input, &saved)
        TerminalPrompt.begin(input, saved: saved)
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(input, TCSANOW, &quiet)
        defer {
            tcsetattr(input, TCSANOW, &saved)
            TerminalPrompt.end()
            _ = write(output, "\n", 1)
        }
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while Glibc.read(input, &byte, 1) == 1, byte != 10 { bytes.append(byte) }
        defer { bytes.withUnsafeMutableBufferPointer { buffer in for index in buffer.indices { buffer[index] = 0 } } }
        return Secret(String(decoding: bytes, as: UTF8.self))
    }
}

/// The terminal prompt a person is answering right now, if any, with the terminal's settings
/// from before it: a Ctrl-C or SIGTERM then restores them (echo back on) and ends termind at
/// once (SignalCatcher), instead of waiting for Enter or leaving the terminal silent.
enum TerminalPrompt {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var active: (fd: Int32, saved: termios)?

    static func begin(_ fd: Int32, saved: termios) { lock.withLock { active = (fd, saved) } }
    static func begin(_ fd: Int32) {
        var current = termios()
        tcgetattr(fd, &current)
        begin(fd, saved: current)
    }
    static func end() { lock.withLock { active = nil } }

    /// Restores the terminal of a prompt in progress; true when there was one.
    static func restore() -> Bool {
        lock.withLock {
            guard var prompt = active else { return false }
            tcsetattr(prompt.fd, TCSANOW, &prompt.saved)
            _ = write(prompt.fd, "\n", 1)
            active = nil
            return true
        }
    }
}
