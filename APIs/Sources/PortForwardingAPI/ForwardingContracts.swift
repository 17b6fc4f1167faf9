import FoundationEssentials
import TermindCore
import VaultAPI

/// `termind forward …`: port-forwarding rules, records of their own (a host's rename never
/// changes a rule), and the forwards a supervisor keeps alive inside `termind serve`.
public enum ForwardKind: String, Codable, Sendable, SchemaEnum {
    /// `-L`: a local port, each connection opened to the target through the server.
    case local
    /// `-R`: a port on the server, each connection brought back to the target as seen from here.
    case remote
    /// `-D`: a local SOCKS4/4a/5 proxy whose connections open through the server.
    case dynamic
}

/// A saved rule.
public struct ForwardRule: Codable, Sendable, Equatable {
    public var id: String
    /// Unique among the rules (case-insensitive); what commands name it by.
    public var name: String
    public var kind: ForwardKind
    /// Where it listens: on this machine (local, dynamic) or on the server (remote).
    public var bindAddress: String
    /// 0 only for remote rules: the server picks (`status` shows the port it chose).
    public var bindPort: Int
    /// Where connections go (nil for dynamic: each SOCKS client names its own).
    public var targetHost: String?
    public var targetPort: Int?
    /// A saved host's id (stays right through renames), or a quick-connect line.
    public var host: String
    public var color: String?
    public var tags: [String]

    public init(id: String, name: String, kind: ForwardKind, bindAddress: String, bindPort: Int, targetHost: String? = nil, targetPort: Int? = nil,
                host: String, color: String? = nil, tags: [String] = []) {
        self.id = id
        self.name = name
        self.kind = kind
        self.bindAddress = bindAddress
        self.bindPort = bindPort
        self.targetHost = targetHost
        self.targetPort = targetPort
        self.host = host
        self.color = color
        self.tags = tags
    }
}

public enum ForwardState: String, Codable, Sendable, SchemaEnum {
    case stopped
    case starting
    case running
    /// The connection was lost after the rule had run; the next attempt is at `nextRetryAt`.
    case recovering
    /// Its own failure (the port in use, the server refusing the listen); `termind forward retry`.
    case failed
    /// A person must answer or fix something (an unknown host key, prompts, authentication):
    /// `termind forward retry NAME` asks again.
    case needsAttention = "needs-attention"
}

/// A rule with what its run is doing now in this process.
public struct ForwardStatus: Codable, Sendable, Equatable {
    public var rule: ForwardRule
    /// The saved host's label now (the rule keeps its id), or the quick-connect line.
    public var hostLabel: String
    public var state: ForwardState
    /// Where it listens now ("127.0.0.1:8080"; a remote rule's port as the server chose it).
    public var bound: String?
    /// Bytes from clients to targets and back, flows open now and since the run started.
    public var bytesSent: UInt64
    public var bytesReceived: UInt64
    public var openFlows: Int
    public var flows: UInt64
    /// Seconds since the Unix epoch: running since, next retry.
    public var runningSince: Double?
    public var nextRetryAt: Double?
    /// The last failure's message (never a secret, never remote output).
    public var lastError: String?

    public init(rule: ForwardRule, hostLabel: String, state: ForwardState, bound: String? = nil, bytesSent: UInt64 = 0, bytesReceived: UInt64 = 0,
                openFlows: Int = 0, flows: UInt64 = 0, runningSince: Double? = nil, nextRetryAt: Double? = nil, lastError: String? = nil) {
        self.rule = rule
        self.hostLabel = hostLabel
        self.state = state
        self.bound = bound
        self.bytesSent = bytesSent
        self.bytesReceived = bytesReceived
        self.openFlows = openFlows
        self.flows = flows
        self.runningSince = runningSince
        self.nextRetryAt = nextRetryAt
        self.lastError = lastError
    }
}

