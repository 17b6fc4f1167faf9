import TermindCore
import VaultAPI

extension SSHConfig {
    /// Parses `text` (the file at `path`) and every file its `Include` lines name, following
    /// OpenSSH's `process_config_line`. Never throws: problems land in `errors`/`warnings`.
    public static func parse(_ text: String, path: String, origin: Origin = .user,
                             include: IncludeResolver = { _, _ in [] }) -> SSHConfig {
        var parser = Parser(origin: origin)
        let entries = parser.parseFile(text, path: path, depth: 0, include: include)
        return SSHConfig(path: path, origin: origin, entries: entries, errors: parser.errors, warnings: parser.warnings.all)
    }

    struct Location: Sendable, Equatable {
        let file: String
        let line: Int
    }

    enum Entry: Sendable {
        case host(patterns: [String], at: Location)
        case match(criteria: [MatchCriterion], at: Location)
        /// A `Host` or `Match` line that could not be read: what follows applies to no host.
        case brokenBlock(at: Location)
        case option(Option, at: Location, warning: String?)
        case include(files: [IncludedFile], at: Location)
        /// A line that was rejected (its errors are in `errors` too): a host it applies to
        /// cannot be imported, as OpenSSH refuses the whole file.
        case invalid(messages: [String], at: Location)
    }

    struct IncludedFile: Sendable {
        let path: String
        let entries: [Entry]
        let index: BlockIndex

        init(path: String, entries: [Entry]) {
            self.path = path
            self.entries = entries
            index = BlockIndex(entries)
        }
    }

    struct MatchCriterion: Sendable {
        enum Kind: String, Sendable { case all, canonical, final, exec, host, originalhost, user, localuser }
        let kind: Kind
        let negated: Bool
        let argument: String?
    }

    enum Option: Sendable {
        case hostname(String)
        case user(String)
        case port(Int)
        case identityFile(String)
        /// nil for `ProxyJump none`.
        case proxyJump([SSHJumpHop]?)
        case proxyCommand
        case forward(SSHForward)
        case other(SSHConfigOption)
    }

