internal import CVTerm

/// How a cell is drawn: SGR attributes and colours, as libvterm keeps them per cell.
struct Pen: Equatable {
    enum Color: Equatable {
        case `default`
        case indexed(UInt8)
        case rgb(UInt8, UInt8, UInt8)

        init(_ color: VTermColor, foreground: Bool) {
            var color = color
            if foreground ? termind_vterm_color_is_default_fg(&color) != 0 : termind_vterm_color_is_default_bg(&color) != 0 {
                self = .default
            } else if termind_vterm_color_is_indexed(&color) != 0 {
                self = .indexed(color.indexed.idx)
            } else {
                self = .rgb(color.rgb.red, color.rgb.green, color.rgb.blue)
            }
        }

        /// SGR parameters for this colour as a foreground (30…) or background (40…).
        func parameters(foreground: Bool) -> String? {
            let base = foreground ? 30 : 40
            switch self {
            case .default: return nil
            case .indexed(let index) where index < 8: return "\(base + Int(index))"
            case .indexed(let index) where index < 16: return "\(base + 60 + Int(index) - 8)"
            case .indexed(let index): return "\(base + 8);5;\(index)"
            case .rgb(let red, let green, let blue): return "\(base + 8);2;\(red);\(green);\(blue)"
            }
        }
    }

    var bold = false
    /// 0 none, 1 single, 2 double, 3 curly.
    var underline = 0
    var italic = false
    var blink = false
    var reverse = false
    var strike = false
    var foreground = Color.default
    var background = Color.default

    /// The SGR sequence that sets exactly this pen from any other.
    var sgr: String {
        var parameters = ["0"]
        if bold { parameters.append("1") }
        if italic { parameters.append("3") }
        switch underline {
        case 1: parameters.append("4")
        case 2: parameters.append("21")
        case 3: parameters.append("4:3")
        default: break
        }
        if blink { parameters.append("5") }
        if reverse { parameters.append("7") }
        if strike { parameters.append("9") }
        if let colour = foreground.parameters(foreground: true) { parameters.append(colour) }
        if let colour = background.parameters(foreground: false) { parameters.append(colour) }
        return "\u{1B}[" + parameters.joined(separator: ";") + "m"
    }
}
