/// termind's shell integration for bash and zsh, sent as one line of input once an
/// interactive shell shows its first prompt — nothing is written on the host. It makes the
/// shell report, as OSC sequences in its output (`TerminalScanner` reads them):
///
/// * OSC 133 ; A / B around the prompt (added to PS1 once: sending it again adds nothing);
/// * OSC 133 ; C ; cmdline_url=… when a command starts, with its line percent-encoded (bash:
///   the history line, as bash stores it; zsh: preexec's line) — or a plain OSC 133 ; C for
///   a command the shell keeps out of its own history (HISTCONTROL, HISTIGNORE, history off;
///   zsh: a leading space with HIST_IGNORE_SPACE), so termind's history leaves it out too;
/// * OSC 133 ; D ; STATUS ; duration_ms=N when it ends, N measured by the shell's own clock
///   (`EPOCHREALTIME`; left out where the shell has none);
/// * OSC 7 ; file://HOST/PATH at each prompt;
/// * OSC 133 ; termind-ready ; NONCE once the line has run (termind hides everything the
///   shell prints before it, then erases the line, so that the next prompt is drawn where
///   the first one was).
///
/// In bash the DEBUG trap ignores `__termind_*` helpers (a prompt's own work never counts as
/// a command), completion, every command after the first of a line, and this line itself
/// when it comes again (both shells). A line that ran with no DEBUG trap in the shell itself
/// (a subshell, `(exit 42)`) is found at the next prompt by its new history entry and
/// reported then, with its status and no duration. An existing DEBUG
/// trap is left alone (then no command starts are reported). The line deletes itself from
/// bash's history. zsh keeps it in its own history unless HIST_IGNORE_SPACE is set (the line
/// starts with a space). Other shells run nothing of it but the final mark.
public enum ShellBootstrap {
    /// The shell code, one statement per element; no single quote anywhere (it travels
    /// inside one).
    static let body: [String] = [
        "if [ -n \"$BASH_VERSION\" ]; then",
        #"__termind_enc() { local LC_ALL=C s="$1" o= c i; for ((i=0;i<${#s};i++)); do c=${s:i:1}; case "$c" in [a-zA-Z0-9/._~-]) o+="$c";; *) printf -v c "%%%02X" "\"$c"; o+="$c";; esac; done; printf "%s" "$o"; }"#,
        #"__termind_status() { __termind_s=$?; }"#,
        #"__termind_last() { local h; h=$(HISTTIMEFORMAT= builtin history 1); __termind_hn=; [[ $h =~ ^[[:space:]]*([0-9]+)[*]?[[:space:]]+(.*)$ ]] && __termind_hn=${BASH_REMATCH[1]} && __termind_hl=${BASH_REMATCH[2]}; }"#,
        #"__termind_unseen() { [ -z "$__termind_cmd" ] && [ -n "$__termind_n" ] || return 0; __termind_last; [ -n "$__termind_hn" ] && [ "$__termind_hn" != "$__termind_n" ] || return 0; __termind_n=$__termind_hn; case "$__termind_hl" in *termind-ready*) return 0;; esac; __termind_cmd=$__termind_hl; __termind_t0=; printf "\033]133;C;cmdline_url=%s\007" "$(__termind_enc "$__termind_cmd")"; }"#,
        #"__termind_prompt() { __termind_unseen; if [ -n "$__termind_cmd" ]; then local d=; [ -n "$__termind_t0" ] && d=";duration_ms=$(( (${EPOCHREALTIME/./} - __termind_t0) / 1000 ))"; printf "\033]133;D;%s%s\007" "$__termind_s" "$d"; __termind_cmd=; fi; printf "\033]7;file://%s%s\007" "$HOSTNAME" "$(__termind_enc "$PWD")"; __termind_ready=1; }"#,
        #"__termind_preexec() { [ "$__termind_ready" = 1 ] || return 0; case "$BASH_COMMAND" in __termind_*) return 0;; esac; [ -n "$COMP_LINE" ] && return 0; __termind_ready=; local h; h=$(HISTTIMEFORMAT= builtin history 1); __termind_t0=; [ -n "$EPOCHREALTIME" ] && __termind_t0=${EPOCHREALTIME/./}; if [[ $h =~ ^[[:space:]]*([0-9]+)[*]?[[:space:]]+(.*)$ ]] && [ "${BASH_REMATCH[1]}" != "$__termind_n" ]; then __termind_cmd=${BASH_REMATCH[2]}; case "$__termind_cmd" in *termind-ready*) __termind_cmd=; return 0;; esac; __termind_n=${BASH_REMATCH[1]}; printf "\033]133;C;cmdline_url=%s\007" "$(__termind_enc "$__termind_cmd")"; else __termind_cmd=" "; printf "\033]133;C\007"; fi; }"#,
        #"case "$PS1" in *"133;A"*) ;; *) PS1="\[\033]133;A\007\]$PS1\[\033]133;B\007\]";; esac"#,
        #"case "$PROMPT_COMMAND" in *__termind_prompt*) ;; *) __termind_pc=$PROMPT_COMMAND; while [[ $__termind_pc == *[[:space:]\;] ]]; do __termind_pc=${__termind_pc%?}; done; PROMPT_COMMAND="__termind_status${__termind_pc:+; $__termind_pc}; __termind_prompt"; unset __termind_pc;; esac"#,
        #"[ -z "$(trap -p DEBUG)" ] && trap "__termind_preexec" DEBUG"#,
        #"builtin history -d "$HISTCMD" 2>/dev/null"#,
        #"__termind_last; __termind_n=${__termind_hn:-0}"#,
        "elif [ -n \"$ZSH_VERSION\" ]; then",
        #"zmodload zsh/datetime 2>/dev/null"#,
        #"__termind_enc() { local LC_ALL=C s="$1" o= c i; for ((i=1;i<=${#s};i++)); do c=${s[i]}; case "$c" in [a-zA-Z0-9/._~-]) o+="$c";; *) o+=$(printf "%%%02X" "\"$c");; esac; done; printf "%s" "$o"; }"#,
        #"__termind_preexec() { case "$1" in *termind-ready*) return 0;; esac; __termind_t0=$EPOCHREALTIME; if [[ -o histignorespace && "$1" == " "* ]]; then __termind_cmd=" "; printf "\033]133;C\007"; else __termind_cmd="$1"; printf "\033]133;C;cmdline_url=%s\007" "$(__termind_enc "$1")"; fi; }"#,
        #"__termind_precmd() { local s=$?; if [ -n "$__termind_cmd" ]; then if [ -n "$__termind_t0" ]; then printf "\033]133;D;%s;duration_ms=%.0f\007" $s $(( (EPOCHREALTIME - __termind_t0) * 1000 )); else printf "\033]133;D;%s\007" $s; fi; __termind_cmd=; fi; printf "\033]7;file://%s%s\007" "$HOST" "$(__termind_enc "$PWD")"; }"#,
        #"autoload -Uz add-zsh-hook; add-zsh-hook preexec __termind_preexec; add-zsh-hook precmd __termind_precmd"#,
        #"case "$PS1" in *"133;A"*) ;; *) PS1="%{$(printf "\033]133;A\007")%}$PS1%{$(printf "\033]133;B\007")%}";; esac"#,
        "fi",
    ]

    /// The input line for a shell (ending in a newline); `nonce` comes back in the ready mark.
    public static func line(nonce: String) -> String {
        var code = ""
        for statement in body {
            if !code.isEmpty { code += code.hasSuffix("then") ? " " : "; " }
            code += statement
        }
        let safeNonce = nonce.filter { $0.isLetter || $0.isNumber }
        return " test -n \"$BASH_VERSION$ZSH_VERSION\" && eval '\(code)'; printf \"\\033]133;termind-ready;%s\\007\" \(safeNonce)\n"
    }
}

/// How history keeps and shows commands.
public enum HistoryText {
    /// The command as kept: backslash-newline continuations joined (as the shell reads them),
    /// nothing else changed; trailing newlines dropped.
    public static func normalized(_ command: String) -> String {
        var text = command.replacing("\\\r\n", with: "").replacing("\\\n", with: "")
        while text.last?.isNewline == true { text.removeLast() }
        return text
    }

    /// The first line, with an ellipsis when more follow.
    public static func firstLine(_ command: String) -> String {
        guard let end = command.firstIndex(where: \.isNewline) else { return command }
        return String(command[..<end]) + " …"
    }
}
