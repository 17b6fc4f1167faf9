#if canImport(Glibc)
import Glibc
#endif

/// The signals the launcher passes on to the server's run of the command (SIGINT, SIGTERM,
/// SIGHUP as a cancel or a detach, SIGWINCH as a window change, SIGTSTP as a pause of the
/// command's output while this job is stopped): caught into a pipe (the self-pipe trick: a
/// handler may only write) that the launcher polls beside its socket. `restore()` puts the
/// default dispositions back before the full client takes over.
enum LauncherSignals {
    static let relayed: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP]

    /// The pipe's ends; -1 until `install()`. Written only by the handler, read by the loop.
    nonisolated(unsafe) private(set) static var readEnd: Int32 = -1
    nonisolated(unsafe) private static var writeEnd: Int32 = -1

    static func install() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return }
        for fd in ends {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
        for number in relayed { catchSignal(number) }
        signal(SIGPIPE, SIG_IGN)
    }

    private static func catchSignal(_ number: Int32) {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { number in
            var byte = UInt8(truncatingIfNeeded: number)
            let saved = errno
            _ = write(LauncherSignals.writeEnd, &byte, 1)
            errno = saved
        }
        action.sa_flags = SA_RESTART
        sigemptyset(&action.sa_mask)
        sigaction(number, &action, nil)
    }

    /// Stops this process as a shell's job (what SIGTSTP does by default) and returns once
    /// it is continued (`fg`, `bg`).
    static func stopSelf() {
        signal(SIGTSTP, SIG_DFL)
        kill(getpid(), SIGTSTP)
        catchSignal(SIGTSTP)
    }

    /// The signals caught since the last call, in order.
    static func drain() -> [Int32] {
        guard readEnd >= 0 else { return [] }
        var caught: [Int32] = []
        var bytes = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(readEnd, &bytes, bytes.count)
            guard count > 0 else { break }
            caught += bytes[..<count].map { Int32($0) }
        }
        return caught
    }

    /// Puts the default dispositions back; a signal caught meanwhile and not passed on is
    /// raised again, so it acts as it would have (a Ctrl-C pressed as the command was handed
    /// back to this process still ends it).
    static func restore() {
        let pending = drain()
        for number in relayed + [SIGPIPE] { signal(number, SIG_DFL) }
        if readEnd >= 0 { close(readEnd); close(writeEnd) }
        readEnd = -1
        writeEnd = -1
        for number in pending where number != SIGWINCH { raise(number) }
    }

    /// The SSH name the server's client uses for a signal.
    static func name(_ number: Int32) -> String {
        switch number {
        case SIGINT: "INT"
        case SIGTERM: "TERM"
        case SIGHUP: "HUP"
        case SIGWINCH: "WINCH"
        case SIGTSTP: "TSTP"
        default: "TERM"
        }
    }
}
