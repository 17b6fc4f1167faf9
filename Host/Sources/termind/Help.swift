enum Help {
    static let general = """
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
      exec HOST [--user U] [--identity I] [--accept-host-key once|save] [--timeout S]
           [--connect-timeout S] -- COMMAND...
                               Run a command over SSH on a saved host (through its jump
                               route) or a quick-connect line ('ssh -J j1,j2 user@host:port');
                               the words of COMMAND are joined with spaces into one remote
                               command line, as ssh does. stdout/stderr stream separately,
                               stdin streams in as it arrives; the exit status is the remote
                               one, 130/143 after Ctrl-C/SIGTERM (which end the remote command
                               too) (--json: status and output, base64 when not UTF-8). Every
                               hop's host key is checked; keyboard-interactive prompts and
                               unknown keys are asked on the terminal (refused without one).
                               --connect-timeout bounds DNS, TCP connect and handshake per hop.
                               With 'termind serve' running, exec runs inside it and reuses
                               its connection to the route (--local: in this process).
      secrets status           How the encrypted secret store is protected.
      secrets protect --passphrase -
                               Protect it with a passphrase typed (or piped) on standard input;
                               later runs need --secrets-passphrase-file. No secret is lost.
      secrets protect --key-file
                               Protect it with the key file again.
      vault ...                Hosts, identities, snippets, known hosts, ssh_config import,
                               quick connect: 'termind vault' lists the commands.
      bench [--iterations N]   Measure boot time and contract round trips (in-process and socket).
      bench vault [--hosts N]  Import N hosts from an ssh_config, list and look them up.
      help [COMMAND]           Show this help, or a plugin command's usage.
      <plugin command> ...     Commands added by loaded features/plugins (see 'termind help').

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
                               (--registry, --plugins and --features imply it.)
      --store PATH             The database (env TERMIND_STORE; default
                               $XDG_DATA_HOME/termind/termind.sqlite, ~/.local/share/...).
      --secrets PATH           The encrypted secret store (env TERMIND_SECRETS; default
                               secrets.sqlite beside the database).
      --secrets-key PATH       Its key file, created mode 0600 on first use (env
                               TERMIND_SECRETS_KEY; default ~/.config/termind/secrets.key).
      --secrets-passphrase-file PATH
                               Protect/open the secret store with the passphrase on the
                               file's first line instead (env TERMIND_SECRETS_PASSPHRASE_FILE).
      --debug                  Debug log to standard error (env TERMIND_DEBUG=1). Off by default.
      --log-file PATH          Append the log to PATH (mode 0600; env TERMIND_LOG_FILE).
      -h, --help               Show help.

    Exit codes: 0 success · 1 the operation failed · 2 bad usage · 3 termind could not boot.
    """
}
