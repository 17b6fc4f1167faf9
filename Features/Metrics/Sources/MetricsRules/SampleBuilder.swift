import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI

/// Turns a host's raw snapshots into samples. Rates divide counter deltas by the remote
/// uptime between two snapshots (never by when they arrived here). A delta is unknown (nil)
/// when the interval is not positive and finite (the first snapshot, a reboot, garbage) or
/// when the counter went backwards (a wrap, a reset, a device replaced under one name);
/// a process's CPU is unknown until it has been seen twice with the same PID and start
/// time. A section that is missing, oversized or malformed leaves its part empty and says
/// so in `problems`; the rest of the sample stands.
public struct SampleBuilder: Sendable {
    public let header: RemoteHeader
    /// How many processes each top list keeps.
    public var topProcesses = 20

    private struct Counters: Sendable {
        var uptime: Double?
        var cpu = ProcParsers.CPUTimes()
        var interfaces: [String: ProcParsers.InterfaceCounters] = [:]
        var disks: [String: ProcParsers.DiskCounters] = [:]
        /// nil when the snapshot had no process detail.
        var processes: [ProcessKey: UInt64]?
    }

    private struct ProcessKey: Hashable, Sendable {
        var pid: Int
        var start: UInt64
    }

    private var previous: Counters?

    public init(header: RemoteHeader) {
        self.header = header
    }

    /// - Parameter interfaces: the interfaces chosen for this host; empty: the physical ones.
    public mutating func sample(_ raw: RawSnapshot, host: String, label: String, takenAt: Double, interfaces: Set<String> = []) -> MetricsSample {
        var problems = raw.oversized.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue): \($0.value) bytes, over its \($0.key.limit)-byte bound" }
        func text(_ section: RemoteScript.Section, required: Bool = true) -> [UInt8]? {
            guard let value = raw.sections[section] else {
                if required, raw.oversized[section] == nil { problems.append("\(section.rawValue): missing") }
                return nil
            }
            return value
        }
        var now = Counters()
        now.uptime = text(.uptime).flatMap(ProcParsers.uptime)
        if raw.sections[.uptime] != nil, now.uptime == nil { problems.append("uptime: unreadable") }
        let interval: Double? = {
            guard let a = previous?.uptime, let b = now.uptime else { return nil }
            let d = b - a
            return d.isFinite && d > 0 && d < 86_400 ? d : nil
        }()
        var sample = MetricsSample(host: host, label: label, takenAt: takenAt, uptimeSeconds: now.uptime, intervalSeconds: interval)

        // CPU.
        if let stat = text(.stat) {
            now.cpu = ProcParsers.stat(stat)
            if let total = now.cpu.total {
                let before = previous?.cpu
                let cores = now.cpu.cores.enumerated().map { index, core in
                    share(core, before.flatMap { index < $0.cores.count ? $0.cores[index] : nil }, valid: interval != nil)
                }
                sample.cpu = MetricsSample.CPU(total: share(total, before?.total, valid: interval != nil), cores: cores)
            } else {
                problems.append("stat: no cpu line")
            }
        }
        if let load = text(.loadavg).flatMap(ProcParsers.loadavg) {
            sample.load = MetricsSample.Load(one: load.0, five: load.1, fifteen: load.2)
        }
        if let info = text(.meminfo).map(ProcParsers.meminfo) {
            sample.memory = memory(info)
            if sample.memory == nil { problems.append("meminfo: no MemTotal") }
        }

        // Network: the chosen interfaces, else the physical ones.
        if let dev = text(.netdev) {
            let virtual = text(.virtual, required: false).map(ProcParsers.names) ?? []
            for counters in ProcParsers.netdev(dev) {
                now.interfaces[counters.name] = counters
                let isVirtual = virtual.contains(counters.name)
                guard interfaces.isEmpty ? !isVirtual : interfaces.contains(counters.name) else { continue }
                let old = interval == nil ? nil : previous?.interfaces[counters.name]
                sample.network.append(.init(name: counters.name, virtual: isVirtual,
                                            receive: rate(counters.received, old?.received, interval),
                                            transmit: rate(counters.transmitted, old?.transmitted, interval)))
            }
        }

        // Disks: whole devices as /sys/block lists them, without loop, ram and optical ones.
        if let stats = text(.diskstats) {
            let block = text(.block, required: false).map(ProcParsers.names)
            for counters in ProcParsers.diskstats(stats) {
                now.disks[counters.name] = counters
                guard block?.contains(counters.name) ?? true, !["loop", "ram", "sr", "fd", "zram"].contains(where: { counters.name.hasPrefix($0) }) else { continue }
                let old = interval == nil ? nil : previous?.disks[counters.name]
                let busy = rate(counters.busyMilliseconds, old?.busyMilliseconds, interval).map { min(100, $0 / 10) }
                sample.disks.append(.init(name: counters.name, read: rate(counters.sectorsRead, old?.sectorsRead, interval).map { $0 * 512 },
                                          write: rate(counters.sectorsWritten, old?.sectorsWritten, interval).map { $0 * 512 }, busy: busy))
            }
        }

