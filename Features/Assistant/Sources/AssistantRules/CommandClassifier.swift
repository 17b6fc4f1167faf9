import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Whether a command line for `ssh_exec` only reads, decided by parsing it (ShellSyntax) and
/// checking every command against an allowlist with argument rules. Known wrappers (`sudo`,
/// `env`, `timeout`, `nice`, `xargs`, `sh -c '…'` …) are unwrapped and what they run is
/// checked in turn, to a depth limit. Anything not fully understood — an unknown command, a
/// command whose name or arguments the shell decides at run time where they matter, a
/// redirection that writes, syntax the parser does not read — is state-changing: the
/// classifier fails closed.
public enum CommandClassifier {
    public enum Kind: String, Sendable, Equatable, Codable {
        case readOnly = "read-only"
        case stateChanging = "state-changing"
    }

    public struct Verdict: Sendable, Equatable {
        public let kind: Kind
        /// Why (for a state-changing one: the first thing found).
        public let reason: String
        public var isReadOnly: Bool { kind == .readOnly }

        static func readOnly(_ reason: String = "every command only reads") -> Verdict { Verdict(kind: .readOnly, reason: reason) }
        static func changing(_ reason: String) -> Verdict { Verdict(kind: .stateChanging, reason: reason) }
    }

    public static func classify(_ line: String) -> Verdict { classify(line, depth: 0) }

    static func classify(_ line: String, depth: Int) -> Verdict {
        guard depth <= ShellSyntax.depthLimit else { return .changing("it nests scripts deeper than \(ShellSyntax.depthLimit) levels") }
        let parsed: ShellSyntax.Parsed
        do { parsed = try ShellSyntax.parse(line) } catch { return .changing("it is not fully understood: \(error.description)") }
        for script in parsed.nested {
            let inner = classify(script, depth: depth + 1)
            if !inner.isReadOnly { return .changing("what runs inside it changes state: \(inner.reason)") }
        }
        for command in parsed.commands {
            if let reason = check(command, depth: depth) { return .changing(reason) }
        }
        return .readOnly()
    }

