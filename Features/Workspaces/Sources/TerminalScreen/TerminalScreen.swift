internal import CVTerm
import WorkspacesRules

/// A remote terminal's screen as termind keeps it for a durable session: libvterm's model of
/// every cell (characters, colours, attributes), the cursor, the alternate screen, and the
/// lines that scrolled off the top (bounded: `scrollbackLimit` lines and 16 MiB). Fed the
/// remote terminal's output as it arrives; `redraw()` gives the bytes that paint the same
/// screen on a fresh terminal of the same size — the state, not a replay of what was sent.
///
/// Not thread-safe: its owner serializes every call (a durable session's screen model keeps
/// it on a queue of its own).
/// The C handles never leave this class.
public final class TerminalScreen {
    public private(set) var rows: Int
    public private(set) var columns: Int
    /// Lines kept once they scrolled off the top.
    public let scrollbackLimit: Int
    /// Bytes the scrollback holds at most, whatever the line count.
    public static let scrollbackByteLimit = 16 << 20
    /// The window title the program set last (OSC 0/2), if any.
    public private(set) var title: String?

    private let vt: OpaquePointer
    private let screen: OpaquePointer
    private let state: OpaquePointer
    private let callbacks: UnsafeMutablePointer<VTermScreenCallbacks>
    private var scanner = TerminalScanner()
    private var scrollback = Scrollback()

    public init(rows: Int, columns: Int, scrollbackLimit: Int) {
        self.rows = Self.clamp(rows)
        self.columns = Self.clamp(columns)
        self.scrollbackLimit = max(0, scrollbackLimit)
        vt = vterm_new(Int32(self.rows), Int32(self.columns))
        vterm_set_utf8(vt, 1)
        // Answers to queries (device attributes, cursor reports) come from the client's own
        // terminal while one is attached; the model never answers.
        vterm_output_set_callback(vt, { _, _, _ in }, nil)
        screen = vterm_obtain_screen(vt)
        state = vterm_obtain_state(vt)
        callbacks = .allocate(capacity: 1)
        callbacks.initialize(to: VTermScreenCallbacks())
        callbacks.pointee.sb_pushline = { columns, cells, user in
            guard let user, let cells else { return 0 }
            let me = Unmanaged<TerminalScreen>.fromOpaque(user).takeUnretainedValue()
            me.pushLine(UnsafeBufferPointer(start: cells, count: Int(columns)))
            return 1
        }
        vterm_screen_set_callbacks(screen, callbacks, Unmanaged.passUnretained(self).toOpaque())
        vterm_screen_enable_altscreen(screen, 1)
        vterm_screen_reset(screen, 1)
    }

    deinit {
        vterm_free(vt)
        callbacks.deinitialize(count: 1)
        callbacks.deallocate()
    }

    private static func clamp(_ value: Int) -> Int { min(max(value, 1), 1000) }

    /// The modes a redraw sets again (DECCKM, bracketed paste, mouse, …).
    public var modes: TerminalModes { scanner.modes }

    /// Lines held in the scrollback now.
    public var scrollbackCount: Int { scrollback.count }

    /// Takes the remote terminal's output; returns the shell marks it completed (OSC 133, 7, 0/2).
    @discardableResult
    public func feed(_ bytes: some Collection<UInt8>) -> [TerminalMark] {
        let bytes = Array(bytes)
        let found = scanner.scanWithOffsets(bytes)
        var start = 0
        for (offset, mark) in found {
            switch mark {
            case .title(let text):
                title = text
            case .alternateScreen(true):
                // The main screen as it is when a program leaves it: libvterm keeps it but
                // does not show it while the alternate one is up, and a redraw paints it first.
                // Everything but the sequence's final byte is drawn by then.
                write(bytes[start..<offset])
                start = offset
                savedMain = SavedScreen(rows: (0..<rows).map { row in
                    var line: [UInt8] = []
                    render(row: row, into: &line)
                    return line
                }, cursor: cursor)
            case .alternateScreen(false):
                savedMain = nil
            default:
                break
            }
        }
        write(bytes[start...])
        return found.map(\.mark)
    }

