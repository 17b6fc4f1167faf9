import FoundationEssentials
import TermindCore

/// The Assistant's operations: providers and models (kept in the settings records of
/// AssistantSettings), runs, and conversations.
public enum AssistantContracts {
    /// A provider as people and scripts see it: never a secret, only whether one is set and
    /// whether this device has it.
    public struct ProviderView: Codable, Sendable, Equatable {
        public var name: String
        public var `protocol`: AssistantSettings.Providers.ProviderProtocol
        public var url: String?
        /// `key` (an API key is referenced), `service-account` (Vertex), or `anonymous`.
        public var credential: String
        /// Whether this device holds the referenced secret (secrets never sync).
        public var credentialPresent: Bool
        public var project: String?
        public var location: String?

        public init(name: String, protocol: AssistantSettings.Providers.ProviderProtocol, url: String?, credential: String, credentialPresent: Bool,
                    project: String? = nil, location: String? = nil) {
            self.name = name
            self.protocol = `protocol`
            self.url = url
            self.credential = credential
            self.credentialPresent = credentialPresent
            self.project = project
            self.location = location
        }
    }

    public enum AddProvider: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            /// `responses` when left out (OpenAI's Responses API, "Automatic").
            public var `protocol`: AssistantSettings.Providers.ProviderProtocol?
            /// Left out: the protocol's public endpoint (the full Responses URL, the others'
            /// base), written into the record.
            public var url: String?
            /// The API key, read from standard input (`--key -`); left out: anonymous.
            public var key: Secret?
            /// Vertex: the service account's JSON key file (read once, kept in the secret store).
            public var serviceAccount: String?
            public var project: String?
            public var location: String?
            /// Replace a provider of that name (its old secrets are deleted).
            public var replace: Bool?
            public init(name: String, protocol: AssistantSettings.Providers.ProviderProtocol? = nil, url: String? = nil, key: Secret? = nil,
                        serviceAccount: String? = nil, project: String? = nil, location: String? = nil, replace: Bool? = nil) {
                self.name = name
                self.protocol = `protocol`
                self.url = url
                self.key = key
                self.serviceAccount = serviceAccount
                self.project = project
                self.location = location
                self.replace = replace
            }
        }
        public typealias Response = ProviderView
        public static let name = "assistant.provider.add"
        public static let version = 1
        public static let summary = "Add a model provider: its protocol, URL and API key (kept in the secret store); nothing is sent to it."
        public static let effect: Effect = Effect(.write, secrets: true)
    }

    public enum EditProvider: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            public var url: String?
            /// A new key from standard input (`--key -`).
            public var key: Secret?
            /// Drop the key: requests go without an auth header (the secret is deleted).
            public var anonymous: Bool?
            public var serviceAccount: String?
            public var project: String?
            public var location: String?
            public init(name: String, url: String? = nil, key: Secret? = nil, anonymous: Bool? = nil, serviceAccount: String? = nil, project: String? = nil,
                        location: String? = nil) {
                self.name = name
                self.url = url
                self.key = key
                self.anonymous = anonymous
                self.serviceAccount = serviceAccount
                self.project = project
                self.location = location
            }
        }
        public typealias Response = ProviderView
        public static let name = "assistant.provider.edit"
        public static let version = 1
        public static let summary = "Change a provider's URL, key, service account, project or location; nothing is sent to it."
        public static let effect: Effect = Effect(.write, secrets: true)
    }

    public enum ListProviders: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var providers: [ProviderView]
            public init(providers: [ProviderView]) { self.providers = providers }
        }
        public static let name = "assistant.provider.list"
        public static let version = 1
        public static let summary = "List model providers: protocol, URL, whether a key is set and present on this device."
        public static let effect: Effect = .read
    }

    public enum RemoveProvider: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            public init(name: String) { self.name = name }
        }
        public typealias Response = ProviderView
        public static let name = "assistant.provider.remove"
        public static let version = 1
        public static let summary = "Remove a provider and delete its key from the secret store."
        public static let effect: Effect = Effect(.destructive, secrets: true)
    }

    public enum TestProvider: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            public init(name: String) { self.name = name }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var name: String
            public var reachable: Bool
            /// The models the provider lists (empty where it has no list, as Vertex).
            public var models: [String]
            public var note: String?
            public init(name: String, reachable: Bool, models: [String], note: String? = nil) {
                self.name = name
                self.reachable = reachable
                self.models = models
                self.note = note
            }
        }
        public static let name = "assistant.provider.test"
        public static let version = 1
        public static let summary = "Contact a provider with its credentials and list its models (the only command that contacts a provider without a prompt)."
        public static let effect: Effect = Effect(.read, network: true, secrets: true)
    }

    public enum AddModel: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public var provider: String
            /// The provider's own model name.
            public var model: String
            public var tools: Bool?
            public var maxOutputTokens: Int?
            public var contextTokens: Int?
            public init(id: String, provider: String, model: String, tools: Bool? = nil, maxOutputTokens: Int? = nil, contextTokens: Int? = nil) {
                self.id = id
                self.provider = provider
                self.model = model
                self.tools = tools
                self.maxOutputTokens = maxOutputTokens
                self.contextTokens = contextTokens
            }
        }
        public typealias Response = ModelView
        public static let name = "assistant.model.add"
        public static let version = 1
        public static let summary = "Add (or replace) a model: an id of yours for a provider's model name; the first one becomes the chat model."
        public static let effect: Effect = .write
    }

    public struct ModelView: Codable, Sendable, Equatable {
        public var id: String
        public var provider: String
        public var model: String
        public var tools: Bool
        /// The roles it plays (chat, title, compact, generator, guardian).
        public var roles: [String]
        public init(id: String, provider: String, model: String, tools: Bool, roles: [String]) {
            self.id = id
            self.provider = provider
            self.model = model
            self.tools = tools
            self.roles = roles
        }
    }

    public enum ListModels: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var models: [ModelView]
            public init(models: [ModelView]) { self.models = models }
        }
        public static let name = "assistant.model.list"
        public static let version = 1
        public static let summary = "List models, their providers and the roles they play."
        public static let effect: Effect = .read
    }

    public enum RemoveModel: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public typealias Response = ModelView
        public static let name = "assistant.model.remove"
        public static let version = 1
        public static let summary = "Remove a model (refused while a role names it)."
        public static let effect: Effect = .write
    }

    public enum SetRole: Contract {
        public enum Role: String, Codable, Sendable, Equatable, SchemaEnum { case chat, title, compact, generator, guardian }
        public struct Request: Codable, Sendable, Equatable {
            public var role: Role
            /// A model id; empty: the role falls back (to the chat model; the guardian to automatic).
            public var model: String
            public init(role: Role, model: String) {
                self.role = role
                self.model = model
            }
        }
        public typealias Response = AssistantSettings.Roles
        public static let name = "assistant.role.set"
        public static let version = 1
        public static let summary = "Choose the model for a role: chat, title, compact, generator or guardian."
        public static let effect: Effect = .write
    }
}

