import FoundationEssentials
import TermindCore
import VaultAPI

/// `termind metrics …`: agentless monitors of saved hosts. One monitor per host per
/// process, shared by every client (each `watch`, `show`, the Assistant's get_metrics);
/// it samples over one long-lived exec and keeps five minutes of history in memory only.
public enum MetricsContracts {
    public enum MonitorState: String, Codable, Sendable, SchemaEnum {
        /// Saved, not sampling in this process (a one-shot command; `termind serve` samples).
        case idle
        case connecting
        case sampling
        /// The connection broke; the next attempt is at `nextRetryAt`.
        case retrying
        case paused
        /// A person must answer something (an unknown host key, keyboard-interactive
        /// prompts) or fix a failure (authentication, a changed key): `termind metrics resume HOST`.
        case needsAttention = "needs-attention"
    }

    /// A monitored host as `list` shows it.
    public struct Monitor: Codable, Sendable, Equatable {
        public var host: String
        public var label: String
        public var state: MonitorState
        public var lastSampleAt: Double?
        public var nextRetryAt: Double?
        /// Why the monitor is retrying or needs attention (an error's message, never remote output).
        public var lastError: String?
        /// Samples held (at most five minutes' worth), and taken since the monitor started in this process.
        public var samples: Int
        public var taken: Int
        /// While sampling: what the latest sample lacks and why (its `problems`: a probe that
        /// has not answered, a section over its bound); empty when it is whole.
        public var problems: [String]
        public init(host: String, label: String, state: MonitorState, lastSampleAt: Double? = nil, nextRetryAt: Double? = nil, lastError: String? = nil,
                    samples: Int = 0, taken: Int = 0, problems: [String] = []) {
            self.host = host
            self.label = label
            self.state = state
            self.lastSampleAt = lastSampleAt
            self.nextRetryAt = nextRetryAt
            self.lastError = lastError
            self.samples = samples
            self.taken = taken
            self.problems = problems
        }
    }

    public enum List: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Response: Codable, Sendable, Equatable {
            public var monitors: [Monitor]
            public init(monitors: [Monitor]) { self.monitors = monitors }
        }
        public static let name = "metrics.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List the monitored hosts in their order: state, last sample, next retry, last error, what the latest sample lacks."
    }

    public enum Remove: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public init(host: String) { self.host = host }
        }
        public typealias Response = Monitor
        public static let name = "metrics.remove"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Stop monitoring a host: its sampler stops, its history and any once-only trust are dropped."
    }

    public enum Pause: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            public init(host: String) { self.host = host }
        }
        public typealias Response = Monitor
        public static let name = "metrics.pause"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Pause a host's monitor (saved): sampling stops, once-only trust is dropped, the history is kept."
    }

    /// For the Assistant's get_metrics tool: what the process already holds, nothing more.
    public enum Get: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Saved host ids or labels; nil: every monitored host.
            public var hosts: [String]?
            public init(hosts: [String]? = nil) { self.hosts = hosts }
        }
        public struct HostMetrics: Codable, Sendable, Equatable {
            public var host: String
            public var label: String
            public var state: MonitorState
            /// The latest sample (at most 20 processes per list), nil when there is none.
            public var sample: MetricsSample?
            /// Seconds since that sample was taken, and whether that is more than three intervals.
            public var ageSeconds: Double?
            public var stale: Bool
            public init(host: String, label: String, state: MonitorState, sample: MetricsSample?, ageSeconds: Double?, stale: Bool) {
                self.host = host
                self.label = label
                self.state = state
                self.sample = sample
                self.ageSeconds = ageSeconds
                self.stale = stale
            }
            enum CodingKeys: String, CodingKey { case host, label, state, sample, ageSeconds, stale }
            public func encode(to encoder: any Encoder) throws {
                var c = encoder.container(keyedBy: CodingKeys.self)
                try c.encode(host, forKey: .host)
                try c.encode(label, forKey: .label)
                try c.encode(state, forKey: .state)
                try c.encode(sample, forKey: .sample)
                try c.encode(ageSeconds.flatMap { $0.isFinite ? $0 : nil }, forKey: .ageSeconds)
                try c.encode(stale, forKey: .stale)
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var hosts: [HostMetrics]
            public init(hosts: [HostMetrics]) { self.hosts = hosts }
        }
        public static let name = "metrics.get"
        public static func hosts(in request: Request) -> [String] { request.hosts ?? ["*"] }
        public static let effect: Effect = Effect(.read, network: true)
        public static let version = 1
        public static let summary = "The latest sample of monitored hosts, with its age and staleness: read-only, never starts sampling or authentication."
    }
}

