import FoundationEssentials
import TermindCore

/// One sample of a monitored host, as every client of the process sees it (`termind metrics
/// show`, `watch`, `metrics.get@1`). Rates come from the remote side's uptime between two
/// snapshots; whatever cannot be known (the first snapshot, a counter that went backwards,
/// a section that was missing, oversized or malformed) is nil, encoded as JSON null — never
/// a negative, infinite or made-up value.
public struct MetricsSample: Codable, Sendable, Equatable {
    /// The saved host's id and label.
    public var host: String
    public var label: String
    /// When termind received the snapshot (Unix seconds, this machine's clock).
    public var takenAt: Double
    /// The remote uptime at the snapshot, and the remote seconds since the previous one (the rates' base).
    public var uptimeSeconds: Double?
    public var intervalSeconds: Double?
    public var cpu: CPU?
    public var load: Load?
    public var memory: Memory?
    /// Network interfaces: physical ones, and virtual ones (lo, veth, bridges, …) only when chosen.
    public var network: [Interface]
    /// Whole block devices (no partitions, loop or ram devices).
    public var disks: [Disk]
    /// Sampled only while someone views the host's detail; nil otherwise.
    public var filesystems: [Filesystem]?
    public var processes: Processes?
    /// nil when the host has no nvidia-smi; empty when it has one and no GPU.
    public var gpus: [GPU]?
    /// What went wrong in this snapshot, by section and size only (never remote content).
    public var problems: [String]

    public init(host: String, label: String, takenAt: Double, uptimeSeconds: Double? = nil, intervalSeconds: Double? = nil, cpu: CPU? = nil,
                load: Load? = nil, memory: Memory? = nil, network: [Interface] = [], disks: [Disk] = [], filesystems: [Filesystem]? = nil,
                processes: Processes? = nil, gpus: [GPU]? = nil, problems: [String] = []) {
        self.host = host
        self.label = label
        self.takenAt = takenAt
        self.uptimeSeconds = uptimeSeconds
        self.intervalSeconds = intervalSeconds
        self.cpu = cpu
        self.load = load
        self.memory = memory
        self.network = network
        self.disks = disks
        self.filesystems = filesystems
        self.processes = processes
        self.gpus = gpus
        self.problems = problems
    }

    enum CodingKeys: String, CodingKey {
        case host, label, takenAt, uptimeSeconds, intervalSeconds, cpu, load, memory, network, disks, filesystems, processes, gpus, problems
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(host, forKey: .host)
        try c.encode(label, forKey: .label)
        try c.encode(takenAt, forKey: .takenAt)
        try c.encode(uptimeSeconds.finite, forKey: .uptimeSeconds)
        try c.encode(intervalSeconds.finite, forKey: .intervalSeconds)
        try c.encode(cpu, forKey: .cpu)
        try c.encode(load, forKey: .load)
        try c.encode(memory, forKey: .memory)
        try c.encode(network, forKey: .network)
        try c.encode(disks, forKey: .disks)
        try c.encode(filesystems, forKey: .filesystems)
        try c.encode(processes, forKey: .processes)
        try c.encode(gpus, forKey: .gpus)
        try c.encode(problems, forKey: .problems)
    }

