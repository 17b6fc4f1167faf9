import Foundation
import TermindCore
import VaultAPI
import TermindKernel
import TermindSSH
import TermindStore
import TermindCrypto

/// `termind exec HOST [options] -- COMMAND...`: runs a command over SSH on a saved host (or a
/// quick-connect target), streams its stdout and stderr to ours as they arrive, passes our
/// standard input when it is not a terminal, and exits with the remote exit status.
///
/// Host-key trust is decided inside the connection: an unknown key is asked about on the
/// terminal (or accepted with --accept-host-key once|save), a changed one fails closed.
/// Keyboard-interactive prompts are shown on the terminal. A saved host's jump route and
/// quick-connect `-J` routes are followed hop by hop. With a `termind serve` running, the
/// command runs inside it (see ExecStream) and reuses its connections.
enum Exec {
    struct Options {
        var target = ""
        var command: [String] = []
        var user: String?
        var identity: String?
        var acceptHostKey: HostKeyAnswer?
        var timeout: Double?
        var connectTimeout: Double?
    }

    static func parse(_ arguments: [String]) throws -> Options {
        guard let separator = arguments.firstIndex(of: "--") else {
            throw Invocation.UsageError(description: "usage: termind exec HOST [--user U] [--identity I] [--accept-host-key once|save] [--timeout S] [--connect-timeout S] -- COMMAND...")
        }
        var options = Options()
        var head = arguments[..<separator].makeIterator()
        while let arg = head.next() {
            switch arg {
            case "--user": options.user = head.next()
            case "--identity": options.identity = head.next()
            case "--timeout":
                guard let value = head.next().flatMap(Double.init), value > 0 else { throw Invocation.UsageError(description: "--timeout needs a number of seconds.") }
                options.timeout = value
            case "--connect-timeout":
                guard let value = head.next().flatMap(Double.init), value > 0 else { throw Invocation.UsageError(description: "--connect-timeout needs a number of seconds.") }
                options.connectTimeout = value
            case "--accept-host-key":
                switch head.next() {
                case "once"?: options.acceptHostKey = .acceptOnce
                case "save"?: options.acceptHostKey = .acceptAndSave
                default: throw Invocation.UsageError(description: "--accept-host-key takes once or save.")
                }
            default:
                guard options.target.isEmpty, !arg.hasPrefix("-") else { throw Invocation.UsageError(description: "exec: unexpected '\(arg)' before --.") }
                options.target = arg
            }
        }
        options.command = Array(arguments[arguments.index(after: separator)...])
        guard !options.target.isEmpty else { throw Invocation.UsageError(description: "exec needs a HOST (a saved host or user@host:port).") }
        guard !options.command.isEmpty else { throw Invocation.UsageError(description: "exec needs a COMMAND after --.") }
        return options
    }

    static func run(_ inv: Invocation) async throws -> Invocation.Exit {
        let options = try parse(inv.arguments)
        // Inside a running `termind serve` when one answers: its connections are shared
        // between invocations, and questions come back here over the socket.
        if !inv.local && !inv.shapesBoot, let client = try? ControlClient(path: inv.socketPath) {
            return try ExecStream.runRemote(options, inv: inv, client: client)
        }
        let kernel = Kernel(configuration: try inv.kernelConfiguration(), sink: try inv.logSink())
        try await kernel.boot()
        do {
            return try await run(options, inv: inv, kernel: kernel)
        } catch {
            await kernel.shutdown()
            throw error
        }
    }

