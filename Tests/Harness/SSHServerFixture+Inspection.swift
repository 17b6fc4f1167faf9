import Foundation

extension SSHServerFixture {
    /// The listening sshd's pid, from its PidFile.
    var listenerPID: pid_t? {
        (try? String(contentsOfFile: directory.file("sshd.pid"), encoding: .utf8))
            .flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// sshd's log so far (LogLevel VERBOSE unless the extra config says otherwise).
    public var log: String { (try? String(contentsOfFile: directory.file("sshd.log"), encoding: .utf8)) ?? "" }

    /// Sends `signal` to sshd and every session process under it (SIGSTOP freezes the server
    /// with its TCP connections still up, as a hung host would; SIGCONT thaws it).
    public func signalAll(_ signal: Int32) {
        guard let root = listenerPID else { return }
        for pid in [root] + Self.descendants(of: root) { Foundation.kill(pid, signal) }
    }

    /// How many TCP connections to sshd's port are established now (from `ss`, in sshd's
    /// namespace).
    public func acceptedConnections() -> Int {
        let (program, arguments) = NetworkChain.command(namespace: namespace, "/usr/bin/ss", ["-Htn", "state", "established", "( sport = :\(port) )"])
        guard let result = try? ProcessRunner.run(program, arguments) else { return -1 }
        return result.stdout.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.count
    }
}
