internal import CLibSSH2
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// Authentication on the engine thread: "none" first (a username-only identity may be all
/// the server wants), then the advertised methods the credentials allow — public key (the
/// given key, then ssh-agent keys), password, keyboard-interactive. A saved password goes
/// to the `password` method before keyboard-interactive, and answers a keyboard-interactive
/// round that is one echo-off password prompt (once, and never after it or the password
/// method was rejected); every other prompt goes to the person. Nothing here is cached,
/// logged or stored.
struct Authenticator {
    let engine: SessionEngine
    let target: SSHTarget
    let credentials: SSHCredentials
    let responder: KeyboardInteractiveResponder?
    let deadline: DispatchTime
    let logger: Logger?

    private static let requestIDs = GenerationCounter()

    private func logAttempt(_ method: String, _ accepted: Bool) {
        logger?.debug("ssh.auth.attempt", ["method": .identifier(method), "accepted": .bool(accepted)])
    }

    func run() throws -> String {
        let user = Array(target.username.utf8)
        // userauth_list sends "none": it answers with the methods, or nil when none succeeded.
        let list = try engine.retryPointer("Authentication", deadline: deadline) { session -> UnsafeMutablePointer<CChar>? in
            user.withUnsafeBufferPointer { u in
                u.withMemoryRebound(to: CChar.self) { libssh2_userauth_list(session, $0.baseAddress, UInt32(u.count)) }
            }
        }
        if list == nil, let session = engine.session, libssh2_userauth_authenticated(session) == 1 { return "none" }
        let methods = list.map { String(cString: $0).split(separator: ",").map(String.init) } ?? []
        logger?.debug("ssh.auth.methods", ["offered": .identifier(methods.joined(separator: ","))])
        var rejected: [String] = []

        if methods.contains("publickey") {
            if let key = credentials.privateKey {
                let accepted = try publicKey(key)
                logAttempt("publickey", accepted)
                if accepted { return "publickey" }
                rejected.append("the public key")
            }
            let socket = credentials.agentSocket ?? ProcessInfo.processInfo.environment["SSH_AUTH_SOCK"] ?? ""
            if !socket.isEmpty {
                switch try agent(socket) {
                case .accepted:
                    logAttempt("agent", true)
                    return "agent"
                case .rejected(let count):
                    logAttempt("agent", false)
                    if count > 0 { rejected.append("\(count) ssh-agent key\(count == 1 ? "" : "s")") }
                case .unavailable: break
                }
            }
        }
        var savedPassword = credentials.password
        if let password = savedPassword, methods.contains("password") {
            let accepted = try self.password(password)
            logAttempt("password", accepted)
            if accepted { return "password" }
            rejected.append("the password")
            savedPassword = nil  // known wrong: never given to keyboard-interactive too
        }
        var unanswered = false
        if methods.contains("keyboard-interactive") {
            // The password may answer one password prompt; rejected there, the person gets a try.
            let attempts: [Secret?] = (savedPassword.map { [$0] } ?? []) + (responder == nil ? [] : [nil])
            attempts: for fill in attempts {
                let outcome = try keyboardInteractive(fill: fill)
                if case .accepted = outcome { logAttempt("keyboard-interactive", true) } else { logAttempt("keyboard-interactive", false) }
                switch outcome {
                case .accepted:
                    return "keyboard-interactive"
                case .rejected(let filled):
                    rejected.append(filled ? "the password (at a keyboard-interactive prompt)" : "the keyboard-interactive answers")
                    if !filled { break attempts }
                case .unanswered:
                    unanswered = true
                    break attempts
                }
            }
        }
        let offered = methods.isEmpty ? "none" : methods.joined(separator: ", ")
        var outcome: [String] = []
        if !rejected.isEmpty { outcome.append("\(Self.list(rejected)) \(rejected.count == 1 ? "was" : "were") rejected") }
        if unanswered { outcome.append("nobody answered the keyboard-interactive prompts (nothing was sent for them)") }
        if outcome.isEmpty { outcome.append("no credential termind holds matches them") }
        let message = "\(target.display) did not accept termind's credentials: the server offers \(offered); \(outcome.joined(separator: "; "))."
        // Prompts nobody answered make it the asker's own failure (another caller may answer
        // them), even after a rejected key: the pool then lets others try with their own.
        throw SSHError.make(unanswered ? .sshAuthCancelled : .sshAuthFailed, message)
    }

    private static func list(_ items: [String]) -> String {
        items.count < 2 ? items.joined() : items.dropLast().joined(separator: ", ") + " and " + items.last!
    }

