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

    /// The CPU seconds sshd has used, its finished session processes included (their time
    /// joins the listener's once it reaps them): waits up to `settle` seconds for the
    /// sessions of a client that just ended to go, so that their time is counted.
    public func serverCPUSeconds(settle: Double = 3) -> Double? {
        guard let root = listenerPID else { return nil }
        let deadline = Date().addingTimeInterval(settle)
        while !Self.descendants(of: root).isEmpty, Date() < deadline { usleep(10_000) }
        return ProcessCPU.withReapedChildren(of: root)
    }

    /// The CPU seconds sshd has used so far, its live session processes' own included (a
    /// pooled connection's process has not ended, so `serverCPUSeconds` cannot count it yet):
    /// differences of two readings give what a piece of work cost the server.
    public func liveServerCPUSeconds() -> Double? {
        guard let root = listenerPID, let own = ProcessCPU.withReapedChildren(of: root) else { return nil }
        return own + Self.descendants(of: root).compactMap { ProcessCPU.withReapedChildren(of: $0) }.reduce(0, +)
    }

    /// sshd's connection processes now: the listener's children, one per connection (its log
    /// cannot count them: each session process writes the -E file at its own offset).
    public func connectionProcesses() -> Int {
        guard let root = listenerPID else { return 0 }
        return Self.descendants(of: root).filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return false }
            return stat[stat.index(after: close)...].split(separator: " ").dropFirst().first.flatMap { pid_t($0) } == root
        }.count
    }

    /// How many TCP connections to sshd's port are established now (from `ss`, in sshd's
    /// namespace).
    public func acceptedConnections() -> Int {
        let (program, arguments) = NetworkChain.command(namespace: namespace, "/usr/bin/ss", ["-Htn", "state", "established", "( sport = :\(port) )"])
        guard let result = try? ProcessRunner.run(program, arguments) else { return -1 }
        return result.stdout.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.count
    }
}
