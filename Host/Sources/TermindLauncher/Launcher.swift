#if canImport(Glibc)
import Glibc
#endif

/// `termind` itself: a small launcher that loads neither Foundation nor any of termind's
/// libraries. When `termind serve` answers on the control socket it hands the command over —
/// its words, working folder, environment and its standard input, output and error as
/// SCM_RIGHTS — and the server runs the generic client against those descriptors
/// (`client.invoke@1`, docs/contracts.md "The launcher"); the launcher meanwhile does only
/// what must happen in the terminal's foreground process (raw mode, prompts, the editor,
/// `~^Z`), passes on SIGINT/SIGTERM/SIGHUP/SIGWINCH, and exits with the code the server
/// sends. With no server (or one that sends the command back), the full client library
/// runs the command in this process (`ClientLibrary`), exactly as before.
public enum Launcher {
    /// The stream a server runs a launched command on.
    public static let stream = "client.invoke@1"

    /// glibc's `mallopt(M_MMAP_THRESHOLD, bytes)`, found with dlsym: Swift's Glibc module does
    /// not bring malloc.h, and a C module for one call is more than it needs. The option's
    /// number is malloc.h's (`#define M_MMAP_THRESHOLD -3`), a glibc ABI constant.
    /// Whether glibc took it (mallopt answers 1; 0 for an option or value it refuses).
    @discardableResult
    static func setMmapThreshold(_ bytes: Int32) -> Bool {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
        return unsafeBitCast(symbol, to: Mallopt.self)(-3, bytes) == 1
    }

    public static func main() -> Never {
        // Blocks of 128 KiB and more (a transfer's 255 KiB requests, a channel's buffers) are
        // mapped for themselves and given back when freed. glibc's default raises this
        // threshold each time such a block is freed, after which they come from the heaps
        // of whichever threads freed them and stay resident there: a 1 GiB put peaked at
        // 77 MiB with the default and 61 MiB with this, at the same speed (issue 40).
        setMmapThreshold(128 << 10)
        if let (index, bytes) = argumentNotUTF8() {
            // Swift would repair it into U+FFFD, and a path with it names another file (or none).
            LauncherTerminal.write("termind: argument \(index) is not valid UTF-8 (\(bytes)); termind takes its arguments as text. "
                                   + "Name such a file by a pattern matched on its side (e.g. 'dir/*.log'), or rename it.\n", to: STDERR_FILENO)
            exit(2)
        }
        let arguments = Array(CommandLine.arguments.dropFirst())
        // Nothing of termind's needs loading to say what it is.
        if let json = LauncherVersion.request(arguments) { exit(LauncherVersion.run(json: json)) }
        let environment = LaunchPlan.currentEnvironment()
        if case .server(let path) = LaunchPlan.decide(arguments, environment: environment),
           let code = runOnServer(path: path, arguments: arguments, environment: environment) {
            exit(code)
        }
        // Nor to list the registry's commands when no server does.
        if LauncherHelp.request(arguments, environment: environment), let code = LauncherHelp.run() { exit(code) }
        ClientLibrary.run()
    }

