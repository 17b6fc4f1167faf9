/// Text from outside termind (ssh_config lines, file names, server prompts, error messages
/// quoting them) made safe to print on a terminal: control characters that a terminal would
/// act on — ESC sequences, carriage returns, backspaces, C1 controls — and the bidirectional
/// overrides that reorder what is shown are written as visible escapes (`\x1b`, `\u202e`).
/// Newlines stay (and tabs, unless `singleLine`), so messages keep their shape.
public enum TerminalText {
    /// A byte count as people read it: "512 B", "1.5 KiB", "3.2 GiB" (binary units).
    public static func bytes(_ count: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(count) B" : String(printf: "%.1f ", value) + units[unit]
    }

    public static func escaped(_ text: String, singleLine: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, singleLine: singleLine) }) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar, singleLine: singleLine) else {
                out.append(scalar)
                continue
            }
            let hex = String(scalar.value, radix: 16)
            let escape = scalar.value < 0x100 ? "\\x" + (hex.count == 1 ? "0" : "") + hex : "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            out.append(contentsOf: escape.unicodeScalars)
        }
        return String(out)
    }

    static func needsEscape(_ scalar: Unicode.Scalar, singleLine: Bool) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: return singleLine
        case 0x00...0x1F, 0x7F, 0x80...0x9F: return true
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C: return true  // bidi controls
        default: return false
        }
    }
}
