/// The terminal modes a program sets with escape sequences and expects to stay set — the
/// ones a redraw on a fresh terminal must set again (DEC private modes, the keypad, the
/// scroll region, the cursor's style), as `TerminalScanner` tracked them.
public struct TerminalModes: Sendable, Equatable {
    /// DECCKM (`CSI ? 1 h`): cursor keys send application sequences.
    public var applicationCursor = false
    /// DECKPAM (`ESC =`): the keypad sends application sequences.
    public var applicationKeypad = false
    /// `CSI ? 2004 h`: pasted text arrives between markers.
    public var bracketedPaste = false
    /// The mouse reporting the program asked for (9, 1000, 1001, 1002 or 1003), if any.
    public var mouseTracking: Int?
    /// How mouse reports are encoded (1005, 1006 or 1015), if not the default.
    public var mouseEncoding: Int?
    /// `CSI ? 1004 h`: focus in/out reports.
    public var focusEvents = false
    /// DECAWM (`CSI ? 7`): on unless a program turned it off.
    public var autowrap = true
    /// DECOM (`CSI ? 6 h`): cursor addressing relative to the scroll region.
    public var originMode = false
    /// IRM (`CSI 4 h`): printed characters push the rest of the line right.
    public var insertMode = false
    /// DECTCEM (`CSI ? 25`).
    public var cursorVisible = true
    /// DECSCNM (`CSI ? 5 h`): the whole screen in reverse video.
    public var reverseVideo = false
    /// The alternate screen (`CSI ? 1049 h`, 1047, 47) is shown.
    public var alternateScreen = false
    /// DECSTBM (`CSI top ; bottom r`), one-based rows; nil: the whole screen.
    public var scrollRegion: ScrollRegion?
    /// DECSCUSR (`CSI n SP q`), if a program chose one.
    public var cursorStyle: Int?

    public struct ScrollRegion: Sendable, Equatable {
        public var top: Int
        public var bottom: Int
        public init(top: Int, bottom: Int) {
            self.top = top
            self.bottom = bottom
        }
    }

    public init() {}

    /// The modes DECSTR (`CSI ! p`) puts back; mouse, paste and the screen stay as they are.
    mutating func softReset() {
        applicationCursor = false
        applicationKeypad = false
        autowrap = true
        originMode = false
        insertMode = false
        cursorVisible = true
        scrollRegion = nil
    }

    /// Sets DEC private mode `mode` on or off; unknown modes are ignored.
    mutating func set(privateMode mode: Int, _ on: Bool) {
        switch mode {
        case 1: applicationCursor = on
        case 5: reverseVideo = on
        case 6: originMode = on
        case 7: autowrap = on
        case 25: cursorVisible = on
        case 47, 1047, 1049: alternateScreen = on
        case 1004: focusEvents = on
        case 2004: bracketedPaste = on
        case 9, 1000, 1001, 1002, 1003:
            if on { mouseTracking = mode } else if mouseTracking == mode { mouseTracking = nil }
        case 1005, 1006, 1015:
            if on { mouseEncoding = mode } else if mouseEncoding == mode { mouseEncoding = nil }
        default: break
        }
    }

    /// What puts a terminal in its default modes into these, except the alternate screen and
    /// the scroll region (a redraw places those around the screen's content itself) and
    /// origin mode (it changes what the cursor position means; set last by `trailer`).
    public var sequences: String {
        var out = ""
        if applicationCursor { out += "\u{1B}[?1h" }
        if applicationKeypad { out += "\u{1B}=" }
        if bracketedPaste { out += "\u{1B}[?2004h" }
        if let mouseTracking { out += "\u{1B}[?\(mouseTracking)h" }
        if let mouseEncoding { out += "\u{1B}[?\(mouseEncoding)h" }
        if focusEvents { out += "\u{1B}[?1004h" }
        if !autowrap { out += "\u{1B}[?7l" }
        if insertMode { out += "\u{1B}[4h" }
        if reverseVideo { out += "\u{1B}[?5h" }
        if let cursorStyle { out += "\u{1B}[\(cursorStyle) q" }
        out += cursorVisible ? "\u{1B}[?25h" : "\u{1B}[?25l"
        return out
    }

    /// What takes a terminal out of these modes again (a client leaving a session): every
    /// mode a program may have set, back to the default.
    public var resetSequences: String {
        var out = ""
        if applicationCursor { out += "\u{1B}[?1l" }
        if applicationKeypad { out += "\u{1B}>" }
        if bracketedPaste { out += "\u{1B}[?2004l" }
        if let mouseTracking { out += "\u{1B}[?\(mouseTracking)l" }
        if let mouseEncoding { out += "\u{1B}[?\(mouseEncoding)l" }
        if focusEvents { out += "\u{1B}[?1004l" }
        if !autowrap { out += "\u{1B}[?7h" }
        if insertMode { out += "\u{1B}[4l" }
        if reverseVideo { out += "\u{1B}[?5l" }
        if originMode { out += "\u{1B}[?6l" }
        if scrollRegion != nil { out += "\u{1B}[r" }
        if cursorStyle != nil { out += "\u{1B}[0 q" }
        if alternateScreen { out += "\u{1B}[?1049l" }
        if !cursorVisible { out += "\u{1B}[?25h" }
        return out + "\u{1B}[0m"
    }
}
