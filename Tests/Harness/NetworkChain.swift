import Foundation
import TermindCore

/// A line of network namespaces for tests of SSH jump routes whose target is reachable only
/// through the jump hosts:
///
///     root ──link 1── hop 1 ──link 2── hop 2 ── … ──link N── hop N
///
/// Hop 0 is the root namespace, where the test runs; hops 1…N are namespaces made here. Link k
/// is a veth pair between hop k-1 and hop k with its own /30 inside one free 10.a.b.0/24:
/// hop k-1 has 10.a.b.(4k-3), hop k has 10.a.b.(4k-2). IP forwarding is off in every hop, and
/// the root namespace gets an `unreachable 10.a.b.0/24` route (more specific routes win, so
/// link 1 stays reachable): from the root only hop 1 answers, from hop 1 only hops 0 and 2,
/// and so on. Connections that skip a hop fail at once (EHOSTUNREACH in the root,
/// ENETUNREACH in a hop, which has no default route) instead of leaking to the root's
/// default route.
///
/// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2. Names carry the creating pid
/// and a random id, and a marker under /run/termind-netchain records what was made, so
/// `removeStale()` (also run by every init) deletes what a crashed test run left behind.
/// `teardown()` (or deinit) kills whatever still runs in the namespaces and deletes them,
/// their veths and the route.
public final class NetworkChain: @unchecked Sendable {
    /// Prefix of every namespace ("tmdnc-<pid>-<id>-<hop>") and veth ("tmdnc<id>-<link>a|b").
    public static let prefix = "tmdnc"
    /// The routing protocol number that tags the root namespace's unreachable routes.
    public static let routeProtocol = 237
    static let markerDirectory = "/run/termind-netchain"

    /// Number of namespaces (hops 1…count).
    public let count: Int
    /// Random hex id shared by this chain's names.
    public let id: String
    /// Namespace names; `namespaces[hop - 1]` is hop `hop`.
    public let namespaces: [String]
    /// The chain's /24, e.g. "10.87.13.0/24".
    public let subnet: String
    private let base: String
    private let lock = NSLock()
    private var tornDown = false

    /// Whether this process can make namespaces at all (root, iproute2 present).
    public static var isAvailable: Bool { getuid() == 0 && ipPath != nil }

    /// Creates `count` namespaces in a line (1…64).
    public init(count: Int = 2) throws {
        guard (1...64).contains(count) else { throw TermindError(code: "fixture.netns", message: "a chain has 1…64 namespaces, not \(count)") }
        guard Self.isAvailable else { throw TermindError(code: "fixture.netns", message: "network namespaces need root and iproute2 (ip)") }
        Self.removeStale()
        self.count = count
        let lockFD = try Self.acquireLock()
        defer { Self.releaseLock(lockFD) }
        var chosenID = ""
        repeat {
            chosenID = String(format: "%05x", Int.random(in: 0..<0x100000))
        } while FileManager.default.fileExists(atPath: Self.markerPath(chosenID))
        id = chosenID
        let pid = getpid()
        namespaces = (1...count).map { "\(Self.prefix)-\(pid)-\(chosenID)-\($0)" }
        base = try Self.freeSubnet()
        subnet = base + "0/24"
        let marker = Marker(pid: pid, start: Self.startTime(of: pid) ?? "", id: id, subnet: subnet, namespaces: namespaces,
                            rootLinks: [Self.vethName(id: id, link: 1, end: "a")])
        do {
            // The marker first, so that a crash from here on leaves a record for removeStale.
            try JSONEncoder().encode(marker).write(to: URL(fileURLWithPath: Self.markerPath(id)))
            try build()
        } catch {
            // deinit runs after a throw from here (self is fully initialized) and must not take
            // the lock again.
            tornDown = true
            Self.destroy(marker)
            throw error
        }
    }

    deinit { teardown() }

    /// The namespace name of `hop` (1…count).
    public func name(of hop: Int) -> String {
        precondition((1...count).contains(hop), "hop \(hop) is not in 1…\(count)")
        return namespaces[hop - 1]
    }

    /// The address of `hop` (1…count) on the link from hop-1: the address the previous hop uses.
    public func address(of hop: Int) -> String { address(of: hop, seenFrom: hop - 1) }

    /// The address of `hop` (0…count) on its link to `neighbour` (hop ± 1). Hop 0 is the root namespace.
    public func address(of hop: Int, seenFrom neighbour: Int) -> String {
        precondition((0...count).contains(hop) && (0...count).contains(neighbour) && abs(hop - neighbour) == 1,
                     "hops \(hop) and \(neighbour) are not neighbours in 0…\(count)")
        let link = max(hop, neighbour)
        return base + String(4 * (link - 1) + (hop < neighbour ? 1 : 2))
    }

