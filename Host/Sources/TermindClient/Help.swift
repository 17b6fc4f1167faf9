import Foundation
import TermindCore
import TermindKernel

enum Help {
    /// The general help with the commands of the features and plugins this invocation
    /// loads (or the running server has) in place.
    static func general(_ inv: Invocation) async -> String {
        let marker = "__FEATURE_COMMANDS__\n"
        return template.replacingOccurrences(of: marker, with: await featureCommands(inv))
    }

    /// "Commands from features and plugins:" with each running feature's commands; a
    /// feature with many lists its first word and where to see them.
    static func featureCommands(_ inv: Invocation) async -> String {
        do {
            return try await Session.with(inv) { session in
                let features = try await session.call(KernelContracts.Features.self, Empty()).features.filter { $0.state == .running }
                var lines: [String] = []
                for feature in features where !feature.commands.isEmpty {
                    if feature.commands.count > 6, let word = feature.commands.first?.words.first {
                        lines.append(row("\(word) ...", "\(feature.commands.count) commands of '\(feature.id)': 'termind \(word)' lists them."))
                    } else {
                        for command in feature.commands.sorted(by: { $0.name < $1.name }) {
                            let usage = ([command.name] + command.arguments.map { $0.hasSuffix("...") ? "-- " + $0.dropLast(3).uppercased() + "..." : $0.uppercased() }).joined(separator: " ")
                            lines.append(row(usage, command.summary ?? "(\(feature.id))"))
                        }
                    }
                }
                if lines.isEmpty { return "  (none loaded; add plugins with --plugins DIR)\n" }
                return lines.joined(separator: "\n") + "\n"
            }
        } catch {
            let reason = (error as? TermindError)?.message ?? (error as? BootFailure)?.description ?? "\(error)"
            return "  (cannot be listed: \(reason))\n"
        }
    }

    private static func row(_ usage: String, _ summary: String) -> String {
        usage.count <= 23 ? "  \(usage.padding(toLength: 23, withPad: " ", startingAt: 0))  \(summary)" : "  \(usage)\n                           \(summary)"
    }

    static let template = """
    termind — an SSH workspace runtime: a vault of hosts and keys, SSH sessions, SFTP,
    port forwards, metrics and an AI assistant, as a kernel of loadable features.

    Usage: termind [options] <command> [arguments]

    Commands:
      features                 List features in boot order: state, and why any is disabled.
      contracts [PREFIX]       List contracts (the operations features offer) with their
                               request/response JSON Schemas (full schemas with --json).
      call CONTRACT [BODY|-]   Call a contract, e.g. termind call kernel.ping@1 '{"payload":"hi"}'.
                               BODY is a JSON object; '-' reads it from standard input.
      serve                    Run the long-lived termind process with its control socket.
                               Other termind commands then run inside it.
      version                  Print termind, build signature and library versions.
      plugins check DIR        Check a plugin the way termind loads it (for plugin authors).
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

    Commands from features and plugins (positional arguments, then --FIELD VALUE;
    after '--' everything is positional; 'termind help COMMAND' explains one):
    __FEATURE_COMMANDS__

    Options (anywhere before '--'):
      --json                   Machine-readable output; errors too ({"error": {code, message}}).
      --registry PATH          Feature registry (default: Registry.json beside the executable;
                               env TERMIND_REGISTRY).
      --plugins DIR            Opt in to plugins in DIR (a plugin.json, or one per subfolder).
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

    Exit codes: 0 success · 1 the operation failed · 2 bad usage · 3 termind could not boot.
    A command that runs a remote command (exec) exits with its status instead: 128 + N when
    signal N ended it, 130/143 after Ctrl-C/SIGTERM (which end the remote command too).
    """
}