    private static func run(_ options: Options, inv: Invocation, kernel: Kernel) async throws -> Invocation.Exit {
        guard let trust = kernel.port(.hostKeyTrust), let credentialsPort = kernel.port(.credentials) else {
            throw TermindError(code: "exec.unavailable", message: "termind exec needs the Vault, which is not running (termind features).")
        }
        // SIGINT and SIGTERM end the command on the server too (its channel closes with the
        // same signal), then termind exits 130 or 143 as a shell would.
        let interrupt = SignalCatcher([SIGINT, SIGTERM])
        let (route, credentials) = try await resolve(options, kernel: kernel, credentials: credentialsPort) { path in askPassphrase(path) }
        let policy = SSHOpenPolicy(trust: trust, deadlines: deadlines(options), logger: kernel.logger.child("ssh"), credentials: { hop in
            credentials[credentialKey(hop)] ?? SSHCredentials()
        }, keyboardInteractive: { challenge in askKeyboardInteractive(challenge) }) { question in
            if let answer = options.acceptHostKey { return answer }
            return ask(question)
        }
        let opening = Task { try await SSHConnection.open(route: route, policy: policy) }
        interrupt.onSignal { _ in opening.cancel() }
        let connection: SSHConnection
        do {
            connection = try await opening.value
        } catch {
            if let number = interrupt.caught { exit(128 + number) }
            throw error
        }
        // Standard input streams to the command as it arrives (none from a terminal).
        let stdin = DescriptorReader(fd: isatty(STDIN_FILENO) == 1 ? -1 : STDIN_FILENO)
        let command = commandLine(options), json = inv.json
        let signal: @Sendable () -> String? = { interrupt.caught.map(SignalCatcher.name) }
        let work = Task { () throws -> ExecResult in
            if json { return try await connection.exec(command, input: stdin, timeout: options.timeout, cancelSignal: signal) }
            return try await connection.exec(command, input: stdin, timeout: options.timeout, output: { stream, chunk in
                (stream == .stdout ? FileHandle.standardOutput : FileHandle.standardError).write(chunk)
            }, cancelSignal: signal)
        }
        interrupt.onSignal { _ in work.cancel() }
        let result: ExecResult
        do {
            result = try await work.value
        } catch {
            if let number = interrupt.caught {
                // The channel closes with the signal: let that reach the server first.
                await connection.waitUntilIdle(timeout: 2)
                await connection.closeRoute()
                exit(128 + number)
            }
            throw error
        }
        await connection.closeRoute()
        await kernel.shutdown()
        finish(status: result.exitStatus, signal: result.exitSignal, json: inv.json,
               output: (result.stdout, result.stderr, result.truncated))
    }

    /// The remote command line: the words after `--` joined with spaces, as ssh joins them
    /// (the remote shell splits and interprets them again: quote for it what it must keep).
    static func commandLine(_ options: Options) -> String {
        options.command.joined(separator: " ")
    }

    /// As OpenSSH's ConnectTimeout: name resolution, TCP connect and the handshake, per hop.
    static func deadlines(_ options: Options) -> SSHDeadlines {
        var deadlines = SSHDeadlines()
        if let limit = options.connectTimeout {
            deadlines.resolve = limit
            deadlines.connect = limit
            deadlines.handshake = limit
        }
        return deadlines
    }

    /// How `resolve` files each hop's credentials.
    static func credentialKey(_ hop: SSHTarget) -> String { "\(hop.host.lowercased()):\(hop.port)" }