    /// The program and arguments that run `executable` inside `hop` (0 = the root namespace,
    /// run directly): `ip netns exec NAME executable arguments…`. `ip netns exec` execs the
    /// program in place, so a spawned process's pid is the program's own.
    public func command(in hop: Int, _ executable: String, _ arguments: [String] = []) -> (executable: String, arguments: [String]) {
        hop == 0 ? (executable, arguments) : Self.command(namespace: name(of: hop), executable, arguments)
    }

    /// `ip netns exec NAMESPACE executable arguments…`, or the program itself for nil.
    public static func command(namespace: String?, _ executable: String, _ arguments: [String] = []) -> (executable: String, arguments: [String]) {
        guard let namespace else { return (executable, arguments) }
        return (ipPath ?? "/usr/sbin/ip", ["netns", "exec", namespace, executable] + arguments)
    }

    /// Runs a program to completion inside `hop`.
    public func run(in hop: Int, _ executable: String, _ arguments: [String] = [], stdin: String? = nil) throws -> ProcessResult {
        let (program, args) = command(in: hop, executable, arguments)
        return try ProcessRunner.run(program, args, stdin: stdin)
    }

    /// Starts a program inside `hop`; the caller waits for or signals it.
    public func spawn(in hop: Int, _ executable: String, _ arguments: [String] = [], captureOutput: Bool = false) throws -> SpawnedProcess {
        let (program, args) = command(in: hop, executable, arguments)
        return try SpawnedProcess(program, args, captureOutput: captureOutput)
    }

    /// Whether a TCP connection from `hop` to host:port is accepted within `timeout` seconds.
    public func canConnect(from hop: Int, to host: String, port: Int, timeout: Double = 2) -> Bool {
        Self.canConnect(namespace: hop == 0 ? nil : name(of: hop), host: host, port: port, timeout: timeout)
    }

