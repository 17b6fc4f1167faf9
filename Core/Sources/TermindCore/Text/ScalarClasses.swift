/// The character classes Foundation's `CharacterSet` named for validation (`.alphanumerics`,
/// `.controlCharacters`, `.newlines`, `.whitespacesAndNewlines`), from the standard
/// library's Unicode properties, as Apple documents each set.
extension Unicode.Scalar {
    /// Letters, marks and numbers (general categories L*, M*, N*).
    public var isAlphanumericScalar: Bool {
        switch properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
             .nonspacingMark, .spacingMark, .enclosingMark,
             .decimalNumber, .letterNumber, .otherNumber: true
        default: false
        }
    }

    /// Control and format characters (general categories Cc, Cf).
    public var isControlScalar: Bool {
        switch properties.generalCategory {
        case .control, .format: true
        default: false
        }
    }

    /// U+000A–U+000D, U+0085, U+2028, U+2029.
    public var isNewlineScalar: Bool {
        (0x0A...0x0D).contains(value) || value == 0x85 || value == 0x2028 || value == 0x2029
    }

    /// Spaces (general category Z*), the tab and the newlines.
    public var isWhitespaceOrNewlineScalar: Bool {
        switch properties.generalCategory {
        case .spaceSeparator, .lineSeparator, .paragraphSeparator: true
        default: value == 0x09 || isNewlineScalar
        }
    }
}
