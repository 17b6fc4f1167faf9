/// Text typed into a terminal on a person's behalf (broadcast): the keys it becomes.
public enum TerminalInput {
    /// `text` as keys: one bracketed paste when the program asked for it (`CSI ? 2004 h`) —
    /// with every ESC in the text dropped, so that nothing in it can end the paste early
    /// (not even a marker that dropping part of another would form) and have the rest run as
    /// typed — else each newline as Enter (CR, as a terminal sends it); then Enter when
    /// `enter`. Mouse reports are never typed (any in the text go).
    public static func keys(for text: String, bracketedPaste: Bool, enter: Bool) -> [UInt8] {
        var keys = withoutMouseReports(Array(text.utf8))
        if bracketedPaste {
            keys = Array("\u{1B}[200~".utf8) + keys.filter { $0 != 0x1B } + Array("\u{1B}[201~".utf8)
        } else {
            var typed: [UInt8] = []
            var previous: UInt8 = 0
            for byte in keys {
                if byte == 0x0A { if previous != 0x0D { typed.append(0x0D) } } else { typed.append(byte) }
                previous = byte
            }
            keys = typed
        }
        if enter { keys.append(0x0D) }
        return keys
    }

    /// `bytes` without X10/normal (`ESC [ M` and three bytes) or SGR (`ESC [ <` digits and `;`,
    /// then `M` or `m`) mouse reports.
    public static func withoutMouseReports(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x1B, index + 2 < bytes.count, bytes[index + 1] == 0x5B {
                if bytes[index + 2] == 0x4D {
                    index += 6
                    continue
                }
                if bytes[index + 2] == 0x3C {
                    var end = index + 3
                    while end < bytes.count, (0x30...0x39).contains(bytes[end]) || bytes[end] == 0x3B { end += 1 }
                    if end < bytes.count, bytes[end] == 0x4D || bytes[end] == 0x6D {
                        index = end + 1
                        continue
                    }
                }
            }
            out.append(bytes[index])
            index += 1
        }
        return out
    }
}