    /// Keywords OpenSSH (9.x, with Debian's GSSAPI options) accepts and termind keeps raw.
    static let rawKeywords: Set<String> = [
        "addkeystoagent", "addressfamily", "batchmode", "bindaddress", "bindinterface",
        "canonicaldomains", "canonicalizefallbacklocal", "canonicalizehostname", "canonicalizemaxdots",
        "canonicalizepermittedcnames", "casignaturealgorithms", "certificatefile", "challengeresponseauthentication",
        "channeltimeout", "checkhostip", "ciphers", "clearallforwardings", "compression", "connectionattempts",
        "connecttimeout", "controlmaster", "controlpath", "controlpersist", "dsaauthentication",
        "enableescapecommandline", "enablesshkeysign", "escapechar", "exitonforwardfailure", "fingerprinthash",
        "forkafterauthentication", "forwardagent", "forwardx11", "forwardx11timeout", "forwardx11trusted",
        "gatewayports", "globalknownhostsfile", "gssapiauthentication", "gssapiclientidentity",
        "gssapidelegatecredentials", "gssapikeyexchange", "gssapikexalgorithms", "gssapirenewalforcesrekey",
        "gssapiserveridentity", "gssapitrustdns", "hashknownhosts", "hostbasedacceptedalgorithms",
        "hostbasedauthentication", "hostbasedkeytypes", "hostkeyalgorithms", "hostkeyalias", "identitiesonly",
        "identityagent", "ignoreunknown", "ipqos", "kbdinteractiveauthentication", "kbdinteractivedevices",
        "kexalgorithms", "keepalive", "logfacility", "loglevel", "logverbose", "macs", "nohostauthenticationforlocalhost",
        "numberofpasswordprompts", "obscurekeystroketiming", "passwordauthentication", "permitremoteopen",
        "pkcs11provider", "preferredauthentications", "proxyusefdpass", "pubkeyacceptedalgorithms",
        "pubkeyacceptedkeytypes", "pubkeyauthentication", "rekeylimit", "remotecommand", "requesttty",
        "requiredrsasize", "revokedhostkeys", "securitykeyprovider", "sendenv", "serveralivecountmax",
        "serveraliveinterval", "sessiontype", "setenv", "skeyauthentication", "smartcarddevice", "stdinnull",
        "streamlocalbindmask", "streamlocalbindunlink", "stricthostkeychecking", "syslogfacility", "tag",
        "tcpkeepalive", "tisauthentication", "tunnel", "tunneldevice", "updatehostkeys", "userknownhostsfile",
        "verifyhostkeydns", "visualhostkey", "xauthlocation",
    ]
    /// Accepted and ignored by OpenSSH (some with a debug message).
    static let ignoredKeywords: Set<String> = [
        "protocol", "cipher", "fallbacktorsh", "globalknownhostsfile2", "rhostsauthentication",
        "userknownhostsfile2", "useroaming", "usersh", "useprivilegedport",
    ]
    /// Accepted by OpenSSH with an "Unsupported option" message.
    static let unsupportedKeywords: Set<String> = [
        "afstokenpassing", "kerberosauthentication", "kerberostgtpassing", "rsaauthentication",
        "rhostsrsaauthentication", "compressionlevel",
    ]
    static let neverRun: [String: String] = [
        "proxycommand": "ProxyCommand is not executed by termind; use ProxyJump",
        "localcommand": "LocalCommand is not executed by termind",
        "knownhostscommand": "KnownHostsCommand is not executed by termind; host keys are checked against known_hosts files",
        "permitlocalcommand": "PermitLocalCommand has no effect: termind never runs LocalCommand",
    ]
    /// Options termind keeps but does not act on, whose values a person relies on: each
    /// value (lowercased) that would matter gets a warning saying what termind does instead.
    static func notActedOn(_ keyword: String, _ args: [String]) -> String? {
        let value = args.first?.lowercased() ?? ""
        switch keyword {
        case "pkcs11provider" where value != "none":
            return "PKCS11Provider is not used by termind: keys on a PKCS#11 token are not offered directly; add them to ssh-agent (ssh-add -s PROVIDER), whose keys termind offers"
        case "securitykeyprovider" where value != "internal":
            return "SecurityKeyProvider is not used by termind: FIDO keys are offered through ssh-agent (ssh-add), not by a provider library"
        case "remotecommand" where value != "none":
            return "RemoteCommand is not run by termind on connect: it runs what you ask (termind exec HOST -- COMMAND)"
        case "forwardagent" where value != "no":
            return "ForwardAgent is not imported: termind forwards your ssh-agent only where you turn it on (ssh -A, or termind vault host edit HOST --forward-agent true)"
        case "stricthostkeychecking" where value == "no" || value == "off":
            return "StrictHostKeyChecking \(value) is not honoured: termind always checks host keys (an unknown key is asked about, a changed one is refused)"
        case "userknownhostsfile" where args.contains("/dev/null"):
            return "UserKnownHostsFile /dev/null is not honoured: termind checks every host key against the keys trusted in its Vault"
        default:
            return nil
        }
    }
    static let matchExecWarning = "Match exec is not executed by termind; this Match block is treated as not matching"
}

extension SSHConfig {
    struct Parser {
        let origin: Origin
        var errors: [TermindError] = []
        var warnings = WarningList()
        var filesRead = 0
        /// The first `IgnoreUnknown` list seen. OpenSSH honours it only where it applies to
        /// the host; termind reads files once for all hosts, so it applies from its line on.
        var ignoreUnknown: String?

        init(origin: Origin) { self.origin = origin }

        mutating func fail(_ code: ErrorCode, _ at: Location, _ message: String) {
            errors.append(TermindError(code, "\(at.file) line \(at.line): \(message)"))
        }

