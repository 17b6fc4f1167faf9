/// termind's general help, written from a list of features and their commands: the client
/// writes it from the features a kernel runs, the launcher from Registry.json's manifests
/// when no server takes the command (no library of termind's loaded). Pure Swift, with
/// neither Concurrency nor StringProcessing imported (the launcher maps neither).
public enum HelpText {
    /// One feature (or plugin) as help shows it.
    public struct Feature {
        public var id: String
        public var title: String?
        public var rank: Int?
        public var isPlugin: Bool
        public var commands: [Command]
        /// Its `serve --NAME VALUE` options: name, value, summary.
        public var serveOptions: [(name: String, value: String, summary: String)]

        public init(id: String, title: String?, rank: Int?, isPlugin: Bool, commands: [Command], serveOptions: [(name: String, value: String, summary: String)]) {
            self.id = id
            self.title = title
            self.rank = rank
            self.isPlugin = isPlugin
            self.commands = commands
            self.serveOptions = serveOptions
        }
    }

    /// One command: its words, its arguments' names (`field...` takes the rest) and summary.
    public struct Command: Equatable {
        public var name: String
        public var arguments: [String]
        public var summary: String?
        public init(name: String, arguments: [String], summary: String?) {
            self.name = name
            self.arguments = arguments
            self.summary = summary
        }
        var words: [Substring] { name.split(separator: " ") }
    }

    /// The whole help: the features' commands (those with any), groups in their rank order,
    /// in place of the template's marker; `unavailable` says why none could be listed.
    public static func general(_ features: [Feature], unavailable: String? = nil) -> String {
        head + featureCommands(features, unavailable: unavailable) + tail
    }

    /// Every command of each feature, under its `help` title (what people do with them).
    /// Commands under one parent (`vault host add`, `vault host list`, …) share a row when
    /// there are three or more.
    public static func featureCommands(_ features: [Feature], unavailable: String? = nil) -> String {
        if let unavailable { return "  (cannot be listed: \(unavailable))\n" }
        let shown = features.filter { !$0.commands.isEmpty }
            .sorted { ($0.rank ?? Int.max, $0.id) < ($1.rank ?? Int.max, $1.id) }
        guard !shown.isEmpty else { return "  (none loaded; add plugins with --plugins DIR)\n" }
        return shown.map { feature in
            let title = feature.title ?? (feature.isPlugin ? "Plugin \(feature.id)" : feature.id)
            let options = feature.serveOptions.map { row("serve --\($0.name) \($0.value)", $0.summary) }
            return "\(title) (\(feature.id)):\n" + (rows(feature.commands) + options).joined(separator: "\n") + "\n"
        }.joined(separator: "\n")
    }

    /// A feature's commands as help rows, in their declared order; a feature with many
    /// (more than 12) shows each family of three or more (`vault host add|list|…`) as one row.
    static func rows(_ commands: [Command]) -> [String] {
        let parents = commands.map { $0.words.dropLast().joined(separator: " ") }
        var familySize: [String: Int] = [:]
        for parent in parents where !parent.isEmpty { familySize[parent, default: 0] += 1 }
        var shown: Set<String> = []
        var lines: [String] = []
        for (index, command) in commands.enumerated() {
            let key = parents[index]
            if commands.count > 12 && !key.isEmpty && familySize[key, default: 0] >= 3 {
                guard shown.insert(key).inserted else { continue }
                let members = commands.indices.filter { parents[$0] == key }.compactMap { commands[$0].words.last.map(String.init) }
                lines.append(row("\(key) " + members.joined(separator: "|"), "'termind help \(key) COMMAND' explains one"))
            } else {
                let usage = ([command.name] + command.arguments.enumerated().map { index, name in
                    guard name.hasSuffix("...") else { return name.uppercased() }
                    let words = name.dropLast(3).uppercased() + "..."
                    return index == command.arguments.count - 1 ? "[-- \(words)]" : words
                }).joined(separator: " ")
                lines.append(row(usage, gist(command.summary) ?? ""))
            }
        }
        return lines
    }

    /// What a command's summary says it does: the part before its usage (`Open a workspace
    /// in tmux, …: WORKSPACE | …`) or its first sentence.
    static func gist(_ summary: String?) -> String? {
        guard let summary else { return nil }
        // Up to the first ': ' or '. ' outside parentheses (not an "e.g. "), read as UTF-8:
        // every character looked for is ASCII, so the cut falls between characters.
        let bytes = Array(summary.utf8)
        var depth = 0
        var end = bytes.count
        func follows(_ word: String, at index: Int) -> Bool {
            let word = Array(word.utf8)
            return index >= word.count && Array(bytes[(index - word.count)..<index]) == word
        }
        for index in bytes.indices {
            let byte = bytes[index]
            if byte == UInt8(ascii: "(") { depth += 1 } else if byte == UInt8(ascii: ")") { depth = max(0, depth - 1) }
            if depth == 0, byte == UInt8(ascii: ":") || byte == UInt8(ascii: "."), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: " "),
               !follows("e.g", at: index), !follows("i.e", at: index) {
                end = index
                break
            }
        }
        var text = String(decoding: bytes[..<end], as: UTF8.self)
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    static func row(_ usage: String, _ summary: String) -> String {
        usage.count <= 30 ? "  \(usage)\(String(repeating: " ", count: 30 - usage.count))  \(summary)"
            : "  \(usage)\n  \(String(repeating: " ", count: 30))  \(summary)"
    }

