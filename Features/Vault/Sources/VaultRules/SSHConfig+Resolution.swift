import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension SSHConfig {
    /// What `ssh -G alias` would use, following OpenSSH: blocks in file order with Includes
    /// inline, the first value obtained wins, `Match host` sees the `HostName` obtained so far,
    /// and a second ("final") pass runs when a `Match final` exists or `CanonicalizeHostname`
    /// is on, matching `Host` lines against the resolved host name. `localUser` is what
    /// `Match localuser` and (without `User`) `Match user` compare; it defaults to the
    /// current user.
    public func resolve(alias: String, localUser: String? = nil) -> ResolvedHost {
        var run = Evaluation(alias: alias, localUser: localUser ?? ProcessInfo.processInfo.userName)
        var active = true
        run.apply(entries, index: index, host: alias, active: &active, neverMatch: false)

        var hostname = alias
        if let configured = run.hostname, let at = run.hostnameAt {
            hostname = run.expandHostName(configured, host: alias, at: at)
        }
        // ssh lowercases the name, but leaves names with ':' (addresses) or '%' as they are
        // (observed with OpenSSH 9.2; `ssh -G` prints `FE80::AB` and `Up%C.a` unchanged).
        if !hostname.contains(":") && !hostname.contains("%") { hostname = SSHPattern.asciiLowercased(hostname) }

        let canonicalize = run.other.first(where: { $0.keyword == "canonicalizehostname" })
        if let canonicalize, let value = canonicalize.arguments.first, ["yes", "true", "always"].contains(value.lowercased()) {
            run.warn(Location(file: canonicalize.file, line: canonicalize.line),
                     "CanonicalizeHostname is not applied by termind (no DNS lookups); the host name is used as written")
            run.wantFinalPass = true
        }
        if run.wantFinalPass {
            run.finalPass = true
            run.hostname = hostname
            active = true
            run.apply(entries, index: index, host: hostname, active: &active, neverMatch: false)
        }
        return ResolvedHost(alias: alias, hostname: hostname, user: run.user, port: run.port ?? 22,
                            identityFiles: run.identityFiles, proxyJump: run.jumpHops, forwards: run.forwards,
                            otherOptions: run.other, warnings: run.warnings.all, problems: run.problems)
    }

    /// One resolved host per concrete alias named on a `Host` line (no `*`, `?` or `!`), in
    /// file order with Includes inline, each alias once. An alias OpenSSH would refuse as a
    /// host name (`x1,x2`: Host lines are not split at commas) carries that as a problem.
    public func importCandidates(localUser: String? = nil) -> [ResolvedHost] {
        importCandidates(localUser: localUser, checking: {})
    }

    /// As `importCandidates(localUser:)`; `check` runs before each host is resolved (a
    /// caller stops a long import by throwing).
    public func importCandidates(localUser: String? = nil, checking check: () throws -> Void) rethrows -> [ResolvedHost] {
        var aliases: [(String, Location)] = []
        var seen: Set<String> = []
        func collect(_ entries: [Entry]) {
            for entry in entries {
                switch entry {
                case .host(let patterns, let at):
                    for pattern in patterns where !pattern.contains(where: { $0 == "*" || $0 == "?" || $0 == "!" }) {
                        if seen.insert(pattern).inserted { aliases.append((pattern, at)) }
                    }
                case .include(let files, _):
                    for file in files { collect(file.entries) }
                default:
                    break
                }
            }
        }
        collect(entries)
        return try aliases.map { alias, at in
            try check()
            var host = resolve(alias: alias, localUser: localUser)
            if let why = Self.invalidHostName(alias) {
                host.problems.insert("\(at.file) line \(at.line): Host '\(alias)' is not a valid host name: \(why)", at: 0)
            }
            return host
        }
    }

    /// Why OpenSSH's `ssh_valid_hostname` refuses `name`, or nil when it accepts it.
    static func invalidHostName(_ name: String) -> String? {
        if name.hasPrefix("-") { return "it starts with '-'." }
        if name.contains(",") {
            return "OpenSSH does not split Host patterns at commas; list several names with spaces (Host a b)."
        }
        if let bad = name.unicodeScalars.first(where: { "'`\"$\\;&<>|(){}".unicodeScalars.contains($0) || $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7f }) {
            return "it contains '\(bad)', which OpenSSH refuses in host names."
        }
        return nil
    }

    /// The options obtained so far while walking the entries for one host.
    struct Evaluation {
        let alias: String
        let localUser: String
        var finalPass = false
        var wantFinalPass = false
        var hostname: String?
        var hostnameAt: Location?
        var user: String?
        var port: Int?
        var identityFiles: [String] = []
        var jumpSet = false
        var jumpHops: [SSHJumpHop] = []
        var proxyCommandAt: Location?
        var forwards: [SSHForward] = []
        var other: [SSHConfigOption] = []
        var appliedOther: Set<String> = []
        var warnings = WarningList()
        /// Rejected lines that applied to this host.
        var problems: [String] = []

        init(alias: String, localUser: String) {
            self.alias = alias
            self.localUser = localUser
        }

        mutating func warn(_ at: Location, _ message: String) {
            warnings.add(SSHConfigWarning(file: at.file, line: at.line, message: message))
        }

        /// OpenSSH's `read_config_file_depth` loop: `active` is the "activep" flag; files
        /// included while inactive are read with Host/Match never matching.
        mutating func apply(_ entries: [Entry], index: BlockIndex, host: String, active: inout Bool, neverMatch: Bool) {
            guard !neverMatch else {
                // Read while inactive: walk everything (nothing can match; rare).
                for entry in entries { step(entry, host: host, active: &active, neverMatch: true) }
                return
            }
            for position in index.preamble { step(entries[position], host: host, active: &active, neverMatch: false) }
            for block in index.blocks(for: host) {
                for position in block { step(entries[position], host: host, active: &active, neverMatch: false) }
            }
        }

        /// One entry of OpenSSH's loop.
        private mutating func step(_ entry: Entry, host: String, active: inout Bool, neverMatch: Bool) {
            switch entry {
            case .host(let patterns, _):
                active = false
                if neverMatch { return }
                for pattern in patterns {
                    let negated = pattern.hasPrefix("!")
                    guard SSHPattern.match(host, negated ? String(pattern.dropFirst()) : pattern) else { continue }
                    if negated { active = false; break }
                    active = true
                }
            case .match(let criteria, let at):
                let matched = evaluate(criteria, host: host, at: at, neverMatch: neverMatch)
                active = neverMatch ? false : matched
            case .brokenBlock:
                active = false
            case .include(let files, _):
                let outer = active
                for file in files {
                    apply(file.entries, index: file.index, host: host, active: &active, neverMatch: neverMatch || !outer)
                    active = outer
                }
            case .invalid(let messages, _):
                guard active else { return }
                for message in messages where !problems.contains(message) { problems.append(message) }
            case .option(let option, let at, let warning):
                guard active else { return }
                // ssh uses an option's first value: a later line that warns does not apply.
                let shadowed: Bool
                if case .other(let value) = option { shadowed = other.contains { $0.keyword == value.keyword } } else { shadowed = false }
                if let warning, !shadowed { warn(at, warning) }
                set(option, at: at)
            }
        }

        private mutating func set(_ option: Option, at: Location) {
            switch option {
            case .hostname(let value):
                if hostname == nil { hostname = value; hostnameAt = at }
            case .user(let value):
                if user == nil { user = value }
            case .port(let value):
                if port == nil { port = value }
            case .identityFile(let path):
                if identityFiles.contains(path) { return }
                if identityFiles.count >= SSHConfig.maxIdentityFiles {
                    warn(at, "Too many identity files specified (max \(SSHConfig.maxIdentityFiles)); \(path) is ignored")
                } else {
                    identityFiles.append(path)
                }
            case .proxyJump(let hops):
                if let proxyCommandAt, !jumpSet {
                    warn(at, "ProxyJump is ignored because ProxyCommand (\(proxyCommandAt.file) line \(proxyCommandAt.line)) was obtained first, as in OpenSSH")
                }
                guard !jumpSet, proxyCommandAt == nil else { return }
                jumpSet = true
                jumpHops = hops ?? []
            case .proxyCommand:
                if proxyCommandAt == nil && !jumpSet { proxyCommandAt = at }
            case .forward(let forward):
                if !forwards.contains(forward) { forwards.append(forward) }
            case .other(let value):
                if appliedOther.insert("\(value.file)\u{0}\(value.line)").inserted { other.append(value) }
            }
        }

        /// OpenSSH's `match_cfg_line`, except that `exec` is never run and fails the block.
        private mutating func evaluate(_ criteria: [MatchCriterion], host: String, at: Location, neverMatch: Bool) -> Bool {
            let remoteUser = user ?? localUser
            let matchHost: String
            if finalPass {
                matchHost = hostname ?? host
            } else if let hostname {
                matchHost = expandHostName(hostname, host: host, at: nil)
            } else {
                matchHost = host
            }
            var result = true
            for criterion in criteria {
                let matched: Bool
                switch criterion.kind {
                case .all:
                    if result { result = !criterion.negated }
                    return result
                case .canonical, .final:
                    if criterion.kind == .final && !finalPass { wantFinalPass = true }
                    matched = finalPass
                case .host:
                    matched = SSHPattern.matchList(SSHPattern.asciiLowercased(matchHost), criterion.argument ?? "", lowercasePatterns: true) == 1
                case .originalhost:
                    matched = SSHPattern.matchList(SSHPattern.asciiLowercased(alias), criterion.argument ?? "", lowercasePatterns: true) == 1
                case .user:
                    matched = SSHPattern.matchList(remoteUser, criterion.argument ?? "", lowercasePatterns: false) == 1
                case .localuser:
                    matched = SSHPattern.matchList(localUser, criterion.argument ?? "", lowercasePatterns: false) == 1
                case .exec:
                    if result && !neverMatch { warn(at, SSHConfig.matchExecWarning) }
                    result = false
                    continue
                }
                if matched == criterion.negated { result = false }
            }
            return result
        }

        /// `%h` and `%%` in HostName, as ssh does; any other token is left as written and
        /// reported (OpenSSH refuses to connect with one).
        mutating func expandHostName(_ value: String, host: String, at: Location?) -> String {
            var out = ""
            var unsupported: [String] = []
            var iterator = value.makeIterator()
            while let c = iterator.next() {
                guard c == "%" else { out.append(c); continue }
                switch iterator.next() {
                case "%": out.append("%")
                case "h": out += host
                case let other?: out += "%\(other)"; unsupported.append("%\(other)")
                case nil: out.append("%"); unsupported.append("%")
                }
            }
            if let at, !unsupported.isEmpty {
                warn(at, "HostName token \(unsupported.joined(separator: ", ")) is not expanded (only %h and %% are); OpenSSH refuses this HostName")
            }
            return out
        }
    }
}
