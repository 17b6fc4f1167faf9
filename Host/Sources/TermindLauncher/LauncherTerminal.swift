#if canImport(Glibc)
import Glibc
#endif

/// What the launcher does on its person's terminal when the server's run of the command
/// asks (docs/contracts.md, "The launcher"): the server has this process's descriptors and
/// reads and writes them itself, but whatever needs the foreground process of the terminal
/// — its modes, a prompt, an editor, stopping on `~^Z` — happens here, in that process.
/// The terminal is put back as it was found on every way out (`restore()`).
final class LauncherTerminal {
    /// Standard input's settings when the launcher first changed them.
    private var saved: termios?

    /// `raw`: standard input (a terminal) in raw mode, as the bridged session needs it.
    func enterRaw() {
        var settings = termios()
        guard isatty(STDIN_FILENO) == 1, tcgetattr(STDIN_FILENO, &settings) == 0 else { return }
        if saved == nil { saved = settings }
        var raw = saved!
        cfmakeraw(&raw)
        tcsetattr(STDIN_FILENO, TCSADRAIN, &raw)
    }

    /// `restore`, and every way out: standard input's settings as they were found.
    func restore() {
        guard var settings = saved else { return }
        tcsetattr(STDIN_FILENO, TCSADRAIN, &settings)
    }

    /// `ended`: end of input (Ctrl-D) before anything was typed, which is no answer.
    enum LineResult { case text(String), ended, unavailable, interrupted(Int32) }

    /// `line`: `prompt` shown, one line read — on the controlling terminal (`/dev/tty`), or
    /// on standard input with the prompt on standard error — with echo off unless `echo`.
    /// A relayed signal during it ends the prompt (the caller then exits, as the full client
    /// does): nobody is left waiting for Enter with the terminal silent.
    func readLine(prompt: String, echo: Bool, controllingTerminal: Bool) -> LineResult {
        let input: Int32, output: Int32
        var opened: Int32 = -1
        if controllingTerminal {
            opened = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
            guard opened >= 0 else { return .unavailable }
            (input, output) = (opened, opened)
        } else {
            guard isatty(STDIN_FILENO) == 1 else { return .unavailable }
            (input, output) = (STDIN_FILENO, STDERR_FILENO)
        }
        defer { if opened >= 0 { close(opened) } }
        Self.write(prompt, to: output)
        var before = termios()
        let haveSettings = tcgetattr(input, &before) == 0
        if !echo && haveSettings {
            var quiet = before
            quiet.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(input, TCSANOW, &quiet)
        }
        defer {
            if !echo && haveSettings {
                tcsetattr(input, TCSANOW, &before)
                Self.write("\n", to: output)
            }
        }
        var bytes: [UInt8] = []
        defer { for index in bytes.indices { bytes[index] = 0 } }  // it may have been a secret
        while bytes.count < 64 << 10 {
            var ready = [pollfd(fd: input, events: Int16(POLLIN), revents: 0),
                         pollfd(fd: LauncherSignals.readEnd, events: Int16(POLLIN), revents: 0)]
            if poll(&ready, LauncherSignals.readEnd >= 0 ? 2 : 1, -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready[1].revents != 0 {
                let caught = LauncherSignals.drain()
                if let stop = caught.first(where: { $0 != SIGWINCH && $0 != SIGTSTP }) { return .interrupted(stop) }
                if caught.contains(SIGTSTP) {
                    // Ctrl-Z at the prompt: the terminal as it was while stopped, the prompt's again after.
                    if !echo && haveSettings { tcsetattr(input, TCSANOW, &before) }
                    LauncherSignals.stopSelf()
                    if !echo && haveSettings {
                        var quiet = before
                        quiet.c_lflag &= ~tcflag_t(ECHO)
                        tcsetattr(input, TCSANOW, &quiet)
                    }
                    Self.write(prompt, to: output)
                }
            }
            guard ready[0].revents != 0 else { continue }
            var byte: UInt8 = 0
            let count = read(input, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count == 1 && byte == 0x0A { return .text(String(decoding: bytes, as: UTF8.self)) }
            guard count == 1 else { break }
            bytes.append(byte)
        }
        if bytes.isEmpty {
            if echo { Self.write("\n", to: output) }  // what follows starts on a line of its own, as after Enter
            return .ended
        }
        return .text(String(decoding: bytes, as: UTF8.self))
    }

    /// `show`: text on the controlling terminal, when there is one.
    func show(_ text: String) {
        let tty = open("/dev/tty", O_WRONLY | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else { return }
        Self.write(text, to: tty)
        close(tty)
    }

    /// `edit`: `/bin/sh -c 'COMMAND "$1"' termind-edit PATH` on the controlling terminal when
    /// there is one, as git runs an editor; its exit status (-1 when it could not start).
    func edit(path: String, command: String) -> Int32 {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        defer { if tty >= 0 { close(tty) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if tty >= 0 { for target in Int32(0)...2 { posix_spawn_file_actions_adddup2(&actions, tty, target) } }
        let words: [String] = ["/bin/sh", "-c", command + " \"$1\"", "termind-edit", path]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS, which Swift does not import.
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : -1
    }

    /// `suspend` (`~^Z`): the terminal as it was found, this process stopped as a shell's
    /// job; returns once it continues (`fg`), when the server asks for raw mode again.
    func suspend() {
        restore()
        LauncherSignals.stopSelf()
    }

    static func write(_ text: String, to fd: Int32) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            offset += count
        }
    }
}