    /// Names a command may not be given through an assignment before it: they change which
    /// program runs or what it loads.
    static let dangerousVariables: Set<String> = ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "PYTHONPATH", "PERL5LIB",
                                                  "PERL5OPT", "RUBYOPT", "NODE_OPTIONS", "GIT_SSH", "GIT_SSH_COMMAND", "PAGER", "EDITOR", "VISUAL", "SHELLOPTS",
                                                  "PROMPT_COMMAND", "GCONV_PATH", "HOSTALIASES", "LESSOPEN", "LESSCLOSE", "MANPAGER", "SYSTEMD_PAGER"]

    /// Nil when `command` only reads; else why not.
    static func check(_ command: ShellSyntax.Command, depth: Int) -> String? {
        if command.background { return "it runs something in the background (&)" }
        for redirection in command.redirections {
            switch redirection.op {
            case "<", "<<", "<<-", "<<<":
                continue
            case "<&", ">&":
                if redirection.target.isLiteral && (redirection.target.text == "-" || redirection.target.text.allSatisfy(\.isNumber)) { continue }
                if redirection.op == ">&" && redirection.target.isLiteral && redirection.target.text == "/dev/null" { continue }
                return "it writes to \(redirection.target.text) (\(redirection.op))"
            default:
                if redirection.target.isLiteral && redirection.target.text == "/dev/null" { continue }
                return "it writes to \(redirection.target.text) (\(redirection.op))"
            }
        }
        for assignment in command.assignments {
            let name = String(assignment.text.prefix { $0 != "=" })
            if dangerousVariables.contains(name) { return "it sets \(name) for the command" }
        }
        guard !command.words.isEmpty else { return nil }
        return check(words: command.words, depth: depth)
    }

    static let binaryFolders: Set<String> = ["/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"]

    /// Checks a command given as words (its name first).
    static func check(words: [ShellSyntax.Word], depth: Int) -> String? {
        guard let first = words.first else { return nil }
        guard first.isLiteral else { return "the command's name is decided when it runs (\(first.text.isEmpty ? "an expansion" : first.text))" }
        var name = first.text
        if name.contains("/") {
            let folder = String(name[..<(name.lastIndex(of: "/") ?? name.startIndex)])
            guard binaryFolders.contains(folder) else { return "\(name) is not a known program" }
            name = String(name[name.index(after: name.lastIndex(of: "/")!)...])
        }
        let arguments = Arguments(Array(words.dropFirst()))
        if let wrapper = wrappers[name] { return wrapper(arguments, depth) }
        if readAnything.contains(name) { return nil }
        if let rule = rules[name] { return rule(arguments).map { "\(name): \($0)" } }
        if neverReadOnly.contains(name) { return "\(name) is never taken as read-only" }
        return "\(name) is not a command known to only read"
    }

    /// A command's arguments, with what the checks ask of them.
    struct Arguments: Sendable {
        let words: [ShellSyntax.Word]
        init(_ words: [ShellSyntax.Word]) { self.words = words }
        var texts: [String] { words.map(\.text) }
        /// Every argument is known before the command runs.
        var literal: Bool { words.allSatisfy(\.isLiteral) }
        var isEmpty: Bool { words.isEmpty }
        /// Words not starting with `-`.
        var positionals: [String] { texts.filter { !$0.hasPrefix("-") || $0 == "-" } }
        /// Whether an option is given: `-x` alone or among short ones (`-ax`), or `--long[=…]`.
        func has(_ short: Character? = nil, _ long: String...) -> Bool {
            texts.contains { text in
                if let short, text.hasPrefix("-"), !text.hasPrefix("--"), text.count > 1, text.dropFirst().contains(short) { return true }
                return long.contains { text == $0 || text.hasPrefix($0 + "=") }
            }
        }
        var first: String? { texts.first }
    }

    // MARK: - What reads

    /// Commands that only read whatever their arguments (or only print them).
    static let readAnything: Set<String> = [
        "echo", "pwd", "true", "false", "whoami", "id", "groups", "uptime", "free", "nproc", "arch", "tty", "logname", "users", "w", "who",
        "sleep", "test", "[", "[[", "basename", "dirname", "realpath", "readlink", "cd", "exit", "return",
        "unset", "shift", "wait", "printenv", "getconf", "locale", "seq", "expr", "cal", "lsb_release", "cat", "head", "tail", "wc", "grep", "egrep",
        "fgrep", "zgrep", "zcat", "bzcat", "xzcat", "file", "stat", "md5sum", "sha1sum", "sha224sum", "sha256sum",
        "sha384sum", "sha512sum", "b2sum", "cksum", "sum", "cut", "tr", "nl", "od", "hexdump", "strings", "column", "fold", "fmt", "paste", "join",
        "comm", "diff", "cmp", "rev", "tac", "expand", "unexpand", "jq", "base64", "base32", "ls", "dir", "vdir", "tree", "du", "df", "lsblk", "blkid",
        "lscpu", "lspci", "lsusb", "lsmod", "lsof", "uname", "ps", "pgrep", "pidof", "vmstat", "iostat", "mpstat", "pidstat", "netstat",
        "ping", "ping6", "dig", "nslookup", "host", "traceroute", "tracepath", "getent", "findmnt", "which", "type", "whereis",
        "numfmt", "lslogins", "lsipc", "lslocks", "lsns", "tput",
        "zdiff", "sdiff", "look", "apropos", "whatis", "help", "ulimit", "jobs", "times",
    ]

    /// Commands that never count as read-only (they run code, write, or reach the network
    /// in ways an argument check cannot bound).
    static let neverReadOnly: Set<String> = ["git", "curl", "wget", "tee", "python", "python2", "python3", "perl", "ruby", "node", "php", "lua",
                                             "eval", "source", ".", "hash", "alias", "function", "nohup", "dd", "rm", "mv", "cp", "ln", "chmod",
                                             "chown", "mkdir", "rmdir", "touch", "truncate", "shred", "kill", "pkill", "killall", "reboot", "shutdown",
                                             "halt", "poweroff", "at", "ssh", "scp", "rsync", "sftp", "nc", "ncat", "socat", "telnet"]

    typealias Rule = @Sendable (Arguments) -> String?

    static let rules: [String: Rule] = [
        "find": { a in
            guard a.literal else { return "an argument is decided when it runs (a file name could be an action)" }
            let writes = ["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"]
            if let action = a.texts.first(where: { writes.contains($0) }) { return "\(action) acts on what it finds" }
            return nil
        },
        "sed": { a in
            guard a.literal else { return "an argument is decided when it runs" }
            if a.has("i", "--in-place") { return "-i edits files in place" }
            if a.has("f", "--file") { return "-f runs a script from a file" }
            guard a.has("n", "--quiet", "--silent") else { return "only `sed -n '…p'` counts as reading" }
            var scripts: [String] = []
            var texts = a.texts[...]
            while let text = texts.first {
                texts = texts.dropFirst()
                if text == "-e" || text == "--expression" {
                    if let script = texts.first { scripts.append(script) }
                    texts = texts.dropFirst()
                } else if text.hasPrefix("--expression=") {
                    scripts.append(String(text.dropFirst("--expression=".count)))
                }
            }
            if scripts.isEmpty, let script = a.positionals.first { scripts.append(script) }
            guard !scripts.isEmpty else { return "no script" }
            if let script = scripts.first(where: { !isPrintScript($0) }) { return "the script '\(script)' does more than print lines" }
            return nil
        },
        "awk": { a in
            guard a.literal else { return "its program is decided when it runs" }
            var texts = a.texts[...]
            var program: String?
            while let text = texts.first {
                texts = texts.dropFirst()
                if text == "-f" || text.hasPrefix("--file") || text == "-i" || text.hasPrefix("--include") || text == "-E" || text.hasPrefix("--exec") {
                    return "it runs a program from a file"
                }
                if text == "-F" || text == "-v" || text == "--field-separator" || text == "--assign" { texts = texts.dropFirst(); continue }
                if text.hasPrefix("-") && text != "-" { continue }
                program = text
                break
            }
            guard let program else { return "no program" }
            for danger in [">", "|", "system", "getline", "close", "fflush", "ENVIRON"] where program.contains(danger) {
                return "its program may write or run commands (\(danger))"
            }
            return nil
        },
        "gawk": { a in rules["awk"]!(a) },
        "mawk": { a in rules["awk"]!(a) },
        "sort": { a in a.has("o", "--output") ? "-o writes a file" : a.has(nil, "--compress-program") ? "--compress-program runs a program" : nil },
        "uniq": { a in a.positionals.count <= 1 ? nil : "a second file name is where it writes" },
        "xxd": { a in
            if a.has("r", "--revert") { return "-r writes what it reads back" }
            var texts = a.texts[...], files = 0
            while let text = texts.first {
                texts = texts.dropFirst()
                if ["-l", "-s", "-c", "-g", "-o", "-n", "-len", "-seek", "-cols", "-groupsize", "-offset", "-name"].contains(text) { texts = texts.dropFirst(); continue }
                if !text.hasPrefix("-") || text == "-" { files += 1 }
            }
            return files <= 1 ? nil : "a second file name is where it writes"
        },
        "date": { a in
            if a.has("s", "--set") { return "-s sets the clock" }
            return a.positionals.allSatisfy { $0.hasPrefix("+") } ? nil : "an argument that is not a +FORMAT sets the clock"
        },
        "hostname": { a in a.positionals.isEmpty && !a.has("F", "--file") ? nil : "a name sets the host name" },
        "dmesg": { a in a.has("c", "--read-clear") || a.has("C", "--clear") || a.has("D", "--console-off") || a.has("E", "--console-on") || a.has("n", "--console-level")
            ? "it changes the kernel log or console" : nil },
        "ss": { a in a.has("K", "--kill") ? "-K closes sockets" : nil },
        "top": { a in a.has("b", "--batch") ? nil : "without -b it is interactive" },
        "mount": { a in a.isEmpty || (a.texts == ["-l"]) ? nil : "with arguments it mounts" },
        "sysctl": { a in
            if a.has("w", "--write") || a.has("p", "--load") || a.has(nil, "--system") { return "it sets kernel parameters" }
            return a.positionals.contains { $0.contains("=") } ? "NAME=VALUE sets a parameter" : nil
        },
        "ifconfig": { a in a.positionals.count <= 1 ? nil : "with settings it configures an interface" },
        "route": { a in a.positionals.isEmpty ? nil : "with a command it changes the routing table" },
        "arp": { a in a.has("s", "--set") || a.has("d", "--delete") || a.has("f", "--file") ? "it changes the ARP table" : nil },
        "ip": { a in
            let words = a.texts.filter { !$0.hasPrefix("-") }
            guard let object = words.first else { return nil }
            let objects: Set<String> = ["a", "addr", "address", "l", "link", "r", "route", "n", "neigh", "neighbor", "neighbour", "rule", "maddr", "maddress",
                                        "ntable", "tunnel", "netns", "monitor", "mroute", "xfrm", "tcp_metrics", "token", "netconf", "vrf", "stats"]
            guard objects.contains(object) else { return "'\(object)' is not an object it only shows" }
            guard words.count > 1 else { return nil }
            let verbs: Set<String> = ["show", "list", "lst", "sh", "ls", "l", "get", "help"]
            return verbs.contains(words[1]) ? nil : "'\(words[1])' changes it"
        },
        "nvidia-smi": { a in
            guard a.literal else { return "an argument is decided when it runs" }
            var texts = a.texts[...]
            while let text = texts.first {
                texts = texts.dropFirst()
                if ["-i", "--id", "-d", "--display"].contains(text) { texts = texts.dropFirst(); continue }
                let reading = ["-q", "--query", "-L", "--list-gpus", "-x", "--xml-format", "-h", "--help"].contains(text)
                    || ["--query-", "--format=", "--id=", "--display=", "--loop"].contains { text.hasPrefix($0) }
                if !reading { return "\(text) is a setting or a subcommand" }
            }
            return nil
        },
        "journalctl": { a in
            a.has(nil, "--vacuum-size", "--vacuum-time", "--vacuum-files", "--rotate", "--flush", "--sync", "--relinquish-var", "--smart-relinquish-var",
                  "--setup-keys", "--update-catalog") ? "it changes the journal" : nil
        },
        "systemctl": { a in
            let verbs = a.texts.filter { !$0.hasPrefix("-") }
            guard let verb = verbs.first else { return nil }
            let reading: Set<String> = ["status", "show", "list-units", "list-unit-files", "list-sockets", "list-timers", "list-jobs", "list-dependencies",
                                        "is-active", "is-enabled", "is-failed", "is-system-running", "cat", "help", "get-default", "show-environment"]
            return reading.contains(verb) ? nil : "'\(verb)' changes the system"
        },
        "service": { a in a.texts.count == 2 && a.texts[1] == "status" || a.texts == ["--status-all"] ? nil : "only `service NAME status` reads" },
        "docker": { a in
            let verbs = a.texts.filter { !$0.hasPrefix("-") }
            guard let verb = verbs.first else { return nil }
            if ["ps", "images", "inspect", "logs", "version", "info", "top", "port", "diff", "history", "search"].contains(verb) { return nil }
            if verb == "stats" { return a.has(nil, "--no-stream") ? nil : "stats without --no-stream never ends" }
            if ["container", "image", "network", "volume", "system"].contains(verb), verbs.count > 1,
               ["ls", "list", "inspect", "df", "ps"].contains(verbs[1]) { return nil }
            return "'\(verb)' changes containers or images"
        },
        "kubectl": { a in
            let verbs = a.texts.filter { !$0.hasPrefix("-") }
            guard let verb = verbs.first else { return nil }
            if ["get", "describe", "logs", "top", "version", "explain", "api-resources", "api-versions", "cluster-info"].contains(verb) { return nil }
            if verb == "config", verbs.count > 1, ["view", "get-contexts", "current-context", "get-clusters"].contains(verbs[1]) { return nil }
            if verb == "auth", verbs.count > 1, verbs[1] == "can-i" { return nil }
            return "'\(verb)' may change the cluster"
        },
        "dpkg": { a in a.has("l", "--list") || a.has("L", "--listfiles") || a.has("s", "--status") || a.has("S", "--search") || a.has(nil, "--print-architecture")
            ? nil : "it may install or remove packages" },
        "dpkg-query": { _ in nil },
        "apt": { a in ["list", "show", "search", "policy", "depends", "rdepends"].contains(a.first ?? "") ? nil : "it may change packages" },
        "apt-cache": { _ in nil },
        "rpm": { a in a.has("q", "--query") && !a.has("e", "--erase") && !a.has("i", "--install") && !a.has("U", "--upgrade") ? nil : "it may change packages" },
        "crontab": { a in
            let values = ["-u"]
            var texts = a.texts[...], listing = false
            while let text = texts.first {
                texts = texts.dropFirst()
                if values.contains(text) { texts = texts.dropFirst(); continue }
                if text == "-l" { listing = true; continue }
                return "only `crontab -l` reads (\(text) changes a crontab)"
            }
            return listing ? nil : "without -l it installs a crontab"
        },
        "timedatectl": { a in (a.first.map { ["status", "show", "list-timezones", "timesync-status", "show-timesync"].contains($0) } ?? true) ? nil : "it changes the clock" },
        "hostnamectl": { a in (a.first.map { ["status"].contains($0) } ?? true) ? nil : "it changes the host's names" },
        "loginctl": { a in (a.first.map { $0.hasPrefix("list-") || $0.hasPrefix("show-") || $0.hasSuffix("-status") } ?? true) ? nil : "it changes sessions" },
        "set": { a in a.texts.allSatisfy { $0.hasPrefix("-") || $0.hasPrefix("+") || ["errexit", "pipefail", "nounset", "xtrace"].contains($0) } ? nil : "it sets positional arguments" },
        "umask": { a in a.positionals.isEmpty ? nil : "it changes the file mode mask" },
        "export": { a in setsDangerous(a) },
        "local": { a in setsDangerous(a) },
        "declare": { a in setsDangerous(a) },
        "typeset": { a in setsDangerous(a) },
        "readonly": { a in setsDangerous(a) },
        "read": { a in setsDangerous(a) },
        "printf": { a in a.has("v") ? setsDangerous(a) : nil },
        "yq": { a in a.has("i", "--inplace") ? "-i edits files in place" : nil },
        "stty": { a in a.texts.allSatisfy { ["-a", "--all", "-g", "--save", "size"].contains($0) } ? nil : "it changes the terminal" },
    ]

    /// Nil unless the arguments name a variable that changes which program runs.
    static func setsDangerous(_ a: Arguments) -> String? {
        guard a.literal else { return "a variable it sets is decided when it runs" }
        for text in a.texts where !text.hasPrefix("-") {
            let name = String(text.prefix { $0 != "=" })
            if dangerousVariables.contains(name) { return "it sets \(name)" }
        }
        return nil
    }

    /// `sed -n`'s scripts that only print: `p`, `Np`, `N,Mp`, `$p`, `/re/p`, `/a/,/b/p`.
    static func isPrintScript(_ script: String) -> Bool {
        let trimmed = script.trimmedWhitespace
        guard trimmed.hasSuffix("p") else { return false }
        let address = String(trimmed.dropLast())
        if address.isEmpty { return true }
        let parts = splitAddress(address)
        guard !parts.isEmpty, parts.count <= 2 else { return false }
        return parts.allSatisfy { part in
            part == "$" || (!part.isEmpty && part.allSatisfy(\.isNumber))
                || (part.count >= 2 && part.hasPrefix("/") && part.hasSuffix("/") && !part.dropFirst().dropLast().contains("/"))
        }
    }

    private static func splitAddress(_ address: String) -> [String] {
        var parts: [String] = [], current = "", inRegex = false
        for character in address {
            if character == "/" { inRegex.toggle() }
            if character == "," && !inRegex {
                parts.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        parts.append(current)
        return parts
    }

    // MARK: - Wrappers

    typealias Wrapper = @Sendable (Arguments, Int) -> String?

    /// Skips `words` while `isOption` (an option taking a value when `takesValue`), then
    /// checks the rest as a command of its own.
    static func inner(_ a: Arguments, depth: Int, optionsWithValue: Set<String> = [], stopAtFirstPositional: Bool = true,
                      skipLeadingPositionals: Int = 0) -> String? {
        var words = a.words[...]
        while let word = words.first, word.isLiteral, word.text.hasPrefix("-"), word.text != "-" {
            words = words.dropFirst()
            if word.text == "--" { break }
            if optionsWithValue.contains(word.text) { words = words.dropFirst() }
        }
        guard words.count >= skipLeadingPositionals else { return "it is given nothing to run" }
        for _ in 0..<skipLeadingPositionals {
            guard let word = words.first, word.isLiteral else { return "an argument is decided when it runs" }
            words = words.dropFirst()
        }
        guard !words.isEmpty else { return nil }
        return check(words: Array(words), depth: depth + 1)
    }

    static let shells: Set<String> = ["sh", "bash", "dash", "zsh", "ksh", "ash", "busybox-sh"]

    static let wrappers: [String: Wrapper] = {
        var wrappers: [String: Wrapper] = [
            "sudo": { a, depth in
                if a.has("s", "--shell") || a.has("i", "--login") || a.has("e", "--edit") { return "sudo -s, -i or -e opens a shell or edits" }
                return inner(a, depth: depth, optionsWithValue: ["-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "--host", "-p", "--prompt",
                                                                  "-r", "--role", "-t", "--type", "-U", "--other-user", "-T", "--command-timeout"])
            },
            "doas": { a, depth in inner(a, depth: depth, optionsWithValue: ["-u", "-C"]) },
            "env": { a, depth in
                var words = a.words[...]
                while let word = words.first {
                    guard word.isLiteral else { return "an argument is decided when it runs" }
                    if word.text.hasPrefix("-") {
                        if ["-S", "--split-string"].contains(word.text) || word.text.hasPrefix("--split-string=") { return "env -S splits a command line itself" }
                        words = words.dropFirst()
                        if ["-u", "--unset", "-C", "--chdir"].contains(word.text) { words = words.dropFirst() }
                    } else if let equals = word.text.firstIndex(of: "="), equals != word.text.startIndex {
                        let name = String(word.text[..<equals])
                        if dangerousVariables.contains(name) { return "it sets \(name) for the command" }
                        words = words.dropFirst()
                    } else {
                        break
                    }
                }
                return words.isEmpty ? nil : check(words: Array(words), depth: depth + 1)
            },
            "timeout": { a, depth in inner(a, depth: depth, optionsWithValue: ["-s", "--signal", "-k", "--kill-after"], skipLeadingPositionals: 1) },
            "nice": { a, depth in inner(a, depth: depth, optionsWithValue: ["-n", "--adjustment"]) },
            "ionice": { a, depth in inner(a, depth: depth, optionsWithValue: ["-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid"]) },
            "time": { a, depth in
                if a.has(nil, "-o", "--output", "-a", "--append") { return "time -o writes a file" }
                return inner(a, depth: depth, optionsWithValue: ["-f", "--format"])
            },
            "stdbuf": { a, depth in inner(a, depth: depth, optionsWithValue: ["-i", "-o", "-e"]) },
            "watch": { a, depth in inner(a, depth: depth, optionsWithValue: ["-n", "--interval", "-d", "--differences"]) },
            "exec": { a, depth in inner(a, depth: depth, optionsWithValue: ["-a"]) },
            "command": { a, depth in
                if a.has("v") || a.has("V") { return nil }
                return inner(a, depth: depth)
            },
            "builtin": { a, depth in inner(a, depth: depth) },
            "xargs": { a, depth in
                // What xargs runs gets arguments from its input: checked as if one were unknown.
                var words = a.words[...]
                let withValue: Set<String> = ["-a", "--arg-file", "-d", "--delimiter", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "--max-args", "-P",
                                              "--max-procs", "-s", "--max-chars"]
                while let word = words.first, word.isLiteral, word.text.hasPrefix("-") {
                    words = words.dropFirst()
                    if withValue.contains(word.text) { words = words.dropFirst() }
                }
                let command = words.isEmpty ? [ShellSyntax.Word("echo")] : Array(words)
                return check(words: command + [ShellSyntax.Word("", expands: true)], depth: depth + 1)
            },
        ]
        for shell in shells {
            wrappers[shell] = { a, depth in
                // `sh -c 'SCRIPT'`: the script is read again; any other use runs a script or standard input.
                guard let index = a.words.firstIndex(where: { $0.text == "-c" || ($0.text.hasPrefix("-") && !$0.text.hasPrefix("--") && $0.text.contains("c")) }),
                      index + 1 < a.words.count else { return "\(shell) without -c runs a script or its input" }
                let options = a.words[..<index].map(\.text) + [a.words[index].text]
                guard options.allSatisfy({ ["-c", "-e", "-u", "-x", "-o", "pipefail", "-ec", "-eu", "-euc", "-exc", "-xc", "-lc", "-l"].contains($0) }) else {
                    return "\(shell) is given options termind does not follow"
                }
                let script = a.words[index + 1]
                guard script.isLiteral else { return "the script \(shell) -c runs is decided when it runs" }
                let verdict = classify(script.text, depth: depth + 1)
                return verdict.isReadOnly ? nil : verdict.reason
            }
        }
        return wrappers
    }()
}
