import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

enum Help {
    /// The general help with the commands of the features and plugins this invocation
    /// loads (or the running server has) in place.
    static func general(_ inv: Invocation) async -> String {
        let marker = "__FEATURE_COMMANDS__\n"
        return template.replacingUTF8(marker, with: await featureCommands(inv))
    }

    /// Every command of each running feature and plugin, under its feature's `help` title
    /// (what people do with them), groups in their rank order. Commands under one parent
    /// (`vault host add`, `vault host list`, …) share a row when there are three or more.
    static func featureCommands(_ inv: Invocation) async -> String {
        do {
            return try await Session.with(inv) { session in
                let features = try await session.call(KernelContracts.Features.self, Empty()).features
                    .filter { $0.state == .running && !$0.commands.isEmpty }
                    .sorted { ($0.help?.rank ?? Int.max, $0.id) < ($1.help?.rank ?? Int.max, $1.id) }
                guard !features.isEmpty else { return "  (none loaded; add plugins with --plugins DIR)\n" }
                return features.map { feature in
                    let title = feature.help?.title ?? (feature.source.hasSuffix("plugin.json") ? "Plugin \(feature.id)" : feature.id)
                    let options = (feature.serveOptions ?? []).map { row("serve --\($0.name) \($0.value)", $0.summary) }
                    return "\(title) (\(feature.id)):\n" + (rows(feature.commands) + options).joined(separator: "\n") + "\n"
                }.joined(separator: "\n")
            }
        } catch {
            let reason = (error as? TermindError)?.message ?? (error as? BootFailure)?.description ?? "\(error)"
            return "  (cannot be listed: \(reason))\n"
        }
    }

    /// A feature's commands as help rows, in their declared order; a feature with many
    /// (more than 12) shows each family of three or more (`vault host add|list|…`) as one row.
    static func rows(_ commands: [FeatureManifest.Command]) -> [String] {
        func parent(_ command: FeatureManifest.Command) -> String { command.words.dropLast().joined(separator: " ") }
        var shown: Set<String> = []
        var lines: [String] = []
        for command in commands {
            let family = commands.filter { !parent($0).isEmpty && parent($0) == parent(command) }
            if commands.count > 12 && family.count >= 3 {
                let key = parent(command)
                guard shown.insert(key).inserted else { continue }
                lines.append(row("\(key) " + family.compactMap(\.words.last).joined(separator: "|"), "'termind help \(key) COMMAND' explains one"))
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
        // Up to the first ': ' or '. ' outside parentheses (not an "e.g. ").
        var depth = 0
        var end = summary.endIndex
        var index = summary.startIndex
        while index < summary.endIndex {
            let character = summary[index]
            if character == "(" { depth += 1 } else if character == ")" { depth = max(0, depth - 1) }
            let next = summary.index(after: index)
            if depth == 0, character == ":" || character == ".", next < summary.endIndex, summary[next] == " ",
               !summary[..<index].hasSuffix("e.g"), !summary[..<index].hasSuffix("i.e") {
                end = index
                break
            }
            index = next
        }
        var text = String(summary[..<end])
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    private static func row(_ usage: String, _ summary: String) -> String {
        usage.count <= 30 ? "  \(usage.padded(to: 30))  \(summary)" : "  \(usage)\n  \(String(repeating: " ", count: 30))  \(summary)"
    }

    static let template = """
    termind — an SSH workspace runtime: a vault of hosts and keys, SSH sessions, SFTP,
    port forwards, metrics and an AI assistant, as a kernel of loadable features.

    Usage: termind [options] <command> [arguments]
    ('termind help COMMAND' explains one; after '--' everything is the command's)

    __FEATURE_COMMANDS__

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