    private func write(_ bytes: ArraySlice<UInt8>) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = vterm_input_write(vt, $0.baseAddress, $0.count) }
        }
    }

    /// The main screen while a program shows the alternate one: its rows and cursor.
    private struct SavedScreen {
        var rows: [[UInt8]]
        var cursor: (row: Int, column: Int)
    }

    private var savedMain: SavedScreen?

    /// Carries on after output that was not fed (the model fell too far behind): whatever
    /// sequence was half read is abandoned, the screen switches to the one `modes` shows and
    /// the modes are taken as they are; on the main screen a line says how much was left out
    /// (it scrolls into the scrollback with what follows).
    public func resynchronize(modes: TerminalModes, skippedBytes: Int) {
        var bytes: [UInt8] = [0x18]  // CAN: no sequence goes on across the gap
        if modes.alternateScreen != scanner.modes.alternateScreen {
            bytes += Array((modes.alternateScreen ? "\u{1B}[?1049h" : "\u{1B}[?1049l").utf8)
        }
        if !modes.alternateScreen {
            bytes += Array("\r\n\u{1B}[0;7m[termind: \(skippedBytes) bytes of output came faster than this screen could follow]\u{1B}[0m\r\n".utf8)
        }
        bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = vterm_input_write(vt, $0.baseAddress, $0.count) }
        }
        scanner.adopt(modes)
    }

    /// A new size (1…1000 each way); lines pushed off the top go to the scrollback.
    public func resize(rows: Int, columns: Int) {
        let rows = Self.clamp(rows), columns = Self.clamp(columns)
        guard rows != self.rows || columns != self.columns else { return }
        self.rows = rows
        self.columns = columns
        vterm_set_size(vt, Int32(rows), Int32(columns))
    }

    /// Where the cursor is, zero-based.
    public var cursor: (row: Int, column: Int) {
        var position = VTermPos()
        vterm_state_get_cursorpos(state, &position)
        return (Int(position.row), Int(position.col))
    }

    /// The screen's text, one string per row, trailing blanks removed.
    public func lines() -> [String] {
        (0..<rows).map { row in
            var scalars = String.UnicodeScalarView()
            var blanks = 0
            for cell in cells(row: row) {
                if cell.isBlank {
                    blanks += cell.width
                    continue
                }
                scalars.append(contentsOf: repeatElement(" ", count: blanks))
                blanks = 0
                scalars.append(contentsOf: cell.scalars)
            }
            return String(scalars)
        }
    }

    /// The scrollback's text, oldest first (SGR sequences removed), for tests and searches.
    public func scrollbackLines() -> [String] {
        scrollback.suffix(scrollback.count).map { Self.plainText($0) }
    }

    // MARK: - Redraw

    /// Bytes that paint this screen on a terminal of the same size in its default modes,
    /// whose cursor is at the start of a line: the scrollback `scrollbackLines` (nil: all
    /// of it) as lines that scroll into the terminal's own history, then every row, so the
    /// terminal shows exactly the model's rows; then the cursor, the pen, the scroll region,
    /// the modes and the title. On the alternate screen, that screen alone is painted.
    public func redraw(scrollbackLines: Int? = nil) -> [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: "\u{1B}[0m".utf8)
        let modes = scanner.modes
        if modes.alternateScreen {
            // The main screen first (what shows when the program leaves), with its cursor
            // saved by the switch, then the alternate screen over it.
            for line in scrollback.suffix(min(scrollback.count, scrollbackLines ?? Int.max)) {
                out.append(contentsOf: line)
                out.append(contentsOf: "\r\n".utf8)
            }
            if let savedMain {
                for (index, line) in savedMain.rows.enumerated() {
                    out.append(contentsOf: line)
                    if index < savedMain.rows.count - 1 { out.append(contentsOf: "\r\n".utf8) }
                }
                out.append(contentsOf: "\u{1B}[0m\u{1B}[\(savedMain.cursor.row + 1);\(savedMain.cursor.column + 1)H".utf8)
            }
            out.append(contentsOf: "\u{1B}[?1049h\u{1B}[H\u{1B}[2J".utf8)
            for row in 0..<rows {
                out.append(contentsOf: "\u{1B}[\(row + 1);1H".utf8)
                render(row: row, into: &out)
            }
        } else {
            for line in scrollback.suffix(min(scrollback.count, scrollbackLines ?? Int.max)) {
                out.append(contentsOf: line)
                out.append(contentsOf: "\r\n".utf8)
            }
            for row in 0..<rows {
                render(row: row, into: &out)
                if row < rows - 1 { out.append(contentsOf: "\r\n".utf8) }
            }
        }
        out.append(contentsOf: "\u{1B}[0m".utf8)
        let cursor = self.cursor
        if let region = modes.scrollRegion { out.append(contentsOf: "\u{1B}[\(region.top);\(region.bottom)r".utf8) }
        if modes.originMode, let region = modes.scrollRegion {
            out.append(contentsOf: "\u{1B}[?6h\u{1B}[\(cursor.row - region.top + 2);\(cursor.column + 1)H".utf8)
        } else {
            out.append(contentsOf: "\u{1B}[\(cursor.row + 1);\(cursor.column + 1)H".utf8)
        }
        out.append(contentsOf: penSequence().utf8)
        out.append(contentsOf: modes.sequences.utf8)
        if let title { out.append(contentsOf: "\u{1B}]2;\(title)\u{7}".utf8) }
        return out
    }

    /// One row: its cells with their pen; blank cells at the end left out and the rest of
    /// the line erased (unless the row is full, where an erase would take the last cell).
    private func render(row: Int, into out: inout [UInt8]) {
        let cells = cells(row: row)
        let end = (cells.lastIndex { !$0.isBlank || $0.pen.background != .default || $0.pen.reverse }).map { $0 + 1 } ?? 0
        var pen = Pen()
        var width = 0
        for cell in cells[..<end] {
            if cell.pen != pen {
                out.append(contentsOf: cell.pen.sgr.utf8)
                pen = cell.pen
            }
            if cell.scalars.isEmpty {
                out.append(0x20)
            } else {
                for scalar in cell.scalars { out.append(contentsOf: String(scalar).utf8) }
            }
            width += cell.width
        }
        if pen != Pen() { out.append(contentsOf: "\u{1B}[0m".utf8) }
        if width < columns { out.append(contentsOf: "\u{1B}[K".utf8) }
    }

    /// The pen text printed next is drawn with (SGR), from the default.
    private func penSequence() -> String {
        var value = VTermValue()
        func flag(_ attr: VTermAttr) -> Bool {
            vterm_state_get_penattr(state, attr, &value) != 0 && value.boolean != 0
        }
        var pen = Pen()
        pen.bold = flag(VTERM_ATTR_BOLD)
        pen.italic = flag(VTERM_ATTR_ITALIC)
        pen.blink = flag(VTERM_ATTR_BLINK)
        pen.reverse = flag(VTERM_ATTR_REVERSE)
        pen.strike = flag(VTERM_ATTR_STRIKE)
        if vterm_state_get_penattr(state, VTERM_ATTR_UNDERLINE, &value) != 0 { pen.underline = Int(value.number) }
        if vterm_state_get_penattr(state, VTERM_ATTR_FOREGROUND, &value) != 0 { pen.foreground = Pen.Color(value.color, foreground: true) }
        if vterm_state_get_penattr(state, VTERM_ATTR_BACKGROUND, &value) != 0 { pen.background = Pen.Color(value.color, foreground: false) }
        return pen == Pen() ? "" : pen.sgr
    }

    // MARK: - Cells

    struct Cell {
        var scalars: [Unicode.Scalar]
        var width: Int
        var pen: Pen
        var isBlank: Bool { scalars.isEmpty || scalars == [" "] }
    }

    private func cells(row: Int) -> [Cell] {
        var result: [Cell] = []
        result.reserveCapacity(columns)
        var cell = VTermScreenCell()
        var column = 0
        while column < columns {
            guard vterm_screen_get_cell(screen, VTermPos(row: Int32(row), col: Int32(column)), &cell) != 0 else { break }
            let converted = Self.cell(cell)
            result.append(converted)
            column += max(converted.width, 1)
        }
        return result
    }

    private static func cell(_ cell: VTermScreenCell) -> Cell {
        var scalars: [Unicode.Scalar] = []
        forEachScalar(of: cell) { scalars.append($0) }
        return Cell(scalars: scalars, width: max(1, Int(cell.width)), pen: pen(of: cell))
    }

    /// The cell's characters, up to the first empty or invalid slot.
    private static func forEachScalar(of cell: VTermScreenCell, _ body: (Unicode.Scalar) -> Void) {
        withUnsafeBytes(of: cell.chars) { raw in
            for code in raw.bindMemory(to: UInt32.self) {
                guard code != 0, code != UInt32.max, let scalar = Unicode.Scalar(code) else { break }
                body(scalar)
            }
        }
    }

    private static func pen(of cell: VTermScreenCell) -> Pen {
        var copy = cell
        let attrs = termind_vterm_cell_attrs(&copy)
        var pen = Pen()
        pen.bold = attrs.bold != 0
        pen.underline = Int(attrs.underline)
        pen.italic = attrs.italic != 0
        pen.blink = attrs.blink != 0
        pen.reverse = attrs.reverse != 0
        pen.strike = attrs.strike != 0
        pen.foreground = Pen.Color(cell.fg, foreground: true)
        pen.background = Pen.Color(cell.bg, foreground: false)
        return pen
    }

    /// As `Cell.isBlank`, without making a `Cell`: no character, or one space.
    private static func isBlank(_ cell: VTermScreenCell) -> Bool {
        var count = 0, first: Unicode.Scalar?
        forEachScalar(of: cell) { scalar in
            if count == 0 { first = scalar }
            count += 1
        }
        return count == 0 || (count == 1 && first == " ")
    }

    // MARK: - Scrollback

    /// A line that scrolled off the top goes into the scrollback as text with SGR, trailing
    /// blanks on the default background left out. Straight from libvterm's cells, with no
    /// `Cell` (an array each) per cell: a flood scrolls a line every 80 bytes.
    private func pushLine(_ cells: UnsafeBufferPointer<VTermScreenCell>) {
        guard scrollbackLimit > 0 else { return }
        var end = cells.count
        while end > 0, Self.isBlank(cells[end - 1]), Pen.Color(cells[end - 1].bg, foreground: false) == .default { end -= 1 }
        var line: [UInt8] = []
        line.reserveCapacity(end + 8)
        var pen = Pen()
        var index = 0
        while index < end {
            let cell = cells[index]
            let cellPen = Self.pen(of: cell)
            if cellPen != pen {
                line.append(contentsOf: cellPen.sgr.utf8)
                pen = cellPen
            }
            let before = line.count
            Self.forEachScalar(of: cell) { UTF8.encode($0) { line.append($0) } }
            if line.count == before { line.append(0x20) }
            index += max(Int(cell.width), 1)
        }
        if pen != Pen() { line.append(contentsOf: "\u{1B}[0m".utf8) }
        scrollback.append(line, lineLimit: scrollbackLimit, byteLimit: Self.scrollbackByteLimit)
    }

    static func plainText(_ line: [UInt8]) -> String {
        var text: [UInt8] = []
        var index = 0
        while index < line.count {
            if line[index] == 0x1B, index + 1 < line.count, line[index + 1] == 0x5B {
                index += 2
                while index < line.count, !(0x40...0x7E).contains(line[index]) { index += 1 }
                index += 1
                continue
            }
            text.append(line[index])
            index += 1
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// The lines that scrolled off, oldest first: past either bound the oldest go, each in
/// constant time (the storage is compacted once its dropped head outgrows what is kept).
struct Scrollback {
    private var storage: [[UInt8]] = []
    private var start = 0
    private var bytes = 0

    var count: Int { storage.count - start }

    /// The newest `count` lines, oldest first.
    func suffix(_ count: Int) -> [[UInt8]] { Array(storage[max(start, storage.count - count)...]) }

    mutating func append(_ line: [UInt8], lineLimit: Int, byteLimit: Int) {
        guard lineLimit > 0 else { return }
        storage.append(line)
        bytes += line.count
        while count > 1 && (count > lineLimit || bytes > byteLimit) {
            bytes -= storage[start].count
            storage[start] = []
            start += 1
        }
        if start > 1024 && start > storage.count / 2 {
            storage.removeFirst(start)
            start = 0
        }
    }
}
