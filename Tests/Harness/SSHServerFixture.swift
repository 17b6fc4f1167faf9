import Foundation
import TermindCore

/// A real OpenSSH sshd on a free port, started by the test itself: its own host keys, config
/// and authorized keys in a temporary folder, running as the test's user. It accepts public
/// keys from `authorizedKeys`; stop() (or deinit) ends it. By default it listens on
/// 127.0.0.1 in the test's own network namespace; `namespace` runs it in another one (see
/// NetworkChain) through `ip netns exec`, and `listenAddress` picks the address.
public final class SSHServerFixture: @unchecked Sendable {
    public let port: Int
    public let directory: TemporaryDirectory
    /// The address in sshd's ListenAddress.
    public let listenAddress: String
    /// The network namespace sshd runs in (nil: the test's own).
    public let namespace: String?
    /// Host public key lines ("type base64"), by algorithm.
    public private(set) var hostKeys: [String: String] = [:]
    private var process: SpawnedProcess!
    /// The sshd it runs (a symlink names the PAM service), again on `restart()`.
    private let executable: String
    private let onStop: (() -> Void)?
    private let stopped = NSLock()
    private var didRunOnStop = false

    /// Starts sshd; `authorizedKeys` are public key lines accepted for the current user;
    /// `extraConfig` lines override the defaults below (e.g. "PasswordAuthentication yes").
    /// `namespace` is a network namespace name (e.g. `chain.name(of: 2)`); `listenAddress`
    /// is where sshd listens in it (e.g. `chain.address(of: 2)`, or "0.0.0.0").
    /// `hostKeyTypes` are the host keys it gets (fresh ones; an RSA key takes most of a second
    /// to generate, so a test that starts many servers and does not care may ask for fewer).
    public convenience init(authorizedKeys: [String], extraConfig: [String] = [], namespace: String? = nil,
                            listenAddress: String = "127.0.0.1", hostKeyTypes: [String] = SSHServerFixture.allHostKeyTypes) throws {
        try self.init(authorizedKeys: authorizedKeys, extraConfig: extraConfig, namespace: namespace,
                      listenAddress: listenAddress, executable: "/usr/sbin/sshd", hostKeyTypes: hostKeyTypes, onStop: nil)
    }

    public static let allHostKeyTypes = ["ed25519", "ecdsa", "rsa"]

