import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Several read-only commands for one host in one SSH session (docs/assistant.md, "Batches"):
/// OpenSSH spends most of a command's cost starting its session (about 100 ms of sshd's CPU
/// on the test machine), so a batch sends one `sh -s` whose script — on the session's
/// standard input, so no quoting reaches the remote login shell — runs every command at once
/// as `sh -c 'COMMAND'` with its output in a private temporary folder, waits for each, and prints
/// each command's exit status and output framed by byte counts (a command that prints
/// anything, marker-like text included, cannot confuse the reader).
public enum BatchScript {
    /// The command line the session runs; the script goes on its input.
    public static let command = "sh -s"

    public static func script(_ commands: [String]) -> String {
        var lines = [
            "d=$(mktemp -d 2>/dev/null) || d=$(mktemp -d -t termind.XXXXXX) || exit 97",
            "readonly d",
            "trap 'rm -rf \"$d\"' EXIT",
        ]
        // Each command is one single-quoted word for a shell of its own: nothing in it can
        // reach the script around it (close a subshell, set `d`, touch the trap).
        for (index, command) in commands.enumerated() {
            lines.append("sh -c \(quoted(command)) >\"$d/\(index).o\" 2>\"$d/\(index).e\" </dev/null &")
            lines.append("p\(index)=$!")
        }
        for index in commands.indices {
            lines.append("wait \"$p\(index)\"; s\(index)=$?")
        }
        for index in commands.indices {
            lines.append("printf 'TERMIND-BATCH %s %s %s %s\\n' \(index) \"$s\(index)\" \"$(wc -c <\"$d/\(index).o\")\" \"$(wc -c <\"$d/\(index).e\")\"")
            lines.append("cat \"$d/\(index).o\" \"$d/\(index).e\"")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` as one single-quoted shell word (`'` written as `'\''`).
    public static func quoted(_ text: String) -> String {
        ShellText.singleQuoted(text)
    }

    public struct Outcome: Sendable, Equatable {
        /// The exit status as the shell reports it (128 + N for a signal).
        public var status: Int32
        public var stdout: Data
        public var stderr: Data
    }

    /// Each command's outcome from the session's standard output, in order; nil when it is
    /// not what the script prints (cut short, or not the script's).
    public static func parse(_ output: Data, count: Int) -> [Outcome]? {
        var outcomes: [Outcome] = []
        var at = output.startIndex
        while outcomes.count < count {
            guard let newline = output[at...].firstIndex(of: 0x0A) else { return nil }
            let header = String(decoding: output[at..<newline], as: UTF8.self).split(separator: " ")
            guard header.count == 5, header[0] == "TERMIND-BATCH", Int(header[1]) == outcomes.count,
                  let status = Int32(header[2]), let outLength = Int(header[3]), let errLength = Int(header[4]),
                  outLength >= 0, errLength >= 0 else { return nil }
            let start = output.index(after: newline)
            guard output.endIndex - start >= outLength + errLength else { return nil }
            let middle = start + outLength
            outcomes.append(Outcome(status: status, stdout: Data(output[start..<middle]), stderr: Data(output[middle..<(middle + errLength)])))
            at = middle + errLength
        }
        return outcomes
    }
}
