import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// OpenSSH known_hosts files: parsing (here), host matching and the trust decision
/// (`KnownHosts+Matching.swift`), hashing and rendering (`KnownHosts+Rendering.swift`).
/// Behaviour mirrors OpenSSH 9.2's hostfile.c, match.c and sshconnect.c; each function names
/// the one it follows. Pure: text in, values out.
public enum KnownHosts {
    /// The largest known_hosts file termind reads (about 20,000 lines of RSA keys).
    public static let maxFileBytes = 8 << 20
    /// The longest line it reads: a 16384-bit RSA key or a certificate fits several times.
    public static let maxLineBytes = 16 << 10
}

/// One usable known_hosts line.
public struct KnownHostEntry: Sendable, Hashable {
    /// The optional `@marker` before the host names.
    public enum Marker: String, Sendable, Hashable {
        case none = ""
        case certAuthority = "@cert-authority"
        case revoked = "@revoked"
    }

    /// The host field: a comma-separated pattern list as written, or one hashed name.
    public enum Names: Sendable, Hashable {
        /// Patterns with `*`, `?`, leading `!` for negation and `[host]:port`, kept verbatim.
        case patterns(String)
        /// `|1|salt|hash`: HMAC-SHA1 keyed with the 20-byte salt over the lookup name.
        case hashed(salt: Data, hash: Data)
    }

    public var marker: Marker
    public var names: Names
    public var key: HostKey
    /// Text after the key, nil when there is none.
    public var comment: String?
    /// Where the line came from (file name given to `parse`) and its 1-based number; 0 for built entries.
    public var source: String
    public var line: Int

    public init(marker: Marker = .none, names: Names, key: HostKey, comment: String? = nil, source: String = "", line: Int = 0) {
        self.marker = marker
        self.names = names
        self.key = key
        self.comment = comment
        self.source = source
        self.line = line
    }
}

/// A known_hosts line that was skipped, as OpenSSH skips it ("parse error in hostkeys file").
public struct KnownHostsProblem: Sendable, Hashable, CustomStringConvertible {
    /// Why the line was skipped; the raw value is the stable error code.
    public enum Kind: String, Sendable, Hashable {
        case invalidMarker = "known_hosts.invalid_marker"
        case missingKey = "known_hosts.missing_key"
        case badHashedName = "known_hosts.bad_hashed_name"
        case badKey = "known_hosts.bad_key"
        case legacyRSA1 = "known_hosts.ssh1_key"
        case lineTooLong = "known_hosts.line_too_long"
    }

    public let source: String
    public let line: Int
    public let kind: Kind
    /// What is wrong, without the line's text.
    public let detail: String

    public var description: String { "\(source):\(line): \(detail)" }

    /// The problem as the error that crosses a boundary.
    public var error: TermindError { TermindError(code: kind.rawValue, message: description + "; the line is ignored.") }
}

/// Whether a host key presented by `host:port` is trusted by a set of known_hosts entries.
public enum TrustDecision: Sendable, Hashable {
    /// A line for the lookup name holds this key.
    case trusted(KnownHostEntry)
    /// Non-22 port with no entry for `[host]:port`, but a port-less line for `host` holds this key.
    case trustedWithoutPort(KnownHostEntry)
    /// No line for this host holds any key (or only CA lines / unsupported key types do).
    case unknown
    /// Lines for this host hold other keys of the presented key's type, and none holds this
    /// one: fail closed. `known` are the keys of that type.
    case changed(known: [HostKey])
    /// Lines for this host hold keys of other types only: OpenSSH's HOST_CHANGED too (fail
    /// closed), told apart so the message can say what happened.
    case otherKeyTypes(known: [HostKey])
    /// A matching `@revoked` line names this key.
    case revoked(KnownHostEntry)

    public var isTrusted: Bool {
        switch self {
        case .trusted, .trustedWithoutPort: return true
        case .unknown, .changed, .otherKeyTypes, .revoked: return false
        }
    }
}

// MARK: - Parsing (mirrors hostfile.c hostkeys_foreach_file, check_markers, hostfile_read_key)

