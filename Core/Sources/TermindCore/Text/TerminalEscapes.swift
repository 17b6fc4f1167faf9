import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// OpenSSH's escape sequences for a bridged terminal (`ssh(1)`, ESCAPE CHARACTERS): the
/// escape character (`~`) is special only as the first character of a line, that is at
/// the start or right after a carriage return or newline. There `~.` disconnects, `~^Z`
/// suspends the client, `~?` lists the sequences and `~~` sends one `~`; `~` followed by
/// anything else sends both. A session that outlives its client (a durable one inside
/// `termind serve`) also knows `~d`, detach. The generic client runs its terminal input
/// through this before it reaches the stream.
public struct TerminalEscapes: Sendable {
    public enum Action: Equatable, Sendable {
        /// Bytes for the remote side.
        case send(Data)
        case disconnect
        case suspend
        case help
        /// `~d`, only where the session is `detachable`.
        case detach
    }

    public static let escape = UInt8(ascii: "~")
    public static let help = Self.help(detachable: false)

    /// The list `~?` shows.
    public static func help(detachable: Bool) -> String {
        "Supported escape sequences:\r\n"
            + " ~.   - terminate connection\(detachable ? " (and end the session)" : "")\r\n"
            + (detachable ? " ~d   - detach: the session goes on; termind attach returns to it\r\n" : "")
            + " ~^Z  - suspend termind\r\n"
            + " ~?   - this message\r\n"
            + " ~~   - send the escape character by typing it twice\r\n"
            + "(Note that escapes are only recognized immediately after newline.)\r\n"
    }

    private var atLineStart = true
    private var pendingEscape = false
    /// Whether `~d` detaches (else it is sent as typed).
    public let detachable: Bool

    public init(detachable: Bool = false) {
        self.detachable = detachable
    }

    /// Whether `input` goes as typed: it holds no escape character and none is pending (most
    /// keys). Then it is taken as `filter` would take it, and `filter` need not be called.
    public mutating func takesAsTyped(_ input: UnsafeRawBufferPointer) -> Bool {
        guard !pendingEscape, let base = input.baseAddress, !input.isEmpty,
              memchr(base, Int32(Self.escape), input.count) == nil else { return false }
        let last = input[input.count - 1]
        atLineStart = last == UInt8(ascii: "\r") || last == UInt8(ascii: "\n")
        return true
    }

    /// What `input` (as typed) means, in order.
    public mutating func filter(_ input: Data) -> [Action] {
        if input.withUnsafeBytes({ takesAsTyped($0) }) { return [.send(input)] }
        var actions: [Action] = []
        var plain = Data()
        func flush() {
            if !plain.isEmpty { actions.append(.send(plain)); plain = Data() }
        }
        for byte in input {
            if pendingEscape {
                pendingEscape = false
                switch byte {
                case UInt8(ascii: "."): flush(); actions.append(.disconnect); return actions
                case 0x1A: flush(); actions.append(.suspend); atLineStart = false; continue
                case UInt8(ascii: "?"): flush(); actions.append(.help); atLineStart = false; continue
                case UInt8(ascii: "d") where detachable: flush(); actions.append(.detach); return actions
                case Self.escape: plain.append(Self.escape); atLineStart = false; continue
                default:
                    plain.append(Self.escape)  // not an escape: the ~ goes too, then this byte as usual
                }
            } else if atLineStart && byte == Self.escape {
                pendingEscape = true
                continue
            }
            plain.append(byte)
            atLineStart = byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n")
        }
        flush()
        return actions
    }
}
