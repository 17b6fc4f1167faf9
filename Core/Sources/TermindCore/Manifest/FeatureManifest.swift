import FoundationEssentials

/// One feature or plugin as declared in Registry.json or a plugin's plugin.json.
/// Read and validated before any library is opened; no code runs at this stage.
public struct FeatureManifest: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, Codable, SchemaEnum {
        /// A Swift library built with this exact toolchain against these contracts.
        case swift
        /// Any library exposing the C plugin ABI (termind_plugin.h).
        case c
    }

    public struct Dependencies: Sendable, Equatable, Codable {
        public var required: [String]
        public var optional: [String]
        public init(required: [String] = [], optional: [String] = []) {
            self.required = required
            self.optional = optional
        }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            required = try c.decodeIfPresent([String].self, forKey: .required) ?? []
            optional = try c.decodeIfPresent([String].self, forKey: .optional) ?? []
        }
        enum CodingKeys: String, CodingKey { case required, optional }
    }

    public struct Ports: Sendable, Equatable, Codable {
        /// Ports this feature provides; each port has exactly one provider.
        public var provides: [String]
        /// Ports this feature cannot run without.
        public var requires: [String]
        /// Ports this feature uses when present.
        public var optional: [String]
        public init(provides: [String] = [], requires: [String] = [], optional: [String] = []) {
            self.provides = provides
            self.requires = requires
            self.optional = optional
        }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            provides = try c.decodeIfPresent([String].self, forKey: .provides) ?? []
            requires = try c.decodeIfPresent([String].self, forKey: .requires) ?? []
            optional = try c.decodeIfPresent([String].self, forKey: .optional) ?? []
        }
        enum CodingKeys: String, CodingKey { case provides, requires, optional }
    }

    /// A C function the plugin exports, called through libffi with a run-time signature
    /// and reachable as the contract `<id>.fn.<name>@1`.
    public struct Function: Sendable, Equatable, Codable {
        public var name: String
        public var symbol: String
        /// `"<return>(<param>, ...)"` over: void, int32, uint32, int64, uint64, double, bool, string.
        public var signature: String
        public var summary: String?

        public init(name: String, symbol: String, signature: String, summary: String? = nil) {
            self.name = name
            self.symbol = symbol
            self.signature = signature
            self.summary = summary
        }
    }

    /// The JSON Schemas a C plugin declares for one of its contracts (`"schemas"` in
    /// plugin.json, keyed by contract id). Absent, the request is any JSON object and the
    /// response any JSON value.
    public struct ContractSchemas: Sendable, Equatable, Codable {
        public var request: JSONValue?
        public var response: JSONValue?
        /// A C plugin's stream: whether it reads the client's input, the event kinds it
        /// emits (kind → the schema of its fields) and its questions (topic → kind).
        public var acceptsInput: Bool?
        public var events: [String: JSONValue]?
        public var questions: [String: String]?
        public init(request: JSONValue? = nil, response: JSONValue? = nil, acceptsInput: Bool? = nil,
                    events: [String: JSONValue]? = nil, questions: [String: String]? = nil) {
            self.events = events
            self.questions = questions
            self.request = request
            self.response = response
            self.acceptsInput = acceptsInput
        }
    }

    /// Where a manifest was declared: the built-in registry, or a plugin folder the user
    /// opted in to. Plugins can never be permanent and never take a reserved id.
    public enum Origin: String, Sendable, Equatable, Codable {
        case registry
        case plugin
    }

    /// A CLI subcommand that maps positional arguments onto fields of the request of a
    /// contract, or of a stream (whose events, questions and input the CLI handles).
    public struct Command: Sendable, Equatable, Codable {
        public var name: String
        /// The contract it calls (`name@version`); exactly one of `contract` and `stream`.
        public var contract: String?
        /// The stream it runs (`name@version`), declared under the feature's `streams`.
        public var stream: String?
        /// Request fields filled by positional arguments, in order. A last one written
        /// `field...` takes every remaining word (joined with spaces for a string field).
        public var arguments: [String]
        /// Fields that hold local file paths: the CLI makes them absolute before sending,
        /// since a server's working directory is not the caller's.
        public var paths: [String]?
        /// Fields that hold secrets: the CLI never takes them from the command line (other
        /// users see it in `ps`); `--field -` reads the value from standard input.
        public var secrets: [String]?
        /// A field the CLI fills with its working directory (for paths inside other values
        /// that the feature resolves, as a client's `-i ./key` in a quick-connect line).
        public var workingDirectory: String?
        /// A stream command that bridges the client's terminal (a shell): the field the CLI
        /// fills with the terminal (`term`, `columns`, `rows`, `environment`) when standard
        /// input is one; the CLI then puts it in raw mode, sends its bytes as input and its
        /// window changes as `resize` controls, and restores it on every way out.
        public var terminal: String?
        /// A field the CLI fills with how it shows what comes back: "json" with `--json`,
        /// else "text" (a stream that sends one event per item for scripts, and coalesced
        /// views for a person).
        public var output: String?
        public var summary: String?
        /// What `termind help COMMAND` adds to the usage and summary (lines of text).
        public var help: [String]?
        /// One-letter switches that set a boolean field to true, as `cp -r -p` (`{"r":
        /// "recursive"}`); several may be written together (`-rp`).
        public var flags: [String: String]?
        /// One-letter options that take a value, as ssh's `-L 8080:db:5432` (`{"L":
        /// "localForward"}`); `-L8080:db:5432` works too, and a list field given more than once
        /// gathers every value.
        public var options: [String: String]?
        /// Fields the CLI fills from its own environment variables, as `{"tmux": "TMUX"}`
        /// (left out when unset or empty): what a server-side handler needs of the client's
        /// surroundings (the terminal multiplexer it runs in). Names are upper case; none
        /// that may hold a secret (…KEY, …TOKEN, …SECRET, …PASS…) nor termind's own.
        public var environment: [String: String]?
        /// Fields the command always sends with these values (one stream behind several
        /// commands: `get` and `put` naming their direction).
        public var values: [String: JSONValue]?
        /// The columns, in order, of the table a person sees of the reply's records: what
        /// a row is first (the host, the session, the rule), then what matters most. Fields
        /// not named follow, identifying ones first; `--json` always has every field.
        public var columns: [String]?
        /// The last argument (`field...`) is a command line of its own (a remote command, text
        /// to type): options end at its first word, as ssh reads `ssh host ls -la`, and a
        /// one-letter option the command does not declare before it is an error.
        public var stopsOptions: Bool?
        /// A stream command whose events already showed a person everything (an answer
        /// streamed as it came): its result is printed only with `--json`.
        public var quietResult: Bool?
        /// A field the CLI fills with whether its standard input is a terminal (a person
        /// who can be asked, as opposed to lines piped in).
        public var interactive: String?
        /// A stream command that runs turns (a chat): the first Ctrl-C of a turn is sent to
        /// the stream as `{"control": {"interrupt": true}}` instead of ending it; a second
        /// one before the stream asks its next question ends the stream as usual.
        public var interruptible: Bool?

        public init(name: String, contract: String? = nil, stream: String? = nil, arguments: [String] = [], paths: [String]? = nil,
                    secrets: [String]? = nil, workingDirectory: String? = nil, terminal: String? = nil, output: String? = nil, summary: String? = nil,
                    help: [String]? = nil, flags: [String: String]? = nil, options: [String: String]? = nil, values: [String: JSONValue]? = nil,
                    environment: [String: String]? = nil) {
            self.environment = environment
            self.flags = flags
            self.options = options
            self.values = values
            self.terminal = terminal
            self.output = output
            self.name = name
            self.contract = contract
            self.stream = stream
            self.arguments = arguments
            self.paths = paths
            self.secrets = secrets
            self.workingDirectory = workingDirectory
            self.summary = summary
            self.help = help
        }

        /// What the command calls or runs.
        public var target: String { contract ?? stream ?? "" }

        /// The command's words: "vault host add" → ["vault", "host", "add"].
        public var words: [String] { name.split(separator: " ").map(String.init) }
    }

    public var id: String
    public var version: String
    public var abi: Int
    public var kind: Kind
    public var library: String
    public var order: Int
    public var permanent: Bool
    public var dependencies: Dependencies
    public var ports: Ports
    public var contracts: [String]
    /// The streams (`name@version`) it serves, in its namespace like its contracts.
    public var streams: [String]
    /// The contracts (`name@version`) of other features and of the kernel this feature may
    /// call; the kernel refuses any other (its own contracts need no listing).
    public var calls: [String]
    /// Calls of `calls` this feature makes only while serving some of its own contracts:
    /// call → those contracts (`{"forwarding.add@1": ["vault.import.commit@1"]}`). The
    /// kernel refuses such a call made from anywhere else, and a one-shot command loads the
    /// call's owner only for a command of one of those contracts.
    public var callsFrom: [String: [String]]
    public var functions: [Function]
    public var commands: [Command]
    /// C plugins only: request/response JSON Schemas of declared contracts.
    public var schemas: [String: ContractSchemas]
    /// Plugins only: the library may live outside the plugin's folder (it must pass the
    /// same ownership and permission checks).
    public var libraryOutsidePlugin: Bool
    /// C plugins only: where the plugin's code runs — `inline`, in termind's process (the
    /// default), or `process`, in a child of its own (`termind-plugin-host`), so a crash or
    /// a hang ends that child, never termind (docs/plugins.md).
    public var isolation: Isolation?
    public enum Isolation: String, Sendable, Codable, SchemaEnum {
        case inline, process
    }
    /// A plugin in a process of its own: what its process may reach (nothing else), and its
    /// bounds. Enforced before any of its code runs (docs/plugins.md, "Isolation").
    public var access: Access?
    public struct Access: Sendable, Equatable, Codable {
        /// Absolute paths it may read beneath (its own folder and the system's libraries always).
        public var read: [String]
        /// Absolute paths it may write beneath.
        public var write: [String]
        /// TCP connections out and listening; none unless true.
        public var tcp: Bool
        public init(read: [String] = [], write: [String] = [], tcp: Bool = false) {
            self.read = read
            self.write = write
            self.tcp = tcp
        }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            read = try c.decodeIfPresent([String].self, forKey: .read) ?? []
            write = try c.decodeIfPresent([String].self, forKey: .write) ?? []
            tcp = try c.decodeIfPresent(Bool.self, forKey: .tcp) ?? false
        }
        enum CodingKeys: String, CodingKey { case read, write, tcp }
    }
    public var limits: Limits?
    public struct Limits: Sendable, Equatable, Codable {
        /// Its process's address space (default 1024 MiB): beyond it, allocations fail there.
        public var memoryMiB: Int?
        /// Descriptors its process may hold open (default 256).
        public var openFiles: Int?
        /// A call's deadline (default 30 s): then it is cancelled, and a process that does
        /// not answer the cancel is ended and started again.
        public var callSeconds: Int?
        public init(memoryMiB: Int? = nil, openFiles: Int? = nil, callSeconds: Int? = nil) {
            self.memoryMiB = memoryMiB
            self.openFiles = openFiles
            self.callSeconds = callSeconds
        }
        public static let defaultMemoryMiB = 1024
        public static let defaultOpenFiles = 256
        public static let defaultCallSeconds = 30
    }
    public var summary: String?
    /// C plugins: the effect of each of its contracts, streams and functions' contracts
    /// (`{"digest.hash@1": "read"}`, `"write+network"`; see `Effect`). One left out is
    /// treated as the worst: destructive, network, secrets.
    public var effects: [String: String]
    /// Where `termind --help` lists the feature's commands: under `title` (what people do
    /// with them: "Files", "Port forwards"), groups in `rank` order (then by id).
    public var help: HelpGroup?
    /// Options of `termind serve` this feature reads at start (`--mcp-listen ADDRESS`), so
    /// the generic host accepts them without knowing any feature: the kernel refuses one no
    /// loaded feature declares and hands each feature only its own (`FeatureContext.options`).
    public var serveOptions: [ServeOption]
    /// Ports whose consumers this feature's commands need loaded too: a one-shot command
    /// loads only its feature and what that reaches, but `settings list` shows the records
    /// the other features register into `settings.values` when they start, and `sync now`
    /// sends those records (a record no loaded feature declares cannot be read).
    public var commandsNeedConsumersOf: [String]
    /// The keys of the settings records this feature registers into `settings.values`
    /// (`["sftp.limits", "sftp.topology"]`): a settings command that names one record
    /// (`settings get KEY`) then loads the feature declaring it instead of every feature
    /// that may register records. A key declared by no manifest loads them all, as before.
    public var settingsRecords: [String]

    public struct ServeOption: Sendable, Equatable, Codable {
        /// Without the leading dashes: `mcp-listen`.
        public var name: String
        /// What the value is, for help: `ADDRESS:PORT`.
        public var value: String
        public var summary: String
        public init(name: String, value: String, summary: String) {
            self.name = name
            self.value = value
            self.summary = summary
        }
    }

    public struct HelpGroup: Sendable, Equatable, Codable {
        public var title: String
        public var rank: Int?
        public init(title: String, rank: Int? = nil) {
            self.title = title
            self.rank = rank
        }
    }

    /// Set by the reader, not the document.
    public var origin: Origin = .registry
    /// Whether termind refuses to start without this feature: only Registry.json entries
    /// can be permanent, whatever a plugin.json says.
    public var isPermanent: Bool { permanent && origin == .registry }

    /// Where this manifest came from, for messages ("Registry.json", a plugin.json path).
    public var source: String = ""
    /// The folder `library` is resolved against (the executable's folder for Registry.json,
    /// the plugin's own folder for plugins).
    public var baseDirectory: String = ""

    enum CodingKeys: String, CodingKey {
        case id, version, abi, kind, library, order, permanent, dependencies, ports, contracts, streams, calls, callsFrom, functions, commands, schemas
        case libraryOutsidePlugin, isolation, access, limits, summary, help, effects, serveOptions, commandsNeedConsumersOf, settingsRecords
    }

    public init(id: String, version: String = "1.0.0", abi: Int = 1, kind: Kind = .swift, library: String,
                order: Int = 100, permanent: Bool = false, dependencies: Dependencies = .init(), ports: Ports = .init(),
                contracts: [String] = [], streams: [String] = [], calls: [String] = [], functions: [Function] = [], commands: [Command] = [],
                schemas: [String: ContractSchemas] = [:],
                libraryOutsidePlugin: Bool = false, summary: String? = nil, source: String = "", baseDirectory: String = "",
                origin: Origin = .registry) {
        self.id = id
        self.version = version
        self.abi = abi
        self.kind = kind
        self.library = library
        self.order = order
        self.permanent = permanent
        self.dependencies = dependencies
        self.ports = ports
        self.contracts = contracts
        self.streams = streams
        self.calls = calls
        self.callsFrom = [:]
        self.functions = functions
        self.commands = commands
        self.schemas = schemas
        self.libraryOutsidePlugin = libraryOutsidePlugin
        self.summary = summary
        self.effects = [:]
        self.serveOptions = []
        self.commandsNeedConsumersOf = []
        self.settingsRecords = []
        self.source = source
        self.baseDirectory = baseDirectory
        self.origin = origin
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        version = try c.decode(String.self, forKey: .version)
        abi = try c.decode(Int.self, forKey: .abi)
        kind = try c.decodeIfPresent(Kind.self, forKey: .kind) ?? .swift
        library = try c.decode(String.self, forKey: .library)
        order = try c.decodeIfPresent(Int.self, forKey: .order) ?? 100
        permanent = try c.decodeIfPresent(Bool.self, forKey: .permanent) ?? false
        dependencies = try c.decodeIfPresent(Dependencies.self, forKey: .dependencies) ?? .init()
        ports = try c.decodeIfPresent(Ports.self, forKey: .ports) ?? .init()
        contracts = try c.decodeIfPresent([String].self, forKey: .contracts) ?? []
        streams = try c.decodeIfPresent([String].self, forKey: .streams) ?? []
        calls = try c.decodeIfPresent([String].self, forKey: .calls) ?? []
        callsFrom = try c.decodeIfPresent([String: [String]].self, forKey: .callsFrom) ?? [:]
        functions = try c.decodeIfPresent([Function].self, forKey: .functions) ?? []
        commands = try c.decodeIfPresent([Command].self, forKey: .commands) ?? []
        schemas = try c.decodeIfPresent([String: ContractSchemas].self, forKey: .schemas) ?? [:]
        libraryOutsidePlugin = try c.decodeIfPresent(Bool.self, forKey: .libraryOutsidePlugin) ?? false
        isolation = try c.decodeIfPresent(Isolation.self, forKey: .isolation)
        access = try c.decodeIfPresent(Access.self, forKey: .access)
        limits = try c.decodeIfPresent(Limits.self, forKey: .limits)
        summary = try c.decodeIfPresent(String.self, forKey: .summary)
        help = try c.decodeIfPresent(HelpGroup.self, forKey: .help)
        effects = try c.decodeIfPresent([String: String].self, forKey: .effects) ?? [:]
        serveOptions = try c.decodeIfPresent([ServeOption].self, forKey: .serveOptions) ?? []
        commandsNeedConsumersOf = try c.decodeIfPresent([String].self, forKey: .commandsNeedConsumersOf) ?? []
        settingsRecords = try c.decodeIfPresent([String].self, forKey: .settingsRecords) ?? []
    }

    /// The declared effect of one of its operations, or nil when it declares none (or one
    /// that does not read: the validator refuses such a manifest).
    public func effect(of id: String) -> Effect? {
        effects[id].flatMap { try? Effect.parse($0).get() }
    }

    /// The absolute path of the library. Relative names resolve against `baseDirectory`,
    /// never against the working directory.
    public var libraryPath: String {
        library.hasPrefix("/") ? library : PathText.appending(baseDirectory, library)
    }
}

extension FeatureManifest {
    /// The request and response schemas of one of this C plugin's contracts: what its
    /// manifest declares, else any JSON object in and any JSON value out.
    public func schemas(of contract: String) -> (request: JSONSchema, response: JSONSchema) {
        let declared = schemas[contract]
        let request = declared?.request.flatMap { try? JSONSchema.read($0, at: "request").get() } ?? .dictionary(.any)
        let response = declared?.response.flatMap { try? JSONSchema.read($0, at: "response").get() } ?? .any
        return (request, response)
    }
}

/// The top-level Registry.json document.
public struct RegistryDocument: Sendable, Equatable, Codable {
    public var schema: Int
    public var features: [FeatureManifest]
}