extension KnownHosts {
    /// Parses known_hosts text. Comments and blank lines are skipped silently; lines OpenSSH
    /// would reject become problems naming `source` and the line number and are skipped.
    /// Lines with key types OpenSSH does not know are kept (`key.isSupported == false`).
    public static func parse(_ text: String, source: String) -> (entries: [KnownHostEntry], problems: [KnownHostsProblem]) {
        var entries: [KnownHostEntry] = []
        var problems: [KnownHostsProblem] = []
        var number = 0
        // "\r\n" is one Character in Swift; OpenSSH's b64_pton skips the "\r" anyway.
        for line in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            number += 1
            guard line.utf8.count <= maxLineBytes else {
                problems.append(KnownHostsProblem(source: source, line: number, kind: .lineTooLong,
                                                  detail: "the line is \(line.utf8.count) bytes; lines longer than \(maxLineBytes) bytes are not read"))
                continue
            }
            switch parseLine(line) {
            case .skip: continue
            case .entry(let marker, let names, let key, let comment):
                entries.append(KnownHostEntry(marker: marker, names: names, key: key, comment: comment, source: source, line: number))
            case .problem(let kind, let detail):
                problems.append(KnownHostsProblem(source: source, line: number, kind: kind, detail: detail))
            }
        }
        return (entries, problems)
    }

    enum LineResult {
        case skip
        case entry(KnownHostEntry.Marker, KnownHostEntry.Names, HostKey, String?)
        case problem(KnownHostsProblem.Kind, String)
    }

    static func parseLine(_ line: Substring) -> LineResult {
        var rest = line.drop(while: isBlank)
        if rest.isEmpty || rest.first == "#" { return .skip }

        var marker = KnownHostEntry.Marker.none
        if rest.first == "@" {
            guard let parsed = parseMarker(&rest) else {
                return .problem(.invalidMarker, "unknown or repeated marker (only one of @cert-authority, @revoked is allowed)")
            }
            marker = parsed
        }

        let hostField = rest.prefix(while: { !isBlank($0) })
        rest = rest.dropFirst(hostField.count).drop(while: isBlank)
        guard !rest.isEmpty, rest.first != "#" else { return .problem(.missingKey, "no key after the host names") }

        let names: KnownHostEntry.Names
        if hostField.first == "|" {
            guard let hashed = parseHashedName(hostField) else {
                return .problem(.badHashedName, "hashed host name is not '|1|<base64 20-byte salt>|<base64 20-byte hash>'")
            }
            names = hashed
        } else {
            names = .patterns(String(hostField))
        }

        // hostfile_read_key -> sshkey_read: type word, blanks, base64 word, blanks, comment.
        let typeWord = rest.prefix(while: { !isBlank($0) })
        rest = rest.dropFirst(typeWord.count).drop(while: isBlank)
        if HostKey.supportedTypes.contains(HostKey.typeAliases[String(typeWord)] ?? String(typeWord)) == false,
           typeWord.count < 8, typeWord.allSatisfy(\.isASCIIDigit) {
            return .problem(.legacyRSA1, "SSH-1 RSA key (bit count '\(typeWord)'), which OpenSSH no longer reads")
        }
        guard !rest.isEmpty else { return .problem(.missingKey, "key type '\(typeWord)' has no key data") }
        let keyWord = rest.prefix(while: { !isBlank($0) })
        rest = rest.dropFirst(keyWord.count).drop(while: isBlank)
        switch HostKey.decode(typeName: String(typeWord), base64: String(keyWord)) {
        case .failure(let reason):
            return .problem(.badKey, "key of type '\(typeWord)': \(reason.text)")
        case .success(let key):
            return .entry(marker, names, key, rest.isEmpty ? nil : String(rest))
        }
    }

    /// check_markers: the marker runs to the first space on the line (or, failing that, the
    /// first tab), must be 2..31 bytes, and may not be followed by a second marker.
    private static func parseMarker(_ rest: inout Substring) -> KnownHostEntry.Marker? {
        guard let end = rest.firstIndex(of: " ") ?? rest.firstIndex(of: "\t") else { return nil }
        let word = rest[rest.startIndex..<end]
        guard word.utf8.count > 1, word.utf8.count < 32 else { return nil }
        let marker: KnownHostEntry.Marker
        switch word {
        case "@cert-authority": marker = .certAuthority
        case "@revoked": marker = .revoked
        default: return nil
        }
        rest = rest[end...].drop(while: isBlank)
        return rest.first == "@" ? nil : marker
    }

    /// extract_salt + host_hash: `|1|` magic, a salt that decodes to 20 bytes, and a hash that
    /// decodes to 20 bytes. OpenSSH compares the whole field as text with the canonical
    /// encoding, so any other spelling (extra names, non-canonical base64) can never match.
    private static func parseHashedName(_ field: Substring) -> KnownHostEntry.Names? {
        let parts = field.split(separator: "|", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].isEmpty, parts[1] == "1",
              let salt = HostKey.strictBase64(String(parts[2])), salt.count == saltLength,
              let hash = HostKey.strictBase64(String(parts[3])), hash.count == saltLength else { return nil }
        return .hashed(salt: salt, hash: hash)
    }

    /// Salt and HMAC-SHA1 length of hashed names.
    static let saltLength = 20

    static func isBlank(_ c: Character) -> Bool { c == " " || c == "\t" }
}

private extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
