import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Single-use secret handles in `ssh_exec` commands (docs/assistant.md, "Secrets"): the model
/// gets `@@SECRET_…@@`, never the secret, and writes the handle where the secret goes. The
/// command termind sends reads each secret from its standard input into a shell variable
/// first and uses the variable where the handle was, so the plaintext is in no command
/// line (not in the remote's `ps`, not in anything termind logs or keeps): only in the
/// channel's input.
public enum SecretHandle {
    public static let prefix = "@@SECRET_"
    public static let suffix = "@@"

    /// A new handle: 16 random lowercase letters and digits.
    public static func make() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        var generator = SystemRandomNumberGenerator()
        return prefix + String((0..<16).map { _ in alphabet[Int(generator.next(upperBound: UInt(alphabet.count)))] }) + suffix
    }

    /// The handles `command` holds (anything shaped like one), each once, in order.
    public static func handles(in command: String) -> [String] {
        var found: [String] = []
        var rest = command[...]
        while let start = rest.firstRange(of: prefix) {
            let after = rest[start.upperBound...]
            let body = after.prefix { $0.isASCII && ($0.isLetter || $0.isNumber) }
            let end = after.index(after.startIndex, offsetBy: body.count)
            if after[end...].hasPrefix(suffix) {
                let handle = prefix + body + suffix
                if !found.contains(handle) { found.append(handle) }
                rest = after[after.index(end, offsetBy: suffix.count)...]
            } else {
                rest = after
            }
        }
        return found
    }

    /// The variable the `index`th secret is read into.
    public static func variable(_ index: Int) -> String { "__termind_secret_\(index + 1)" }

    /// The command sent for `command` using `handles` (in this order, one line each on the
    /// command's standard input): each read into its variable, then the command with every
    /// handle replaced by `${variable}` (so put the handle inside double quotes where the
    /// secret must stay one word).
    public static func rewrite(_ command: String, handles: [String]) -> String {
        var body = command
        var reads: [String] = []
        for (index, handle) in handles.enumerated() {
            body = body.replacingUTF8(handle, with: "${\(variable(index))}")
            reads.append("IFS= read -r \(variable(index))")
        }
        guard !reads.isEmpty else { return command }
        return reads.joined(separator: " && ") + " && {\n" + body + "\n}"
    }
}
