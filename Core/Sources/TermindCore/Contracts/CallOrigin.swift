import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One link of a call's chain: who asked first (a client), then each feature that called on
/// its behalf, and an agent where one decided what to do (docs/contracts.md, "The caller
/// chain").
public struct Caller: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Kind: String, Sendable, Codable, SchemaEnum {
        /// A person's client: this process, or a peer of the control socket.
        case client
        /// A feature or plugin calling on behalf of the links before it.
        case feature
        /// Something that is not a person decided the calls that follow (an assistant's
        /// conversation, an MCP client): the kernel's policy hook decides on them.
        case agent
    }
    public var kind: Kind
    /// `uid 1000`, a feature's id, `assistant`.
    public var id: String
    /// `pid 4242`, `conversation 7/tool-call 3`.
    public var detail: String?

    public init(_ kind: Kind, _ id: String, detail: String? = nil) {
        self.kind = kind
        self.id = id
        self.detail = detail
    }

    /// `client:uid 1000 (pid 4242)`, `agent:assistant (conversation 7/tool-call 3)`.
    public var description: String { "\(kind.rawValue):\(id)" + (detail.map { " (\($0))" } ?? "") }
}

/// Who a call or stream is for: its caller chain, first link first. The kernel builds it —
/// a client link where a call enters, a feature link each time a feature calls on — and
/// hands it to every handler, its policy hook and its log; no feature can shorten it.
/// A value with its links shared (copying it copies a reference), so passing it on every
/// call costs next to nothing.
public struct CallOrigin: Sendable, Hashable, Codable, CustomStringConvertible {
    private final class Links: Sendable {
        let chain: [Caller]
        let hasAgent: Bool
        init(_ chain: [Caller]) {
            self.chain = chain
            hasAgent = chain.contains { $0.kind == .agent }
        }
    }
    private let links: Links

    public var chain: [Caller] { links.chain }

    package init(chain: [Caller]) { links = Links(chain) }

    public init(from decoder: any Decoder) throws { self.init(chain: try [Caller](from: decoder)) }
    public func encode(to encoder: any Encoder) throws { try chain.encode(to: encoder) }
    public static func == (lhs: CallOrigin, rhs: CallOrigin) -> Bool { lhs.links === rhs.links || lhs.chain == rhs.chain }
    public func hash(into hasher: inout Hasher) { hasher.combine(chain) }

    /// Whether both are the very same chain value (not merely equal): a cheap test the
    /// kernel uses to see that a call goes on for the chain its task already serves.
    package func isSame(_ other: CallOrigin) -> Bool { links === other.links }

    /// This process's own person (a command run in-process).
    public static let inProcess = CallOrigin(chain: [Caller(.client, "uid \(getuid())", detail: "pid \(getpid())")])

    /// A peer of the control socket (its uid and pid as the kernel read them).
    public static func controlSocket(connection: UInt64, uid: uid_t = getuid(), pid: pid_t? = nil) -> CallOrigin {
        CallOrigin(chain: [Caller(.client, "uid \(uid)", detail: (pid.map { "pid \($0), " } ?? "") + "connection \(connection)")])
    }

    /// The chain with `caller` after its last link.
    package func appending(_ caller: Caller) -> CallOrigin {
        CallOrigin(chain: chain + [caller])
    }

    /// Whether an agent decided (some of) what this call does: the policy hook decides on it.
    public var hasAgent: Bool { links.hasAgent }

    /// The features that called on, in order.
    public var features: [String] { chain.filter { $0.kind == .feature }.map(\.id) }

    /// `client:uid 1000 (pid 4242) → feature:assistant → agent:assistant (conversation 7)`.
    public var description: String { chain.map(\.description).joined(separator: " → ") }

    /// The chain of the call or stream the current task serves, set by the kernel as it
    /// dispatches (package: no feature can set or clear it). Unset means `inProcess`.
    @TaskLocal package static var current: CallOrigin?

    /// The chain of the call or stream this task serves (`inProcess` outside any).
    public static var serving: CallOrigin { current ?? .inProcess }

    /// Runs `body` with `origin` as the chain its task serves — at no cost when it is the
    /// chain served already (a call that goes on for the same caller).
    package static func serving<T>(_ origin: CallOrigin, _ body: () async throws -> T) async rethrows -> T {
        let served = current ?? .inProcess
        if served.isSame(origin) { return try await body() }
        return try await $current.withValue(origin) { try await body() }
    }
}
