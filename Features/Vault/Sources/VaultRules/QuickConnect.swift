import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI

/// One host on a route: `[user@]host[:port]`. `host` has no brackets (`fe80::1%eth0`);
/// a nil `port` means 22 unless the host's own configuration says otherwise.
public struct SSHJumpHop: Sendable, Hashable, CustomStringConvertible {
    public let user: String?
    public let host: String
    public let port: Int?

    public init(user: String? = nil, host: String, port: Int? = nil) {
        self.user = user
        self.host = host
        self.port = port
    }

    /// `[user@]host[:port]`, with IPv6 hosts in brackets.
    public var description: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return (user.map { "\($0)@" } ?? "") + name + (port.map { ":\($0)" } ?? "")
    }

    /// Parses `[user@]host[:port]` or `ssh://[user@]host[:port]`, validating each part.
    public static func parse(_ text: String) throws -> SSHJumpHop {
        try QuickConnect.parseEndpoint(text, allowPort: true, what: "jump host")
    }
}

/// What a quick-connect line asks for. Nothing has been connected or saved.
public struct QuickConnectTarget: Sendable, Equatable {
    /// The host to reach, without brackets; may be an ssh_config alias.
    public var host: String
    public var user: String?
    /// The port to use: the one given, or 22.
    public var port: Int
    /// Whether the input named a port (so an alias's configured port must not replace it).
    public var portIsExplicit: Bool
    /// `-i` key files as written (`~` is not expanded here).
    public var identityFiles: [String]
    /// Jump hosts, first hop first.
    public var jumpRoute: [SSHJumpHop]

    public init(host: String, user: String? = nil, port: Int = 22, portIsExplicit: Bool = false,
                identityFiles: [String] = [], jumpRoute: [SSHJumpHop] = []) {
        self.host = host
        self.user = user
        self.port = port
        self.portIsExplicit = portIsExplicit
        self.identityFiles = identityFiles
        self.jumpRoute = jumpRoute
    }
}

/// The Welcome screen's connect grammar, parsed without a shell and without reading any
/// configuration: `host`, `user@host[:port]`, `[v6]:port`, `ssh://user@host:port`, or an
/// `ssh` command limited to `-p -l -i -J -o Port= -o User=` and one `[user@]host`.
/// Routes hold at most `maxRouteHosts` hosts including the target and never visit the same
/// host and port twice; both are checked here, before anything connects.
public enum QuickConnect {
    public static let maxRouteHosts = RouteLimits.maxHosts

    public static func parse(_ input: String) throws -> QuickConnectTarget {
        let words: [String]
        do {
            words = try ShellWords.split(input)
        } catch {
            switch error {
            case .unterminatedQuote(let q):
                throw TermindError(.quickConnectBadQuotes, "'\(input)' has an unterminated \(q) quote.")
            case .trailingBackslash:
                throw TermindError(.quickConnectBadQuotes, "'\(input)' ends with a backslash that escapes nothing.")
            }
        }
        guard let first = words.first else {
            throw TermindError(.quickConnectEmpty, "Enter a host to connect to, such as 'user@host:22' or 'ssh -p 2222 host'.")
        }
        let target: QuickConnectTarget
        if first == "ssh" {
            target = try parseCommand(Array(words.dropFirst()))
        } else {
            if words.count > 1 {
                throw TermindError(.quickConnectUnexpectedArgument,
                                   "Unexpected '\(words[1])' after '\(first)': enter one host, or an 'ssh ...' command.")
            }
            let endpoint = try parseEndpoint(first, allowPort: true, what: "host")
            target = QuickConnectTarget(host: endpoint.host, user: endpoint.user, port: endpoint.port ?? 22,
                                        portIsExplicit: endpoint.port != nil)
        }
        try validateRoute(target.jumpRoute, to: SSHJumpHop(user: target.user, host: target.host, port: target.port))
        return target
    }

    /// Rejects a route (jump hosts, then the target) longer than `maxRouteHosts` or that
    /// reaches the same host and port twice (host names compared case-insensitively,
    /// a missing port counting as 22).
    public static func validateRoute(_ hops: [SSHJumpHop], to target: SSHJumpHop) throws {
        let route = hops + [target]
        if route.count > maxRouteHosts {
            throw TermindError(.quickConnectRouteTooLong,
                               "The route has \(route.count) hosts (\(route.map(\.description).joined(separator: " -> "))); at most \(maxRouteHosts) are allowed, including the target.")
        }
        var seen: [String: SSHJumpHop] = [:]
        for hop in route {
            let key = "\(hop.host.lowercased())|\(hop.port ?? 22)"
            if let earlier = seen[key] {
                throw TermindError(.quickConnectRouteCycle,
                                   "The route visits \(hop.host):\(hop.port ?? 22) twice ('\(earlier)' and '\(hop)'); remove the repeated hop.")
            }
            seen[key] = hop
        }
    }

