import struct FoundationEssentials.Data
import Glibc

/// What a remote terminal's output says about its shell, beside what it draws: shell
/// integration marks (OSC 133, as FinalTerm, kitty and others send them), the working folder
/// (OSC 7) and the window title (OSC 0/2).
public enum TerminalMark: Sendable, Equatable {
    /// OSC 133 ; A — a prompt starts.
    case promptStart
    /// OSC 133 ; B — the prompt ended; what is typed now is the command.
    case commandStart
    /// OSC 133 ; C — the command runs; with the command line when the shell said it
    /// (`cmdline_url=` percent-encoded, or kitty's `cmdline=`).
    case commandExecuted(commandLine: String?)
    /// OSC 133 ; D [; status] — the command finished, with its exit status and, when the
    /// shell measured it (`duration_ms=`), how long it ran by the remote clock.
    case commandFinished(status: Int?, durationMilliseconds: Int?)
    /// OSC 7 ; file://HOST/PATH — the shell's current folder (the path, percent-decoded).
    case workingDirectory(String)
    /// OSC 0 or 2 — the window title.
    case title(String)
    /// OSC 133 ; termind-ready ; NONCE — termind's shell bootstrap has run (see `ShellBootstrap`).
    case bootstrapReady(nonce: String)
    /// `CSI ? 1049 h` (or 1047, 47) switched to the alternate screen, or back (`l`): reported
    /// only when the screen shown changes.
    case alternateScreen(Bool)
}

/// Reads a terminal's output stream as a terminal would, byte by byte across any chunking,
/// and reports the marks above and keeps the modes a redraw needs (`TerminalModes`). It
/// draws nothing: the screen itself is `TerminalScreen`'s.
///
/// Bounded: an OSC string longer than `oscLimit` bytes is skipped whole (nothing reported
/// of it), CSI parameters beyond 16 and numbers beyond 99,999 are clamped, so a hostile
/// stream cannot make it hold more than a few KiB.
public struct TerminalScanner: Sendable {
    public static let oscLimit = 16 << 10

    public private(set) var modes = TerminalModes()

    private enum State: Sendable {
        case ground, escape, escapeIntermediate, csi, osc, oscEscape, string, stringEscape
    }

    private var state = State.ground
    private var csiPrivate: UInt8 = 0
    private var csiParams: [Int] = []
    private var csiCurrent: Int?
    private var csiIntermediate: UInt8 = 0
    private var osc: [UInt8] = []
    private var oscOverflow = false

    public init() {}

    /// Takes `modes` as the modes now, with no sequence half read: for a reader that skipped
    /// part of the stream and learnt the modes at its end from another scanner.
    public mutating func adopt(_ modes: TerminalModes) {
        self.modes = modes
        state = .ground
        osc.removeAll(keepingCapacity: true)
        oscOverflow = false
    }

    /// Reads `bytes` and returns the marks they complete, in order.
    public mutating func scan(_ bytes: some Sequence<UInt8>) -> [TerminalMark] {
        scanWithOffsets(bytes).map(\.mark)
    }

    /// As `scan`, with the offset in `bytes` of the byte that completed each mark.
    public mutating func scanWithOffsets(_ bytes: some Sequence<UInt8>) -> [(offset: Int, mark: TerminalMark)] {
        if let marks = bytes.withContiguousStorageIfAvailable({ scanRaw(UnsafeRawBufferPointer($0)) }) { return marks }
        return Array(bytes).withUnsafeBytes { scanRaw($0) }
    }

    /// As `scanWithOffsets`, for a terminal's output as it arrives (no copy).
    public mutating func scanWithOffsets(_ data: Data) -> [(offset: Int, mark: TerminalMark)] {
        data.withUnsafeBytes { scanRaw($0) }
    }