// MARK: - Policy and audit

extension AssistantContracts {
    /// A host's or a tag's tier (`termind assistant tier`).
    public enum SetTier: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label); or give `tag`. With `tag`, the tier may come here.
            public var host: String?
            /// read-only, ask, auto; or "default" to remove the record.
            public var tier: String?
            public var tag: String?
            /// The command line's words: `HOST TIER`, or `TIER` with `tag`.
            public var words: [String]?
            public init(host: String? = nil, tier: String? = nil, tag: String? = nil, words: [String]? = nil) {
                self.words = words
                self.host = host
                self.tier = tier
                self.tag = tag
            }
        }
        public typealias Response = ListTiers.Response
        public static let name = "assistant.tier.set"
        public static let version = 1
        public static let summary = "Set the tier of a saved host or a tag: read-only, ask or auto (default removes it)."
        public static let effect: Effect = .write
    }

    /// The tier records, the tool rules and the default mode.
    public enum ListTiers: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Row: Codable, Sendable, Equatable {
            /// "host" or "tag".
            public var kind: String
            /// The host's label (its id when the host is gone) or the tag.
            public var name: String
            public var id: String?
            public var tier: AssistantSettings.Policy.Tier
            public init(kind: String, name: String, id: String?, tier: AssistantSettings.Policy.Tier) {
                self.kind = kind
                self.name = name
                self.id = id
                self.tier = tier
            }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var tiers: [Row]
            public var tools: [String: AssistantSettings.Policy.ToolRule]
            public var mode: AssistantSettings.Policy.Mode
            public init(tiers: [Row], tools: [String: AssistantSettings.Policy.ToolRule], mode: AssistantSettings.Policy.Mode) {
                self.tiers = tiers
                self.tools = tools
                self.mode = mode
            }
        }
        public static let name = "assistant.tier.list"
        public static let version = 1
        public static let summary = "List the assistant's host and tag tiers, its tool rules and its default mode."
        public static let effect: Effect = .read
    }

    /// One audit entry: a decision on an agent's action, or its execution. Never arguments,
    /// commands, outputs or bodies.
    public struct AuditEntry: Codable, Sendable, Equatable {
        public var seq: Int
        /// Seconds since 1970.
        public var at: Double
        public var conversation: String?
        public var call: String?
        public var tool: String
        /// The saved host's id and its label then.
        public var host: String?
        public var hostLabel: String?
        /// "read" or "change".
        public var effect: String
        /// ssh_exec: the classifier's verdict ("read-only", "state-changing").
        public var classifier: String?
        /// "decision" or "execution".
        public var event: String
        /// decision: "allowed" or "refused", and who decided (policy, person, guardian, mode).
        public var decision: String?
        public var decider: String?
        public var reason: String?
        /// execution: "succeeded", "failed", "unknown".
        public var outcome: String?
        public var exitStatus: Int32?
        public var exitSignal: String?
        public var stdoutBytes: Int?
        public var stderrBytes: Int?

        public init(seq: Int, at: Double, conversation: String?, call: String?, tool: String, host: String?, hostLabel: String?, effect: String,
                    classifier: String?, event: String, decision: String? = nil, decider: String? = nil, reason: String? = nil, outcome: String? = nil,
                    exitStatus: Int32? = nil, exitSignal: String? = nil, stdoutBytes: Int? = nil, stderrBytes: Int? = nil) {
            self.seq = seq
            self.at = at
            self.conversation = conversation
            self.call = call
            self.tool = tool
            self.host = host
            self.hostLabel = hostLabel
            self.effect = effect
            self.classifier = classifier
            self.event = event
            self.decision = decision
            self.decider = decider
            self.reason = reason
            self.outcome = outcome
            self.exitStatus = exitStatus
            self.exitSignal = exitSignal
            self.stdoutBytes = stdoutBytes
            self.stderrBytes = stderrBytes
        }
    }
}

