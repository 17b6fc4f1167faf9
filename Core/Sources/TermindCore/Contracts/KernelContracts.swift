/// Contracts the kernel itself answers; they need no feature.
public enum KernelContracts {
    /// Echo, for health checks and round-trip benchmarks.
    public enum Ping: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var payload: String
            public init(payload: String) { self.payload = payload }
        }
        public typealias Response = Request
        public static let name = "kernel.ping"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Echo the payload back (health check, benchmarks)."
    }

    /// The features of this process, in boot order, with status and reasons.
    /// Turns a plugin that crashes turned off (in its own process) on again.
    public enum PluginEnable: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var message: String
            public init(message: String) { self.message = message }
        }
        public static let name = "kernel.plugins.enable"
        public static let effect: Effect = .write
        public static let version = 1
        public static let summary = "Turn a plugin that crashes turned off on again: ID; its next call starts its process."
    }

    public enum Features: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var features: [FeatureStatus]
            public init(features: [FeatureStatus]) { self.features = features }
        }
        public static let name = "kernel.features"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List features in boot order with their status and, if disabled, why."
    }

    /// Every routed contract with its JSON Schemas.
    public enum Contracts: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Only contracts whose id starts with this prefix.
            public var prefix: String?
            public init(prefix: String? = nil) { self.prefix = prefix }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var contracts: [ContractInfo]
            public init(contracts: [ContractInfo]) { self.contracts = contracts }
        }
        public static let name = "kernel.contracts"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List contracts with their owner and request/response JSON Schemas."
    }

    /// What a command line names, in one round trip (the CLI asks this before anything
    /// else): the longest command a running feature declares whose words start the line,
    /// with its contract's or stream's schemas; otherwise what could follow (for a usage
    /// list), or the disabled feature that declares it.
    public enum Command: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var words: [String]
            public init(words: [String]) { self.words = words }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var command: FeatureManifest.Command?
            /// The command's contract or stream, as `kernel.contracts` lists it.
            public var target: ContractInfo?
            /// No command matched: the running commands whose words start with the line's
            /// words before its first option.
            public var partial: [FeatureManifest.Command]
            /// No command matched: a disabled feature that declares one that would, and why.
            public var disabledFeature: String?
            public var disabledReason: String?
            /// The first words of every running command.
            public var available: [String]
            /// No command matched and none starts with the line's words: the longest start
            /// of them that some commands share (`vault host` for `vault host rm X`), and
            /// those commands — what the person most likely meant to choose from.
            public var nearest: [String]?
            public var nearestCommands: [FeatureManifest.Command]?
            public init(command: FeatureManifest.Command?, target: ContractInfo?, partial: [FeatureManifest.Command] = [],
                        disabledFeature: String? = nil, disabledReason: String? = nil, available: [String] = [],
                        nearest: [String]? = nil, nearestCommands: [FeatureManifest.Command]? = nil) {
                self.command = command
                self.target = target
                self.partial = partial
                self.disabledFeature = disabledFeature
                self.disabledReason = disabledReason
                self.available = available
                self.nearest = nearest
                self.nearestCommands = nearestCommands
            }
        }
        public static let name = "kernel.command"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Resolve a command line's words to the declared command, with its contract's schemas (what the CLI asks first)."
    }

    /// Versions of termind and what it is built from.
    public enum Version: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var termind: String
            public var signature: BuildSignature
            public var pluginABI: Int
            public var libraries: [String: String]
            public init(termind: String, signature: BuildSignature, pluginABI: Int, libraries: [String: String]) {
                self.termind = termind
                self.signature = signature
                self.pluginABI = pluginABI
                self.libraries = libraries
            }
        }
        public static let name = "kernel.version"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Termind version, build signature, plugin ABI and C library versions."
    }
}

