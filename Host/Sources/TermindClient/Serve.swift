import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// `termind serve`: boots the kernel once, listens on the control socket, and runs until
/// SIGINT or SIGTERM; then stops accepting, stops features in reverse order and removes
/// the socket.
enum Serve {
    /// How long stopping may take before the process ends anyway.
    static let stopLimit: Double = 30

    static func run(_ inv: Invocation) async throws -> Invocation.Exit {
        let options = try Self.options(inv.arguments)
        // Armed before anything is announced: a SIGTERM right after the ready line (a
        // supervisor, or a test, stopping a server it just started) must stop the server
        // cleanly, not kill it with the default action (status 143, socket left behind).
        let termination = SignalCatcher([SIGINT, SIGTERM], keepUntilHandled: true)
        var configuration = try inv.kernelConfiguration()
        configuration.resident = true
        configuration.serveOptions = options
        configuration.controlSocket = inv.console.absolute(inv.socketPath)
        let kernel = Kernel(configuration: configuration, sink: try inv.logSink())
        let statuses = try await kernel.boot()
        // Features' contracts and streams (termind exec's among them) are served here; their
        // SSH connections are the kernel's one pool, shared between invocations.
        let server = ControlServer(path: inv.socketPath, kernel: kernel, logger: kernel.logger)
        // Whole commands from the launcher, run here against its descriptors.
        RemoteInvocation.register(on: server, kernel: kernel)
        Self.leaveControllingTerminal()
        // Launchers' pipes are written from here: one whose reader went away is an error on
        // that write (the launcher then exits 141), never the server's death.
        signal(SIGPIPE, SIG_IGN)
        do {
            try server.start()
        } catch {
            await kernel.shutdown()
            throw error
        }
        let running = statuses.filter { $0.state == .running }.count
        let disabled = statuses.filter { $0.state == .disabled }
        if inv.json {
            struct Ready: Encodable { let event = "ready"; let socket: String; let pid: Int32; let running: Int; let disabled: [String] }
            let data = (try? JSONCoding.encode(Ready(socket: inv.socketPath, pid: getpid(), running: running, disabled: disabled.map(\.id)))) ?? Data()
            inv.console.write(data + Data("\n".utf8), to: inv.console.output)
        } else {
            inv.console.line("termind \(Invocation.version) serving on \(inv.socketPath): \(running) feature\(running == 1 ? "" : "s") running\(disabled.isEmpty ? "" : ", \(disabled.count) disabled (termind features)"). Stop with Ctrl-C or SIGTERM.")
        }
        SystemdNotify.send("READY=1\nMAINPID=\(getpid())\nSTATUS=serving on \(inv.socketPath)")
        let signal = await termination.waitForSignal()
        SystemdNotify.send("STOPPING=1")
        // Stopping is bounded whatever hangs (a plugin's stop is abandoned after 5 s, a
        // feature's after this): the process ends.
        let console = inv.console
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.stopLimit) {
            console.error("stopping took more than \(Int(Self.stopLimit)) s; exiting without waiting for the rest.")
            console.terminate(1)
        }
        server.stop()
        await kernel.shutdown()
        if !inv.json { inv.console.error("stopped (\(signal == SIGINT ? "SIGINT" : "SIGTERM")).") }
        return .success
    }
}

extension Serve {
    /// Features' serve options as `--NAME VALUE` or `--NAME=VALUE` (the kernel checks that a
    /// loaded feature declares each): by name without dashes.
    static func options(_ arguments: [String]) throws -> [String: String] {
        var options: [String: String] = [:]
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            guard word.hasPrefix("--"), word.count > 2 else {
                throw Invocation.UsageError(description: "serve takes no arguments, only its features' options (--NAME VALUE): '\(word)' is not one.")
            }
            var name = String(word.dropFirst(2))
            var value: String
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            } else {
                index += 1
                guard index < arguments.count else { throw Invocation.UsageError(description: "--\(name) needs a value.") }
                value = arguments[index]
            }
            guard !value.isEmpty else { throw Invocation.UsageError(description: "--\(name) needs a value.") }
            guard options[name] == nil else { throw Invocation.UsageError(description: "--\(name) is given twice.") }
            options[name] = value
            index += 1
        }
        return options
    }

    /// A server started from a shell (`termind serve &`) gives up that shell's terminal as
    /// its controlling one: a launcher in the same terminal hands it over, and the server
    /// reading or writing it as a background job would be stopped (SIGTTIN) or refused (EIO).
    /// Ctrl-C still reaches a server in the foreground: the terminal signals its process group.
    static func leaveControllingTerminal() {
        let tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard tty >= 0 else { return }
        // A session leader giving it up would hang up the whole session.
        if getsid(0) != getpid() { _ = ioctl(tty, UInt(TIOCNOTTY)) }
        close(tty)
    }
}

/// The systemd notification protocol (sd_notify): with `NOTIFY_SOCKET` set (a unit with
/// `Type=notify`), `READY=1` once the socket answers and `STOPPING=1` on the way out.
enum SystemdNotify {
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty, path.utf8.count < 108 else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }  // an abstract socket
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        _ = Array(state.utf8).withUnsafeBytes { message in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, message.baseAddress, message.count, Int32(MSG_NOSIGNAL), $0, length) }
            }
        }
    }
}
