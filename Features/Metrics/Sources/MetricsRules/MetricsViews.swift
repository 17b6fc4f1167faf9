import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI
import TermindCore

/// The text tables of `termind metrics watch` and `show` (sent as `view` events, which any
/// client draws): a row per host, and one host's detail.
public enum MetricsViews {
    /// Sparkline width: the last minute at a 2 s interval.
    public static let sparkWidth = 30

    /// The order of an overview row's columns: the host first, problems last (a view's
    /// `columns`).
    public static let overviewColumns: JSONValue = .array(["host", "state", "cpu", "memory", "load", "net", "disk", "gpu", "problems", "error"].map(JSONValue.string))

    /// One host's row: state, CPU, memory, load, network, the busiest disk, each GPU.
    public static func overviewRow(host: String, label: String, state: MetricsContracts.MonitorState, sample: MetricsSample?, history: [History.Point],
                                   error: String? = nil) -> [String: JSONValue] {
        var row: [String: JSONValue] = ["host": .string(label)]
        row["state"] = .string(state.rawValue)
        let s = sample
        row["cpu"] = .string(percent(s?.cpu?.total.busy) + " " + History.sparkline(history.map(\.cpu), width: sparkWidth, maximum: 100))
        if let m = s?.memory {
            row["memory"] = .string("\(bytes(m.used.map { Double($0) }))/\(bytes(Double(m.total))) " + History.sparkline(history.map(\.memory), width: 12, maximum: 100))
        } else {
            row["memory"] = .string("-")
        }
        row["load"] = .string(s?.load.map { String(printf: "%.2f", $0.one) } ?? "-")
        let rx = s?.network.compactMap(\.receive).reduce(0, +)
        let tx = s?.network.compactMap(\.transmit).reduce(0, +)
        let known = s.map { !$0.network.isEmpty && $0.network.allSatisfy { $0.receive != nil } } ?? false
        row["net"] = .string(known ? "↓\(bytes(rx))/s ↑\(bytes(tx))/s " + History.sparkline(history.map(\.network), width: 12) : "-")
        if let disk = s?.disks.filter({ $0.busy != nil }).max(by: { ($0.busy ?? 0) < ($1.busy ?? 0) }) {
            row["disk"] = .string("\(disk.name) \(percent(disk.busy))")
        } else {
            row["disk"] = .string("-")
        }
        if let gpus = s?.gpus, !gpus.isEmpty {
            row["gpu"] = .string(gpus.prefix(8).map { g in
                "\(percent(g.utilization)) \(bytes(g.memoryUsed.map { Double($0) }))/\(bytes(g.memoryTotal.map { Double($0) }))"
            }.joined(separator: " | ") + (gpus.count > 8 ? " +\(gpus.count - 8)" : ""))
        }
        if let error, state != .sampling {
            row["error"] = .string(String(error.prefix(120)))
        } else if state == .sampling, let problems = s?.problems, !problems.isEmpty {
            // Sampling, but not everything is there (a probe that has not answered): said, not hidden.
            row["problems"] = .string(String(problems.joined(separator: "; ").prefix(120)))
        }
        return row
    }

    /// One host's detail: the overview row, then per core, network, disks, filesystems,
    /// processes by CPU and by memory, GPUs and their processes.
    public static func detail(_ sample: MetricsSample, state: MetricsContracts.MonitorState, history: [History.Point]) -> (rows: [[String: JSONValue]], sections: [(String, [[String: JSONValue]])]) {
        let rows = [overviewRow(host: sample.host, label: sample.label, state: state, sample: sample, history: history)]
        var sections: [(String, [[String: JSONValue]])] = []
        if let cpu = sample.cpu {
            sections.append(("CPU cores", cpu.cores.enumerated().map { index, core in
                ["core": .integer(Int64(index)), "busy": .string(percent(core.busy)), "user": .string(percent(core.user)), "system": .string(percent(core.system)),
                 "iowait": .string(percent(core.iowait)), "steal": .string(percent(core.steal))]
            }))
        }
        if !sample.network.isEmpty {
            sections.append(("Network", sample.network.map {
                ["name": .string($0.name), "receive": .string(bytes($0.receive) + "/s"), "transmit": .string(bytes($0.transmit) + "/s")]
            }))
        }
        if !sample.disks.isEmpty {
            sections.append(("Disks", sample.disks.map {
                ["name": .string($0.name), "read": .string(bytes($0.read) + "/s"), "write": .string(bytes($0.write) + "/s"), "busy": .string(percent($0.busy))]
            }))
        }
        if let filesystems = sample.filesystems {
            sections.append(("Filesystems", filesystems.map {
                ["mount": .string($0.mount), "device": .string($0.device), "used": .string(bytes(Double($0.used))), "total": .string(bytes(Double($0.total))),
                 "use": .string(percent($0.total > 0 ? Double($0.used) / Double($0.total) * 100 : nil))]
            }))
        }
        if let processes = sample.processes {
            func rows(_ list: [MetricsSample.Process]) -> [[String: JSONValue]] {
                list.map { ["pid": .integer(Int64($0.pid)), "name": .string($0.name), "cpu": .string(percent($0.cpu)), "rss": .string(bytes(Double($0.rss)))] }
            }
            sections.append(("Processes by CPU (of \(processes.count))", rows(processes.byCPU)))
            sections.append(("Processes by memory", rows(processes.byMemory)))
        }
        if let gpus = sample.gpus, !gpus.isEmpty {
            sections.append(("GPUs", gpus.map { g in
                var row: [String: JSONValue] = ["id": .string(g.id), "name": .string(g.name ?? "-"), "util": .string(percent(g.utilization)),
                                                "memory": .string("\(bytes(g.memoryUsed.map { Double($0) }))/\(bytes(g.memoryTotal.map { Double($0) }))"),
                                                "temp": .string(g.temperature.map { String(printf: "%.0f C", $0) } ?? "-"),
                                                "power": .string(g.power.map { String(printf: "%.0f W", $0) } ?? "-")]
                if g.migMode { row["mig"] = .string("\(g.migDevices.count) devices") }
                return row
            }))
            let processes = gpus.flatMap { g in g.processes.map { (g, $0) } }
            if !processes.isEmpty {
                sections.append(("GPU processes", processes.map { g, p in
                    ["gpu": .string(g.id), "pid": .integer(Int64(p.pid)), "name": .string(p.name), "memory": .string(bytes(p.memoryUsed.map { Double($0) }))]
                }))
            }
        }
        if !sample.problems.isEmpty {
            sections.append(("Problems", sample.problems.map { ["problem": .string($0)] }))
        }
        return (rows, sections)
    }

    public static func percent(_ value: Double?) -> String {
        guard let value, value.isFinite else { return "-" }
        return String(printf: "%.0f%%", value)
    }

    public static func bytes(_ value: Double?) -> String {
        guard let value, value.isFinite, value >= 0 else { return "-" }
        let units = ["B", "K", "M", "G", "T", "P"]
        var scaled = value
        var unit = 0
        while scaled >= 1024, unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        return unit == 0 ? "\(Int(scaled))B" : String(printf: scaled < 10 ? "%.1f" : "%.0f", scaled) + units[unit]
    }

    /// The view event's fields for `sections`.
    public static func sectionsJSON(_ sections: [(String, [[String: JSONValue]])]) -> JSONValue {
        .array(sections.map { .object(["title": .string($0.0), "rows": .array($0.1.map { .object($0) })]) })
    }
}