/// The state of one feature as reported by `kernel.features@1` and `termind features`.
public struct FeatureStatus: Sendable, Equatable, Codable {
    public enum State: String, Sendable, Codable, SchemaEnum {
        case running, disabled, stopped
    }
    public var id: String
    public var version: String
    public var kind: FeatureManifest.Kind
    public var state: State
    /// Why the feature is disabled; nil while it runs.
    public var reason: String?
    public var reasonCode: String?
    public var permanent: Bool
    public var source: String
    public var contracts: [String]
    public var provides: [String]
    /// CLI subcommands the feature adds.
    public var commands: [FeatureManifest.Command]
    /// Where `termind --help` lists them (the manifest's `help`).
    public var help: FeatureManifest.HelpGroup?
    /// The `termind serve` options it reads (`--mcp-listen ADDRESS:PORT`).
    public var serveOptions: [FeatureManifest.ServeOption]?
    /// A C plugin in a process of its own: that process, and what its sandbox enforces on
    /// this kernel and what it cannot (nil for everything in termind's process).
    public var isolation: String?
    /// What it may reach, as its manifest declares and the kernel enforces: the ports it
    /// requires and may use, and the contracts of others it may call.
    public var requires: [String]
    public var optional: [String]
    public var calls: [String]

    public init(id: String, version: String, kind: FeatureManifest.Kind, state: State, reason: String?, reasonCode: String?,
                permanent: Bool, source: String, contracts: [String], provides: [String], commands: [FeatureManifest.Command] = [],
                requires: [String] = [], optional: [String] = [], calls: [String] = []) {
        self.requires = requires
        self.optional = optional
        self.calls = calls
        self.id = id
        self.version = version
        self.kind = kind
        self.state = state
        self.reason = reason
        self.reasonCode = reasonCode
        self.permanent = permanent
        self.source = source
        self.contracts = contracts
        self.provides = provides
        self.commands = commands
    }
}

public struct ContractInfo: Sendable, Equatable, Codable {
    public var id: String
    public var owner: String
    public var summary: String
    public var request: JSONValue
    /// For a stream: its result.
    public var response: JSONValue
    /// True for a stream (events, questions and input while it runs; see StreamSession).
    public var stream: Bool?
    /// For a stream: whether it reads the client's standard input.
    public var acceptsInput: Bool?
    /// For a stream: whether it takes the client's standard streams as descriptors.
    public var acceptsDescriptors: Bool?
    /// For a stream: the event kinds it emits, each with the JSON Schema of its fields
    /// (a data event's bytes come besides them).
    public var events: [String: JSONValue]?
    /// For a stream: the questions it may ask, topic → kind (`choice`, `confirm`, `prompts`).
    public var questions: [String: String]?
    /// What it does (`Effect`); `declared` false when its owner did not say, and the kernel
    /// takes the worst (destructive, network, secrets).
    public var effect: Effect
    public var effectDeclared: Bool

    public init(id: String, owner: String, summary: String, request: JSONValue, response: JSONValue, stream: Bool? = nil, acceptsInput: Bool? = nil,
                events: [String: JSONValue]? = nil, questions: [String: String]? = nil, acceptsDescriptors: Bool? = nil, effect: Effect? = nil) {
        self.effect = effect ?? Effect.undeclared
        self.effectDeclared = effect != nil
        self.acceptsDescriptors = acceptsDescriptors
        self.events = events
        self.questions = questions
        self.id = id
        self.owner = owner
        self.summary = summary
        self.request = request
        self.response = response
        self.stream = stream
        self.acceptsInput = acceptsInput
    }
}

/// The secret store's protection (the store itself is a kernel service).
public enum SecretStoreContracts {
    public enum Status: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            /// "key file" or "passphrase (scrypt)".
            public var protection: String
            public var path: String
            public var secrets: Int
            /// When the data key was made or last rotated (ISO 8601, UTC); nil for a store
            /// from before termind recorded it.
            public var keyRotatedAt: String?
            public init(protection: String, path: String, secrets: Int, keyRotatedAt: String? = nil) {
                self.protection = protection
                self.path = path
                self.secrets = secrets
                self.keyRotatedAt = keyRotatedAt
            }
        }
        public static let name = "kernel.secrets.status"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "How the secret store is protected and how many secrets it holds."
    }

    /// Rotates the store's data key under new protection: every secret stays readable, and
    /// an old key file or passphrase never opens what is stored afterwards.
    public enum Protect: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// The new passphrase; empty or absent switches to the key file.
            public var passphrase: Secret?
            public init(passphrase: Secret? = nil) { self.passphrase = passphrase }
        }
        public typealias Response = SecretStoreContracts.Status.Response
        public static let name = "kernel.secrets.protect"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Protect the secret store with a new passphrase (or a new key file), rotating its data key; no secret is lost."
    }
}
