import Foundation
import TermindCore

/// A real terminal emulator for tests: a private tmux server (its own socket, no config)
/// whose windows run programs on pseudo-terminals of a given size. Tests type into them
/// (`send`), resize them, and read the screen as tmux draws it (`screen()`, capture-pane) —
/// what a person would see, after every escape sequence took effect.
public final class TmuxTerminal: @unchecked Sendable {
    public let socket: String
    private let configuration: String
    private let environment: [String: String]

    /// A tmux server on `directory`'s own socket; `environment` is what its programs get.
    public init(directory: TemporaryDirectory, environment: [String: String]) {
        socket = directory.file("tmux.sock")
        configuration = (try? directory.write("tmux.conf", "set -g status off\nset -g history-limit 5000\n")) ?? "/dev/null"
        var environment = printingBacktraces(environment)
        environment.removeValue(forKey: "TMUX")
        self.environment = environment
    }

    @discardableResult
    public func tmux(_ arguments: [String]) throws -> String {
        let result = try ProcessRunner.run("/usr/bin/tmux", ["-S", socket, "-f", configuration] + arguments, environment: environment)
        guard result.status == 0 else {
            throw TermindError(code: "test.tmux", message: "tmux \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
        }
        return result.stdout
    }

    /// Opens a terminal `name` (a tmux session of its own) running `argv` at
    /// `columns`×`rows` from the start. A small shell waits for the program and prints
    /// `[exited N]` after it (tmux can miss a pane program's exit status: it runs helpers
    /// with SIGCHLD at its default meanwhile), then keeps the terminal open for reading.
    public func open(_ name: String, _ argv: [String], columns: Int = 100, rows: Int = 30) throws {
        // Once the program has exited, keys (a Ctrl-C meant for it) must not end the terminal.
        let wrapped = ["/bin/sh", "-c", "\"$@\"; status=$?; trap '' INT QUIT TSTP; echo \"[exited $status]\"; exec sleep 100000", "sh"] + argv
        let command = Shell.quoted(wrapped)
        // The first command starts the tmux server, which keeps the descriptors it was given:
        // never this process's pipes (a reader would wait for their end forever).
        let arguments = ["-S", socket, "-f", configuration, "new-session", "-d", "-s", name, "-x", String(columns), "-y", String(rows), command]
        let result = try ProcessRunner.run("/bin/sh", ["-c", "exec /usr/bin/tmux \"$@\" </dev/null >/dev/null 2>&1", "tmux"] + arguments, environment: environment)
        guard result.status == 0 else { throw TermindError(code: "test.tmux", message: "tmux new-session \(name) failed (\(result.status))") }
    }

    public func resize(_ name: String, columns: Int, rows: Int) throws {
        try tmux(["resize-window", "-t", "\(name):", "-x", String(columns), "-y", String(rows)])
    }

    /// Types `text` literally (a `\r` is Enter).
    public func send(_ name: String, _ text: String) throws {
        try tmux(["send-keys", "-t", "\(name):", "-l", text])
    }

    /// The screen's rows as tmux shows them, trailing blanks removed.
    public func screen(_ name: String) throws -> [String] {
        let text = try tmux(["capture-pane", "-p", "-t", "\(name):"])
        var rows = text.components(separatedBy: "\n").map { String($0.reversed().drop { $0 == " " }.reversed()) }
        if rows.last == "" { rows.removeLast() }
        return rows
    }

    /// Waits until the screen shows `text`; the screen at the end either way.
    @discardableResult
    public func wait(_ name: String, for text: String, seconds: Double = 20) throws -> (found: Bool, screen: [String]) {
        let deadline = Date().addingTimeInterval(seconds)
        var rows: [String] = []
        while Date() < deadline {
            rows = (try? screen(name)) ?? rows
            if rows.contains(where: { $0.contains(text) }) { return (true, rows) }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return (false, rows)
    }

    /// Waits until the screen satisfies `condition` and then stays the same for `quiet`
    /// seconds (a program redrawing is done); that screen, or nil when it never settles.
    /// For comparing screens, where a fixed sleep races a loaded machine.
    public func settled(_ name: String, seconds: Double = 20, quiet: Double = 0.3, until condition: ([String]) -> Bool) throws -> [String]? {
        let deadline = Date().addingTimeInterval(seconds)
        var last: [String]?
        var since = Date()
        while Date() < deadline {
            let rows = try screen(name)
            if !condition(rows) {
                last = nil
            } else if rows != last {
                last = rows
                since = Date()
            } else if Date().timeIntervalSince(since) >= quiet {
                return rows
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return nil
    }

    /// The program's exit status once it has ended (the `[exited N]` line), else nil.
    public func exitStatus(_ name: String) throws -> Int? {
        for row in try screen(name).reversed() {
            if let range = row.range(of: "[exited "), let end = row[range.upperBound...].firstIndex(of: "]") {
                return Int(row[range.upperBound..<end])
            }
        }
        return nil
    }

    /// Waits for the pane's program to end; its status.
    public func waitForExit(_ name: String, seconds: Double = 20) throws -> Int? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let status = try exitStatus(name) { return status }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return nil
    }

    /// Closes the terminal: its program gets SIGHUP, as when a window is closed.
    public func kill(_ name: String) {
        _ = try? tmux(["kill-session", "-t", name])
    }

    /// Ends the tmux server and everything it runs.
    public func stop() {
        _ = try? tmux(["kill-server"])
    }
}