    /// Whether a TCP connection from `namespace` (nil: this process's) to host:port is
    /// accepted within `timeout` seconds (through python3, run with `ip netns exec`).
    public static func canConnect(namespace: String?, host: String, port: Int, timeout: Double = 2) -> Bool {
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
            s.settimeout(float(sys.argv[3]))
            try:
                s.connect((sys.argv[1], int(sys.argv[2])))
            except OSError:
                sys.exit(1)
            """
        let (program, args) = command(namespace: namespace, "/usr/bin/python3", ["-c", script, host, String(port), String(timeout)])
        return (try? ProcessRunner.run(program, args).status) == 0
    }

    /// Kills what still runs in the namespaces, deletes them (their veths go with them) and
    /// the root namespace's route. Safe to call more than once.
    public func teardown() {
        lock.lock()
        defer { lock.unlock() }
        guard !tornDown else { return }
        tornDown = true
        let lockFD = try? Self.acquireLock()
        defer { if let lockFD { Self.releaseLock(lockFD) } }
        Self.destroy(Marker(pid: getpid(), start: "", id: id, subnet: subnet, namespaces: namespaces,
                            rootLinks: [Self.vethName(id: id, link: 1, end: "a")]))
    }

    /// Deletes chains left by processes that are gone: namespaces named with a dead pid,
    /// markers under /run/termind-netchain whose process is gone, and root-namespace veths
    /// and tagged unreachable routes that belong to no live chain.
    public static func removeStale() {
        guard isAvailable, let lockFD = try? acquireLock() else { return }
        defer { releaseLock(lockFD) }
        var liveIDs = Set<String>()
        var liveSubnets = Set<String>()
        let markerFiles = (try? FileManager.default.contentsOfDirectory(atPath: markerDirectory)) ?? []
        for file in markerFiles where file.hasSuffix(".json") {
            let path = (markerDirectory as NSString).appendingPathComponent(file)
            guard let data = FileManager.default.contents(atPath: path),
                  let marker = try? JSONDecoder().decode(Marker.self, from: data) else {
                try? FileManager.default.removeItem(atPath: path)
                continue
            }
            if isAlive(marker.pid, start: marker.start) {
                liveIDs.insert(marker.id)
                liveSubnets.insert(marker.subnet)
            } else {
                destroy(marker, stale: true)
            }
        }
        // Namespaces whose marker is missing: the pid in the name decides.
        for namespace in listNamespaces() where namespace.hasPrefix(prefix + "-") {
            let parts = namespace.split(separator: "-")
            guard parts.count == 4, let pid = pid_t(parts[1]) else { continue }
            if isAlive(pid, start: nil) { liveIDs.insert(String(parts[2])); continue }
            killProcesses(in: namespace, removeFixtureFolders: true)
            _ = try? ip(["netns", "delete", namespace])
        }
        // Root ends of link 1 whose chain is gone (normally they vanish with their peer).
        let links = (try? ip(["-o", "link", "show"]).stdout) ?? ""
        for line in links.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 1 else { continue }
            let name = String(fields[1].split(separator: "@").first ?? "").trimmingCharacters(in: CharacterSet(charactersIn: ":"))
            guard name.hasPrefix(prefix), name.count > prefix.count + 5 else { continue }
            let chainID = String(name.dropFirst(prefix.count).prefix(5))
            if !liveIDs.contains(chainID) { _ = try? ip(["link", "delete", name]) }
        }
        // Tagged unreachable routes of chains that are gone.
        let routes = (try? ip(["-4", "route", "show", "proto", String(routeProtocol)]).stdout) ?? ""
        for line in routes.split(separator: "\n") {
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 2, fields[0] == "unreachable", !liveSubnets.contains(fields[1]) else { continue }
            _ = try? ip(["-4", "route", "delete", "unreachable", fields[1], "proto", String(routeProtocol)])
        }
    }

    // MARK: - Building

    private func build() throws {
        for namespace in namespaces {
            try Self.check(Self.ip(["netns", "add", namespace]), "netns add \(namespace)")
        }
        for link in 1...count {
            let near = Self.vethName(id: id, link: link, end: "a"), far = Self.vethName(id: id, link: link, end: "b")
            // Both ends are made in their namespaces at once, so no veth is ever left in the root
            // namespace with its peer there too.
            var arguments = ["link", "add", near]
            if link > 1 { arguments += ["netns", name(of: link - 1)] }
            arguments += ["type", "veth", "peer", "name", far, "netns", name(of: link)]
            try Self.check(Self.ip(arguments), "veth for link \(link)")
            try Self.check(Self.ip(namespaceArguments(link - 1) + ["addr", "add", address(of: link - 1, seenFrom: link) + "/30", "dev", near]), "address of \(near)")
            try Self.check(Self.ip(namespaceArguments(link - 1) + ["link", "set", near, "up"]), "\(near) up")
            try Self.check(Self.ip(namespaceArguments(link) + ["addr", "add", address(of: link) + "/30", "dev", far]), "address of \(far)")
            try Self.check(Self.ip(namespaceArguments(link) + ["link", "set", far, "up"]), "\(far) up")
        }
        for hop in 1...count {
            try Self.check(Self.ip(namespaceArguments(hop) + ["link", "set", "lo", "up"]), "lo up in hop \(hop)")
            // New namespaces start with forwarding off; say so explicitly all the same.
            let off = try run(in: hop, "/bin/sh", ["-c", "echo 0 > /proc/sys/net/ipv4/ip_forward && cat /proc/sys/net/ipv4/ip_forward"])
            guard off.status == 0, off.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0" else {
                throw TermindError(code: "fixture.netns", message: "cannot turn IPv4 forwarding off in \(name(of: hop)): \(off.stderr)")
            }
        }
        try Self.check(Self.ip(["-4", "route", "add", "unreachable", subnet, "proto", String(Self.routeProtocol)]), "unreachable route \(subnet)")
    }

    private func namespaceArguments(_ hop: Int) -> [String] { hop == 0 ? [] : ["-n", name(of: hop)] }

    /// Takes link `link` (1…count) down or up again, as a pulled and replugged cable would:
    /// packets on it are dropped meanwhile (TCP connections over it stall, they are not reset).
    public func setLink(_ link: Int, up: Bool) throws {
        precondition((1...count).contains(link), "link \(link) is not in 1…\(count)")
        let near = Self.vethName(id: id, link: link, end: "a")
        try Self.check(Self.ip(namespaceArguments(link - 1) + ["link", "set", near, up ? "up" : "down"]), "\(near) \(up ? "up" : "down")")
    }

    // MARK: - Helpers

    struct Marker: Codable {
        var pid: pid_t
        var start: String
        var id: String
        var subnet: String
        var namespaces: [String]
        var rootLinks: [String]
    }

    static func vethName(id: String, link: Int, end: String) -> String { "\(prefix)\(id)-\(link)\(end)" }

    static func markerPath(_ id: String) -> String { (markerDirectory as NSString).appendingPathComponent("\(id).json") }

    static var ipPath: String? {
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func ip(_ arguments: [String]) throws -> ProcessResult {
        guard let ipPath else { throw TermindError(code: "fixture.netns", message: "iproute2's ip is not installed") }
        return try ProcessRunner.run(ipPath, arguments)
    }

    private static func check(_ result: ProcessResult, _ what: String) throws {
        guard result.status == 0 else {
            throw TermindError(code: "fixture.netns", message: "ip failed (\(what)): \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
    }

    private static func destroy(_ marker: Marker, stale: Bool = false) {
        for namespace in marker.namespaces { killProcesses(in: namespace, removeFixtureFolders: stale) }
        for namespace in marker.namespaces {
            _ = try? ip(["netns", "delete", namespace])
            // Files a test gave the namespace (`ip netns exec` mounts them over /etc's).
            try? FileManager.default.removeItem(atPath: "/etc/netns/\(namespace)")
        }
        for link in marker.rootLinks where FileManager.default.fileExists(atPath: "/sys/class/net/\(link)") {
            _ = try? ip(["link", "delete", link])
        }
        _ = try? ip(["-4", "route", "delete", "unreachable", marker.subnet, "proto", String(routeProtocol)])
        try? FileManager.default.removeItem(atPath: markerPath(marker.id))
    }

    /// SIGKILLs every process still in `namespace` (a namespace outlives its name while
    /// processes use it, and its veths with it), and removes the folder of any
    /// SSHServerFixture sshd among them when asked (for crashed runs: a live fixture removes
    /// its own).
    private static func killProcesses(in namespace: String, removeFixtureFolders: Bool) {
        guard let pids = try? ip(["netns", "pids", namespace]), pids.status == 0 else { return }
        for pid in pids.stdout.split(whereSeparator: \.isNewline).compactMap({ pid_t($0) }) where pid != getpid() {
            let folder = SSHServerFixture.fixtureFolder(inCommandLine: SSHServerFixture.commandLineWords(of: pid))
            Foundation.kill(pid, SIGKILL)
            if removeFixtureFolders, let folder { try? FileManager.default.removeItem(atPath: folder) }
        }
    }

    private static func listNamespaces() -> [String] {
        let listed = (try? ip(["netns", "list"]).stdout) ?? ""
        return listed.split(whereSeparator: \.isNewline).compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    /// Field 22 of /proc/<pid>/stat: the start time, which tells a reused pid apart.
    static func startTime(of pid: pid_t) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? String(fields[19]) : nil
    }

    static func isAlive(_ pid: pid_t, start: String?) -> Bool {
        guard pid > 0, Foundation.kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard let start, !start.isEmpty else { return true }
        return startTime(of: pid) == start
    }

    /// A 10.a.b.0/24 that no address or route of the root namespace overlaps (prefixes
    /// shorter than /16, such as a 10.0.0.0/8 route, do not count: ours are more specific).
    /// Returns "10.a.b.".
    private static func freeSubnet() throws -> String {
        let text = ((try? ip(["-o", "-4", "addr", "show"]).stdout) ?? "") + "\n" + ((try? ip(["-4", "route", "show", "table", "all"]).stdout) ?? "")
        var used: [(UInt32, Int)] = []
        let regex = try NSRegularExpression(pattern: #"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:/(\d{1,2}))?"#)
        let range = NSRange(text.startIndex..., in: text)
        for match in regex.matches(in: text, range: range) {
            let part = { (i: Int) -> String? in Range(match.range(at: i), in: text).map { String(text[$0]) } }
            let octets = (1...4).compactMap { part($0).flatMap(UInt32.init) }
            guard octets.count == 4, octets.allSatisfy({ $0 < 256 }) else { continue }
            let length = part(5).flatMap(Int.init) ?? 32
            guard length >= 16 else { continue }
            used.append((octets.reduce(0) { $0 << 8 | $1 }, length))
        }
        for _ in 0..<500 {
            let a = UInt32.random(in: 64...254), b = UInt32.random(in: 0...255)
            let candidate: UInt32 = 10 << 24 | a << 16 | b << 8
            let clash = used.contains { address, length in
                let shorter = min(length, 24)
                let mask: UInt32 = shorter == 0 ? 0 : ~UInt32(0) << (32 - UInt32(shorter))
                return address & mask == candidate & mask
            }
            if !clash { return "10.\(a).\(b)." }
        }
        throw TermindError(code: "fixture.netns", message: "no free 10.x.y.0/24 for a namespace chain")
    }

    private static func acquireLock() throws -> Int32 {
        try FileManager.default.createDirectory(atPath: markerDirectory, withIntermediateDirectories: true)
        let fd = open(markerDirectory + "/lock", O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TermindError(code: "fixture.netns", message: "cannot open \(markerDirectory)/lock: \(String(cString: strerror(errno)))") }
        while flock(fd, LOCK_EX) != 0 && errno == EINTR {}
        return fd
    }

    private static func releaseLock(_ fd: Int32) {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