public enum ForwardingContracts {
    /// A rule's shape is one OpenSSH-style spec, named as ssh_config names them:
    /// `localForward` (`-L [BIND:]PORT:HOST:HOSTPORT`), `remoteForward` (`-R …`) or
    /// `dynamicForward` (`-D [BIND:]PORT`).
    public enum Add: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            /// A saved host (id or label) or a quick-connect line.
            public var host: String
            public var localForward: String?
            public var remoteForward: String?
            public var dynamicForward: String?
            public var color: String?
            public var tags: [String]?
            public init(name: String, host: String, localForward: String? = nil, remoteForward: String? = nil, dynamicForward: String? = nil, color: String? = nil,
                        tags: [String]? = nil) {
                self.name = name
                self.host = host
                self.localForward = localForward
                self.remoteForward = remoteForward
                self.dynamicForward = dynamicForward
                self.color = color
                self.tags = tags
            }
        }
        public typealias Response = ForwardRule
        public static let name = "forwarding.add"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Save a forwarding rule (not started): a name, a host, and one of local, remote or dynamic as ssh's -L, -R or -D."
    }

    public enum Edit: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// The rule's name or id.
            public var rule: String
            public var name: String?
            public var host: String?
            public var localForward: String?
            public var remoteForward: String?
            public var dynamicForward: String?
            /// "" clears it.
            public var color: String?
            public var tags: [String]?
            public init(rule: String, name: String? = nil, host: String? = nil, localForward: String? = nil, remoteForward: String? = nil, dynamicForward: String? = nil,
                        color: String? = nil, tags: [String]? = nil) {
                self.rule = rule
                self.name = name
                self.host = host
                self.localForward = localForward
                self.remoteForward = remoteForward
                self.dynamicForward = dynamicForward
                self.color = color
                self.tags = tags
            }
        }
        public typealias Response = ForwardStatus
        public static let name = "forwarding.edit"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Change a rule; a running one restarts with the change (its peers keep running)."
    }

    public struct RuleRequest: Codable, Sendable, Equatable {
        /// The rule's name or id.
        public var rule: String
        public init(rule: String) { self.rule = rule }
    }

    public enum Remove: Contract {
        public typealias Request = RuleRequest
        public typealias Response = ForwardRule
        public static let name = "forwarding.remove"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "Delete a rule, stopping it first when it runs."
    }

    public enum Stop: Contract {
        public typealias Request = RuleRequest
        public typealias Response = ForwardStatus
        public static let name = "forwarding.stop"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Stop a running rule: its listener closes and its flows end; other rules keep running."
    }

    public enum List: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var tag: String?
            public init(tag: String? = nil) { self.tag = tag }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var rules: [ForwardStatus]
            public init(rules: [ForwardStatus]) { self.rules = rules }
        }
        public static let name = "forwarding.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List the rules with their state in this process."
    }
}

public enum ForwardingStreams {
    /// Starts one saved rule (never several at once), asking what connecting needs; ends
    /// once it listens. Retry does the same for a failed rule or one that needs attention.
    public enum Start: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            public var rule: String
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            public init(rule: String, acceptHostKey: HostKeyPreset? = nil, connectTimeout: Double? = nil) {
                self.rule = rule
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
            }
        }
        public typealias Result = ForwardStatus
        public static let name = "forwarding.start"
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Start a saved rule inside termind serve, asking what connecting needs; the supervisor keeps it alive."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "view": StreamEvents.view] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    public enum Retry: StreamContract {
        public typealias Request = Start.Request
        public typealias Result = ForwardStatus
        public static let name = "forwarding.retry"
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Start a failed rule, or one that needs attention, again, asking what connecting needs."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "view": StreamEvents.view] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    /// Unsaved forwards for the command's lifetime, like `ssh -N`.
    public enum Run: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label) or a quick-connect line.
            public var host: String
            /// Specs as ssh's -L, -R and -D take them (each may be given more than once).
            public var localForward: [String]?
            public var remoteForward: [String]?
            public var dynamicForward: [String]?
            public var acceptHostKey: HostKeyPreset?
            public var connectTimeout: Double?
            /// Ends after this many seconds (nil: until cancelled).
            public var seconds: Double?
            /// As ssh's ExitOnForwardFailure: a forward that cannot be set up ends the run and
            /// every other forward (nil, false: it is reported and the others go on).
            public var exitOnForwardFailure: Bool?
            public init(host: String, localForward: [String]? = nil, remoteForward: [String]? = nil, dynamicForward: [String]? = nil, acceptHostKey: HostKeyPreset? = nil,
                        connectTimeout: Double? = nil, seconds: Double? = nil, exitOnForwardFailure: Bool? = nil) {
                self.host = host
                self.localForward = localForward
                self.remoteForward = remoteForward
                self.dynamicForward = dynamicForward
                self.acceptHostKey = acceptHostKey
                self.connectTimeout = connectTimeout
                self.seconds = seconds
                self.exitOnForwardFailure = exitOnForwardFailure
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var forwards: [ForwardStatus]
            /// 3 when the run ended with some of its forwards failed (a partial failure); nil when every one ran.
            public var exitStatus: Int?
            public init(forwards: [ForwardStatus], exitStatus: Int? = nil) {
                self.forwards = forwards
                self.exitStatus = exitStatus
            }
        }
        public static let name = "forwarding.run"
        public static func hosts(in request: Request) -> [String] { [request.host] }
        public static let effect: Effect = Effect(.write, network: true)
        public static let version = 1
        public static let summary = "Run unsaved forwards (-L, -R, -D) on a host for this command's lifetime, like ssh -N; they recover after a dropped connection, and one that cannot be set up leaves the others running."
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "view": StreamEvents.view] }
        public static var questions: [String: String] { ConnectionOpener.questions }
    }

    /// The rules' state, once or (watch) redrawn live.
    public enum Status: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// One rule's name or id; nil: every rule.
            public var rule: String?
            public var watch: Bool?
            /// Stop after this many redraws of a watch (nil: until cancelled).
            public var count: Int?
            /// Filled by the CLI: "json" emits the statuses as each view's `json`.
            public var output: String?
            /// Only the rules with this tag.
            public var tag: String?
            public init(rule: String? = nil, watch: Bool? = nil, count: Int? = nil, output: String? = nil, tag: String? = nil) {
                self.rule = rule
                self.watch = watch
                self.count = count
                self.output = output
                self.tag = tag
            }
        }
        public typealias Result = ForwardingContracts.List.Response
        public static let name = "forwarding.status"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Each rule's state, where it listens, bytes each way, open flows, last error, uptime; --watch redraws it live."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }

    // The commands that change a rule, as a person runs them: each does what the contract
    // of the same name without `rule.` does, returns what it returns, and says what it did
    // in a sentence (a `view`, left out with --json).

    public enum AddRule: StreamContract {
        public typealias Request = ForwardingContracts.Add.Request
        public typealias Result = ForwardRule
        public static let name = "forwarding.rule.add"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "forwarding.add@1 for a person: save a rule (not started) and say what was saved."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }

    public enum EditRule: StreamContract {
        public typealias Request = ForwardingContracts.Edit.Request
        public typealias Result = ForwardStatus
        public static let name = "forwarding.rule.edit"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "forwarding.edit@1 for a person: change a rule (a running one restarts alone) and say what it is now."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }

    public enum RemoveRule: StreamContract {
        public typealias Request = ForwardingContracts.RuleRequest
        public typealias Result = ForwardRule
        public static let name = "forwarding.rule.remove"
        public static let effect: Effect = .destructive
        public static let version = 1
        public static let summary = "forwarding.remove@1 for a person: delete a rule (stopped first when it runs) and say what was deleted."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }

    public enum StopRule: StreamContract {
        public typealias Request = ForwardingContracts.RuleRequest
        public typealias Result = ForwardStatus
        public static let name = "forwarding.rule.stop"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "forwarding.stop@1 for a person: stop a running rule (its peers keep running) and say so."
        public static var events: [String: JSONSchema] { ["view": StreamEvents.view] }
    }
}