        // Detail: filesystems and processes, when asked for.
        if let df = raw.sections[.df] {
            sample.filesystems = ProcParsers.df(df).map {
                .init(mount: $0.mount, device: $0.device, used: $0.usedKiB.multipliedReportingOverflow(by: 1024).partialValue,
                      total: $0.totalKiB.multipliedReportingOverflow(by: 1024).partialValue)
            }
        }
        if let procs = raw.sections[.procs] {
            let parsed = ProcParsers.processes(procs)
            var table: [ProcessKey: UInt64] = [:]
            table.reserveCapacity(parsed.count)
            let ticks = Double(header.clockTicks)
            let list = parsed.map { p -> MetricsSample.Process in
                let key = ProcessKey(pid: p.pid, start: p.startTime)
                table[key] = p.cpuTicks
                let old = interval == nil ? nil : previous?.processes?[key]
                let cpu = rate(p.cpuTicks, old, interval).map { $0 / ticks * 100 }
                let (rss, overflow) = p.rssPages.multipliedReportingOverflow(by: header.pageSize)
                return MetricsSample.Process(pid: p.pid, startTime: p.startTime, name: p.name, cpu: cpu, rss: overflow ? UInt64.max : rss)
            }
            now.processes = table
            let n = topProcesses
            // Processes' CPU needs the previous snapshot's table: a first detail snapshot (a
            // viewer just arrived) has none, and says so.
            sample.processes = .init(count: list.count, intervalSeconds: previous?.processes == nil ? nil : interval,
                                     byCPU: Array(list.filter { ($0.cpu ?? 0) > 0 }.sorted { ($0.cpu ?? 0, $1.pid) > ($1.cpu ?? 0, $0.pid) }.prefix(n)),
                                     byMemory: Array(list.sorted { ($0.rss, $1.pid) > ($1.rss, $0.pid) }.prefix(n)))
        }

        // GPUs.
        if header.hasNvidiaSMI {
            if let xml = raw.sections[.gpu] {
                do {
                    sample.gpus = try NvidiaSMI.gpus(xml)
                } catch {
                    problems.append("gpu: nvidia-smi's XML (\(xml.count) bytes) is unusable: \(error)")
                }
            }
        }

        // Probes with no result to show: named, with how long they have been running.
        if let probes = raw.sections[.probes] {
            problems += ProcParsers.probes(probes).map(Self.problem)
        }

        sample.problems = problems
        previous = now
        return sample
    }

    /// What a probe without a result is, as one of a sample's problems.
    static func problem(_ probe: ProcParsers.ProbeState) -> String {
        let command = probe.section == .gpu ? "nvidia-smi" : "df"
        guard let seconds = probe.lateSeconds else {
            return "\(probe.section.rawValue): \(command) was not run: the host gave no temporary folder for its output (mktemp -d failed)"
        }
        return "\(probe.section.rawValue): \(command) has not answered for \(seconds) s (it is left running; its figures come back when it answers)"
    }

    /// Forgets the previous snapshot (a new channel: its counters may come from a rebooted host).
    public mutating func reset() { previous = nil }

    /// Per second; nil without an interval or when the counter went backwards.
    func rate(_ now: UInt64, _ before: UInt64?, _ interval: Double?) -> Double? {
        guard let before, let interval, now >= before else { return nil }
        let value = Double(now - before) / interval
        return value.isFinite ? value : nil
    }

    func share(_ now: ProcParsers.CPUCounters, _ before: ProcParsers.CPUCounters?, valid: Bool) -> MetricsSample.CPUShare {
        let unknown = MetricsSample.CPUShare(busy: nil, user: nil, system: nil, iowait: nil, steal: nil)
        guard valid, let before else { return unknown }
        let pairs = [(now.user, before.user), (now.nice, before.nice), (now.system, before.system), (now.idle, before.idle), (now.iowait, before.iowait),
                     (now.irq, before.irq), (now.softirq, before.softirq), (now.steal, before.steal)]
        guard pairs.allSatisfy({ $0.0 >= $0.1 }) else { return unknown }
        let d = pairs.map { Double($0.0 - $0.1) }
        let total = d.reduce(0, +)
        guard total > 0, total.isFinite else { return unknown }
        func percent(_ x: Double) -> Double { min(100, max(0, x / total * 100)) }
        return MetricsSample.CPUShare(busy: percent(total - d[3] - d[4]), user: percent(d[0] + d[1]), system: percent(d[2] + d[5] + d[6]),
                                      iowait: percent(d[4]), steal: percent(d[7]))
    }

    func memory(_ info: [String: UInt64]) -> MetricsSample.Memory? {
        guard let total = info["MemTotal"] else { return nil }
        let cached = [info["Buffers"], info["Cached"], info["SReclaimable"]].reduce(UInt64(0)) { sum, v in sum.addingReportingOverflow(v ?? 0).partialValue }
        let available = info["MemAvailable"] ?? info["MemFree"].map { $0.addingReportingOverflow(cached).partialValue }
        let used = available.flatMap { total >= $0 ? total - $0 : nil }
        let swapUsed = info["SwapTotal"].flatMap { t in info["SwapFree"].flatMap { t >= $0 ? t - $0 : nil } }
        return MetricsSample.Memory(total: total, available: available, used: used, cached: cached, swapTotal: info["SwapTotal"], swapUsed: swapUsed)
    }
}