    private mutating func scanRaw(_ bytes: UnsafeRawBufferPointer) -> [(offset: Int, mark: TerminalMark)] {
        var marks: [(offset: Int, mark: TerminalMark)] = []
        var offset = 0
        let count = bytes.count
        while offset < count {
            // Text between sequences is most of a terminal's output: skip to the next ESC.
            // memchr: the slice's generic firstIndex went byte by byte (a twentieth of the
            // SSH engine's CPU while a flood went through a durable session).
            if case .ground = state {
                guard let escape = memchr(bytes.baseAddress! + offset, 0x1B, count - offset) else { break }
                offset = bytes.baseAddress!.distance(to: UnsafeRawPointer(escape))
            }
            let byte = bytes[offset]
            defer { offset += 1 }
            // CAN and SUB abort any sequence; ESC starts a new one (except inside strings,
            // where it may be the first half of ST).
            if byte == 0x18 || byte == 0x1A {
                state = .ground
                continue
            }
            switch state {
            case .ground:
                if byte == 0x1B { state = .escape }
            case .escape:
                let alternate = modes.alternateScreen
                escape(byte)
                if modes.alternateScreen != alternate { marks.append((offset, .alternateScreen(modes.alternateScreen))) }
            case .escapeIntermediate:
                // ESC ( 0, ESC # 8 …: one final byte ends it.
                if byte == 0x1B { state = .escape } else if byte >= 0x30 { state = .ground }
            case .csi:
                let alternate = modes.alternateScreen
                csi(byte)
                if modes.alternateScreen != alternate { marks.append((offset, .alternateScreen(modes.alternateScreen))) }
            case .osc:
                switch byte {
                case 0x07:
                    if let mark = finishOSC() { marks.append((offset, mark)) }
                    state = .ground
                case 0x1B:
                    state = .oscEscape
                default:
                    if osc.count < Self.oscLimit { osc.append(byte) } else { oscOverflow = true }
                }
            case .oscEscape:
                if byte == 0x5C, let mark = finishOSC() { marks.append((offset, mark)) }
                // ESC followed by anything else: the OSC was cut off; that ESC starts anew.
                if byte == 0x5C { state = .ground } else {
                    state = .escape
                    escape(byte)
                }
            case .string:
                if byte == 0x1B { state = .stringEscape } else if byte == 0x07 { state = .ground }
            case .stringEscape:
                if byte == 0x5C { state = .ground } else if byte != 0x1B { state = .string }
            }
        }
        return marks
    }

    private mutating func escape(_ byte: UInt8) {
        switch byte {
        case 0x5B:  // [
            state = .csi
            csiPrivate = 0
            csiParams.removeAll(keepingCapacity: true)
            csiCurrent = nil
            csiIntermediate = 0
        case 0x5D:  // ]
            state = .osc
            osc.removeAll(keepingCapacity: true)
            oscOverflow = false
        case 0x50, 0x58, 0x5E, 0x5F:  // DCS, SOS, PM, APC: skipped to their ST
            state = .string
        case 0x3D:  // =
            modes.applicationKeypad = true
            state = .ground
        case 0x3E:  // >
            modes.applicationKeypad = false
            state = .ground
        case 0x63:  // c: RIS, a full reset
            modes = TerminalModes()
            state = .ground
        case 0x1B:
            state = .escape
        case 0x20...0x2F:
            state = .escapeIntermediate
        default:
            state = .ground
        }
    }

    private mutating func csi(_ byte: UInt8) {
        switch byte {
        case 0x30...0x39:
            csiCurrent = min((csiCurrent ?? 0) * 10 + Int(byte - 0x30), 99_999)
        case 0x3B, 0x3A:  // ; (and : sub-parameters, read as separators)
            if csiParams.count < 16 { csiParams.append(csiCurrent ?? 0) }
            csiCurrent = nil
        case 0x3C...0x3F:  // < = > ?
            if csiParams.isEmpty && csiCurrent == nil { csiPrivate = byte }
        case 0x20...0x2F:
            csiIntermediate = byte
        case 0x40...0x7E:
            if let csiCurrent, csiParams.count < 16 { csiParams.append(csiCurrent) }
            finishCSI(byte)
            state = .ground
        case 0x1B:
            state = .escape
        default:
            break  // C0 controls inside a CSI are executed by a terminal; nothing to track
        }
    }

