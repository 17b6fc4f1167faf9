import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// `termind completion bash|zsh`: a completion script generated from the commands termind
/// has now — its own and those the loaded features and plugins declare, each with the
/// `--field` options of its request schema. Install it once (make install does) and
/// generate it again after adding plugins. zsh uses the same function through bashcompinit.
enum Completion {
    /// Global options that take no value (every other `--option` takes the next word).
    static let flags = ["--json", "--local", "--debug", "--yes", "-y", "--help", "-h"]
    static let valued = ["--registry", "--plugins", "--plugin-isolation", "--features", "--socket", "--store", "--secrets", "--secrets-key",
                         "--secrets-passphrase-file", "--log-file", "--answers"]

    /// The host's own commands, with their words and options.
    static let builtins: [(words: [String], options: [String])] = [
        (["features"], []), (["contracts"], []), (["call"], []), (["serve"], []),
        (["version"], []), (["plugins", "check"], []), (["secrets", "status"], []), (["secrets", "protect"], ["--passphrase", "--key-file"]),
        (["bench"], ["--iterations"]), (["help"], []), (["completion", "bash"], []), (["completion", "zsh"], []),
    ]

    static func run(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.count == 1, let shell = inv.arguments.first, ["bash", "zsh"].contains(shell) else {
            throw Invocation.UsageError(description: "completion takes one argument, bash or zsh (e.g. termind completion bash > ~/.local/share/bash-completion/completions/termind).")
        }
        var commands = builtins
        // Feature and plugin commands, with the fields of their requests.
        commands += try await Session.with(inv) { session in
            let features = try await session.call(KernelContracts.Features.self, Empty()).features.filter { $0.state == .running }
            let contracts = try await session.call(KernelContracts.Contracts.self, .init(prefix: nil)).contracts
            let schemas = Dictionary(contracts.map { ($0.id, $0.request) }, uniquingKeysWith: { first, _ in first })
            return features.flatMap(\.commands).map { command in
                var options: [String] = []
                if case .object(let properties)? = schemas[command.target]?["properties"] {
                    let positional = Set(command.arguments.map { $0.hasSuffix("...") ? String($0.dropLast(3)) : $0 })
                    options = properties.keys.filter { !positional.contains($0) && $0 != command.workingDirectory && $0 != command.output && command.environment?[$0] == nil }.sorted().map { "--" + kebab($0) }
                }
                return (command.words, options)
            }
        }
        inv.console.write(script(commands, zsh: shell == "zsh"), to: inv.console.output)
        return .success
    }

    /// `acceptHostKey` → `accept-host-key` (termind takes either).
    static func kebab(_ name: String) -> String {
        name.reduce(into: "") { out, character in
            if character.isUppercase { out += "-" + character.lowercased() } else { out.append(character) }
        }
    }

    /// The script: a bash function that finds the command words typed so far (skipping
    /// options and their values) and offers what may follow them.
    static func script(_ commands: [(words: [String], options: [String])], zsh: Bool) -> String {
        // What may follow each group of words: its next words; a whole command: its options.
        var next: [String: Set<String>] = [:]
        var options: [String: [String]] = [:]
        for command in commands {
            for depth in 0..<command.words.count {
                next[command.words[..<depth].joined(separator: " "), default: []].insert(command.words[depth])
            }
            options[command.words.joined(separator: " ")] = command.options
        }
        func quoted(_ words: [String]) -> String { words.map { $0.replacingUTF8("'", with: "") }.joined(separator: " ") }
        var cases: [String] = []
        for (path, words) in next.sorted(by: { $0.key < $1.key }) {
            cases.append("        '\(path)') words='\(quoted(words.sorted()))' ;;")
        }
        // A whole command, and any positional arguments after it: its options (longest first).
        for (path, list) in options.sorted(by: { ($0.key.count, $0.key) > ($1.key.count, $1.key) }) where next[path] == nil {
            cases.append("        '\(path)'|'\(path) '*) words='\(quoted(list))'; leaf=1 ;;")
        }
        let header = zsh ? "#compdef termind\n# termind completion for zsh (through bashcompinit): termind completion zsh > \"${fpath[1]}/_termind\"\nautoload -U +X bashcompinit && bashcompinit\n"
            : "# termind completion for bash: termind completion bash > ~/.local/share/bash-completion/completions/termind\n"
        return header + """
        _termind() {
            local cur typed='' word skip=0 leaf=0 words=''
            cur="${COMP_WORDS[COMP_CWORD]}"
            local i
            for ((i = 1; i < COMP_CWORD; i++)); do
                word="${COMP_WORDS[i]}"
                if ((skip)); then skip=0; continue; fi
                case "$word" in
                    --) break ;;
                    \(flags.joined(separator: "|"))) ;;
                    --*=*) ;;
                    -*) skip=1 ;;
                    *) typed="${typed:+$typed }$word" ;;
                esac
            done
            case "$typed" in
        \(cases.joined(separator: "\n"))
                *) leaf=1 ;;
            esac
            if [[ "$cur" == -* ]]; then
                words="$words \(quoted(flags + valued))"
            elif ((leaf)); then
                COMPREPLY=()
                return 0
            fi
            COMPREPLY=($(compgen -W "$words" -- "$cur"))
        }
        complete -o default -F _termind termind

        """
    }
}