        mutating func parseFile(_ text: String, path: String, depth: Int, include: IncludeResolver) -> [Entry] {
            filesRead += 1
            guard text.utf8.count <= SSHConfig.maxFileBytes else {
                errors.append(TermindError(.sshConfigFileTooLarge,
                                           "\(path) is \(text.utf8.count) bytes; ssh_config files larger than \(SSHConfig.maxFileBytes) bytes are not read."))
                return []
            }
            var entries: [Entry] = []
            var number = 0
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                number += 1
                let before = errors.count
                let at = Location(file: path, line: number)
                if let entry = parseLine(line, at: at, depth: depth, include: include) {
                    entries.append(entry)
                } else if errors.count > before {
                    entries.append(.invalid(messages: errors[before...].map(\.message), at: at))
                }
            }
            return entries
        }

        private static func isSpace(_ c: Character) -> Bool { c == " " || c == "\t" || c == "\r" || c == "\n" || c == "\u{0C}" }

        mutating func parseLine(_ raw: Substring, at: Location, depth: Int, include: IncludeResolver) -> Entry? {
            if raw.utf8.count > SSHConfig.maxLineBytes {
                fail(.sshConfigLineTooLong, at, "the line is \(raw.utf8.count) bytes; lines longer than \(SSHConfig.maxLineBytes) bytes are not read.")
                return nil
            }
            var line = raw
            while let last = line.last, Self.isSpace(last) { line = line.dropLast() }
            line = line.drop(while: { $0 == " " || $0 == "\t" })
            guard let first = line.first, first != "#" else { return nil }

            // The keyword ends at whitespace, '=' or a quote; one '=' may follow it.
            let keywordEnd = line.firstIndex(where: { $0 == " " || $0 == "\t" || $0 == "=" || $0 == "\"" }) ?? line.endIndex
            let keyword = line[..<keywordEnd].lowercased()
            var rest = line[keywordEnd...].drop(while: { $0 == " " || $0 == "\t" })
            if rest.first == "=" { rest = rest.dropFirst().drop(while: { $0 == " " || $0 == "\t" }) }
            guard !rest.isEmpty else {
                fail(.sshConfigMissingArgument, at, "no argument after keyword \"\(keyword)\".")
                return nil
            }
            let known = ["host", "match", "include", "hostname", "user", "port", "identityfile", "identityfile2",
                         "proxyjump", "localforward", "remoteforward", "dynamicforward"].contains(keyword)
                || SSHConfig.neverRun[keyword] != nil || SSHConfig.rawKeywords.contains(keyword)
                || SSHConfig.ignoredKeywords.contains(keyword) || SSHConfig.unsupportedKeywords.contains(keyword)
            if !known {
                if let ignoreUnknown, SSHPattern.matchList(keyword, ignoreUnknown, lowercasePatterns: true) == 1 { return nil }
                fail(.sshConfigBadOption, at, "Bad configuration option: \(keyword).")
                return nil
            }
            guard let args = ShellWords.splitConfigArguments(rest) else {
                fail(.sshConfigBadQuotes, at, "invalid quotes.")
                return nil
            }
            // Keywords that take exactly one argument.
            func single() -> String? {
                guard let value = args.first, !value.isEmpty else {
                    fail(.sshConfigMissingArgument, at, "keyword \(keyword) is missing its argument.")
                    return nil
                }
                guard args.count == 1 else {
                    fail(.sshConfigExtraArguments, at, "keyword \(keyword) extra arguments at end of line.")
                    return nil
                }
                return value
            }

            switch keyword {
            case "host":
                guard !args.isEmpty, !args.contains("") else {
                    fail(.sshConfigMissingArgument, at, "keyword host empty argument.")
                    return .brokenBlock(at: at)
                }
                return .host(patterns: args, at: at)
            case "match":
                do {
                    let criteria = try parseMatch(args)
                    if criteria.contains(where: { $0.kind == .exec }) {
                        warnings.add(SSHConfigWarning(file: at.file, line: at.line, message: SSHConfig.matchExecWarning))
                    }
                    return .match(criteria: criteria, at: at)
                } catch {
                    fail(.sshConfigBadMatch, at, "Bad Match condition: \(error.message).")
                    return .brokenBlock(at: at)
                }
            case "include":
                return parseInclude(args, at: at, depth: depth, include: include)
            case "hostname":
                return single().map { .option(.hostname($0), at: at, warning: nil) }
            case "user":
                return single().map { .option(.user($0), at: at, warning: nil) }
            case "port":
                guard let value = single() else { return nil }
                guard value.count <= 5, value.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(value), (1...65535).contains(port) else {
                    fail(.sshConfigBadPort, at, "Bad port '\(value)' (ports are numbers from 1 to 65535).")
                    return nil
                }
                return .option(.port(port), at: at, warning: nil)
            case "identityfile", "identityfile2":
                return single().map { .option(.identityFile($0), at: at, warning: nil) }
            case "proxyjump":
                var value = rest
                if let hash = value.firstIndex(of: "#") { value = value[..<hash] }
                while let last = value.last, Self.isSpace(last) { value = value.dropLast() }
                if value.lowercased() == "none" { return .option(.proxyJump(nil), at: at, warning: nil) }
                do {
                    let hops = try QuickConnect.parseJumpList(String(value), in: "ProxyJump \(value)")
                    return .option(.proxyJump(hops), at: at, warning: nil)
                } catch let error as TermindError {
                    fail(.sshConfigBadProxyJump, at, "Invalid ProxyJump \"\(value)\": \(error.message)")
                } catch {
                    fail(.sshConfigBadProxyJump, at, "Invalid ProxyJump \"\(value)\".")
                }
                return nil
            case "localforward", "remoteforward", "dynamicforward":
                return parseForwardLine(keyword, args, at: at)
            case "proxycommand", "localcommand", "knownhostscommand", "permitlocalcommand":
                let message = SSHConfig.neverRun[keyword]!
                warnings.add(SSHConfigWarning(file: at.file, line: at.line, message: message))
                let option: Option = keyword == "proxycommand"
                    ? .proxyCommand
                    : .other(SSHConfigOption(keyword: keyword, arguments: args, file: at.file, line: at.line))
                return .option(option, at: at, warning: message)
            default:
                if SSHConfig.ignoredKeywords.contains(keyword) { return nil }
                if SSHConfig.unsupportedKeywords.contains(keyword) {
                    warnings.add(SSHConfigWarning(file: at.file, line: at.line, message: "Unsupported option \"\(keyword)\""))
                    return nil
                }
                if keyword == "ignoreunknown", ignoreUnknown == nil, let list = args.first { ignoreUnknown = list }
                let warning = SSHConfig.notActedOn(keyword, args)
                if let warning { warnings.add(SSHConfigWarning(file: at.file, line: at.line, message: warning)) }
                return .option(.other(SSHConfigOption(keyword: keyword, arguments: args, file: at.file, line: at.line)), at: at, warning: warning)
            }
        }