// MARK: - Conversations

extension AssistantContracts {
    public enum RunState: String, Codable, Sendable, Equatable, SchemaEnum {
        case running, completed, failed, cancelled
        /// termind stopped while it ran; it is never resumed or replayed.
        case interrupted
    }

    public struct ConversationSummary: Codable, Sendable, Equatable {
        public var id: String
        public var title: String
        public var model: String
        public var messages: Int
        public var archived: Bool
        public var updatedAt: Double
        public var lastRun: RunState?
        public var forkedFrom: String?
        public init(id: String, title: String, model: String, messages: Int, archived: Bool, updatedAt: Double, lastRun: RunState?, forkedFrom: String?) {
            self.id = id
            self.title = title
            self.model = model
            self.messages = messages
            self.archived = archived
            self.updatedAt = updatedAt
            self.lastRun = lastRun
            self.forkedFrom = forkedFrom
        }
    }

    /// One entry of a conversation as stored.
    public struct Entry: Codable, Sendable, Equatable {
        public enum Role: String, Codable, Sendable, Equatable, SchemaEnum { case user, assistant, tool, error }
        public var index: Int
        public var role: Role
        public var text: String
        /// Assistant: the tool calls it made (name and arguments); tool: the call answered.
        public var calls: [CallView]?
        public var createdAt: Double
        public var inputTokens: Int?
        public var outputTokens: Int?
        public init(index: Int, role: Role, text: String, calls: [CallView]? = nil, createdAt: Double, inputTokens: Int? = nil, outputTokens: Int? = nil) {
            self.index = index
            self.role = role
            self.text = text
            self.calls = calls
            self.createdAt = createdAt
            self.inputTokens = inputTokens
            self.outputTokens = outputTokens
        }
    }

    public struct CallView: Codable, Sendable, Equatable {
        public enum State: String, Codable, Sendable, Equatable, SchemaEnum {
            case pending, running, succeeded, failed, refused
            /// termind stopped while it ran: whether it took effect is not known.
            case unknown
        }
        public var id: String
        public var name: String
        public var arguments: JSONValue
        public var state: State
        /// The start of its result (at most 4 KiB); the whole is kept by reference.
        public var preview: String?
        public var resultBytes: Int?
        public init(id: String, name: String, arguments: JSONValue, state: State, preview: String? = nil, resultBytes: Int? = nil) {
            self.id = id
            self.name = name
            self.arguments = arguments
            self.state = state
            self.preview = preview
            self.resultBytes = resultBytes
        }
    }

