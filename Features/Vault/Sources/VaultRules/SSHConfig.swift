import TermindCore

/// An OpenSSH client configuration (ssh_config(5)) read without running anything.
///
/// `parse` reads text, inlines `Include` files through a caller-provided resolver and keeps
/// every line it understands; `resolve(alias:)` then answers like `ssh -G alias` for the
/// values termind uses. Nothing is ever executed: `ProxyCommand`, `LocalCommand`,
/// `KnownHostsCommand`, `PermitLocalCommand` and `Match exec` only produce warnings.
///
/// Error policy: OpenSSH refuses a whole file when any line is bad ("terminating, N bad
/// configuration options"). termind keeps parsing instead so an import preview can show what
/// is there: each bad line is recorded in `errors` (naming file and line) and skipped; a bad
/// `Host`/`Match` line makes the lines under it inactive, so they apply to no host.
/// `validate()` throws when there are errors, for callers that must behave like OpenSSH.
///
/// Bounds: lines up to `maxLineBytes`, files up to `maxFileBytes`, `Include` nesting up to
/// `maxIncludeDepth` (as OpenSSH), at most `maxFiles` files in total, and at most
/// `maxIdentityFiles` identity files per host (as OpenSSH).
public struct SSHConfig: Sendable {
    /// Where the top-level file comes from; decides how relative `Include` paths are anchored
    /// (`~/.ssh/` for user files, `/etc/ssh/` for the system file) and whether `~` is allowed.
    public enum Origin: Sendable, Equatable {
        case user
        case system
    }

    /// Returns the files a glob names, in the order to read them (glob(3) sorts them), with
    /// their text. `pattern` is already anchored (absolute or starting with `~`); the
    /// resolver expands `~`, and returns an empty list when nothing matches.
    public typealias IncludeResolver = (_ pattern: String, _ fromFile: String) throws -> [(path: String, text: String)]

    public static let maxLineBytes = 4096
    public static let maxFileBytes = 1 << 20
    public static let maxIncludeDepth = 16
    public static let maxFiles = 256
    public static let maxIdentityFiles = 100

    /// The display path of the top-level file, used in messages.
    public let path: String
    /// One error per rejected line, each naming file and line; see the type's error policy.
    public let errors: [TermindError]
    /// Lines termind reads but will not act on (commands it never runs, unsupported options),
    /// whether or not they apply to any host.
    public let warnings: [SSHConfigWarning]

    let entries: [Entry]
    let index: BlockIndex
    let origin: Origin

    init(path: String, origin: Origin, entries: [Entry], errors: [TermindError], warnings: [SSHConfigWarning]) {
        self.path = path
        self.origin = origin
        self.entries = entries
        self.index = BlockIndex(entries)
        self.errors = errors
        self.warnings = warnings
    }

    /// Throws when OpenSSH would refuse this configuration: the first error, and how many
    /// lines were bad in all.
    public func validate() throws {
        guard let first = errors.first else { return }
        let more = errors.count > 1 ? " (and \(errors.count - 1) more bad line\(errors.count == 2 ? "" : "s"))" : ""
        throw TermindError(code: first.code, message: first.message + more)
    }
}

/// A line termind reads but does not act on, with where it is.
public struct SSHConfigWarning: Sendable, Hashable, CustomStringConvertible {
    public let file: String
    public let line: Int
    public let message: String

    public init(file: String, line: Int, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    public var description: String { "\(file) line \(line): \(message)" }
}

/// Warnings as a bounded list: each said once, at most `limit` listed, the rest counted and
/// summed up in one last warning at the first of them. (A file of 75,000 `Match exec`
/// lines warns 75,000 times, for every host it applies to.)
struct WarningList: Sendable {
    static let limit = 100
    private(set) var listed: [SSHConfigWarning] = []
    private var seen: Set<SSHConfigWarning> = []
    private var omitted = 0
    private var firstOmitted: SSHConfigWarning?