        /// Why a `Match` line is refused; the caller words it as `ssh_config.bad_match`.
        struct MatchProblem: Error {
            let message: String
        }

        /// `Match` criteria, validated like OpenSSH's `match_cfg_line`.
        private func parseMatch(_ args: [String]) throws(MatchProblem) -> [MatchCriterion] {
            var criteria: [MatchCriterion] = []
            var attributes = 0
            var index = 0
            while index < args.count {
                let original = args[index]
                index += 1
                let negated = original.hasPrefix("!")
                let name = String(original.dropFirst(negated ? 1 : 0)).lowercased()
                if name == "all" {
                    if attributes > 1 || index < args.count {
                        throw MatchProblem(message: "'\(original)' cannot be combined with other Match attributes")
                    }
                    criteria.append(MatchCriterion(kind: .all, negated: negated, argument: nil))
                    return criteria
                }
                attributes += 1
                guard let kind = MatchCriterion.Kind(rawValue: name) else {
                    throw MatchProblem(message: "Unsupported Match attribute \(name)")
                }
                if kind == .canonical || kind == .final {
                    criteria.append(MatchCriterion(kind: kind, negated: negated, argument: nil))
                    continue
                }
                guard index < args.count, !args[index].isEmpty else {
                    throw MatchProblem(message: "Missing Match criteria for \(name)")
                }
                criteria.append(MatchCriterion(kind: kind, negated: negated, argument: args[index]))
                index += 1
            }
            if attributes == 0 { throw MatchProblem(message: "One or more attributes required for Match") }
            return criteria
        }