    public enum ListConversations: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// Archived ones instead of the others.
            public var archived: Bool?
            public init(archived: Bool? = nil) { self.archived = archived }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var conversations: [ConversationSummary]
            public init(conversations: [ConversationSummary]) { self.conversations = conversations }
        }
        public static let name = "assistant.conversation.list"
        public static let version = 1
        public static let summary = "List conversations, newest first (archived ones with --archived true)."
        public static let effect: Effect = .read
    }

    public enum ShowConversation: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var conversation: ConversationSummary
            public var entries: [Entry]
            public init(conversation: ConversationSummary, entries: [Entry]) {
                self.conversation = conversation
                self.entries = entries
            }
        }
        public static let name = "assistant.conversation.show"
        public static let version = 1
        public static let summary = "Show a conversation: its messages, tool calls with their results' previews, errors and token use."
        public static let effect: Effect = .read
    }

    public enum RemoveConversation: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public typealias Response = ConversationSummary
        public static let name = "assistant.conversation.remove"
        public static let version = 1
        public static let summary = "Delete a conversation and everything kept of it."
        public static let effect: Effect = .destructive
    }

    public enum ArchiveConversation: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            /// Restore an archived conversation (it can be continued again).
            public var restore: Bool?
            public init(id: String, restore: Bool? = nil) {
                self.id = id
                self.restore = restore
            }
        }
        public typealias Response = ConversationSummary
        public static let name = "assistant.conversation.archive"
        public static let version = 1
        public static let summary = "Archive a conversation (read-only until restored with --restore true)."
        public static let effect: Effect = .write
    }

    public enum ForkConversation: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public typealias Response = ConversationSummary
        public static let name = "assistant.conversation.fork"
        public static let version = 1
        public static let summary = "Copy a conversation into a new one to continue it another way; the original stays as it is."
        public static let effect: Effect = .write
    }
}

// MARK: - Runs

