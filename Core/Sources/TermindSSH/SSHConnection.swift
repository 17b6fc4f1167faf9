import CLibSSH2
import Dispatch
import Foundation
import TermindCore
import TermindCrypto

/// Where to connect and as whom.
public struct SSHTarget: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var username: String
    public init(host: String, port: Int = 22, username: String) {
        self.host = host
        self.port = port
        self.username = username
    }
    var display: String { port == 22 ? "\(username)@\(host)" : "\(username)@\(host):\(port)" }
}

/// Secrets for one connection attempt; used once, never cached, logged or stored.
public struct SSHCredentials: Sendable {
    public var password: Secret?
    /// An OpenSSH or PEM private key (unencrypted, or with `passphrase`).
    public var privateKey: Secret?
    public var passphrase: Secret?
    public init(password: Secret? = nil, privateKey: Secret? = nil, passphrase: Secret? = nil) {
        self.password = password
        self.privateKey = privateKey
        self.passphrase = passphrase
    }
}

/// Deadlines (seconds) for each phase; an operation past its deadline fails with `ssh.timeout`.
public struct SSHDeadlines: Sendable {
    public var connect: Double = 10
    public var handshake: Double = 15
    public var authentication: Double = 30
    public var channel: Double = 30
    public init() {}
}

/// What the user is asked about a host key nobody has trusted yet (inside the handshake).
public struct HostKeyQuestion: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var algorithm: String
    public var fingerprint: String
}

public enum HostKeyAnswer: Sendable, Equatable {
    /// Continue this connection only; nothing is saved and no reconnect is authorized.
    case acceptOnce
    /// Save the key as trusted, then continue.
    case acceptAndSave
    case reject
}

/// Which stream a chunk of command output came from.
public enum ExecStream: Sendable, Equatable {
    case stdout, stderr
}

/// The result of a command run with `exec`.
public struct ExecResult: Sendable, Equatable {
    public var stdout: Data
    public var stderr: Data
    /// The remote exit status; nil when the command ended by a signal.
    public var exitStatus: Int32?
    public var exitSignal: String?
    /// Output beyond the limit was read and discarded.
    public var truncated: Bool
}

/// An authenticated SSH connection. The libssh2 session belongs to one serial worker;
/// host-key trust is decided inside this very connection's handshake, never on a separate
/// discovery connection.
public final class SSHConnection: Sendable {
    public let target: SSHTarget
    public let hostKey: PublicHostKey
    /// "none", "publickey" or "password".
    public let authenticatedWith: String
    private let worker: SessionWorker
    private let deadlines: SSHDeadlines

    private init(target: SSHTarget, hostKey: PublicHostKey, authenticatedWith: String, worker: SessionWorker, deadlines: SSHDeadlines) {
        self.target = target
        self.hostKey = hostKey
        self.authenticatedWith = authenticatedWith
        self.worker = worker
        self.deadlines = deadlines
    }

    /// Connects, verifies the host key with `trust` (asking `askUnknownHostKey` about an
    /// unknown one; a changed or revoked key fails closed), then authenticates: none first,
    /// then the advertised methods the credentials allow.
    public static func open(_ target: SSHTarget, credentials: SSHCredentials, trust: any HostKeyTrust,
                            deadlines: SSHDeadlines = SSHDeadlines(),
                            askUnknownHostKey: @escaping @Sendable (HostKeyQuestion) async -> HostKeyAnswer) async throws -> SSHConnection {
        let endpoint = target.port == 22 ? target.host : "\(target.host):\(target.port)"
        let fd = try await offPool { try SocketConnector.connect(host: target.host, port: target.port, deadline: .now() + deadlines.connect) }
        let worker = try SessionWorker(fd: fd, endpoint: endpoint)
        do {
            let hostKey = try await worker.perform { worker -> PublicHostKey in
                let deadline = DispatchTime.now() + deadlines.handshake
                let rc = try worker.retry("The SSH handshake", deadline: deadline) { libssh2_session_handshake($0, worker.fd) }
                guard rc == 0 else { throw SSHError.make("ssh.handshake_failed", "The SSH handshake with \(endpoint) failed: \(worker.lastError()).") }
                var length = 0
                var type: Int32 = 0
                guard let session = worker.session, let raw = libssh2_session_hostkey(session, &length, &type), length > 4 else {
                    throw SSHError.make("ssh.handshake_failed", "\(endpoint) presented no host key.")
                }
                let blob = Data(bytes: raw, count: length)
                return PublicHostKey(algorithm: Self.algorithm(of: blob), blob: blob)
            }
            // Trust, on this connection, before any credential is sent.
            switch try await trust.verdict(host: target.host, port: target.port, key: hostKey) {
            case .trusted, .trustedWithoutPort:
                break
            case .unknown:
                let question = HostKeyQuestion(host: target.host, port: target.port, algorithm: hostKey.algorithm, fingerprint: trust.fingerprint(hostKey))
                switch await askUnknownHostKey(question) {
                case .acceptOnce: break
                case .acceptAndSave: try await trust.trust(host: target.host, port: target.port, key: hostKey)
                case .reject:
                    throw SSHError.make("ssh.host_key_rejected", "The host key of \(endpoint) (\(question.fingerprint)) was not accepted; nothing was sent to the server.")
                }
            case .changed, .revoked:
                let message = try await trust.refusal(host: target.host, port: target.port, key: hostKey)
                    ?? "The host key of \(endpoint) is not trusted; the connection was refused."
                throw SSHError.make("ssh.host_key_changed", message)
            }
            let method = try await worker.perform { worker in
                try Self.authenticate(worker, target: target, credentials: credentials, deadline: .now() + deadlines.authentication)
            }
            return SSHConnection(target: target, hostKey: hostKey, authenticatedWith: method, worker: worker, deadlines: deadlines)
        } catch {
            await worker.shutdown()
            throw error
        }
    }