/// The metrics streams: those that may connect, and so may ask (host keys, prompts).
public enum MetricsStreams {
    /// Adds a saved host to the monitors (saved in `metrics.preferences`) and takes its
    /// first sample, asking the client what connecting needs. Resume does the same for a
    /// paused host or one that needs attention.
    public enum Add: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host's id or label.
            public var host: String
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            public init(host: String, acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil) {
                self.host = host
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
        }
        public typealias Result = MetricsContracts.Monitor
        public static let name = "metrics.add"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Monitor a saved host: saved in this device's metrics preferences, first sample taken (asking what connecting needs)."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    public enum Resume: StreamContract {
        public typealias Request = Add.Request
        public typealias Result = MetricsContracts.Monitor
        public static let name = "metrics.resume"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Resume a paused host's monitor, or one that needs attention, asking what connecting needs."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    /// One host's latest sample with rates (waiting for a second snapshot when needed).
    public enum Show: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            public var host: String
            /// Processes and filesystems too.
            public var detail: Bool?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            public init(host: String, detail: Bool? = nil, acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil) {
                self.host = host
                self.detail = detail
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
        }
        public typealias Result = MetricsSample
        public static let name = "metrics.show"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = Effect(.read, network: true)
        public static let version = 1
        public static let summary = "Show a host's latest sample: CPU, memory, load, network, disks, GPUs (with --detail processes and filesystems)."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view, "notice": StreamEvents.notice] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    /// A live view of hosts, redrawn at each sample: a row per host, or one host's detail.
    public enum Watch: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// Saved host ids or labels; empty or left out: every monitored host that is not paused.
            public var hosts: [String]
            /// One host's detail: per core, processes, filesystems, GPU processes.
            public var detail: Bool?
            /// Stop after this many redraws (nil: until cancelled).
            public var count: Int?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            /// Filled by the CLI: "json" streams one view per sample whose `json` is the
            /// sample; "text" (the default) coalesces redraws for a person.
            public var output: String?
            public init(hosts: [String] = [], detail: Bool? = nil, count: Int? = nil, acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil,
                        output: String? = nil) {
                self.hosts = hosts
                self.detail = detail
                self.count = count
                self.output = output
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
            /// `hosts` may be left out (every monitored host), so `termind metrics watch` needs no HOST.
            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                hosts = try c.decodeIfPresent([String].self, forKey: .hosts) ?? []
                detail = try c.decodeIfPresent(Bool.self, forKey: .detail)
                count = try c.decodeIfPresent(Int.self, forKey: .count)
                acceptHostKey = try c.decodeIfPresent(HostKeyPreset.self, forKey: .acceptHostKey)
                connectTimeout = try c.decodeIfPresent(Double.self, forKey: .connectTimeout)
                output = try c.decodeIfPresent(String.self, forKey: .output)
            }
            enum CodingKeys: String, CodingKey { case hosts, detail, count, acceptHostKey, connectTimeout, output }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var redraws: Int
            public init(redraws: Int) { self.redraws = redraws }
        }
        public static let name = "metrics.watch"
        public static func hosts(in request: Request) -> [String] { request.hosts.isEmpty ? ["*"] : request.hosts }
        public static let effect: Effect = Effect(.read, network: true)
        public static let version = 1
        public static let summary = "Watch hosts live: a row per host with sparklines, or one host's detail; --json streams one object per sample."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view, "notice": StreamEvents.notice] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }
}

extension ErrorCode {
    /// The host is not among the monitored ones (`termind metrics add HOST` first).
    public static let metricsNotMonitored: ErrorCode = "metrics.not_monitored"
    /// The monitor could not produce a sample (connection, authentication, the remote side).
    public static let metricsUnavailable: ErrorCode = "metrics.unavailable"
}