    private mutating func finishCSI(_ final: UInt8) {
        switch (csiPrivate, csiIntermediate, final) {
        case (0x3F, 0, 0x68), (0x3F, 0, 0x6C):  // ? h / ? l
            for mode in csiParams { modes.set(privateMode: mode, final == 0x68) }
        case (0, 0, 0x68), (0, 0, 0x6C):
            if csiParams.contains(4) { modes.insertMode = final == 0x68 }
        case (0, 0, 0x72):  // r: DECSTBM
            let top = csiParams.first ?? 0, bottom = csiParams.count > 1 ? csiParams[1] : 0
            modes.scrollRegion = top <= 1 && bottom == 0 ? nil : TerminalModes.ScrollRegion(top: max(top, 1), bottom: bottom)
        case (0, 0x21, 0x70):  // ! p: DECSTR
            modes.softReset()
        case (0, 0x20, 0x71):  // SP q: DECSCUSR
            let style = csiParams.first ?? 0
            modes.cursorStyle = style == 0 ? nil : style
        default:
            break
        }
    }

    private mutating func finishOSC() -> TerminalMark? {
        defer {
            osc.removeAll(keepingCapacity: true)
            oscOverflow = false
        }
        guard !oscOverflow else { return nil }
        let separator = osc.firstIndex(of: 0x3B) ?? osc.endIndex
        let command = String(decoding: osc[..<separator], as: UTF8.self)
        let text = separator < osc.endIndex ? Array(osc[(separator + 1)...]) : []
        switch command {
        case "0", "2":
            return .title(String(decoding: text, as: UTF8.self))
        case "7":
            return Self.workingDirectory(text).map { .workingDirectory($0) }
        case "133":
            return Self.shellMark(text)
        default:
            return nil
        }
    }

    /// `file://HOST/PATH` (or kitty's `kitty-shell-cwd://`): the path, percent-decoded.
    static func workingDirectory(_ url: [UInt8]) -> String? {
        let text = String(decoding: url, as: UTF8.self)
        for scheme in ["file://", "kitty-shell-cwd://"] where text.hasPrefix(scheme) {
            let rest = text.dropFirst(scheme.count)
            guard let slash = rest.firstIndex(of: "/") else { return nil }
            return percentDecoded(rest[slash...])
        }
        return nil
    }

    static func shellMark(_ text: [UInt8]) -> TerminalMark? {
        let fields = text.split(separator: 0x3B, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard let kind = fields.first else { return nil }
        let options = fields.dropFirst()
        func option(_ key: String) -> String? {
            options.first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        switch kind {
        case "A": return .promptStart
        case "B": return .commandStart
        case "C":
            if let encoded = option("cmdline_url") { return .commandExecuted(commandLine: percentDecoded(Substring(encoded))) }
            return .commandExecuted(commandLine: option("cmdline"))
        case "D":
            let status = options.first.flatMap { $0.contains("=") ? nil : Int($0) }
            let duration = option("duration_ms").flatMap { Int($0) }.flatMap { $0 >= 0 ? $0 : nil }
            return .commandFinished(status: status, durationMilliseconds: duration)
        case "termind-ready":
            return options.first.map { .bootstrapReady(nonce: $0) }
        default:
            return nil
        }
    }

    /// `%XX` escapes decoded as bytes; invalid escapes kept as they are; not UTF-8: nil.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == 0x25, utf8.count >= 2, let high = hex(utf8[utf8.startIndex]), let low = hex(utf8[utf8.startIndex + 1]) {
                bytes.append(high << 4 | low)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }
}