public enum AssistantStreams {
    /// One prompt, answered until the model stops (tool calls dispatched in between).
    public enum Run: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// What to ask.
            public var prompt: String
            /// Continue this conversation (a new one when left out).
            public var conversation: String?
            /// A model id of assistant.models; or, with `provider`, the provider's own
            /// model name. Left out: the chat role's model.
            public var model: String?
            /// A provider to use directly, with `model` its model name.
            public var provider: String?
            /// How the client shows it: "json" (a record per event) or "text".
            public var output: String?
            /// Who answers what needs an approval: ask (the person), approve-for-me (the
            /// Guardian), full-access (pre-approved). Left out: `assistant.policy`'s mode.
            public var mode: AssistantSettings.Policy.Mode?
            public init(prompt: String, conversation: String? = nil, model: String? = nil, provider: String? = nil, output: String? = nil,
                        mode: AssistantSettings.Policy.Mode? = nil) {
                self.mode = mode
                self.prompt = prompt
                self.conversation = conversation
                self.model = model
                self.provider = provider
                self.output = output
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var conversation: String
            public var run: String
            public var state: RunStateValue
            /// The final answer's text.
            public var text: String
            public var inputTokens: Int
            public var outputTokens: Int
            public var toolCalls: Int
            public init(conversation: String, run: String, state: RunStateValue, text: String, inputTokens: Int, outputTokens: Int, toolCalls: Int) {
                self.conversation = conversation
                self.run = run
                self.state = state
                self.text = text
                self.inputTokens = inputTokens
                self.outputTokens = outputTokens
                self.toolCalls = toolCalls
            }
        }
        public typealias RunStateValue = AssistantContracts.RunState
        public static let name = "assistant.run"
        public static let version = 1
        public static let summary = "Ask the assistant once: the answer streams as it arrives, tool calls run under the policy, and the conversation is kept."
        public static let effect: Effect = Effect(.write, network: true, secrets: true)
        public static var events: [String: JSONSchema] { ["stdout": StreamEvents.data, "notice": StreamEvents.notice, "record": StreamEvents.record] }
        /// An action that needs the person's approval (mode ask): once, for the host, for the
        /// exact command on the host, or no — answered at a terminal only.
        public static let approvalTopic = "assistant.approval"
        /// A secret for one command (`request_user_secret`), echo off, at a terminal only.
        public static let secretTopic = "assistant.secret"
        public static var questions: [String: String] { [approvalTopic: "choice", secretTopic: "prompts"] }
    }

    /// Follow a run that goes on inside `termind serve` after its client left: what it said
    /// so far, then the rest as it comes.
    public enum Attach: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            public var conversation: String
            public var output: String?
            public init(conversation: String, output: String? = nil) {
                self.conversation = conversation
                self.output = output
            }
        }
        public typealias Result = Run.Result
        public static let name = "assistant.attach"
        public static let version = 1
        public static let summary = "Follow a conversation's run that goes on inside termind serve: what it said so far, then the rest."
        public static let effect: Effect = .read
        public static var events: [String: JSONSchema] { Run.events }
    }

    /// A conversation, turn after turn: on a terminal a prompt asks for each one (the
    /// answer streams as it comes; Ctrl-C ends the turn, a second one leaves); without one,
    /// each line of standard input is a turn.
    public enum Chat: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// Go on with this conversation (a new one when left out).
            public var conversation: String?
            public var model: String?
            public var provider: String?
            /// Filled by the CLI: whether its standard input is a terminal.
            public var interactive: Bool?
            public var output: String?
            /// As `assistant run`'s.
            public var mode: AssistantSettings.Policy.Mode?
            public init(conversation: String? = nil, model: String? = nil, provider: String? = nil, interactive: Bool? = nil, output: String? = nil,
                        mode: AssistantSettings.Policy.Mode? = nil) {
                self.mode = mode
                self.conversation = conversation
                self.model = model
                self.provider = provider
                self.interactive = interactive
                self.output = output
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// Nil when no turn was taken.
            public var conversation: String?
            public var turns: Int
            public init(conversation: String?, turns: Int) {
                self.conversation = conversation
                self.turns = turns
            }
        }
        public static let name = "assistant.chat"
        public static let version = 1
        public static let summary = "Talk with the assistant turn after turn; the conversation is kept."
        public static let effect: Effect = Effect(.write, network: true, secrets: true)
        public static let acceptsInput = true
        public static let promptTopic = "assistant.prompt"
        public static var events: [String: JSONSchema] { ["stdout": StreamEvents.data, "notice": StreamEvents.notice, "record": StreamEvents.record] }
        public static var questions: [String: String] { [promptTopic: "prompts", Run.approvalTopic: "choice", Run.secretTopic: "prompts"] }
    }

    /// A shell command for what a person wants, for the host they name; printed, never run.
    public enum Suggest: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            public var want: String
            /// A saved host whose context (its OS, shell) the command is for.
            public var host: String?
            public var model: String?
            public var provider: String?
            /// How the client shows it: "json" or "text" (the bare command on standard output).
            public var output: String?
            public init(want: String, host: String? = nil, model: String? = nil, provider: String? = nil, output: String? = nil) {
                self.want = want
                self.host = host
                self.model = model
                self.provider = provider
                self.output = output
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var command: String
            public init(command: String) { self.command = command }
        }
        public static let name = "assistant.suggest"
        public static let version = 1
        public static let summary = "Suggest a shell command for what you want (printed, never run)."
        public static let effect: Effect = Effect(.read, network: true, secrets: true)
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice, "stdout": StreamEvents.data] }
    }
}

extension AssistantStreams {
    /// The audit log, oldest first: with `--json` one JSON object per line.
    public enum Audit: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// A saved host (id or label); or a host id that is gone.
            public var host: String?
            /// From when: an ISO 8601 time (2026-12-06T10:00:00Z), a date, or an age (30m, 12h, 7d).
            public var since: String?
            /// At most this many, the latest (default 1000).
            public var limit: Int?
            public var output: String?
            public init(host: String? = nil, since: String? = nil, limit: Int? = nil, output: String? = nil) {
                self.host = host
                self.since = since
                self.limit = limit
                self.output = output
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var entries: Int
            public init(entries: Int) { self.entries = entries }
        }
        public static let name = "assistant.audit"
        public static let version = 1
        public static let summary = "Show the audit log of the assistant's decisions and executions."
        public static let effect: Effect = .read
        public static var events: [String: JSONSchema] { ["record": StreamEvents.record, "view": StreamEvents.view] }
    }
}