    /// The first argument (numbered from 1) whose bytes are not UTF-8, with those bytes
    /// written as a person can read them (`caf\xe9.txt`).
    static func argumentNotUTF8() -> (Int, String)? {
        for index in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index], String(validatingCString: pointer) == nil else { continue }
            var shown = ""
            var cursor = UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self)
            while cursor.pointee != 0 {
                let byte = cursor.pointee
                if byte >= 0x20 && byte < 0x7f { shown.append(Character(Unicode.Scalar(byte))) } else {
                    let hex = String(byte, radix: 16)
                    shown += "\\x" + (hex.count == 1 ? "0" + hex : hex)
                }
                cursor += 1
            }
            return (index, shown)
        }
        return nil
    }

    /// The command run by the server at `path`: its exit code, or nil when it must run in
    /// this process instead (no server, another user's, one that sends it back or does not
    /// know the launcher's stream). Nothing has been read from standard input when nil.
    static func runOnServer(path: String, arguments: [String], environment: [String: String]) -> Int32? {
        guard let socket = LauncherSocket(path: path), let folder = workingDirectory() else { return nil }
        // The standard streams this process has open: the server reads and writes them itself.
        let roles = ["stdin", "stdout", "stderr"]
        let open = (Int32(0)...2).filter { fcntl($0, F_GETFD) >= 0 }
        let body: LauncherJSON = .object([
            "argv": .array(arguments.map(LauncherJSON.string)),
            "workingDirectory": .string(folder),
            "environment": .object(LaunchPlan.forwardedEnvironment(environment).mapValues(LauncherJSON.string)),
        ])
        var line: [String: LauncherJSON] = ["id": .number(1), "stream": .string(stream), "body": body]
        if !open.isEmpty { line["descriptors"] = .array(open.map { .string(roles[Int($0)]) }) }
        // Signals are caught before the server has the command: it may write to our output
        // (and a person may press Ctrl-C) before this process is scheduled again, and one
        // arriving in between must be passed on, not end this process by default.
        LauncherSignals.install()
        guard socket.send(LauncherJSON.object(line).text, descriptors: open) else {
            LauncherSignals.restore()
            return nil
        }
        let terminal = LauncherTerminal()
        let outcome = serve(socket, terminal: terminal)
        terminal.restore()
        switch outcome {
        case .exit(let code):
            return code
        case .inProcess:
            socket.close()
            LauncherSignals.restore()
            return nil
        case .failed(let message):
            LauncherTerminal.write("termind: \(message)\n", to: STDERR_FILENO)
            return 1
        }
    }

    enum Outcome { case exit(Int32), inProcess, failed(String) }

    /// Reads the server's lines until the command's end, answering its questions and passing
    /// caught signals on as `{"control": {"signal": NAME}}`.
    static func serve(_ socket: LauncherSocket, terminal: LauncherTerminal) -> Outcome {
        var answered = false
        while true {
            let read: LauncherSocket.Read
            if let line = socket.bufferedLine() {
                read = .line(line)
            } else {
                var ready = [pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0),
                             pollfd(fd: LauncherSignals.readEnd, events: Int16(POLLIN), revents: 0)]
                if poll(&ready, 2, -1) < 0 {
                    if errno == EINTR { continue }
                    return .failed("cannot wait for the termind server: \(String(cString: strerror(errno))).")
                }
                if ready[1].revents != 0 {
                    for number in LauncherSignals.drain() {
                        relay(number, socket)
                        if number == SIGTSTP {
                            // Stopped as a job: the command's output waits meanwhile, as it
                            // would behind a stopped process of its own.
                            LauncherSignals.stopSelf()
                            relay(SIGCONT, socket)
                        }
                    }
                }
                guard ready[0].revents != 0 else { continue }
                read = socket.readLine()
            }
            switch read {
            case .again:
                continue
            case .end:
                // Before any answer: a server that closed at once (stopping, full) — the full
                // client then decides; later the command's outcome is unknown.
                return answered ? .failed("the termind server closed the connection before the command ended (did it stop?); its outcome is unknown.") : .inProcess
            case .line(let bytes):
                guard let message = LauncherJSON.parse(bytes) else {
                    return .failed("the termind server sent a line that is not JSON; the command's outcome is unknown.")
                }
                answered = true
                if let ok = message["ok"]?.bool {
                    guard message["id"] == .number(1) else { return .inProcess }  // socket.busy and the like
                    if ok {
                        if message["body"]?["local"]?.bool == true { return .inProcess }
                        return .exit(message["body"]?["exitCode"]?.int32 ?? 1)
                    }
                    // A server that predates the launcher runs its commands the old way.
                    if message["error"]?["code"]?.string == "stream.unknown" { return .inProcess }
                    return .failed(message["error"]?["message"]?.string ?? "the termind server failed the command.")
                }
                if message["event"]?.string == "ask", let id = message["askID"], let question = message["ask"] {
                    var answer = perform(question, terminal: terminal)
                    if case .object(var fields) = answer {
                        if fields["interrupted"] != nil, let number = fields["interrupted"]?.int32 {
                            // A signal during a prompt ends termind at once, as the full client does.
                            terminal.restore()
                            exit(128 + number)
                        }
                        fields["askID"] = id
                        answer = .object(fields)
                    }
                    guard socket.send(LauncherJSON.object(["id": .number(1), "answer": answer]).text) else {
                        return .failed("the termind server closed the connection before the command ended (did it stop?); its outcome is unknown.")
                    }
                }
                // Grants and anything else: nothing to do.
            }
        }
    }

    static func relay(_ number: Int32, _ socket: LauncherSocket) {
        let name = number == SIGCONT ? "CONT" : LauncherSignals.name(number)
        _ = socket.send(LauncherJSON.object(["id": .number(1), "control": .object(["signal": .string(name)])]).text)
    }

    /// Carries out one request of the server's (`op`), returning the answer's fields.
    static func perform(_ question: LauncherJSON, terminal: LauncherTerminal) -> LauncherJSON {
        switch question["op"]?.string {
        case "raw":
            terminal.enterRaw()
            return .object(["done": .bool(true)])
        case "restore":
            terminal.restore()
            return .object(["done": .bool(true)])
        case "suspend":
            terminal.suspend()
            return .object(["done": .bool(true)])
        case "show":
            terminal.show(question["text"]?.string ?? "")
            return .object(["done": .bool(true)])
        case "line":
            switch terminal.readLine(prompt: question["text"]?.string ?? "", echo: question["echo"]?.bool ?? true,
                                     controllingTerminal: question["terminal"]?.bool ?? true) {
            case .text(let text): return .object(["text": .string(text)])
            case .ended: return .object(["ended": .bool(true)])
            case .unavailable: return .object(["unavailable": .bool(true)])
            case .interrupted(let number): return .object(["interrupted": .number(Double(number))])
            }
        case "edit":
            guard let path = question["path"]?.string, let command = question["command"]?.string else { return .object(["unavailable": .bool(true)]) }
            return .object(["status": .number(Double(terminal.edit(path: path, command: command)))])
        default:
            return .object(["unavailable": .bool(true)])
        }
    }

    /// The working folder (the server resolves relative paths against it), or nil when it
    /// cannot be named (then the full client runs here, where relative paths still work).
    static func workingDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(validating: bytes, as: UTF8.self)
    }
}