    /// `executable` is the sshd to run (a symlink to /usr/sbin/sshd names the PAM service, see
    /// KeyboardInteractiveFixture); `onStop` runs once sshd has ended in stop().
    init(authorizedKeys: [String], extraConfig: [String], namespace: String?, listenAddress: String,
         executable: String, hostKeyTypes: [String] = SSHServerFixture.allHostKeyTypes, onStop: (() -> Void)?) throws {
        self.listenAddress = listenAddress
        self.namespace = namespace
        self.executable = executable
        self.onStop = onStop
        directory = try TemporaryDirectory("termind-sshd")
        chmod(directory.path, 0o755)
        for type in hostKeyTypes {
            let path = directory.file("ssh_host_\(type)_key")
            let made = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", type, "-N", "", "-f", path] + (type == "rsa" ? ["-b", "3072"] : []))
            guard made.status == 0 else { throw TermindError(code: "fixture.sshd", message: "ssh-keygen failed: \(made.stderr)") }
            let line = try String(contentsOfFile: path + ".pub", encoding: .utf8).split(separator: " ").prefix(2).joined(separator: " ")
            hostKeys[String(line.split(separator: " ")[0])] = line
        }
        try (authorizedKeys.joined(separator: "\n") + "\n").write(toFile: directory.file("authorized_keys"), atomically: true, encoding: .utf8)
        chmod(directory.file("authorized_keys"), 0o600)
        port = try Self.freePort()
        // sshd keeps the first value it reads for an option: extra lines go first to override
        // (a subsystem may not be named twice: an extra `Subsystem sftp` line replaces ours).
        let config = extraConfig + hostKeyTypes.map { "HostKey \(directory.file("ssh_host_\($0)_key"))" } + [
            "Port \(port)",
            "ListenAddress \(listenAddress)",
            "PidFile \(directory.file("sshd.pid"))",
            "AuthorizedKeysFile \(directory.file("authorized_keys"))",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "LogLevel VERBOSE",
        ] + (extraConfig.contains { $0.hasPrefix("Subsystem sftp ") } ? [] : ["Subsystem sftp internal-sftp"])
        try (config.joined(separator: "\n") + "\n").write(toFile: directory.file("sshd_config"), atomically: true, encoding: .utf8)
        try? FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        // With a namespace, `ip netns exec` execs sshd in place: the spawned pid is sshd's own.
        let (program, arguments) = NetworkChain.command(namespace: namespace, executable, ["-D", "-E", directory.file("sshd.log"), "-f", directory.file("sshd_config")])
        process = try SpawnedProcess(program, arguments, captureOutput: false)
        process.stopAtExit()
        process.closeInput()
        do {
            try waitUntilListening()
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    public func stop() {
        if let process, process.isRunning {
            let sessions = Self.descendants(of: process.pid)
            process.signal(SIGTERM)
            process.wait()
            for pid in sessions { Foundation.kill(pid, SIGKILL) }
        }
        directory.remove()
        stopped.lock()
        let run = !didRunOnStop
        didRunOnStop = true
        stopped.unlock()
        if run { onStop?() }
    }

    /// The address a client in sshd's namespace connects to: `listenAddress`, or loopback
    /// when sshd listens on every address.
    public var connectAddress: String {
        switch listenAddress {
        case "0.0.0.0", "*": return "127.0.0.1"
        case "::", "[::]": return "::1"
        default: return listenAddress.hasPrefix("[") ? String(listenAddress.dropFirst().dropLast()) : listenAddress
        }
    }

    public var isRunning: Bool { process?.isRunning ?? false }

    /// Kills sshd and its session children at once, as a crash or a pulled cable would.
    public func kill() {
        guard let process else { return }
        // Per-connection sshd processes rename themselves, so find them by ancestry.
        for pid in [process.pid] + Self.descendants(of: process.pid) { Foundation.kill(pid, SIGKILL) }
        process.wait()
    }

    /// Starts sshd again after `kill()`, on the same port with the same keys and
    /// configuration (a server that came back after a crash).
    public func restart() throws {
        if let process, process.isRunning { kill() }
        let (program, arguments) = NetworkChain.command(namespace: namespace, executable,
                                                        ["-D", "-E", directory.file("sshd.log"), "-f", directory.file("sshd_config")])
        let deadline = Date().addingTimeInterval(10)
        while true {
            process = try SpawnedProcess(program, arguments, captureOutput: false)
            process.closeInput()
            do {
                try waitUntilListening()
                return
            } catch {
                // The port may still be held for a moment by the killed listener.
                if process.isRunning { process.signal(SIGKILL) }
                process.wait()
                guard Date() < deadline else { throw error }
                usleep(100_000)
            }
        }
    }

    /// The words of a process's command line. sshd's setproctitle rewrites it to one string,
    /// "<progname>: <argv…> [listener] …", so words are split on NULs and spaces.
    static func commandLineWords(of pid: pid_t) -> [String] {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return [] }
        return data.split(separator: 0).flatMap { String(decoding: $0, as: UTF8.self).split(separator: " ").map(String.init) }
    }

    /// The fixture folder ("…/termind-sshd-XXXXXX") of a fixture sshd's command line
    /// ("-f <folder>/sshd_config"), for removing what a crashed run left behind.
    static func fixtureFolder(inCommandLine words: [String]) -> String? {
        guard let flag = words.firstIndex(of: "-f"), flag + 1 < words.count else { return nil }
        let folder = (words[flag + 1] as NSString).deletingLastPathComponent
        return (folder as NSString).lastPathComponent.hasPrefix("termind-sshd-") ? folder : nil
    }

    /// Every process below `root`, from /proc.
    static func descendants(of root: pid_t) -> [pid_t] {
        var parents: [pid_t: pid_t] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let ppid = pid_t(fields[1]) { parents[pid] = ppid }
        }
        var result: [pid_t] = []
        var frontier = [root]
        while let next = frontier.popLast() {
            let children = parents.filter { $0.value == next }.map(\.key)
            result += children
            frontier += children
        }
        return result
    }

    private func waitUntilListening() throws {
        let deadline = Date().addingTimeInterval(10)
        let host = connectAddress
        while Date() < deadline {
            guard process.isRunning else {
                throw TermindError(code: "fixture.sshd", message: "sshd exited with status \(process.wait()); check \(directory.file("sshd_config"))")
            }
            if namespace != nil || host.contains(":") {
                // Another namespace (or IPv6): a python3 connect run there through `ip netns exec`.
                if NetworkChain.canConnect(namespace: namespace, host: host, port: port, timeout: 1) { return }
            } else if Self.canConnect(host: host, port: port) {
                return
            }
            usleep(20_000)
        }
        throw TermindError(code: "fixture.sshd", message: "sshd did not listen on \(host):\(port)\(namespace.map { " in namespace \($0)" } ?? "") within 10 s")
    }

    private static func canConnect(host: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return connected == 0
    }

    /// A port the kernel says is free now (bound to port 0, then released).
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw TermindError(code: "fixture.port", message: "no free loopback port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

extension SSHServerFixture {
    /// An sshd that accepts one new Ed25519 key, made at `directory/name` (no passphrase):
    /// what most SSH tests start from.
    public static func withNewKey(in directory: TemporaryDirectory, name: String = "id", extraConfig: [String] = []) throws -> SSHServerFixture {
        let generated = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory.file(name)])
        guard generated.status == 0 else { throw TermindError(code: "test.keygen", message: "ssh-keygen failed: \(generated.stderr)") }
        return try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file(name + ".pub"), encoding: .utf8)], extraConfig: extraConfig)
    }
}
