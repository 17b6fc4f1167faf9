import Foundation
import TermindCore
import VaultAPI
import TermindKernel
import TermindSSH

/// `termind exec` inside `termind serve`: the stream "ssh.exec@1" over the control socket.
/// The server resolves the route with its Vault, opens (or reuses) the route's connection
/// from its pool, and streams stdout/stderr back; host-key and keyboard-interactive
/// questions travel to the client, which asks on its terminal; the client's standard input
/// travels to the command. Connections stay in the server's pool for the next invocation.
enum ExecStream {
    static let name = "ssh.exec@1"

    struct Request: Codable {
        var target: String
        var command: String
        var user: String?
        var identity: String?
        var timeout: Double?
        var connectTimeout: Double?
        /// "once" or "save": answer an unknown host key without asking.
        var acceptHostKey: String?
    }

    struct Result: Codable {
        var exitStatus: Int32?
        var exitSignal: String?
    }

    // MARK: - Server

    /// Registers the stream on `server`; connections live in `pool`.
    static func register(on server: ControlServer, kernel: Kernel, pool: SSHConnectionPool) {
        server.register(stream: name) { body, session in
            let request: Request
            do {
                request = try JSONDecoder().decode(Request.self, from: body)
            } catch {
                throw TermindError.badRequest("The ssh.exec@1 request needs target and command (strings).")
            }
            return try JSONCoding.encode(try await serve(request, session: session, kernel: kernel, pool: pool))
        }
    }

    private static func serve(_ request: Request, session: StreamSession, kernel: Kernel, pool: SSHConnectionPool) async throws -> Result {
        guard let trust = kernel.port(.hostKeyTrust), let credentialsPort = kernel.port(.credentials) else {
            throw TermindError(code: "exec.unavailable", message: "termind exec needs the Vault, which is not running in this server (termind features).")
        }
        var options = Exec.Options()
        options.target = request.target
        options.user = request.user
        options.identity = request.identity
        options.timeout = request.timeout
        options.connectTimeout = request.connectTimeout
        let (resolved, credentials) = try await Exec.resolve(options, kernel: kernel, credentials: credentialsPort) { path in
            let answer = await session.ask(.object(["kind": .string("passphrase"), "path": .string(path)]))
            return answer?["passphrase"]?.stringValue.map(Secret.init)
        }
        // Connections are shared only between invocations that asked for the same thing.
        let route = SSHRoute(resolved.hops, context: "\(request.target)\u{1F}\(request.user ?? "")\u{1F}\(request.identity ?? "")")
        let preset = request.acceptHostKey
        let policy = SSHOpenPolicy(trust: trust, deadlines: Exec.deadlines(options), logger: kernel.logger.child("ssh"), credentials: { hop in
            credentials[Exec.credentialKey(hop)] ?? SSHCredentials()
        }, keyboardInteractive: { challenge in
            let prompts = challenge.prompts.map { JSONValue.object(["text": .string($0.text), "echo": .bool($0.echo)]) }
            let answer = await session.ask(.object(["kind": .string("keyboardInteractive"), "host": .string(challenge.host),
                                                    "name": .string(challenge.name), "instruction": .string(challenge.instruction),
                                                    "prompts": .array(prompts)]))
            guard case .array(let answers)? = answer?["answers"] else { return nil }
            return answers.map { Secret($0.stringValue ?? "") }
        }) { question in
            if preset == "once" { return .acceptOnce }
            if preset == "save" { return .acceptAndSave }
            let answer = await session.ask(.object(["kind": .string("hostKey"), "host": .string(question.host), "port": .integer(Int64(question.port)),
                                                    "algorithm": .string(question.algorithm), "fingerprint": .string(question.fingerprint),
                                                    "key": .string(question.key)]))
            switch answer?["answer"]?.stringValue {
            case "once"?: return .acceptOnce
            case "save"?: return .acceptAndSave
            case "unanswered"?: return .unanswered(reason: answer?["reason"]?.stringValue ?? Exec.noTerminalRemedy(question))
            default: return .reject
            }
        }
        let connection = try await pool.connection(for: route, policy: policy)
        let result = try await connection.exec(request.command, input: session.input, timeout: request.timeout, output: { stream, data in
            session.emit(stream == .stdout ? "stdout" : "stderr", data: data)
        }, cancelSignal: { session.cancelSignal })
        return Result(exitStatus: result.exitStatus, exitSignal: result.exitSignal)
    }

    // MARK: - Client

