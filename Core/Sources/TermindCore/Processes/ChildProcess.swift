import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A program termind starts (tmux, an editor). Whatever this process ignores or blocks
/// (`serve` ignores SIGTERM and SIGINT to handle them itself, the SSH engine blocks
/// SIGPIPE), the program starts with every signal at its default disposition and none
/// blocked; it gets the standard input, output and error it is given and no other
/// descriptor of ours (a descendant that outlives it, such as the tmux server a first
/// `tmux new-session` starts, must not hold our pipes or sockets open); and it is reaped.
///
/// Spawned with posix_spawn: nothing runs between fork and exec but the file actions.
public enum ChildProcess {
    /// How a program ended.
    public struct Termination: Sendable, Equatable {
        /// Its exit status, when it exited.
        public let status: Int32?
        /// The signal that ended it, when one did.
        public let signal: Int32?
        public var succeeded: Bool { status == 0 }
    }

    /// A program that ran to its end, with what it wrote (up to the limit asked for).
    public struct Outcome: Sendable {
        public let termination: Termination
        public let stdout: Data
        public let stderr: Data
    }

    /// Starts `argv` (`argv[0]` an absolute path) with `environment` (nil: this process's).
    /// Standard input, output and error are the descriptors given (nil: /dev/null); every
    /// other descriptor is closed in the child. Returns its process id: `wait` reaps it.
    /// `newSession`: the child leads a session of its own (setsid): no controlling terminal,
    /// not in termind's process group.
    public static func spawn(_ argv: [String], environment: [String: String]? = nil,
                             stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil, newSession: Bool = false) throws -> pid_t {
        guard let program = argv.first, program.hasPrefix("/") else {
            throw TermindError(.processSpawnFailed, "A child process needs an absolute program path, not '\(argv.first ?? "")'.")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // dup2 clears close-on-exec on the target; /dev/null where nothing was given.
        for (target, source) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            if let source {
                posix_spawn_file_actions_adddup2(&actions, source, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        closeOthers(&actions)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        // POSIX_SPAWN_SETSID is 0x80 in glibc (2.26 and later; Swift's Glibc module does not declare it).
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) | (newSession ? 0x80 : 0))

        let environmentLines = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let result = withCStrings(argv) { arguments in
            withCStrings(environmentLines) { variables in
                posix_spawn(&pid, program, &actions, &attributes, arguments, variables)
            }
        }
        guard result == 0 else {
            throw TermindError(.processSpawnFailed, "\(program) could not be started: \(String(cString: strerror(result))).")
        }
        return pid
    }

    /// Waits for `pid` to end (reaping it), on the calling thread.
    public static func wait(_ pid: pid_t) -> Termination {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return Termination(status: nil, signal: nil) }
        }
        return termination(status)
    }

    /// Runs `argv` to its end on `executor` (never the cooperative pool), standard input
    /// from /dev/null, and returns what it wrote to standard output and error (the first
    /// `limit` bytes of each). Once the program itself has exited, what it wrote is read
    /// and no more is waited for: a descendant that kept the pipes open does not hold the
    /// caller.
    public static func run(_ argv: [String], environment: [String: String]? = nil, limit: Int = 1 << 20,
                           executor: BlockingExecutor = .core) async throws -> Outcome {
        try await executor.run(busy: TermindError(.blockingBusy, "termind has too much blocking work queued; try again.")) {
            try runBlocking(argv, environment: environment, limit: limit)
        }
    }

    /// A pipe for a child's output, both ends close-on-exec (the child gets its end only
    /// through `spawn`'s dup2): `[read, write]`.
    public static func pipe(for program: String) throws -> [Int32] {
        var ends: [Int32] = [-1, -1]
        guard Glibc.pipe(&ends) == 0 else { throw TermindError(.processSpawnFailed, "No pipe for \(program): \(String(cString: strerror(errno))).") }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return ends
    }

    private static func runBlocking(_ argv: [String], environment: [String: String]?, limit: Int) throws -> Outcome {
        let out = try pipe(for: argv[0])
        let err: [Int32]
        do { err = try pipe(for: argv[0]) } catch {
            close(out[0]); close(out[1])
            throw error
        }
        let pid: pid_t
        do {
            pid = try spawn(argv, environment: environment, stdout: out[1], stderr: err[1])
        } catch {
            for fd in out + err { close(fd) }
            throw error
        }
        close(out[1])
        close(err[1])
        defer { close(out[0]); close(err[0]) }
        var collected = [Data(), Data()]
        var open = [true, true]
        var exited: Termination?
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while open.contains(true) {
            var descriptors = [out[0], err[0]].enumerated().filter { open[$0.offset] }.map { pollfd(fd: $0.element, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), exited == nil ? 100 : 0)
            if ready < 0 && errno == EINTR { continue }
            var readSomething = false
            for descriptor in descriptors where descriptor.revents != 0 {
                let index = descriptor.fd == out[0] ? 0 : 1
                let n = read(descriptor.fd, &buffer, buffer.count)
                if n > 0 {
                    readSomething = true
                    if collected[index].count < limit { collected[index].append(contentsOf: buffer[0..<min(n, limit - collected[index].count)]) }
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    open[index] = false
                }
            }
            if exited == nil {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid { exited = termination(status) }
            } else if !readSomething {
                // It has exited and its pipes hold nothing more: what is left open belongs
                // to a descendant.
                break
            }
        }
        return Outcome(termination: exited ?? wait(pid), stdout: collected[0], stderr: collected[1])
    }

    private static func termination(_ status: Int32) -> Termination {
        let signal = status & 0x7f
        if signal == 0 { return Termination(status: (status >> 8) & 0xff, signal: nil) }
        return Termination(status: nil, signal: signal)
    }

    // MARK: - Descriptors

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// glibc's posix_spawn_file_actions_addclosefrom_np (2.34 and later; Swift's Glibc
    /// module does not declare it).
    private static let closeFrom: CloseFrom? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: CloseFrom.self)
    }()

    /// Closes every descriptor above standard error in the child: at once with closefrom
    /// where glibc has it, else each one open now.
    private static func closeOthers(_ actions: inout posix_spawn_file_actions_t) {
        if let closeFrom, closeFrom(&actions, 3) == 0 { return }
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for name in open {
            if let fd = Int32(name), fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        }
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