    mutating func add(_ warning: SSHConfigWarning) {
        guard seen.insert(warning).inserted else { return }
        if listed.count < Self.limit {
            listed.append(warning)
        } else {
            omitted += 1
            if firstOmitted == nil { firstOmitted = warning }
        }
    }

    /// The listed warnings, then the summary of those not listed.
    var all: [SSHConfigWarning] {
        guard let first = firstOmitted else { return listed }
        return listed + [SSHConfigWarning(file: first.file, line: first.line,
                                          message: "\(omitted) more warning\(omitted == 1 ? "" : "s") from this line on \(omitted == 1 ? "is" : "are") not listed")]
    }
}

/// A known ssh_config keyword termind keeps but does not interpret.
public struct SSHConfigOption: Sendable, Equatable {
    /// The keyword, lowercased as OpenSSH matches it (`serveraliveinterval`).
    public let keyword: String
    /// The arguments after unquoting.
    public let arguments: [String]
    public let file: String
    public let line: Int
}

/// What `ssh -G alias` would use for one host, restricted to what termind interprets.
public struct ResolvedHost: Sendable, Equatable {
    /// The name asked for (a `Host` alias or any host name).
    public var alias: String
    /// `HostName` with `%h` and `%%` expanded, or the alias; lowercased like OpenSSH (except
    /// names with `:` or `%`, which ssh leaves as written).
    public var hostname: String
    /// `User`, or nil when the configuration names none (OpenSSH then uses the local user).
    public var user: String?
    /// `Port`, or 22.
    public var port: Int
    /// `IdentityFile` values in the order obtained, duplicates removed, `~` and `%` tokens
    /// left as written (they are expanded when keys are read).
    public var identityFiles: [String]
    /// `ProxyJump` hops, first hop first; empty for none.
    public var proxyJump: [SSHJumpHop]
    /// Local, remote and dynamic forwards in the order obtained, duplicates removed.
    public var forwards: [SSHForward]
    /// Every other known option that applied, in the order read, uninterpreted.
    public var otherOptions: [SSHConfigOption]
    /// Lines that applied to this host but that termind does not act on.
    public var warnings: [SSHConfigWarning]
    /// Rejected lines (each naming file, line and what is wrong) that applied to this host:
    /// OpenSSH would refuse to connect to it, so it is not importable.
    public var problems: [String] = []
}

/// A `LocalForward`, `RemoteForward` or `DynamicForward`, structured as OpenSSH parses it.
public struct SSHForward: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        case local, remote, dynamic
    }

    /// A TCP address (no host means the default bind address) or a Unix socket path.
    public enum Endpoint: Sendable, Hashable, CustomStringConvertible {
        case tcp(host: String?, port: Int)
        case socket(path: String)

        public var description: String {
            switch self {
            case .tcp(nil, let port): return "\(port)"
            case .tcp(let host?, let port): return "[\(host)]:\(port)"
            case .socket(let path): return path
            }
        }
    }

    public let kind: Kind
    public let listen: Endpoint
    /// Where connections go; nil for a SOCKS forward (`DynamicForward`, or `RemoteForward`
    /// with one argument).
    public let connect: Endpoint?

    public init(kind: Kind, listen: Endpoint, connect: Endpoint?) {
        self.kind = kind
        self.listen = listen
        self.connect = connect
    }

    /// The line `ssh -G` prints for this forward (`localforward [127.0.0.1]:8080 [db]:5432`).
    public var description: String {
        switch kind {
        case .dynamic: return "dynamicforward \(listen)"
        case .local: return "localforward \(listen) \(connect?.description ?? "[socks]:0")"
        case .remote: return "remoteforward \(listen) \(connect?.description ?? "[socks]:0")"
        }
    }
}

/// OpenSSH's `parse_forward`: `[listen_host:]port|path` then `host:port|path`, with
/// `[...]` for literal fields and `\` escapes; ports 0–65535 (0 only where OpenSSH allows).
enum SSHForwardParser {
    private struct Field {
        var text: String
        var isPath: Bool
    }

