import Foundation

/// Parsers of what the remote script prints: procfs files, sysfs listings and `df -P`.
/// Each takes text that came from a host (untrusted, already size-bounded by
/// `SnapshotReader`), never traps, skips what it cannot read, and keeps at most a bounded
/// number of entries, so a malicious host cannot make the monitor allocate without limit.
public enum ProcParsers {
    public static let maxCores = 4096
    public static let maxInterfaces = 1024
    public static let maxDisks = 4096
    public static let maxFilesystems = 1024
    public static let maxProcesses = 65_536
    public static let maxNames = 8192

    // MARK: - CPU

    /// One `cpu` line of /proc/stat, in clock ticks.
    public struct CPUCounters: Sendable, Equatable {
        public var user, nice, system, idle, iowait, irq, softirq, steal: UInt64
        public init(user: UInt64, nice: UInt64, system: UInt64, idle: UInt64, iowait: UInt64, irq: UInt64, softirq: UInt64, steal: UInt64) {
            self.user = user
            self.nice = nice
            self.system = system
            self.idle = idle
            self.iowait = iowait
            self.irq = irq
            self.softirq = softirq
            self.steal = steal
        }
    }

    public struct CPUTimes: Sendable, Equatable {
        public var total: CPUCounters?
        /// cpu0, cpu1, … in their order; a core the kernel lists out of order or twice is dropped.
        public var cores: [CPUCounters] = []
        public init(total: CPUCounters? = nil, cores: [CPUCounters] = []) {
            self.total = total
            self.cores = cores
        }
    }

    public static func uptime(_ text: String) -> Double? {
        guard let first = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first, let value = Double(first),
              value.isFinite, value >= 0 else { return nil }
        return value
    }

    public static func loadavg(_ text: String) -> (Double, Double, Double)? {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard words.count >= 3, let one = Double(words[0]), let five = Double(words[1]), let fifteen = Double(words[2]),
              [one, five, fifteen].allSatisfy({ $0.isFinite && $0 >= 0 }) else { return nil }
        return (one, five, fifteen)
    }