    /// Runs `command`, feeding `stdin`, and returns stdout and stderr separately (each at
    /// most `outputLimit` bytes, the rest read and discarded) with the exit status. With
    /// `output`, chunks are handed over as they arrive (on the session's worker) instead of
    /// being collected.
    public func exec(_ command: String, stdin: Data? = nil, outputLimit: Int = 16 << 20, timeout: Double? = nil,
                     output: (@Sendable (ExecStream, Data) -> Void)? = nil) async throws -> ExecResult {
        let deadlines = self.deadlines
        let endpoint = worker.endpoint
        return try await worker.perform { worker in
            let deadline = DispatchTime.now() + (timeout ?? 86_400)
            let openDeadline = DispatchTime.now() + deadlines.channel
            guard let channel = try worker.retryPointer("Opening a channel", deadline: openDeadline, { termind_ssh2_channel_open_session($0) }) else {
                throw SSHError.make("ssh.channel_failed", "\(endpoint) refused a session channel: \(worker.lastError()).")
            }
            // Freeing an open channel closes it first, which can return EAGAIN: retry, bounded.
            defer { _ = try? worker.retry("Freeing the channel", deadline: .now() + 2) { _ in libssh2_channel_free(channel) } }
            let bytes = Array(command.utf8)
            let started = try worker.retry("Starting the command", deadline: openDeadline) { _ in
                bytes.withUnsafeBufferPointer { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { termind_ssh2_channel_exec(channel, $0.baseAddress, UInt32(buffer.count)) }
                }
            }
            guard started == 0 else { throw SSHError.make("ssh.exec_failed", "\(endpoint) did not start the command: \(worker.lastError()).") }

            // One loop writes input and reads output: the remote stops reading our input once
            // its output fills our window, which only reading reopens.
            let input = stdin ?? Data()
            var written = 0
            var inputClosed = false
            var out = Data(), err = Data(), truncated = false
            var buffer = [CChar](repeating: 0, count: 65_536)
            while true {
                var progressed = false
                if written < input.count {
                    let n = input.withUnsafeBytes { raw -> Int in
                        Int(libssh2_channel_write_ex(channel, 0, raw.baseAddress!.assumingMemoryBound(to: CChar.self) + written, raw.count - written))
                    }
                    if n > 0 { written += n; progressed = true }
                    else if n < 0 && n != Int(termind_ssh2_error_eagain()) {
                        throw SSHError.make("ssh.channel_failed", "Sending input to \(endpoint) failed: \(worker.lastError()).")
                    }
                } else if !inputClosed {
                    let rc = libssh2_channel_send_eof(channel)
                    if rc == 0 { inputClosed = true; progressed = true }
                    else if rc != termind_ssh2_error_eagain() {
                        throw SSHError.make("ssh.channel_failed", "Closing input to \(endpoint) failed: \(worker.lastError()).")
                    }
                }
                for (stream, isError) in [(Int32(0), false), (SSH_EXTENDED_DATA_STDERR, true)] {
                    let n = termind_ssh2_channel_read(channel, stream, &buffer, buffer.count)
                    if n > 0 {
                        progressed = true
                        let chunk = buffer.withUnsafeBytes { Data($0.prefix(n)) }
                        if let output {
                            output(isError ? .stderr : .stdout, chunk)
                        } else if isError {
                            if err.count + chunk.count <= outputLimit { err += chunk } else { err += chunk.prefix(max(0, outputLimit - err.count)); truncated = true }
                        } else {
                            if out.count + chunk.count <= outputLimit { out += chunk } else { out += chunk.prefix(max(0, outputLimit - out.count)); truncated = true }
                        }
                    } else if n < 0 && n != Int(termind_ssh2_error_eagain()) {
                        throw SSHError.make("ssh.connection_lost", "The connection to \(endpoint) was lost while the command ran: \(worker.lastError()).")
                    }
                }
                if libssh2_channel_eof(channel) == 1 && !progressed { break }
                if !progressed { try worker.waitForSocket("The command", deadline: deadline) }
            }
            let closeDeadline = DispatchTime.now() + deadlines.channel
            _ = try worker.retry("Closing the channel", deadline: closeDeadline) { _ in libssh2_channel_close(channel) }
            _ = try worker.retry("Closing the channel", deadline: closeDeadline) { _ in libssh2_channel_wait_closed(channel) }
            var signal: UnsafeMutablePointer<CChar>?
            var signalLength = 0
            libssh2_channel_get_exit_signal(channel, &signal, &signalLength, nil, nil, nil, nil)
            let signalName = signal.map { String(cString: $0) }
            if let signal, let session = worker.session { libssh2_free(session, signal) }
            let status = libssh2_channel_get_exit_status(channel)
            return ExecResult(stdout: out, stderr: err, exitStatus: signalName == nil ? status : nil, exitSignal: signalName, truncated: truncated)
        }
    }

