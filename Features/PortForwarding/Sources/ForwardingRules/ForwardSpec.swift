import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import TermindCore

/// A forward's shape as ssh's -L, -R and -D write it:
///
/// - `-L [BIND:]PORT:HOST:HOSTPORT` and `-R [BIND:]PORT:HOST:HOSTPORT`,
/// - `-D [BIND:]PORT`,
///
/// with IPv6 addresses in brackets (`[::1]:8080:[fd00::5]:80`), `*` or an empty BIND for
/// every address, and `/` accepted in place of `:` (ssh's older form). Unix socket paths and
/// `-R PORT` alone (a SOCKS proxy on the server) are refused with a message saying so.
public struct ForwardSpec: Sendable, Equatable {
    public var kind: ForwardKind
    public var bindAddress: String
    public var bindPort: Int
    public var targetHost: String?
    public var targetPort: Int?

    public init(kind: ForwardKind, bindAddress: String, bindPort: Int, targetHost: String? = nil, targetPort: Int? = nil) {
        self.kind = kind
        self.bindAddress = bindAddress
        self.bindPort = bindPort
        self.targetHost = targetHost
        self.targetPort = targetPort
    }

    /// Where a rule listens when the spec names no address: the loopback, as ssh does
    /// without GatewayPorts.
    public static let defaultBind = "127.0.0.1"
    /// A host name or address is at most this long (DNS: 253).
    static let maximumHostBytes = 255

    /// Parses `text` as the spec of `kind`; the error names the spec and what is wrong.
    public static func parse(_ text: String, kind: ForwardKind) throws -> ForwardSpec {
        func bad(_ why: String) -> TermindError {
            TermindError(.forwardingBadSpec, "\(kind.flag) '\(text)': \(why).")
        }
        guard !text.isEmpty, text.utf8.count <= 1024 else { throw bad("a spec is 1 to 1024 bytes") }
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }) else { throw bad("a spec has no spaces") }
        let parts = try fields(text, bad: bad)
        func port(_ field: String, what: String, allowZero: Bool) throws -> Int {
            guard !field.isEmpty, field.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(field), value <= 65_535, value >= (allowZero ? 0 : 1) else {
                throw bad("\(what) '\(field)' is not a port (\(allowZero ? 0 : 1) to 65535)")
            }
            return value
        }
        func host(_ field: String, what: String) throws -> String {
            guard !field.isEmpty else { throw bad("\(what) is empty") }
            guard field.utf8.count <= maximumHostBytes else { throw bad("\(what) is longer than \(maximumHostBytes) bytes") }
            guard field.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else { throw bad("\(what) has control characters") }
            return field
        }
        func bind(_ field: String?) throws -> String {
            guard let field else { return defaultBind }
            if field.isEmpty || field == "*" { return "0.0.0.0" }
            if field == "localhost" { return defaultBind }
            return try host(field, what: "the bind address")
        }
        switch kind {
        case .dynamic:
            switch parts.count {
            case 1: return ForwardSpec(kind: kind, bindAddress: defaultBind, bindPort: try port(parts[0], what: "the port", allowZero: false))
            case 2: return ForwardSpec(kind: kind, bindAddress: try bind(parts[0]), bindPort: try port(parts[1], what: "the port", allowZero: false))
            default: throw bad("write [BIND:]PORT")
            }
        case .local, .remote:
            if parts.count == 1 || parts.count == 2, kind == .remote {
                throw bad("a SOCKS proxy on the server (-R [BIND:]PORT alone) is not supported; give [BIND:]PORT:HOST:HOSTPORT")
            }
            if parts.contains(where: { $0.hasPrefix("/") }) || (parts.count < 3 && text.contains("/")) {
                throw bad("Unix socket forwarding is not supported")
            }
            let spec: [String]
            switch parts.count {
            case 3: spec = [""] + parts
            case 4: spec = parts
            default: throw bad("write [BIND:]PORT:HOST:HOSTPORT")
            }
            let address = parts.count == 3 ? defaultBind : try bind(spec[0])
            return ForwardSpec(kind: kind, bindAddress: address, bindPort: try port(spec[1], what: "the listening port", allowZero: kind == .remote),
                               targetHost: try host(spec[2], what: "the target host"), targetPort: try port(spec[3], what: "the target port", allowZero: false))
        }
    }

    /// Splits at `:` (or `/`, all of one kind) outside brackets; bracketed parts lose their brackets.
    static func fields(_ text: String, bad: (String) -> TermindError) throws -> [String] {
        let separator: Character = text.contains("[") || text.contains(":") ? ":" : "/"
        var parts: [String] = []
        var current = ""
        var inBrackets = false
        var wasBracketed = false
        for character in text {
            switch character {
            case "[" where !inBrackets && current.isEmpty && !wasBracketed:
                inBrackets = true
            case "]" where inBrackets:
                inBrackets = false
                wasBracketed = true
            case separator where !inBrackets:
                parts.append(current)
                current = ""
                wasBracketed = false
            default:
                if wasBracketed { throw bad("nothing may follow ']' but '\(separator)'") }
                current.append(character)
            }
        }
        if inBrackets { throw bad("a '[' is not closed") }
        parts.append(current)
        return parts
    }

    /// As ssh writes it back (`[::1]:8080:db:5432`).
    public var description: String {
        guard let targetHost, let targetPort else { return listenDescription }
        return "\(listenDescription):\(Self.bracketed(targetHost)):\(targetPort)"
    }

    /// Where it listens, as ssh writes it (`127.0.0.1:8080`, `[::1]:1080`).
    public var listenDescription: String { "\(Self.bracketed(bindAddress)):\(bindPort)" }

    /// An IPv6 address in brackets (`[::1]`); a name or an IPv4 address as it is.
    public static func bracketed(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }
}

extension ForwardKind {
    /// ssh's flag for it: `-L`, `-R`, `-D`.
    public var flag: String {
        switch self {
        case .local: "-L"
        case .remote: "-R"
        case .dynamic: "-D"
        }
    }
}

extension ForwardRule {
    public var spec: ForwardSpec {
        ForwardSpec(kind: kind, bindAddress: bindAddress, bindPort: bindPort, targetHost: targetHost, targetPort: targetPort)
    }

    /// `-L 127.0.0.1:8080:db:5432`, as ssh takes it.
    public var flagDescription: String { "\(kind.flag) \(spec.description)" }

    /// `--local-forward 127.0.0.1:8080:db:5432`, as termind's commands take it.
    public var optionDescription: String { "--\(kind.rawValue)-forward \(spec.description)" }
}

/// The supervisor's reconnect delays (seed): each outage's attempts come 1, 2, 5, 10, then
/// every 30 s after the loss — every outage, however soon after the last one it comes. Only a
/// connection that did not hold (lost within `holdSeconds` of being made: a host that takes
/// the connection and drops it at once) goes on where the schedule stood, so such a host is
/// not asked every second.
public struct RetrySchedule: Sendable, Equatable {
    public static let delays: [Double] = [1, 2, 5, 10, 30]
    /// One keepalive interval: a link that dies silently is noticed only after 15 s, so a
    /// connection lost sooner than this was dropped by the other end.
    public static let holdSeconds: Double = 5
    public private(set) var attempt = 0

    public init() {}

    /// The delay before the next attempt.
    public mutating func next() -> Double {
        defer { attempt += 1 }
        return Self.delays[min(attempt, Self.delays.count - 1)]
    }

    /// A connection that was up for `seconds` before it broke: one that held starts a new
    /// outage at the first delay.
    public mutating func connectionEnded(after seconds: Double) {
        if seconds >= Self.holdSeconds { attempt = 0 }
    }
}
