import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

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

    public static func uptime(_ text: String) -> Double? { uptime(Array(text.utf8)) }
    public static func uptime(_ bytes: [UInt8]) -> Double? {
        guard let first = Bytes.lines(bytes).first.flatMap({ Bytes.fields($0).first }), let value = Bytes.double(first), value >= 0 else { return nil }
        return value
    }

    public static func loadavg(_ text: String) -> (Double, Double, Double)? { loadavg(Array(text.utf8)) }
    public static func loadavg(_ bytes: [UInt8]) -> (Double, Double, Double)? {
        guard let line = Bytes.lines(bytes).first else { return nil }
        let words = Bytes.fields(line)
        guard words.count >= 3, let one = Bytes.double(words[0]), let five = Bytes.double(words[1]), let fifteen = Bytes.double(words[2]),
              one >= 0, five >= 0, fifteen >= 0 else { return nil }
        return (one, five, fifteen)
    }

    public static func stat(_ text: String) -> CPUTimes { stat(Array(text.utf8)) }
    public static func stat(_ bytes: [UInt8]) -> CPUTimes {
        var times = CPUTimes()
        for line in Bytes.lines(bytes) {
            guard line.starts(with: Bytes.cpu) else { continue }
            let words = Bytes.fields(line)
            guard words.count >= 5 else { continue }
            var v = [UInt64](repeating: 0, count: 8)
            var valid = true
            for (i, word) in words.dropFirst().prefix(8).enumerated() {
                guard let n = Bytes.unsigned(word) else { valid = false; break }
                v[i] = n
            }
            guard valid else { continue }
            let counters = CPUCounters(user: v[0], nice: v[1], system: v[2], idle: v[3], iowait: v[4], irq: v[5], softirq: v[6], steal: v[7])
            let name = words[0]
            if name.count == 3 {
                times.total = counters
            } else if let index = Bytes.unsigned(name.dropFirst(3)), index == times.cores.count, times.cores.count < maxCores {
                times.cores.append(counters)
            }
        }
        return times
    }

    // MARK: - Memory

    /// /proc/meminfo's fields termind uses, in bytes.
    public static func meminfo(_ text: String) -> [String: UInt64] { meminfo(Array(text.utf8)) }
    public static func meminfo(_ bytes: [UInt8]) -> [String: UInt64] {
        var values: [String: UInt64] = [:]
        for line in Bytes.lines(bytes) {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let key = line[..<colon]
            guard let index = Bytes.memoryKeyBytes.firstIndex(where: { $0.count == key.count && $0.elementsEqual(key) }) else { continue }
            let name = Bytes.memoryKeys[index]
            let words = Bytes.fields(line[(colon + 1)...])
            guard let number = words.first.flatMap(Bytes.unsigned) else { continue }
            let kB = words.count > 1 && words[1].elementsEqual("kB".utf8)
            let (bytes, overflow) = number.multipliedReportingOverflow(by: kB ? 1024 : 1)
            if !overflow { values[name] = bytes }
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
    public static func netdev(_ text: String) -> [InterfaceCounters] { netdev(Array(text.utf8)) }
    public static func netdev(_ bytes: [UInt8]) -> [InterfaceCounters] {
        var interfaces: [InterfaceCounters] = []
        var seen: Set<String> = []
        for line in Bytes.lines(bytes) where interfaces.count < maxInterfaces {
            guard let colon = line.lastIndex(of: UInt8(ascii: ":")) else { continue }
            let names = Bytes.fields(line[..<colon])
            guard names.count == 1, isName(names[0]) else { continue }
            let nameBytes = names[0]
            let fields = Bytes.fields(line[(colon + 1)...])
            guard fields.count >= 9, let rx = Bytes.unsigned(fields[0]), let tx = Bytes.unsigned(fields[8]) else { continue }
            let name = String(decoding: nameBytes, as: UTF8.self)
            guard seen.insert(name).inserted else { continue }
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
    public static func diskstats(_ text: String) -> [DiskCounters] { diskstats(Array(text.utf8)) }
    public static func diskstats(_ bytes: [UInt8]) -> [DiskCounters] {
        var disks: [DiskCounters] = []
        var seen: Set<String> = []
        for line in Bytes.lines(bytes) where disks.count < maxDisks {
            let f = Bytes.fields(line)
            guard f.count >= 13, isName(f[2]), let read = Bytes.unsigned(f[5]), let written = Bytes.unsigned(f[9]), let busy = Bytes.unsigned(f[12]) else { continue }
            let name = String(decoding: f[2], as: UTF8.self)
            guard seen.insert(name).inserted else { continue }
            disks.append(DiskCounters(name: name, sectorsRead: read, sectorsWritten: written, busyMilliseconds: busy))
        }
        return disks
    }

    /// One name per line (the sysfs listings of virtual interfaces and block devices).
    public static func names(_ text: String) -> Set<String> { names(Array(text.utf8)) }
    public static func names(_ bytes: [UInt8]) -> Set<String> {
        var names: Set<String> = []
        for line in Bytes.lines(bytes) where names.count < maxNames && isName(line) && !line.elementsEqual([UInt8(ascii: "*")]) {
            names.insert(String(decoding: line, as: UTF8.self))
        }
        return names
    }

    /// An interface or device name as the kernel allows one: short, no spaces, slashes or control characters.
    static func isName(_ name: some Collection<UInt8>) -> Bool {
        !name.isEmpty && name.count <= 64 && name.allSatisfy { $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "/") }
    }
    static func isName(_ name: some StringProtocol) -> Bool { isName(Array(name.utf8)) }

    // MARK: - Filesystems

    /// `df -P -k`: `Filesystem 1024-blocks Used Available Capacity Mounted-on`, the mount
    /// point last (it may hold spaces). Pseudo filesystems (tmpfs, devtmpfs, …) are left out; a container's overlay root stays.
    public static func df(_ bytes: [UInt8]) -> [(device: String, totalKiB: UInt64, usedKiB: UInt64, mount: String)] {
        df(String(decoding: bytes, as: UTF8.self))
    }
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

    // MARK: - Probes

    /// A probe the snapshot holds no result of (the script's `probes` section).
    public struct ProbeState: Sendable, Equatable {
        /// The section its result goes to: `df` or `gpu`.
        public var section: RemoteScript.Section
        /// Seconds it has been running (late); nil when it could not be run at all.
        public var lateSeconds: UInt64?
        public init(section: RemoteScript.Section, lateSeconds: UInt64?) {
            self.section = section
            self.lateSeconds = lateSeconds
        }
    }

    /// `NAME late SECONDS` or `NAME skipped` lines, for the probes the script runs (`df`,
    /// `gpu`): any other line is skipped, and each probe counts once.
    public static func probes(_ bytes: [UInt8]) -> [ProbeState] {
        var result: [ProbeState] = []
        for line in Bytes.lines(bytes) {
            let words = Bytes.fields(line)
            guard let name = words.first, let section = RemoteScript.Section(rawValue: String(decoding: name, as: UTF8.self)),
                  section == .df || section == .gpu, !result.contains(where: { $0.section == section }) else { continue }
            switch (words.count, words.dropFirst().first.map { String(decoding: $0, as: UTF8.self) }) {
            case (3, "late"?):
                guard let seconds = Bytes.unsigned(words[2]) else { continue }
                result.append(ProbeState(section: section, lateSeconds: seconds))
            case (2, "skipped"?):
                result.append(ProbeState(section: section, lateSeconds: nil))
            default:
                continue
            }
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
    public static func processes(_ text: String) -> [ProcessCounters] { processes(Array(text.utf8)) }
    public static func processes(_ bytes: [UInt8]) -> [ProcessCounters] {
        var result: [ProcessCounters] = []
        for line in Bytes.lines(bytes) where result.count < maxProcesses {
            guard let open = line.firstIndex(of: UInt8(ascii: "(")), let close = line.lastIndex(of: UInt8(ascii: ")")), open < close,
                  let pidField = Bytes.fields(line[..<open]).first, let pid = Bytes.unsigned(pidField).flatMap({ Int(exactly: $0) }), pid > 0 else { continue }
            let rest = Bytes.fields(line[(close + 1)...])
            guard rest.count >= 22, let utime = Bytes.unsigned(rest[11]), let stime = Bytes.unsigned(rest[12]), let start = Bytes.unsigned(rest[19]) else { continue }
            // RSS may be negative for a kernel thread's odd accounting: never wrapped into a huge one.
            let rss = rest[21].first == UInt8(ascii: "-") ? 0 : Bytes.unsigned(rest[21])
            guard let rss else { continue }
            let (ticks, overflow) = utime.addingReportingOverflow(stime)
            guard !overflow else { continue }
            let comm = String(decoding: line[(open + 1)..<close], as: UTF8.self)
            result.append(ProcessCounters(pid: pid, name: printable(comm, limit: 64), startTime: start, cpuTicks: ticks, rssPages: rss))
        }
        return result
    }

    /// Remote text for display: control characters become `?`, at most `limit` characters.
    static func printable(_ text: some StringProtocol, limit: Int) -> String {
        String(String(text).unicodeScalars.prefix(limit).map { $0.properties.generalCategory == .control ? "?" : Character($0) })
    }
}

/// Byte-level helpers for procfs text: lines, whitespace-separated fields, decimal numbers.
/// procfs is ASCII; working on bytes avoids String's Unicode machinery, which cost most of
/// a monitor's CPU (a few KiB a snapshot, a hundred snapshots a second in a server).
enum Bytes {
    static let cpu = Array("cpu".utf8)
    static let memoryKeys = ["MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SReclaimable", "SwapTotal", "SwapFree"]
    /// The same as bytes: each of meminfo's ~50 lines is matched against them, and comparing
    /// with a String's UTF-8 view was the parser's largest cost.
    static let memoryKeyBytes = memoryKeys.map { Array($0.utf8) }

    static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true)
    }

    static func fields(_ line: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        line.split(omittingEmptySubsequences: true) { $0 == 0x20 || $0 == 0x09 }
    }

    /// A decimal number of digits only; nil on anything else or overflow.
    static func unsigned(_ digits: ArraySlice<UInt8>) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 20 else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(byte - 0x30))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return value
    }

    /// A finite decimal like "123.45".
    static func double(_ text: ArraySlice<UInt8>) -> Double? {
        guard !text.isEmpty, text.count <= 32, text.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") }) else { return nil }
        guard let value = Double(String(decoding: text, as: UTF8.self)), value.isFinite else { return nil }
        return value
    }
}