    /// Disconnects and frees the session; an operation still running is cancelled first.
    public func close() async {
        worker.cancel()
        await worker.shutdown()
    }

    // MARK: - Internals

    private static func authenticate(_ worker: SessionWorker, target: SSHTarget, credentials: SSHCredentials, deadline: DispatchTime) throws -> String {
        let user = Array(target.username.utf8)
        // "none" first: userauth_list answers with the methods, or nil when none succeeded.
        let list = try worker.retryPointer("Authentication", deadline: deadline) { session -> UnsafeMutablePointer<CChar>? in
            user.withUnsafeBufferPointer { u in
                u.withMemoryRebound(to: CChar.self) { libssh2_userauth_list(session, $0.baseAddress, UInt32(u.count)) }
            }
        }
        if list == nil, let session = worker.session, libssh2_userauth_authenticated(session) == 1 { return "none" }
        let methods = list.map { String(cString: $0).split(separator: ",").map(String.init) } ?? []
        var tried: [String] = []
        if let key = credentials.privateKey, methods.contains("publickey") {
            tried.append("publickey")
            let parsed = try SSHPrivateKey.parse(key, passphrase: credentials.passphrase)
            let publicLine = Array(parsed.publicKey.openSSHLine(comment: nil).utf8)
            let privateText = parsed.openSSHPrivateKeyText()
            let rc = try privateText.withPlaintext { text -> Int32 in
                let privateBytes = Array(text.utf8)
                return try worker.retry("Public key authentication", deadline: deadline) { session in
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
            if rc == 0 { return "publickey" }
        }
        if let password = credentials.password, methods.contains("password") {
            tried.append("password")
            let rc = try password.withPlaintext { text -> Int32 in
                let bytes = Array(text.utf8)
                return try worker.retry("Password authentication", deadline: deadline) { session in
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
            if rc == 0 { return "password" }
        }
        let offered = methods.isEmpty ? "none" : methods.joined(separator: ", ")
        let attempted = tried.isEmpty ? "no credential termind holds matches them" : "\(tried.joined(separator: " and ")) \(tried.count == 1 ? "was" : "were") rejected"
        throw SSHError.make("ssh.auth_failed", "\(target.display) did not accept termind's credentials: the server offers \(offered); \(attempted).")
    }

    /// The algorithm name at the start of an SSH wire-format key blob.
    static func algorithm(of blob: Data) -> String {
        let bytes = [UInt8](blob)
        guard bytes.count >= 4 else { return "unknown" }
        let length = Int(bytes[0]) << 24 | Int(bytes[1]) << 16 | Int(bytes[2]) << 8 | Int(bytes[3])
        guard length > 0, 4 + length <= bytes.count else { return "unknown" }
        return String(decoding: bytes[4..<(4 + length)], as: UTF8.self)
    }

    private static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
        }
    }
}