    /// Runs the command through the server at `client`, with questions asked here.
    static func runRemote(_ options: Exec.Options, inv: Invocation, client: ControlClient) throws -> Invocation.Exit {
        let preset: String? = switch options.acceptHostKey {
        case .acceptOnce?: "once"
        case .acceptAndSave?: "save"
        default: nil
        }
        let request = Request(target: options.target, command: Exec.commandLine(options), user: options.user, identity: options.identity,
                              timeout: options.timeout, connectTimeout: options.connectTimeout, acceptHostKey: preset)
        var collected = ExecOutput(limit: SSHConnection.defaultOutputLimit)
        // SIGINT/SIGTERM cancel the stream, naming the signal: the server closes the remote
        // command's channel with it; termind exits 130/143 once the server answered (at most 3 s).
        let interrupt = SignalCatcher([SIGINT, SIGTERM])
        let body: Data
        do {
            body = try client.stream(name, body: try JSONCoding.encode(request), onOpen: { id in
                interrupt.onSignal { number in
                    client.streamMessage(id: id, ["cancel": .bool(true), "signal": .string(SignalCatcher.name(number))])
                    DispatchQueue.global().asyncAfter(deadline: .now() + 3) { _exit(128 + number) }  // never races main's exit
                }
                sendInput(id: id, client: client)
            }) { event in
                switch event["event"]?.stringValue {
                case "stdout"?, "stderr"?:
                    guard let data = event["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { return nil }
                    let isOut = event["event"]?.stringValue == "stdout"
                    if inv.json { collected.append(isOut ? .stdout : .stderr, data) } else {
                        (isOut ? FileHandle.standardOutput : FileHandle.standardError).write(data)
                    }
                    return nil
                case "ask"?:
                    guard case .integer(let askID)? = event["askID"], let ask = event["ask"] else { return nil }
                    return answer(ask, askID: askID)
                default:
                    return nil
                }
            }
        } catch {
            if let number = interrupt.caught { exit(128 + number) }
            throw error
        }
        if let number = interrupt.caught { exit(128 + number) }
        let result = try JSONDecoder().decode(Result.self, from: body)
        Exec.finish(status: result.exitStatus, signal: result.exitSignal, json: inv.json,
                    output: (collected.stdout, collected.stderr, collected.truncated))
    }

    /// Standard input follows the open line, from a thread of its own (the command sees EOF
    /// at once on a terminal).
    private static func sendInput(id: JSONValue, client: ControlClient) {
        guard isatty(STDIN_FILENO) != 1 else {
            client.streamMessage(id: id, ["inputEnd": .bool(true)])
            return
        }
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = read(STDIN_FILENO, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                guard client.streamMessage(id: id, ["input": .string(Data(buffer[0..<n]).base64EncodedString())]) else { return }
            }
            client.streamMessage(id: id, ["inputEnd": .bool(true)])
        }
        thread.start()
    }

    /// Asks the person at this terminal what the server asks.
    private static func answer(_ ask: JSONValue, askID: Int64) -> JSONValue {
        switch ask["kind"]?.stringValue {
        case "hostKey"?:
            let question = HostKeyQuestion(host: ask["host"]?.stringValue ?? "?", port: { if case .integer(let port)? = ask["port"] { return Int(port) }; return 22 }(),
                                           algorithm: ask["algorithm"]?.stringValue ?? "?", fingerprint: ask["fingerprint"]?.stringValue ?? "?",
                                           key: ask["key"]?.stringValue ?? "")
            switch Exec.ask(question) {
            case .acceptOnce: return .object(["askID": .integer(askID), "answer": .string("once")])
            case .acceptAndSave: return .object(["askID": .integer(askID), "answer": .string("save")])
            case .reject: return .object(["askID": .integer(askID), "answer": .string("reject")])
            case .unanswered(let reason): return .object(["askID": .integer(askID), "answer": .string("unanswered"), "reason": .string(reason)])
            }
        case "passphrase"?:
            guard let passphrase = Exec.askPassphrase(ask["path"]?.stringValue ?? "?") else { return .object(["askID": .integer(askID)]) }
            return .object(["askID": .integer(askID), "passphrase": passphrase.withPlaintext { JSONValue.string($0) }])
        case "keyboardInteractive"?:
            var prompts: [KeyboardInteractiveChallenge.Prompt] = []
            if case .array(let list)? = ask["prompts"] {
                prompts = list.map { .init(text: $0["text"]?.stringValue ?? "", echo: $0["echo"] == .bool(true)) }
            }
            let challenge = KeyboardInteractiveChallenge(requestID: UInt64(askID), host: ask["host"]?.stringValue ?? "",
                                                         name: ask["name"]?.stringValue ?? "", instruction: ask["instruction"]?.stringValue ?? "",
                                                         prompts: prompts)
            guard let answers = Exec.askKeyboardInteractive(challenge) else { return .object(["askID": .integer(askID)]) }
            return .object(["askID": .integer(askID), "answers": .array(answers.map { secret in secret.withPlaintext { JSONValue.string($0) } })])
        default:
            return .object(["askID": .integer(askID)])
        }
    }
}