    public static func stat(_ text: String) -> CPUTimes {
        var times = CPUTimes()
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ")
            guard let name = words.first, name.hasPrefix("cpu"), words.count >= 5 else { continue }
            let values = words.dropFirst().prefix(8).map { UInt64($0) }
            guard values.allSatisfy({ $0 != nil }) else { continue }
            let v = values.map { $0 ?? 0 } + Array(repeating: 0, count: max(0, 8 - values.count))
            let counters = CPUCounters(user: v[0], nice: v[1], system: v[2], idle: v[3], iowait: v[4], irq: v[5], softirq: v[6], steal: v[7])
            if name == "cpu" {
                times.total = counters
            } else if let index = Int(name.dropFirst(3)), index == times.cores.count, times.cores.count < maxCores {
                times.cores.append(counters)
            }
        }
        return times
    }

    // MARK: - Memory

    /// /proc/meminfo's fields termind uses, in bytes.
    public static func meminfo(_ text: String) -> [String: UInt64] {
        let wanted: Set<Substring> = ["MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SReclaimable", "SwapTotal", "SwapFree"]
        var values: [String: UInt64] = [:]
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon]
            guard wanted.contains(key) else { continue }
            let words = line[line.index(after: colon)...].split(separator: " ")
            guard let number = words.first.flatMap({ UInt64($0) }) else { continue }
            let unit = words.dropFirst().first
            let (bytes, overflow) = number.multipliedReportingOverflow(by: unit == "kB" ? 1024 : 1)
            if !overflow { values[String(key)] = bytes }
        }
        return values
    }

    // MARK: - Network and disks

    public struct InterfaceCounters: Sendable, Equatable {
        public var name: String
        public var received: UInt64
        public var transmitted: UInt64
    }

    /// /proc/net/dev: `name: rx_bytes packets errs drop fifo frame compressed multicast tx_bytes …`.
    public static func netdev(_ text: String) -> [InterfaceCounters] {
        var interfaces: [InterfaceCounters] = []
        var seen: Set<String> = []
        for line in text.split(separator: "\n") where interfaces.count < maxInterfaces {
            guard let colon = line.lastIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            let fields = line[line.index(after: colon)...].split(separator: " ")
            guard isName(name), fields.count >= 9, let rx = UInt64(fields[0]), let tx = UInt64(fields[8]), seen.insert(name).inserted else { continue }
            interfaces.append(InterfaceCounters(name: name, received: rx, transmitted: tx))
        }
        return interfaces
    }

    public struct DiskCounters: Sendable, Equatable {
        public var name: String
        public var sectorsRead: UInt64
        public var sectorsWritten: UInt64
        /// Milliseconds spent doing I/O.
        public var busyMilliseconds: UInt64
    }

    /// /proc/diskstats: `major minor name reads merged sectors ms writes merged sectors ms inflight io_ms …`.
    public static func diskstats(_ text: String) -> [DiskCounters] {
        var disks: [DiskCounters] = []
        var seen: Set<String> = []
        for line in text.split(separator: "\n") where disks.count < maxDisks {
            let f = line.split(separator: " ")
            guard f.count >= 13, isName(f[2]), let read = UInt64(f[5]), let written = UInt64(f[9]), let busy = UInt64(f[12]),
                  seen.insert(String(f[2])).inserted else { continue }
            disks.append(DiskCounters(name: String(f[2]), sectorsRead: read, sectorsWritten: written, busyMilliseconds: busy))
        }
        return disks
    }

    /// One name per line (the sysfs listings of virtual interfaces and block devices).
    public static func names(_ text: String) -> Set<String> {
        var names: Set<String> = []
        for line in text.split(separator: "\n") where names.count < maxNames && isName(line) && line != "*" {
            names.insert(String(line))
        }
        return names
    }

    /// An interface or device name as the kernel allows one: short, no spaces, slashes or control characters.
    static func isName(_ name: some StringProtocol) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "/") }
    }

    // MARK: - Filesystems

    /// `df -P -k`: `Filesystem 1024-blocks Used Available Capacity Mounted-on`, the mount
    /// point last (it may hold spaces). Pseudo filesystems (tmpfs, devtmpfs, …) are left out; a container's overlay root stays.
    public static func df(_ text: String) -> [(device: String, totalKiB: UInt64, usedKiB: UInt64, mount: String)] {
        let pseudo: Set<Substring> = ["tmpfs", "devtmpfs", "udev", "none", "shm", "efivarfs", "cgroup", "cgroup2", "proc", "sysfs"]
        var result: [(String, UInt64, UInt64, String)] = []
        for line in text.split(separator: "\n").dropFirst() where result.count < maxFilesystems {
            let f = line.split(separator: " ", maxSplits: 5)
            guard f.count == 6, !pseudo.contains(f[0]), !f[0].hasPrefix("/dev/loop"), let total = UInt64(f[1]), let used = UInt64(f[2]), total > 0,
                  f[5].hasPrefix("/") else { continue }
            result.append((printable(f[0], limit: 128), total, used, printable(f[5], limit: 256)))
        }
        return result
    }

    // MARK: - Processes

    public struct ProcessCounters: Sendable, Equatable {
        public var pid: Int
        public var name: String
        /// Clock ticks after boot: with the PID, the process's identity.
        public var startTime: UInt64
        /// utime + stime, in clock ticks.
        public var cpuTicks: UInt64
        public var rssPages: UInt64
    }

    /// /proc/PID/stat lines: `pid (comm) state ppid …`, comm possibly holding spaces and
    /// parentheses (the last `)` ends it). Fields 14-15 are utime and stime, 22 the start
    /// time, 24 the resident pages. The command line and environment are never read.
    public static func processes(_ text: String) -> [ProcessCounters] {
        var result: [ProcessCounters] = []
        for line in text.split(separator: "\n") where result.count < maxProcesses {
            guard let open = line.firstIndex(of: "("), let close = line.lastIndex(of: ")"), open < close,
                  let pid = Int(line[..<open].trimmingCharacters(in: .whitespaces)), pid > 0 else { continue }
            let rest = line[line.index(after: close)...].split(separator: " ")
            guard rest.count >= 22, let utime = UInt64(rest[11]), let stime = UInt64(rest[12]), let start = UInt64(rest[19]),
                  let rss = Int64(rest[21]) else { continue }
            let (ticks, overflow) = utime.addingReportingOverflow(stime)
            guard !overflow else { continue }
            let comm = line[line.index(after: open)..<close]
            result.append(ProcessCounters(pid: pid, name: printable(comm, limit: 64), startTime: start, cpuTicks: ticks, rssPages: UInt64(max(0, rss))))
        }
        return result
    }

    /// Remote text for display: control characters become `?`, at most `limit` characters.
    static func printable(_ text: some StringProtocol, limit: Int) -> String {
        String(String(text).unicodeScalars.prefix(limit).map { $0.properties.generalCategory == .control ? "?" : Character($0) })
    }
}