    /// What comes before the features' commands.
    static let head = """
    termind — an SSH workspace runtime: a vault of hosts and keys, SSH sessions, SFTP,
    port forwards, metrics and an AI assistant, as a kernel of loadable features.

    Usage: termind [options] <command> [arguments]
    ('termind help COMMAND' explains one; after '--' everything is the command's)


    """

    /// What comes after them: termind's own commands, the options, the exit codes.
    static let tail = """

    termind itself:
      features                 List features in boot order: state, and why any is disabled.
      contracts [PREFIX]       List contracts (the operations features offer) with their
                               request/response JSON Schemas (full schemas with --json).
      call CONTRACT [BODY|-]   Call a contract, e.g. termind call kernel.ping@1 '{"payload":"hi"}'.
                               BODY is a JSON object; '-' reads it from standard input.
      serve [--OPTION VALUE]...
                               Run the long-lived termind process with its control socket.
                               Other termind commands then run inside it. Its options are
                               features' (serve --mcp-listen above, under its feature).
      version                  Print termind, build signature and library versions.
      plugins check DIR        Check a plugin the way termind loads it (for plugin authors).
      plugins enable ID        Turn on a plugin that crashes turned off in the running server.
      secrets status           How the encrypted secret store is protected.
      secrets protect --passphrase -
                               Protect it with a passphrase typed (or piped) on standard input;
                               later runs need --secrets-passphrase-file. No secret is lost.
      secrets protect --key-file
                               Protect it with the key file again.
      bench [--iterations N]   Measure boot time and contract round trips (in-process and socket).
      completion bash|zsh      Print a completion script for the commands termind has now
                               (make install puts them in place).
      help [COMMAND]           Show this help, or a feature or plugin command's usage.


    Options (anywhere before '--'):
      --json                   Machine-readable output; errors too ({"error": {code, message}}).
      --registry PATH          Feature registry (default: Registry.json beside the executable;
                               env TERMIND_REGISTRY).
      --plugins DIR            Opt in to plugins in DIR (a plugin.json, or one per subfolder).
      --plugin-isolation MODE  Run every C plugin "process" (a sandboxed process of its own) or
                               "inline" (in termind's), whatever its plugin.json says.
                               Repeatable; env TERMIND_PLUGINS=dir1:dir2.
      --features A,B           Load only these features and what they require (permanent
                               features always load); env TERMIND_FEATURES.
      --socket PATH            Control socket (env TERMIND_SOCKET; default
                               $XDG_RUNTIME_DIR/termind/control.sock or /tmp/termind-UID/).
      --local                  Run in this process even when a server is running.
                               (--registry, --plugins, --features and their TERMIND_*
                               variables imply it.)
      --store PATH             The database (env TERMIND_STORE; default
                               $XDG_DATA_HOME/termind/termind.sqlite, ~/.local/share/...).
      --secrets PATH           The encrypted secret store (env TERMIND_SECRETS; default
                               secrets.sqlite beside the database).
      --secrets-key PATH       Its key file, created mode 0600 on first use (env
                               TERMIND_SECRETS_KEY; default ~/.config/termind/secrets.key).
      --secrets-passphrase-file PATH
                               Protect/open the secret store with the passphrase on the
                               file's first line instead (env TERMIND_SECRETS_PASSPHRASE_FILE).
      --yes, -y                Answer a command's yes/no confirmations yes (never a host key
                               question and never a secret).
      --answers FILE           Answer a command's questions from FILE, a JSON object by topic:
                               {"ssh.hostKey": "once", "confirm-topic": true, "ssh.passphrase":
                               ["..."]}; answers to secret prompts only from a file only you
                               can read. Without a terminal, --yes or --answers a question
                               is refused, never guessed.
      --debug                  Debug log to standard error (env TERMIND_DEBUG=1). Off by default.
      --log-file PATH          Append the log to PATH (mode 0600; env TERMIND_LOG_FILE).
      -h, --help               Show help.
      --version                Print termind's version (as termind version).

    Exit codes: 0 success · 1 the operation failed · 2 bad usage · 3 termind could not boot.
    A command that runs a remote command (exec) exits with its status instead: 128 + N when
    signal N ended it, 130/143 after Ctrl-C/SIGTERM (which end the remote command too).
    """
}