    static func parse(_ spec: String, kind: SSHForward.Kind, dynamic: Bool) -> SSHForward? {
        guard let fields = fields(spec) else { return nil }
        let remote = kind == .remote
        var listenHost: String?, listenPath: String?, listenPort = -1
        var connectHost: String?, connectPath: String?, connectPort = -1
        switch fields.count {
        case 1:
            if fields[0].isPath { listenPath = fields[0].text } else { listenPort = port(fields[0].text) }
        case 2:
            if fields[0].isPath && fields[1].isPath {
                listenPath = fields[0].text; connectPath = fields[1].text
            } else if fields[1].isPath {
                listenPort = port(fields[0].text); connectPath = fields[1].text
            } else {
                listenHost = fields[0].text; listenPort = port(fields[1].text)
            }
        case 3:
            if fields[0].isPath {
                listenPath = fields[0].text; connectHost = fields[1].text; connectPort = port(fields[2].text)
            } else if fields[2].isPath {
                listenHost = fields[0].text; listenPort = port(fields[1].text); connectPath = fields[2].text
            } else {
                listenPort = port(fields[0].text); connectHost = fields[1].text; connectPort = port(fields[2].text)
            }
        case 4:
            listenHost = fields[0].text; listenPort = port(fields[1].text)
            connectHost = fields[2].text; connectPort = port(fields[3].text)
        default:
            return nil
        }
        if dynamic {
            guard fields.count <= 2 else { return nil }
        } else {
            if fields.count < 3 && connectPath == nil && listenPath == nil { return nil }
            if connectPort <= 0 && connectPath == nil { return nil }
        }
        if listenPort < 0 && listenPath == nil { return nil }
        if !remote && listenPath == nil && listenPort == 0 { return nil }
        if (connectHost?.utf8.count ?? 0) >= 1025 || (listenHost?.utf8.count ?? 0) >= 1025 { return nil }
        if (connectPath?.utf8.count ?? 0) >= 108 || (listenPath?.utf8.count ?? 0) >= 108 { return nil }

        let listen: SSHForward.Endpoint = listenPath.map { .socket(path: $0) } ?? .tcp(host: listenHost, port: listenPort)
        let connect: SSHForward.Endpoint?
        if dynamic {
            connect = nil
        } else if let connectPath {
            connect = .socket(path: connectPath)
        } else {
            connect = .tcp(host: connectHost, port: connectPort)
        }
        return SSHForward(kind: kind, listen: listen, connect: connect)
    }

    /// OpenSSH's `a2port` without service names: 0–65535, or -1.
    private static func port(_ text: String) -> Int {
        guard !text.isEmpty, text.count <= 5, text.allSatisfy({ $0.isASCII && $0.isNumber }),
              let value = Int(text), value <= 65535 else { return -1 }
        return value
    }

    /// Up to four `:`-separated fields; nil on an unclosed `[`, a trailing `\` or
    /// anything left after the fourth field.
    private static func fields(_ spec: String) -> [Field]? {
        let s = Array(spec.unicodeScalars)
        var i = 0
        while i < s.count, s[i] == " " || s[i] == "\t" || s[i] == "\n" { i += 1 }
        var fields: [Field] = []
        while fields.count < 4, i < s.count {
            var field = Field(text: "", isPath: false)
            var text = String.UnicodeScalarView()
            if s[i] == "[" {
                var end = i + 1
                while end < s.count, s[end] != "]" {
                    if s[end] == "/" { field.isPath = true }
                    end += 1
                }
                guard end < s.count, end + 1 == s.count || s[end + 1] == ":" else { return nil }
                text.append(contentsOf: s[(i + 1)..<end])
                i = end + 1
                if i < s.count { i += 1 }
            } else {
                while i < s.count {
                    let c = s[i]
                    i += 1
                    if c == "\\" {
                        guard i < s.count else { return nil }
                        text.append(s[i])
                        i += 1
                    } else if c == ":" {
                        break
                    } else {
                        if c == "/" { field.isPath = true }
                        text.append(c)
                    }
                }
            }
            field.text = String(text)
            fields.append(field)
        }
        return i < s.count ? nil : fields
    }
}