    // MARK: - ssh command form

    private static func parseCommand(_ words: [String]) throws -> QuickConnectTarget {
        var hostToken: String?
        var user: (value: String, from: String)?
        var port: (value: Int, from: String)?
        var identityFiles: [String] = []
        var jump: [SSHJumpHop]?
        var optionsEnded = false
        var i = 0

        func setUser(_ value: String, from source: String) throws {
            try validateUser(value, in: source)
            if let existing = user, existing.value != value {
                throw TermindError(.quickConnectConflict, "'\(existing.from)' and '\(source)' name different users; give one.")
            }
            user = (value, source)
        }
        func setPort(_ value: String, from source: String) throws {
            let number = try parsePort(value, in: source)
            if let existing = port, existing.value != number {
                throw TermindError(.quickConnectConflict, "'\(existing.from)' and '\(source)' name different ports; give one.")
            }
            port = (number, source)
        }

        while i < words.count {
            let word = words[i]
            i += 1
            if !optionsEnded && word == "--" { optionsEnded = true; continue }
            guard !optionsEnded, word.hasPrefix("-"), word.count > 1 else {
                if hostToken != nil {
                    throw TermindError(.quickConnectUnexpectedArgument,
                                       "Unexpected '\(word)' after the host: remote commands and extra arguments are not supported.")
                }
                hostToken = word
                continue
            }
            let flag = word.dropFirst().first!
            guard "plijoJ".contains(flag) else {
                throw TermindError(.quickConnectUnsupportedOption,
                                   "'\(word)' is not supported; use -p PORT, -l USER, -i KEYFILE, -J HOPS, -o Port=N or -o User=NAME.")
            }
            var value = String(word.dropFirst(2))
            if value.isEmpty {
                guard i < words.count else {
                    throw TermindError(.quickConnectMissingArgument, "'\(word)' needs a value.")
                }
                value = words[i]
                i += 1
            }
            let source = word.count > 2 ? word : "\(word) \(value)"
            switch flag {
            case "p": try setPort(value, from: source)
            case "l": try setUser(value, from: source)
            case "i":
                guard !value.isEmpty, !value.unicodeScalars.contains(where: isControl) else {
                    throw TermindError(.quickConnectBadIdentity, "'\(source)': the key file name is empty or has control characters.")
                }
                identityFiles.append(value)
            case "J":
                if jump != nil {
                    throw TermindError(.quickConnectConflict, "'\(source)': only one -J is allowed; list hops separated by commas.")
                }
                jump = try parseJumpList(value, in: source)
            default: // "o"
                let (keyword, argument) = splitOption(value)
                switch keyword.lowercased() {
                case "port" where !argument.isEmpty: try setPort(argument, from: source)
                case "user" where !argument.isEmpty: try setUser(argument, from: source)
                default:
                    throw TermindError(.quickConnectUnsupportedOption,
                                       "'\(source)' is not supported; only -o Port=N and -o User=NAME are.")
                }
            }
        }
        guard let hostToken else {
            throw TermindError(.quickConnectMissingHost, "The ssh command names no host; add [user@]host.")
        }
        let endpoint: SSHJumpHop
        if hostToken.hasPrefix("ssh://") {
            endpoint = try parseEndpoint(hostToken, allowPort: true, what: "host")
        } else {
            endpoint = try parseEndpoint(hostToken, allowPort: false, what: "host")
        }
        if let u = endpoint.user { try setUser(u, from: hostToken) }
        if let p = endpoint.port { try setPort(String(p), from: hostToken) }
        return QuickConnectTarget(host: endpoint.host, user: user?.value, port: port?.value ?? 22,
                                  portIsExplicit: port != nil, identityFiles: identityFiles, jumpRoute: jump ?? [])
    }

    /// `Port=22`, `Port 22` or `Port = 22` → ("Port", "22").
    private static func splitOption(_ text: String) -> (String, String) {
        guard let cut = text.firstIndex(where: { $0 == "=" || $0 == " " || $0 == "\t" }) else { return (text, "") }
        var rest = text[cut...].drop(while: { $0 == " " || $0 == "\t" })
        if rest.first == "=" { rest = rest.dropFirst().drop(while: { $0 == " " || $0 == "\t" }) }
        return (String(text[..<cut]), String(rest))
    }