        private mutating func parseInclude(_ args: [String], at: Location, depth: Int, include: IncludeResolver) -> Entry? {
            var files: [IncludedFile] = []
            for arg in args {
                guard !arg.isEmpty else {
                    fail(.sshConfigMissingArgument, at, "keyword include empty argument.")
                    return nil
                }
                if arg.hasPrefix("~") && origin == .system {
                    fail(.sshConfigBadIncludePath, at, "bad include path \(arg): system configuration files cannot use '~'.")
                    return nil
                }
                let pattern = arg.hasPrefix("/") || arg.hasPrefix("~") ? arg : (origin == .user ? "~/.ssh/" : "/etc/ssh/") + arg
                let matched: [(path: String, text: String)]
                do {
                    matched = try include(pattern, at.file)
                } catch {
                    let why = (error as? TermindError)?.message ?? "\(error)"
                    fail(.sshConfigIncludeFailed, at, "cannot read Include \(pattern): \(why)")
                    return nil
                }
                if !matched.isEmpty && depth + 1 > SSHConfig.maxIncludeDepth {
                    fail(.sshConfigIncludeDepth, at, "Too many recursive configuration includes (more than \(SSHConfig.maxIncludeDepth) levels) at Include \(pattern).")
                    return nil
                }
                for file in matched {
                    guard filesRead < SSHConfig.maxFiles else {
                        fail(.sshConfigTooManyFiles, at, "Include \(pattern) would read more than \(SSHConfig.maxFiles) files in all; the rest are not read.")
                        return files.isEmpty ? nil : .include(files: files, at: at)
                    }
                    files.append(IncludedFile(path: file.path, entries: parseFile(file.text, path: file.path, depth: depth + 1, include: include)))
                }
            }
            return .include(files: files, at: at)
        }

        private mutating func parseForwardLine(_ keyword: String, _ args: [String], at: Location) -> Entry? {
            let remote = keyword == "remoteforward"
            var dynamic = keyword == "dynamicforward"
            guard let first = args.first, !first.isEmpty else {
                fail(.sshConfigMissingArgument, at, "keyword \(keyword) is missing its argument.")
                return nil
            }
            var spec = first
            var used = 1
            if !dynamic {
                if args.count > 1, !args[1].isEmpty {
                    spec = "\(first):\(args[1])"
                    used = 2
                } else if remote {
                    dynamic = true
                } else {
                    fail(.sshConfigMissingArgument, at, "Missing target argument for \(keyword).")
                    return nil
                }
            }
            guard args.count == used else {
                fail(.sshConfigExtraArguments, at, "keyword \(keyword) extra arguments at end of line.")
                return nil
            }
            let kind: SSHForward.Kind = keyword == "localforward" ? .local : remote ? .remote : .dynamic
            guard let forward = SSHForwardParser.parse(spec, kind: kind, dynamic: dynamic) else {
                fail(.sshConfigBadForward, at, "Bad forwarding specification '\(args.prefix(used).joined(separator: " "))'.")
                return nil
            }
            return .option(.forward(forward), at: at, warning: nil)
        }
    }
}