    private func publicKey(_ key: Secret) throws -> Bool {
        let user = Array(target.username.utf8)
        let parsed = try SSHPrivateKey.parse(key, passphrase: credentials.passphrase)
        let publicLine = Array(parsed.publicKey.openSSHLine(comment: nil).utf8)
        let privateText = parsed.openSSHPrivateKeyText()
        let rc = try Self.withWipedBytes(privateText) { privateBytes -> Int32 in
            try engine.retry("Public key authentication", deadline: deadline) { session in
                user.withUnsafeBufferPointer { u in
                    publicLine.withUnsafeBufferPointer { p in
                        privateBytes.withUnsafeBufferPointer { k in
                            u.withMemoryRebound(to: CChar.self) { uc in
                                p.withMemoryRebound(to: CChar.self) { pc in
                                    k.withMemoryRebound(to: CChar.self) { kc in
                                        libssh2_userauth_publickey_frommemory(session, uc.baseAddress, u.count, pc.baseAddress, p.count,
                                                                              kc.baseAddress, k.count, nil)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        try failIfLost(rc)
        return rc == 0
    }

    private enum AgentOutcome { case accepted, rejected(Int), unavailable }

    /// Offers each key the agent holds (the agent signs; no private key enters termind).
    /// The agent is read in slices (shim.h's receive callback), so cancelling ends even a
    /// wait for its confirmation.
    private func agent(_ socket: String) throws -> AgentOutcome {
        guard let session = engine.session, let agent = libssh2_agent_init(session) else { return .unavailable }
        defer { libssh2_agent_free(agent) }
        libssh2_agent_set_identity_path(agent, socket)
        guard try engine.retry("Connecting to ssh-agent", deadline: deadline, { _ in libssh2_agent_connect(agent) }) == 0 else { return .unavailable }
        defer { libssh2_agent_disconnect(agent) }
        guard try engine.retry("Listing ssh-agent keys", deadline: deadline, { _ in libssh2_agent_list_identities(agent) }) == 0 else { return .unavailable }
        var previous: UnsafeMutablePointer<libssh2_agent_publickey>?
        var offered = 0
        while true {
            var identity: UnsafeMutablePointer<libssh2_agent_publickey>?
            guard libssh2_agent_get_identity(agent, &identity, previous) == 0, let identity else { break }
            previous = identity
            offered += 1
            let rc = try engine.retry("ssh-agent authentication", deadline: deadline) { _ in
                libssh2_agent_userauth(agent, target.username, identity)
            }
            if rc == 0 { return .accepted }
            try engine.checkCancelled("ssh-agent authentication")
            try failIfLost(rc)
        }
        try engine.checkCancelled("ssh-agent authentication")
        return offered == 0 ? .unavailable : .rejected(offered)
    }

    private func password(_ password: Secret) throws -> Bool {
        let user = Array(target.username.utf8)
        let rc = try Self.withWipedBytes(password) { bytes -> Int32 in
            try engine.retry("Password authentication", deadline: deadline) { session in
                user.withUnsafeBufferPointer { u in
                    bytes.withUnsafeBufferPointer { p in
                        u.withMemoryRebound(to: CChar.self) { uc in
                            p.withMemoryRebound(to: CChar.self) { pc in
                                termind_ssh2_userauth_password(session, uc.baseAddress, UInt32(u.count), pc.baseAddress, UInt32(p.count))
                            }
                        }
                    }
                }
            }
        }
        try failIfLost(rc)
        return rc == 0
    }

    private enum KeyboardInteractiveOutcome { case accepted, rejected(filledSavedPassword: Bool), unanswered }

    /// libssh2 calls back, on this thread, once per round; the callback answers a password
    /// prompt with `fill` once, and otherwise waits (cancellably, outside the network
    /// deadline) for the async responder. Unanswered prompts end the attempt with nothing
    /// more sent (the session is then done: see `KeyboardInteractiveContext`).
    private func keyboardInteractive(fill: Secret?) throws -> KeyboardInteractiveOutcome {
        let user = Array(target.username.utf8)
        let host = target.port == 22 ? target.host : "\(target.host):\(target.port)"
        let context = KeyboardInteractiveContext(engine: engine, host: host, responder: responder, savedPassword: fill)
        engine.keyboardInteractive = context
        defer { engine.keyboardInteractive = nil }
        let rc: Int32
        do {
            rc = try kbdint(context, user: user)
        } catch where context.error == nil && context.unanswered {
            return .unanswered
        }
        if let error = context.error { throw error }
        try failIfLost(rc)
        return rc == 0 ? .accepted : .rejected(filledSavedPassword: context.filledSavedPassword)
    }

    private func kbdint(_ context: KeyboardInteractiveContext, user: [UInt8]) throws -> Int32 {
        try engine.retry("Keyboard-interactive authentication", deadline: deadline, abort: { context.stop }) { session in
            user.withUnsafeBufferPointer { u in
                u.withMemoryRebound(to: CChar.self) { uc in
                    termind_ssh2_userauth_kbdint(session, uc.baseAddress, UInt32(u.count)) { name, nameLength, instruction, instructionLength, count, prompts, responses, abstract in
                        guard let raw = termind_ssh2_abstract(abstract) else { return }
                        let engine = Unmanaged<SessionEngine>.fromOpaque(raw).takeUnretainedValue()
                        engine.keyboardInteractive?.answer(name: Self.text(name, nameLength), instruction: Self.text(instruction, instructionLength),
                                                           count: Int(count), prompts: prompts, responses: responses)
                    }
                }
            }
        }
    }

    private func failIfLost(_ rc: Int32) throws {
        if rc != 0 && SessionEngine.isFatal(rc) {
            throw SSHError.make(.sshConnectionLost, "The connection to \(engine.endpoint) was lost during authentication: \(engine.lastError()).")
        }
    }

    fileprivate static func text(_ pointer: UnsafePointer<CChar>?, _ length: Int32) -> String {
        guard let pointer, length > 0 else { return "" }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self)
        }
    }

    fileprivate static func nextRequestID() -> UInt64 { requestIDs.next() }

    /// The secret's UTF-8 bytes for `body`, wiped afterwards.
    static func withWipedBytes<T>(_ secret: Secret, _ body: ([UInt8]) throws -> T) rethrows -> T {
        try secret.withPlaintext { text in
            var bytes = Array(text.utf8)
            defer { bytes.withUnsafeMutableBytes { termind_ssh2_wipe($0.baseAddress, $0.count) } }
            return try body(bytes)
        }
    }
}

/// The state of one keyboard-interactive attempt, reached from libssh2's C callback.
final class KeyboardInteractiveContext {
    let engine: SessionEngine
    let host: String
    let responder: KeyboardInteractiveResponder?
    /// Answers the first round that is one echo-off password prompt, then is forgotten.
    private var savedPassword: Secret?
    private(set) var filledSavedPassword = false
    /// Set when the wait was cancelled or the answers do not fit: the attempt fails with it.
    private(set) var error: TermindError?
    /// Set when nobody answered (no responder, or it gave up): the attempt ends, and since
    /// the empty responses libssh2 then sends are discarded, so does the session's sending.
    private(set) var unanswered = false

    /// Why the attempt must stop, for the engine's retry loop.
    var stop: TermindError? {
        error ?? (unanswered ? SSHError.make(.sshAuthCancelled, "Keyboard-interactive authentication on \(host) was not answered; nothing more was sent.") : nil)
    }

    init(engine: SessionEngine, host: String, responder: KeyboardInteractiveResponder?, savedPassword: Secret?) {
        self.engine = engine
        self.host = host
        self.responder = responder
        self.savedPassword = savedPassword
    }

    /// One prompt, echo off, asking for a password (not a new one): what PAM's pam_unix asks.
    static func isPasswordPrompt(_ prompts: [KeyboardInteractiveChallenge.Prompt]) -> Bool {
        guard prompts.count == 1, let prompt = prompts.first, !prompt.echo else { return false }
        let text = prompt.text.lowercased()
        return text.contains("password") && !text.contains("new")
    }

    func answer(name: String, instruction: String, count: Int,
                prompts: UnsafePointer<LIBSSH2_USERAUTH_KBDINT_PROMPT>?, responses: UnsafeMutablePointer<LIBSSH2_USERAUTH_KBDINT_RESPONSE>?) {
        guard count > 0, let prompts, let responses else { return }  // zero prompts need no form
        var list: [KeyboardInteractiveChallenge.Prompt] = []
        for index in 0..<count {
            var length = 0
            var echo: Int32 = 0
            let text = termind_ssh2_prompt_text(prompts, Int32(index), &length, &echo)
            let string = text.map { String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self) } ?? ""
            list.append(.init(text: string, echo: echo != 0))
        }
        // After a refusal every later round is answered empty without asking.
        var answers: [Secret]?
        if stop == nil {
            if let saved = savedPassword, Self.isPasswordPrompt(list) {
                answers = [saved]
                filledSavedPassword = true
            } else if let responder {
                let challenge = KeyboardInteractiveChallenge(requestID: Authenticator.nextRequestID(), host: host, name: name,
                                                             instruction: instruction, prompts: list)
                do {
                    answers = try engine.waitForInteraction("Keyboard-interactive authentication") { await responder(challenge) }
                    if answers == nil {
                        unanswered = true
                    } else if answers!.count != count {
                        error = SSHError.make(.sshAuthBadAnswers, "The server asked \(count) question\(count == 1 ? "" : "s") but \(answers!.count) answer\(answers!.count == 1 ? " was" : "s were") given.")
                        answers = nil
                    }
                } catch let failure as TermindError {
                    error = failure
                } catch {
                    self.error = SSHError.make(.sshCancelled, "Keyboard-interactive authentication on \(host) was cancelled.")
                }
            } else {
                unanswered = true
            }
            savedPassword = nil  // used for one round at most
        }
        if stop != nil {
            // Given up: the (empty) responses libssh2 now sends never leave this process,
            // and the attempt ends.
            engine.discardOutput()
        }
        for index in 0..<count {
            // libssh2 frees (and our allocator wipes) each response.
            if let answer = answers?[index] {
                _ = Authenticator.withWipedBytes(answer) { bytes in
                    bytes.withUnsafeBufferPointer { buffer in
                        buffer.withMemoryRebound(to: CChar.self) { termind_ssh2_set_response(responses, Int32(index), $0.baseAddress, UInt32(buffer.count)) }
                    }
                }
            } else {
                _ = termind_ssh2_set_response(responses, Int32(index), "", 0)
            }
        }
    }
}