    /// Shares of CPU time in percent (0-100) over the interval.
    public struct CPUShare: Codable, Sendable, Equatable {
        /// 100 minus idle and iowait.
        public var busy: Double?
        public var user: Double?
        public var system: Double?
        public var iowait: Double?
        public var steal: Double?
        public init(busy: Double?, user: Double?, system: Double?, iowait: Double?, steal: Double?) {
            self.busy = busy
            self.user = user
            self.system = system
            self.iowait = iowait
            self.steal = steal
        }
        enum CodingKeys: String, CodingKey { case busy, user, system, iowait, steal }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(busy.finite, forKey: .busy)
            try c.encode(user.finite, forKey: .user)
            try c.encode(system.finite, forKey: .system)
            try c.encode(iowait.finite, forKey: .iowait)
            try c.encode(steal.finite, forKey: .steal)
        }
    }

    public struct CPU: Codable, Sendable, Equatable {
        public var total: CPUShare
        /// Per core, in /proc/stat's order (cpu0, cpu1, …).
        public var cores: [CPUShare]
        public init(total: CPUShare, cores: [CPUShare]) {
            self.total = total
            self.cores = cores
        }
    }

    public struct Load: Codable, Sendable, Equatable {
        public var one: Double
        public var five: Double
        public var fifteen: Double
        public init(one: Double, five: Double, fifteen: Double) {
            self.one = one
            self.five = five
            self.fifteen = fifteen
        }
    }

    /// Bytes.
    public struct Memory: Codable, Sendable, Equatable {
        public var total: UInt64
        public var available: UInt64?
        public var used: UInt64?
        public var cached: UInt64?
        public var swapTotal: UInt64?
        public var swapUsed: UInt64?
        public init(total: UInt64, available: UInt64?, used: UInt64?, cached: UInt64?, swapTotal: UInt64?, swapUsed: UInt64?) {
            self.total = total
            self.available = available
            self.used = used
            self.cached = cached
            self.swapTotal = swapTotal
            self.swapUsed = swapUsed
        }
        enum CodingKeys: String, CodingKey { case total, available, used, cached, swapTotal, swapUsed }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(total, forKey: .total)
            try c.encode(available, forKey: .available)
            try c.encode(used, forKey: .used)
            try c.encode(cached, forKey: .cached)
            try c.encode(swapTotal, forKey: .swapTotal)
            try c.encode(swapUsed, forKey: .swapUsed)
        }
    }

    public struct Interface: Codable, Sendable, Equatable {
        public var name: String
        public var virtual: Bool
        /// Bytes per second.
        public var receive: Double?
        public var transmit: Double?
        public init(name: String, virtual: Bool, receive: Double?, transmit: Double?) {
            self.name = name
            self.virtual = virtual
            self.receive = receive
            self.transmit = transmit
        }
        enum CodingKeys: String, CodingKey { case name, virtual, receive, transmit }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(name, forKey: .name)
            try c.encode(virtual, forKey: .virtual)
            try c.encode(receive.finite, forKey: .receive)
            try c.encode(transmit.finite, forKey: .transmit)
        }
    }

    public struct Disk: Codable, Sendable, Equatable {
        public var name: String
        /// Bytes per second, and the share of the interval the device was busy (0-100).
        public var read: Double?
        public var write: Double?
        public var busy: Double?
        public init(name: String, read: Double?, write: Double?, busy: Double?) {
            self.name = name
            self.read = read
            self.write = write
            self.busy = busy
        }
        enum CodingKeys: String, CodingKey { case name, read, write, busy }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(name, forKey: .name)
            try c.encode(read.finite, forKey: .read)
            try c.encode(write.finite, forKey: .write)
            try c.encode(busy.finite, forKey: .busy)
        }
    }

    public struct Filesystem: Codable, Sendable, Equatable {
        public var mount: String
        public var device: String
        /// Bytes.
        public var used: UInt64
        public var total: UInt64
        public init(mount: String, device: String, used: UInt64, total: UInt64) {
            self.mount = mount
            self.device = device
            self.used = used
            self.total = total
        }
    }

    /// A remote process: its identity is the PID with its start time (a reused PID is
    /// another process). The name is the kernel's short one (comm): never arguments or environment.
    public struct Process: Codable, Sendable, Equatable {
        public var pid: Int
        /// Clock ticks after boot, as /proc/PID/stat gives it.
        public var startTime: UInt64
        public var name: String
        /// Percent of one core over the interval; nil for a process new in this snapshot.
        public var cpu: Double?
        /// Resident memory in bytes (pages times the remote page size).
        public var rss: UInt64
        public init(pid: Int, startTime: UInt64, name: String, cpu: Double?, rss: UInt64) {
            self.pid = pid
            self.startTime = startTime
            self.name = name
            self.cpu = cpu
            self.rss = rss
        }
        enum CodingKeys: String, CodingKey { case pid, startTime, name, cpu, rss }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(pid, forKey: .pid)
            try c.encode(startTime, forKey: .startTime)
            try c.encode(name, forKey: .name)
            try c.encode(cpu.finite, forKey: .cpu)
            try c.encode(rss, forKey: .rss)
        }
    }

    public struct Processes: Codable, Sendable, Equatable {
        /// How many processes the host had.
        public var count: Int
        /// The remote seconds since the process table the processes' CPU is computed against
        /// (the previous snapshot's); nil when there was none, and every `cpu` is then unknown.
        public var intervalSeconds: Double?
        public var byCPU: [Process]
        public var byMemory: [Process]
        public init(count: Int, intervalSeconds: Double? = nil, byCPU: [Process], byMemory: [Process]) {
            self.count = count
            self.intervalSeconds = intervalSeconds
            self.byCPU = byCPU
            self.byMemory = byMemory
        }
        enum CodingKeys: String, CodingKey { case count, intervalSeconds, byCPU, byMemory }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(count, forKey: .count)
            try c.encode(intervalSeconds.finite, forKey: .intervalSeconds)
            try c.encode(byCPU, forKey: .byCPU)
            try c.encode(byMemory, forKey: .byMemory)
        }
    }

    /// A GPU as nvidia-smi reports it; each value nil where it says N/A or not supported.
    public struct GPU: Codable, Sendable, Equatable {
        /// PCI bus id, e.g. 00000000:3B:00.0.
        public var id: String
        /// The product name; nil (JSON null) when nvidia-smi gives none, an empty one or N/A.
        public var name: String?
        public var uuid: String?
        /// Percent.
        public var utilization: Double?
        public var memoryUtilization: Double?
        /// Bytes.
        public var memoryUsed: UInt64?
        public var memoryTotal: UInt64?
        /// Degrees Celsius, watts, MHz.
        public var temperature: Double?
        public var power: Double?
        public var powerLimit: Double?
        public var graphicsClock: Double?
        public var memoryClock: Double?
        public var migMode: Bool
        public var migDevices: [MIGDevice]
        public var processes: [GPUProcess]
        public init(id: String, name: String?, uuid: String? = nil, utilization: Double? = nil, memoryUtilization: Double? = nil, memoryUsed: UInt64? = nil,
                    memoryTotal: UInt64? = nil, temperature: Double? = nil, power: Double? = nil, powerLimit: Double? = nil, graphicsClock: Double? = nil,
                    memoryClock: Double? = nil, migMode: Bool = false, migDevices: [MIGDevice] = [], processes: [GPUProcess] = []) {
            self.id = id
            self.name = name
            self.uuid = uuid
            self.utilization = utilization
            self.memoryUtilization = memoryUtilization
            self.memoryUsed = memoryUsed
            self.memoryTotal = memoryTotal
            self.temperature = temperature
            self.power = power
            self.powerLimit = powerLimit
            self.graphicsClock = graphicsClock
            self.memoryClock = memoryClock
            self.migMode = migMode
            self.migDevices = migDevices
            self.processes = processes
        }
        enum CodingKeys: String, CodingKey {
            case id, name, uuid, utilization, memoryUtilization, memoryUsed, memoryTotal, temperature, power, powerLimit, graphicsClock, memoryClock
            case migMode, migDevices, processes
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(name, forKey: .name)
            try c.encode(uuid, forKey: .uuid)
            try c.encode(utilization.finite, forKey: .utilization)
            try c.encode(memoryUtilization.finite, forKey: .memoryUtilization)
            try c.encode(memoryUsed, forKey: .memoryUsed)
            try c.encode(memoryTotal, forKey: .memoryTotal)
            try c.encode(temperature.finite, forKey: .temperature)
            try c.encode(power.finite, forKey: .power)
            try c.encode(powerLimit.finite, forKey: .powerLimit)
            try c.encode(graphicsClock.finite, forKey: .graphicsClock)
            try c.encode(memoryClock.finite, forKey: .memoryClock)
            try c.encode(migMode, forKey: .migMode)
            try c.encode(migDevices, forKey: .migDevices)
            try c.encode(processes, forKey: .processes)
        }
    }

    /// A MIG slice of a GPU.
    public struct MIGDevice: Codable, Sendable, Equatable {
        public var index: Int?
        public var gpuInstance: Int?
        public var computeInstance: Int?
        public var memoryUsed: UInt64?
        public var memoryTotal: UInt64?
        public init(index: Int?, gpuInstance: Int?, computeInstance: Int?, memoryUsed: UInt64?, memoryTotal: UInt64?) {
            self.index = index
            self.gpuInstance = gpuInstance
            self.computeInstance = computeInstance
            self.memoryUsed = memoryUsed
            self.memoryTotal = memoryTotal
        }
        enum CodingKeys: String, CodingKey { case index, gpuInstance, computeInstance, memoryUsed, memoryTotal }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(index, forKey: .index)
            try c.encode(gpuInstance, forKey: .gpuInstance)
            try c.encode(computeInstance, forKey: .computeInstance)
            try c.encode(memoryUsed, forKey: .memoryUsed)
            try c.encode(memoryTotal, forKey: .memoryTotal)
        }
    }

    /// A process using a GPU: its PID, the executable's short name (never its arguments)
    /// and the GPU memory it uses; the MIG instance it runs on, when there is one.
    public struct GPUProcess: Codable, Sendable, Equatable {
        public var pid: Int
        public var name: String
        public var memoryUsed: UInt64?
        public var gpuInstance: Int?
        public init(pid: Int, name: String, memoryUsed: UInt64?, gpuInstance: Int? = nil) {
            self.pid = pid
            self.name = name
            self.memoryUsed = memoryUsed
            self.gpuInstance = gpuInstance
        }
        enum CodingKeys: String, CodingKey { case pid, name, memoryUsed, gpuInstance }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(pid, forKey: .pid)
            try c.encode(name, forKey: .name)
            try c.encode(memoryUsed, forKey: .memoryUsed)
            try c.encode(gpuInstance, forKey: .gpuInstance)
        }
    }
}

extension Optional where Wrapped == Double {
    /// The value when it is finite; nil (JSON null) otherwise.
    public var finite: Double? {
        guard let value = self, value.isFinite else { return nil }
        return value
    }
}