extension AssistantStreams {
    /// `termind mcp`: an MCP server on standard input and output (docs/mcp.md).
    public enum MCP: StreamContract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Result: Codable, Sendable, Equatable {
            /// Tool calls answered.
            public var calls: Int
            public init(calls: Int) { self.calls = calls }
        }
        public static let name = "assistant.mcp"
        public static let version = 1
        public static let summary = "Serve MCP on standard input and output: the assistant's host tools under its policy, for MCP clients."
        public static let effect: Effect = Effect(.destructive, network: true, secrets: true)
        public static let acceptsInput = true
        public static var events: [String: JSONSchema] { ["stdout": StreamEvents.data, "notice": StreamEvents.notice] }
        public static var questions: [String: String] { Run.questions }
    }
}

extension AssistantStreams {
    /// `termind mcp approvals`: what MCP sessions inside serve ask, put to the person here.
    public enum MCPApprovals: StreamContract {
        public struct Request: Codable, Sendable, Equatable {
            /// Leave after this many answers (default: at Ctrl-C).
            public var count: Int?
            public init(count: Int? = nil) { self.count = count }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var answered: Int
            public init(answered: Int) { self.answered = answered }
        }
        public static let name = "assistant.mcp.approvals"
        public static let version = 1
        public static let summary = "Answer what MCP sessions inside termind serve ask: approvals and secrets, one at a time."
        public static let effect: Effect = Effect(.write, secrets: true)
        public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice] }
        public static var questions: [String: String] { Run.questions }
    }
}

extension AssistantContracts {
    /// `termind mcp token show`: the HTTP listener's Bearer token, made when there is none,
    /// shown once (a second show is refused: rotate makes a new one).
    public enum MCPTokenShow: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Response: Codable, Sendable, Equatable {
            public var token: String
            /// What to do with it (where it goes, that it is not shown again).
            public var note: String
            public init(token: String, note: String) {
                self.token = token
                self.note = note
            }
        }
        public static let name = "assistant.mcp.token.show"
        public static let version = 1
        public static let summary = "Show the MCP HTTP listener's Bearer token once (made when there is none)."
        public static let effect: Effect = Effect(.write, secrets: true)
    }

    /// `termind mcp status`: whether this process serves MCP over HTTP, where, and its sessions.
    public enum MCPStatus: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Response: Codable, Sendable, Equatable {
            /// `http://127.0.0.1:8765/mcp`; nil when no listener runs here.
            public var url: String?
            /// Handshake-era sessions open, and stateless-era clients seen.
            public var sessions: Int
            public var clients: Int
            /// Whether a token exists and whether it was shown.
            public var tokenExists: Bool
            public var tokenShown: Bool
            public init(url: String?, sessions: Int, clients: Int, tokenExists: Bool, tokenShown: Bool) {
                self.url = url
                self.sessions = sessions
                self.clients = clients
                self.tokenExists = tokenExists
                self.tokenShown = tokenShown
            }
        }
        public static let name = "assistant.mcp.status"
        public static let version = 1
        public static let summary = "Where this termind serves MCP over HTTP (if it does), its sessions, whether its token exists and was shown."
        public static let effect: Effect = .read
    }

    /// `termind mcp token rotate`: a new token; the old one is refused from then on.
    public enum MCPTokenRotate: Contract {
        public typealias Request = MCPTokenShow.Request
        public typealias Response = MCPTokenShow.Response
        public static let name = "assistant.mcp.token.rotate"
        public static let version = 1
        public static let summary = "Make a new MCP HTTP token and show it once; the old one stops working at once."
        public static let effect: Effect = Effect(.write, secrets: true)
    }
}

extension AssistantContracts {
    /// A configured MCP server as `termind assistant mcp list` shows it.
    public struct MCPServerView: Codable, Sendable, Equatable {
        public var name: String
        public var transport: AssistantSettings.MCPServers.Transport
        /// The command (stdio) or the URL (http).
        public var target: String
        public var enabled: Bool
        /// Whether a token is configured, and whether this device holds it.
        public var token: Bool
        public init(name: String, transport: AssistantSettings.MCPServers.Transport, target: String, enabled: Bool, token: Bool) {
            self.name = name
            self.transport = transport
            self.target = target
            self.enabled = enabled
            self.token = token
        }
    }