    static func parseJumpList(_ text: String, in source: String) throws -> [SSHJumpHop] {
        try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            do {
                return try parseEndpoint(String(part), allowPort: true, what: "jump host")
            } catch let error as TermindError {
                throw TermindError(.quickConnectBadJump, "'\(source)': \(error.message)")
            }
        }
    }

    // MARK: - Endpoints, users, hosts and ports

    /// `[user@]host[:port]`, `[v6]:port`, bare IPv6, or `ssh://[user@]host[:port]`.
    static func parseEndpoint(_ text: String, allowPort: Bool, what: String) throws -> SSHJumpHop {
        var rest = Substring(text)
        let isURI = rest.hasPrefix("ssh://")
        if isURI {
            rest = rest.dropFirst(6)
            if rest.hasSuffix("/") { rest = rest.dropLast() }
            if rest.contains("/") {
                throw TermindError(.quickConnectBadHost, "'\(text)': an ssh:// address cannot have a path.")
            }
        }
        var user: String?
        if let at = rest.lastIndex(of: "@") {
            var name = String(rest[..<at])
            if isURI { name = name.percentDecoded ?? name }
            try validateUser(name, in: text)
            user = name
            rest = rest[rest.index(after: at)...]
        }
        var hostPart = rest
        var portPart: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw TermindError(.quickConnectBadHost, "'\(text)': the '[' around the address is not closed.")
            }
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portPart = after.dropFirst()
            } else if !after.isEmpty {
                throw TermindError(.quickConnectBadHost, "'\(text)': unexpected '\(after)' after the address.")
            }
            guard hostPart.contains(":") else {
                throw TermindError(.quickConnectBadHost, "'\(text)': brackets are only for IPv6 addresses.")
            }
        } else if rest.filter({ $0 == ":" }).count == 1, let colon = rest.firstIndex(of: ":") {
            hostPart = rest[..<colon]
            portPart = rest[rest.index(after: colon)...]
        }
        if let portPart, !allowPort {
            throw TermindError(.quickConnectBadHost,
                               "'\(text)': ssh does not take host:port; use -p \(portPart) or ssh://\(hostPart.contains(":") ? "[\(hostPart)]" : String(hostPart)):\(portPart).")
        }
        let host = try validateHost(String(hostPart), in: text, what: what)
        let port = try portPart.map { try parsePort(String($0), in: text) }
        return SSHJumpHop(user: user, host: host, port: port)
    }

    static func parsePort(_ text: String, in source: String) throws -> Int {
        guard !text.isEmpty, text.count <= 5, text.allSatisfy({ $0.isASCII && $0.isNumber }),
              let value = Int(text), (1...65535).contains(value) else {
            throw TermindError(.quickConnectBadPort, "'\(source)': port '\(text)' is not a number from 1 to 65535.")
        }
        return value
    }

    private static let userForbidden = Set("'\"`$\\;&<>|(){}")

    static func validateUser(_ user: String, in source: String) throws {
        let bad = user.isEmpty || user.hasPrefix("-") || user.count > 256
            || user.unicodeScalars.contains(where: { isControl($0) || $0 == " " })
            || user.contains(where: { userForbidden.contains($0) })
        if bad {
            throw TermindError(.quickConnectBadUser,
                               "'\(source)': user name '\(user)' is empty, starts with '-', or has spaces, control or shell characters.")
        }
    }

    /// A DNS name (letters, digits, `-` and `_` in dot-separated labels), an IPv4 address,
    /// or an IPv6 address with an optional `%zone`. Returns the host without brackets.
    static func validateHost(_ host: String, in source: String, what: String) throws -> String {
        func fail(_ why: String) -> TermindError {
            TermindError(.quickConnectBadHost, "'\(source)': \(what) '\(host)' \(why).")
        }
        if host.isEmpty { throw fail("is empty") }
        if host.contains(":") {
            let parts = host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 && (parts[1].isEmpty || !parts[1].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })) {
                throw fail("has an invalid zone")
            }
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(parts[0]), &address) == 1 else { throw fail("is not a valid IPv6 address") }
            return host
        }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.count == 4, labels.allSatisfy({ !$0.isEmpty && $0.allSatisfy({ $0.isASCII && $0.isNumber }) }) {
            guard labels.allSatisfy({ $0.count <= 3 && Int($0)! <= 255 }) else { throw fail("is not a valid IPv4 address") }
            return host
        }
        var checked = labels[...]
        if host.hasSuffix("."), labels.count > 1 { checked = checked.dropLast() }
        guard host.utf8.count <= 253 else { throw fail("is longer than 253 characters") }
        for label in checked {
            guard !label.isEmpty, label.count <= 63,
                  label.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }),
                  !label.hasPrefix("-"), !label.hasSuffix("-") else {
                throw fail("is not a valid host name (letters, digits, '-' and '_' in dot-separated labels), IPv4 address or [IPv6] address")
            }
        }
        if checked.allSatisfy({ $0.allSatisfy({ $0.isNumber }) }) { throw fail("is not a valid IPv4 address") }
        return host
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7f || (0x80..<0xa0).contains(scalar.value)
    }
}
