import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import MetricsAPI

/// GPUs from `nvidia-smi -q -x` (root `nvidia_smi_log`, one `gpu` element per device), as
/// drivers from the 4xx to the 5xx series write it. Values nvidia-smi cannot give ("N/A",
/// "[N/A]", "[Not Supported]", "Unknown Error") are nil. Where drivers moved an element
/// (power under `power_readings`, later `gpu_power_readings` with `instant_power_draw`) both
/// places are read. Process names keep the executable's last path component only, so a
/// driver that reports a command line never passes its arguments on.
public enum NvidiaSMI {
    public static let maxGPUs = 64
    public static let maxMIGDevices = 64
    public static let maxProcesses = 256

    public static func gpus(_ bytes: [UInt8]) throws(XMLError) -> [MetricsSample.GPU] {
        let root = try XMLTree.parse(bytes)
        guard root.name == "nvidia_smi_log" else { throw XMLError(offset: 0, reason: "a root element other than nvidia_smi_log") }
        return root.all("gpu").prefix(maxGPUs).map(gpu)
    }

    static func gpu(_ e: XMLElement) -> MetricsSample.GPU {
        let power = e["gpu_power_readings"] ?? e["power_readings"]
        let migDevices = (e["mig_devices"]?.all("mig_device") ?? []).prefix(maxMIGDevices).map { d in
            MetricsSample.MIGDevice(index: integer(d["index"]), gpuInstance: integer(d["gpu_instance_id"]), computeInstance: integer(d["compute_instance_id"]),
                                    memoryUsed: bytes(d["fb_memory_usage", "used"]), memoryTotal: bytes(d["fb_memory_usage", "total"]))
        }
        let processes = (e["processes"]?.all("process_info") ?? []).prefix(maxProcesses).compactMap { p -> MetricsSample.GPUProcess? in
            guard let pid = integer(p["pid"]), pid > 0 else { return nil }
            return MetricsSample.GPUProcess(pid: pid, name: executableName(p["process_name"]?.trimmedText ?? ""), memoryUsed: bytes(p["used_memory"]),
                                            gpuInstance: integer(p["gpu_instance_id"]))
        }
        return MetricsSample.GPU(
            id: ProcParsers.printable(e.attributes["id"] ?? "", limit: 64),
            name: text(e["product_name"], limit: 128),
            uuid: text(e["uuid"], limit: 128),
            utilization: number(e["utilization", "gpu_util"]),
            memoryUtilization: number(e["utilization", "memory_util"]),
            memoryUsed: bytes(e["fb_memory_usage", "used"]),
            memoryTotal: bytes(e["fb_memory_usage", "total"]),
            temperature: number(e["temperature", "gpu_temp"]),
            power: number(power?["power_draw"]) ?? number(power?["instant_power_draw"]) ?? number(power?["average_power_draw"]),
            powerLimit: number(power?["current_power_limit"]) ?? number(power?["power_limit"]) ?? number(power?["enforced_power_limit"]),
            graphicsClock: number(e["clocks", "graphics_clock"]),
            memoryClock: number(e["clocks", "mem_clock"]),
            migMode: e["mig_mode", "current_mig"]?.trimmedText == "Enabled",
            migDevices: Array(migDevices),
            processes: processes)
    }

    /// An element's text for display; nil when it is missing, empty, or a value nvidia-smi
    /// cannot give ("N/A", "[N/A]", "[Not Supported]", "Unknown Error"), never "".
    static func text(_ e: XMLElement?, limit: Int) -> String? {
        guard let text = e?.trimmedText, !text.isEmpty, !unavailable.contains(text) else { return nil }
        return ProcParsers.printable(text, limit: limit)
    }

    static let unavailable: Set<String> = ["N/A", "[N/A]", "[Not Supported]", "Not Supported", "Unknown Error", "[Unknown Error]"]

    /// The number at the start of "71 %", "9.85 W", "1590 MHz", "32 C"; nil for N/A and the like.
    static func number(_ e: XMLElement?) -> Double? {
        guard let word = e?.trimmedText.split(separator: " ").first, let value = Double(word), value.isFinite, value >= 0 else { return nil }
        return value
    }

    static func integer(_ e: XMLElement?) -> Int? {
        guard let text = e?.trimmedText, let value = Int(text), value >= 0 else { return nil }
        return value
    }

    /// "16160 MiB" (nvidia-smi's unit), "512 KiB", "2 GiB", "123 B".
    static func bytes(_ e: XMLElement?) -> UInt64? {
        let words = e?.trimmedText.split(separator: " ") ?? []
        guard let first = words.first, let value = UInt64(first) else { return nil }
        let scale: UInt64 = switch words.dropFirst().first {
        case "KiB"?: 1 << 10
        case "MiB"?, nil: 1 << 20
        case "GiB"?: 1 << 30
        case "B"?: 1
        default: 0
        }
        let (product, overflow) = value.multipliedReportingOverflow(by: scale)
        return scale == 0 || overflow ? nil : product
    }

    /// "/usr/bin/python3 train.py --lr 3" → "python3"; a Windows path
    /// ("C:\\Program Files\\App\\app.exe", never with arguments) → "app.exe".
    static func executableName(_ raw: String) -> String {
        let name: String
        if raw.contains("\\") {
            name = raw.split(separator: "\\").last.map(String.init) ?? raw
        } else {
            let first = raw.split(separator: " ").first.map(String.init) ?? ""
            name = first.split(separator: "/").last.map(String.init) ?? first
        }
        return ProcParsers.printable(name, limit: 64)
    }
}