    /// `termind assistant mcp add NAME -- COMMAND...` or `--url URL [--token -]`.
    public enum MCPServerAdd: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            /// A stdio server: the program and its arguments.
            public var command: [String]?
            /// An HTTP server (Streamable HTTP): its endpoint.
            public var url: String?
            /// Sent as Authorization: Bearer; read from standard input (`--token -`), kept in
            /// the secret store.
            public var token: Secret?
            /// Replace a server of that name.
            public var replace: Bool?
            public init(name: String, command: [String]? = nil, url: String? = nil, token: Secret? = nil, replace: Bool? = nil) {
                self.name = name
                self.command = command
                self.url = url
                self.token = token
                self.replace = replace
            }
        }
        public typealias Response = MCPServerView
        public static let name = "assistant.mcp.server.add"
        public static let version = 1
        public static let summary = "Configure an MCP server whose tools the assistant may use (a stdio command or an HTTP URL with a token); nothing is started."
        public static let effect: Effect = Effect(.write, secrets: true)
    }

    public enum MCPServerRemove: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var name: String
            public init(name: String) { self.name = name }
        }
        public typealias Response = MCPServerView
        public static let name = "assistant.mcp.server.remove"
        public static let version = 1
        public static let summary = "Remove a configured MCP server (and its token); its tools' rules in assistant.policy stay."
        public static let effect: Effect = Effect(.write, secrets: true)
    }

    public enum MCPServerList: Contract {
        public struct Request: Codable, Sendable, Equatable { public init() {} }
        public struct Response: Codable, Sendable, Equatable {
            public var servers: [MCPServerView]
            public init(servers: [MCPServerView]) { self.servers = servers }
        }
        public static let name = "assistant.mcp.server.list"
        public static let version = 1
        public static let summary = "List the configured MCP servers."
        public static let effect: Effect = .read
    }

    /// A configured server's tool as termind offers it, with the rule that decides it.
    public struct MCPToolView: Codable, Sendable, Equatable {
        /// `mcp__SERVER__TOOL`.
        public var name: String
        public var server: String
        public var readOnlyHint: Bool?
        public var destructiveHint: Bool?
        /// deny, approve or ask.
        public var rule: AssistantSettings.Policy.ToolRule
        /// `person` (assistant.policy's tools) or `hints` (the default from the server's hints).
        public var ruleFrom: String
        public var description: String
        public init(name: String, server: String, readOnlyHint: Bool?, destructiveHint: Bool?, rule: AssistantSettings.Policy.ToolRule, ruleFrom: String, description: String) {
            self.name = name
            self.server = server
            self.readOnlyHint = readOnlyHint
            self.destructiveHint = destructiveHint
            self.rule = rule
            self.ruleFrom = ruleFrom
            self.description = description
        }
    }

    /// `termind assistant mcp tools [SERVER]`: connects and lists the servers' tools.
    public enum MCPServerTools: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var server: String?
            public init(server: String? = nil) { self.server = server }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var tools: [MCPToolView]
            /// Per server: why it could not be reached, or which tools could not be offered.
            public var problems: [String: String]
            /// Per server reached: the protocol version it speaks with termind (2026-07-28: the
            /// stateless era, found with server/discover; else the handshake's).
            public var versions: [String: String]
            public init(tools: [MCPToolView], problems: [String: String], versions: [String: String] = [:]) {
                self.tools = tools
                self.problems = problems
                self.versions = versions
            }
        }
        public static let name = "assistant.mcp.server.tools"
        public static let version = 1
        public static let summary = "Connect to the configured MCP servers and list their tools (mcp__SERVER__TOOL) with the rule that decides each."
        public static let effect: Effect = Effect(.read, network: true)
    }
}

extension ErrorCode {
    /// No such provider, model or conversation; or none is configured for a role.
    public static let assistantUnknown: ErrorCode = "assistant.unknown"
    /// A provider, model or request that cannot be used as given (named in the message).
    public static let assistantInvalid: ErrorCode = "assistant.invalid"
    /// The provider refused or failed the request (after the retries transient failures get).
    public static let assistantProviderFailed: ErrorCode = "assistant.provider_failed"
    /// The provider's answer was incomplete or broke its protocol; it was discarded.
    public static let assistantIncomplete: ErrorCode = "assistant.incomplete"
    /// The audit log's chain is broken: a row was changed, removed or inserted outside termind.
    public static let assistantAuditBroken: ErrorCode = "assistant.audit_broken"
    /// An archived conversation is read-only until restored.
    public static let assistantArchived: ErrorCode = "assistant.archived"
}