    /// Prints the --json report (with the collected output) and exits with the remote status,
    /// or 128 + the signal's number when a signal ended the command, as a shell does.
    static func finish(status: Int32?, signal: String?, json: Bool, output: (stdout: Data, stderr: Data, truncated: Bool)) -> Never {
        if json {
            // Output that is not valid UTF-8 travels as base64, so every byte arrives as sent.
            struct Report: Encodable {
                let exitStatus: Int32?, exitSignal: String?
                let stdout: String, stdoutEncoding: String, stderr: String, stderrEncoding: String
                let truncated: Bool
            }
            func text(_ data: Data) -> (String, String) {
                String(data: data, encoding: .utf8).map { ($0, "utf-8") } ?? (data.base64EncodedString(), "base64")
            }
            let (out, outEncoding) = text(output.stdout), (err, errEncoding) = text(output.stderr)
            Output.json(Report(exitStatus: status, exitSignal: signal, stdout: out, stdoutEncoding: outEncoding, stderr: err,
                               stderrEncoding: errEncoding, truncated: output.truncated))
        }
        if let signal {
            if !json { Output.error("the remote command was killed by SIG\(signal).") }
            let numbers: [String: Int32] = ["HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9, "USR1": 10,
                                            "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15]
            exit(128 + (numbers[signal] ?? 15))
        }
        exit(status ?? 255)
    }

    /// The route (jump hosts, then the target) and each hop's credentials, by "host:port".
    /// A saved host brings its own jump route; each saved hop gets its credentials from the
    /// Vault. On a quick-connect line, `-i` key files and --user/--identity apply to the
    /// target only (as with OpenSSH's -J); unsaved jump hosts can use ssh-agent keys.
    /// A passphrase-protected `-i` key is unlocked with `askPassphrase(path)` (nil: nobody
    /// can be asked, and the error names the remedies).
    static func resolve(_ options: Options, kernel: Kernel, credentials: any CredentialProvider,
                        askPassphrase: @Sendable (String) async -> Secret?) async throws -> (SSHRoute, [String: SSHCredentials]) {
        let localUser = NSUserName()
        var hops: [SSHTarget] = []
        var secrets: [String: SSHCredentials] = [:]
        func saved(_ host: String, isTarget: Bool) async throws {
            let granted = try await credentials.credentials(for: CredentialRequest(host: host, explicitUser: isTarget ? options.user : nil,
                                                                                     explicitIdentity: isTarget ? options.identity : nil))
            let hop = SSHTarget(host: granted.address, port: granted.port, username: granted.username ?? localUser)
            hops.append(hop)
            secrets[credentialKey(hop)] = SSHCredentials(password: granted.password, privateKey: granted.privateKey)
        }
        if let record = try await savedHost(options.target, kernel: kernel) {
            for jump in record.jump { try await saved(jump, isTarget: false) }
            try await saved(record.id, isTarget: true)
            return (SSHRoute(hops), secrets)
        }
        let resolved = try await kernel.call(ConnectContracts.Resolve.self, .init(input: options.target))
        for (index, endpoint) in resolved.route.enumerated() {
            let isTarget = index == resolved.route.count - 1
            if let id = endpoint.savedHost, !(isTarget && (options.user != nil || options.identity != nil || !resolved.identityFiles.isEmpty)) {
                try await saved(id, isTarget: isTarget)
                continue
            }
            let hop = SSHTarget(host: endpoint.address, port: endpoint.port, username: (isTarget ? options.user : nil) ?? endpoint.user ?? localUser)
            hops.append(hop)
            var key: Secret?, passphrase: Secret?
            if isTarget, let file = resolved.identityFiles.first {
                let path = Invocation.absolute(file)
                key = Secret(String(decoding: try BoundedFile.read(path, limit: 64 << 10, what: "key file", code: "exec.key_unreadable"), as: UTF8.self))
                passphrase = try await unlock(key!, path: path, askPassphrase: askPassphrase)
            }
            secrets[credentialKey(hop)] = SSHCredentials(privateKey: key, passphrase: passphrase)
        }
        return (SSHRoute(hops), secrets)
    }

    /// The passphrase of a protected key file (checked here, so a wrong one is named before
    /// anything connects), or nil for an unprotected one.
    static func unlock(_ key: Secret, path: String, askPassphrase: @Sendable (String) async -> Secret?) async throws -> Secret? {
        do {
            _ = try SSHPrivateKey.parse(key, passphrase: nil)
            return nil
        } catch let error as TermindError where error.is(.keyPassphraseRequired) {
            guard let passphrase = await askPassphrase(path) else {
                throw TermindError(code: "key.passphrase_required", message: "The key file \(path) is passphrase-protected and there is no terminal to ask for it. "
                    + "Import it once (termind vault key import \(path) --passphrase -) and use a saved identity, or add it to ssh-agent (ssh-add \(path)).")
            }
            do {
                _ = try SSHPrivateKey.parse(key, passphrase: passphrase)
            } catch let error as TermindError where error.is(.keyWrongPassphrase) {
                throw TermindError(code: error.code, message: "Wrong passphrase for the key file \(path); nothing was sent to the server.")
            }
            return passphrase
        }
    }

    /// Asks for a key's passphrase on the terminal, echo off; nil without a terminal.
    static func askPassphrase(_ path: String) -> Secret? {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { return nil }
        defer { close(tty) }
        return SecretInput.hidden(input: tty, output: tty, prompt: "Enter passphrase for key '\(path)': ")
    }

    /// The saved host named `name`, or nil; any failure but "not found" (a store error) is reported.
    private static func savedHost(_ name: String, kernel: Kernel) async throws -> HostRecord? {
        do {
            return try await kernel.call(VaultContracts.HostGet.self, .init(host: name))
        } catch let error as TermindError where error.is(.vaultHostNotFound) {
            return nil
        }
    }

    /// Shows the server's literal keyboard-interactive prompts on the terminal, reading each
    /// answer with echo as the server asks; without a terminal, gives up (fail closed).
    static func askKeyboardInteractive(_ challenge: KeyboardInteractiveChallenge) -> [Secret]? {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { return nil }
        defer { close(tty) }
        // The server's text, shown with its control characters escaped (TerminalText).
        func say(_ text: String) { _ = TerminalText.escaped(text).withCString { write(tty, $0, strlen($0)) } }
        say("(\(challenge.host))\n")
        if !challenge.name.isEmpty { say(challenge.name + "\n") }
        if !challenge.instruction.isEmpty { say(challenge.instruction + (challenge.instruction.hasSuffix("\n") ? "" : "\n")) }
        var answers: [Secret] = []
        for prompt in challenge.prompts {
            if !prompt.echo {
                answers.append(SecretInput.hidden(input: tty, output: tty, prompt: prompt.text))
                continue
            }
            say(prompt.text)
            TerminalPrompt.begin(tty)
            defer { TerminalPrompt.end() }
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while read(tty, &byte, 1) == 1, byte != 10 { bytes.append(byte) }
            answers.append(Secret(String(decoding: bytes, as: UTF8.self)))
            bytes.withUnsafeMutableBufferPointer { buffer in
                for index in buffer.indices { buffer[index] = 0 }
            }
        }
        return answers
    }

    /// Asks on the terminal; without one, refuses (fail closed) and says what to do.
    static func ask(_ question: HostKeyQuestion) -> HostKeyAnswer {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { return .unanswered(reason: noTerminalRemedy(question)) }
        TerminalPrompt.begin(tty)
        defer {
            TerminalPrompt.end()
            close(tty)
        }
        let target = question.port == 22 ? question.host : "[\(question.host)]:\(question.port)"
        let prompt = "The authenticity of host \(target) can't be established.\n\(question.algorithm) key fingerprint is \(question.fingerprint).\nTrust it? [s]ave / [o]nce / [N]o: "
        _ = TerminalText.escaped(prompt).withCString { write(tty, $0, strlen($0)) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = read(tty, &buffer, buffer.count)
        let answer = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).lowercased() : ""
        switch answer {
        case "s", "save", "yes", "y": return .acceptAndSave
        case "o", "once": return .acceptOnce
        default: return .reject
        }
    }

    /// What to do when an unknown host key cannot be asked about.
    static func noTerminalRemedy(_ question: HostKeyQuestion) -> String {
        "there is no terminal to ask whether to trust it. Check the fingerprint with the server's administrator, then run termind exec "
            + "on a terminal, or pass --accept-host-key once (this connection only) or --accept-host-key save, or trust it first: "
            + "termind vault knownhost add \(question.host) '\(question.key)'\(question.port == 22 ? "" : " --port \(question.port)")."
    }
}