extension ErrorCode {
    /// No rule has that name or id.
    public static let forwardingRuleNotFound: ErrorCode = "forwarding.rule_not_found"
    /// Another rule has that name.
    public static let forwardingNameTaken: ErrorCode = "forwarding.name_taken"
    /// A spec (-L, -R, -D) or a rule's field is malformed.
    public static let forwardingBadSpec: ErrorCode = "forwarding.bad_spec"
    /// The local address is in use or cannot be bound.
    public static let forwardingBindFailed: ErrorCode = "forwarding.bind_failed"
    /// Saved rules run inside `termind serve`.
    public static let forwardingNeedsServer: ErrorCode = "forwarding.needs_server"
    /// The rule could not start or stopped trying (its last error says why).
    public static let forwardingFailed: ErrorCode = "forwarding.failed"
}

/// `forwarding.session`: forwards that live as long as something else holds them — an
/// interactive session's `ssh -L/-R/-D` (Workspaces). They run as `forward run` runs its
/// own: over the host's connection for forwards, kept alive by the supervisor while held.
public protocol SessionForwarding: Sendable {
    /// Starts each forward (`specs`: kind and ssh's grammar, as `forward run` takes them) on
    /// `target` (a saved host's id or label, or a quick-connect line), asking `ask` what
    /// connecting needs. A spec that does not parse throws, naming it, and nothing starts;
    /// a forward that cannot start (a port in use) is reported in its status, the others run.
    func start(_ specs: [(kind: ForwardKind, spec: String)], on target: String, acceptHostKey: HostKeyPreset?, connectTimeout: Double?,
               ask: @escaping ConnectionAsker) async throws -> any SessionForwards
}

/// Forwards started for a session: stopped when it ends.
public protocol SessionForwards: Sendable {
    func statuses() async -> [ForwardStatus]
    /// Ends every forward and closes what was opened for them (once).
    func stop() async
}

extension PortKey where P == any SessionForwarding {
    public static var sessionForwarding: Self { PortKey("forwarding.session") }
}
