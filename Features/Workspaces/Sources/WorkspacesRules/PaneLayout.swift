import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A workspace's split tree as the command line writes it, and how tmux builds it.
///
/// The expression: a pane is a host (an SSH session on it), `ssh:HOST`, `sftp:HOST` or
/// `empty`; `h(A, B, …)` puts panes side by side (left to right), `v(A, B, …)` stacks them
/// (top to bottom); a child may end with its share, `60%`. Children without one share
/// what the others leave. A host with spaces or punctuation is written in double quotes.
/// Example: `h(web 60%, v(db, sftp:db))`.
public indirect enum PaneTree: Sendable, Equatable {
    case pane(kind: Kind, host: String?)
    case split(horizontal: Bool, children: [Child])

    public enum Kind: String, Sendable, Equatable {
        case ssh, sftp, empty
    }

    public struct Child: Sendable, Equatable {
        public var fraction: Double
        public var tree: PaneTree
        public init(fraction: Double, tree: PaneTree) {
            self.fraction = fraction
            self.tree = tree
        }
    }

    /// The fewest columns and rows the tree fits in: a pane needs a cell each way, panes side
    /// by side add up across (one column of border between each two), stacked ones down.
    public var minimumSize: (columns: Int, rows: Int) {
        switch self {
        case .pane:
            return (1, 1)
        case .split(let horizontal, let children):
            let sizes = children.map(\.tree.minimumSize)
            let borders = max(0, children.count - 1)
            return horizontal
                ? (sizes.map(\.columns).reduce(0, +) + borders, sizes.map(\.rows).max() ?? 1)
                : (sizes.map(\.columns).max() ?? 1, sizes.map(\.rows).reduce(0, +) + borders)
        }
    }

    /// Panes depth first, children in order (the order tmux's panes are made and numbered).
    public var leaves: [(kind: Kind, host: String?)] {
        switch self {
        case .pane(let kind, let host): [(kind, host)]
        case .split(_, let children): children.flatMap(\.tree.leaves)
        }
    }
}

public struct PaneLayoutError: Error, Equatable, CustomStringConvertible {
    public let message: String
    /// Where in the expression (0-based, in characters), when it is about one place.
    public let offset: Int?
    public var description: String { offset.map { "\(message) (at character \($0 + 1))" } ?? message }
}

public enum PaneLayout {
    public static let lengthLimit = 4096

    // MARK: - Parsing

    public static func parse(_ text: String) throws -> PaneTree {
        guard text.utf8.count <= lengthLimit else { throw PaneLayoutError(message: "the layout is longer than \(lengthLimit) bytes", offset: nil) }
        var parser = Parser(tokens: try tokenize(text), end: text.count)
        let (tree, share) = try parser.item(depth: 0)
        if share != nil { throw PaneLayoutError(message: "a share (%) belongs to a pane inside h(…) or v(…), not to the whole layout", offset: nil) }
        if let extra = parser.peek { throw PaneLayoutError(message: "unexpected \(extra.shown) after the layout", offset: extra.offset) }
        return tree
    }

    enum TokenKind: Equatable {
        /// `quotedFrom`: where in the word quoting began (nil: nowhere); what comes before
        /// it is plain (so `sftp:"my box"` is an SFTP pane on "my box").
        case open, close, comma, percent(Double), word(String, quotedFrom: Int?)
    }

    struct Token {
        let kind: TokenKind
        let offset: Int
        var shown: String {
            switch kind {
            case .open: "'('"
            case .close: "')'"
            case .comma: "','"
            case .percent(let value): "'\(value)%'"
            case .word(let text, _): "'\(text)'"
            }
        }
    }

    static func tokenize(_ text: String) throws -> [Token] {
        var tokens: [Token] = []
        let characters = Array(text)
        var index = 0
        while index < characters.count {
            let character = characters[index]
            switch character {
            case " ", "\t", "\n", "\r":
                index += 1
            case "(": tokens.append(Token(kind: .open, offset: index)); index += 1
            case ")": tokens.append(Token(kind: .close, offset: index)); index += 1
            case ",": tokens.append(Token(kind: .comma, offset: index)); index += 1
            default:
                let start = index
                var word = ""
                var quotedFrom: Int?
                while index < characters.count, !" \t\n\r(),".contains(characters[index]) {
                    if characters[index] == "\"" {
                        quotedFrom = quotedFrom ?? word.count
                        index += 1
                        var closed = false
                        while index < characters.count {
                            let c = characters[index]
                            index += 1
                            if c == "\\", index < characters.count { word.append(characters[index]); index += 1; continue }
                            if c == "\"" { closed = true; break }
                            word.append(c)
                        }
                        if !closed { throw PaneLayoutError(message: "a quote is not closed", offset: start) }
                    } else {
                        word.append(characters[index])
                        index += 1
                    }
                }
                if quotedFrom == nil, word.hasSuffix("%") {
                    guard let value = Double(word.dropLast()), value.isFinite else {
                        throw PaneLayoutError(message: "'\(word)' is not a share (write it as 60%)", offset: start)
                    }
                    tokens.append(Token(kind: .percent(value), offset: start))
                } else {
                    tokens.append(Token(kind: .word(word, quotedFrom: quotedFrom), offset: start))
                }
            }
        }
        return tokens
    }

    struct Parser {
        let tokens: [Token]
        let end: Int
        var position = 0

        var peek: Token? { position < tokens.count ? tokens[position] : nil }

        mutating func next(_ expected: String) throws -> Token {
            guard let token = peek else { throw PaneLayoutError(message: "the layout ends where \(expected) should be", offset: end) }
            position += 1
            return token
        }

        /// A pane or split, and the share written after it.
        mutating func item(depth: Int) throws -> (PaneTree, Double?) {
            let token = try next("a pane")
            guard case .word(let word, let quotedFrom) = token.kind else {
                throw PaneLayoutError(message: "expected a pane (a host, sftp:HOST, empty) or h(…)/v(…), not \(token.shown)", offset: token.offset)
            }
            let tree: PaneTree
            if quotedFrom == nil, word == "h" || word == "v", peek?.kind == .open {
                guard depth < 8 else { throw PaneLayoutError(message: "splits nest at most 8 deep", offset: token.offset) }
                position += 1
                var children: [(PaneTree, Double?, Int)] = []
                while true {
                    let at = peek?.offset ?? end
                    let (child, share) = try item(depth: depth + 1)
                    children.append((child, share, at))
                    let separator = try next("',' or ')'")
                    if separator.kind == .close { break }
                    guard separator.kind == .comma else {
                        throw PaneLayoutError(message: "expected ',' or ')' after a pane, not \(separator.shown)", offset: separator.offset)
                    }
                }
                guard children.count >= 2 else {
                    throw PaneLayoutError(message: "\(word)(…) needs two panes or more", offset: token.offset)
                }
                tree = .split(horizontal: word == "h", children: try Self.shares(children, at: token.offset))
            } else {
                tree = try Self.pane(word, quotedFrom: quotedFrom, at: token.offset)
            }
            if case .percent(let value)? = peek?.kind {
                position += 1
                return (tree, value)
            }
            return (tree, nil)
        }

        static func pane(_ word: String, quotedFrom: Int?, at offset: Int) throws -> PaneTree {
            if quotedFrom == nil, word == "empty" { return .pane(kind: .empty, host: nil) }
            for kind in [PaneTree.Kind.ssh, .sftp] where word.hasPrefix(kind.rawValue + ":") && (quotedFrom ?? .max) >= kind.rawValue.count + 1 {
                let host = String(word.dropFirst(kind.rawValue.count + 1))
                guard !host.isEmpty else { throw PaneLayoutError(message: "'\(word)' names no host", offset: offset) }
                return .pane(kind: kind, host: host)
            }
            guard !word.isEmpty else { throw PaneLayoutError(message: "an empty host name", offset: offset) }
            return .pane(kind: .ssh, host: word)
        }

        /// Written shares in percent; the rest split evenly among children without one.
        static func shares(_ children: [(PaneTree, Double?, Int)], at offset: Int) throws -> [PaneTree.Child] {
            for (_, share, at) in children {
                if let share, !(share > 0 && share < 100) {
                    throw PaneLayoutError(message: "a share must be above 0% and below 100%, not \(share)%", offset: at)
                }
            }
            let written = children.compactMap(\.1).reduce(0, +)
            let open = children.filter { $0.1 == nil }.count
            if open == 0 {
                guard abs(written - 100) <= 1 else {
                    throw PaneLayoutError(message: "the shares add up to \(written)%, not 100%", offset: offset)
                }
            } else if written >= 100 {
                throw PaneLayoutError(message: "the shares add up to \(written)%, leaving nothing for the panes without one", offset: offset)
            }
            let rest = open == 0 ? 0 : (100 - written) / Double(open)
            let total = open == 0 ? written : 100
            return children.map { PaneTree.Child(fraction: ($0.1 ?? rest) / total, tree: $0.0) }
        }
    }

    // MARK: - Writing

    /// The expression for `tree`, hosts named by `name` (a label), shares written only
    /// where the children are not even.
    public static func render(_ tree: PaneTree, name: (String) -> String = { $0 }) -> String {
        switch tree {
        case .pane(let kind, let host):
            guard let host else { return "empty" }
            let shown = word(name(host))
            return kind == .ssh && shown != "empty" && shown != "h" && shown != "v" ? shown : "\(kind.rawValue):\(shown)"
        case .split(let horizontal, let children):
            let even = children.allSatisfy { abs($0.fraction - 1 / Double(children.count)) < 0.0005 }
            let shares = percents(children.map(\.fraction))
            let parts = zip(children, shares).map { child, share in
                render(child.tree, name: name) + (even ? "" : " \(share)%")
            }
            return (horizontal ? "h(" : "v(") + parts.joined(separator: ", ") + ")"
        }
    }

    /// A split's shares as written back: to a tenth of a percent, or finer (the same for
    /// every child) when that would round one to 0% or 100% — `99.99%` must not come back as
    /// `100%`, which `save` refuses.
    static func percents(_ fractions: [Double]) -> [String] {
        var digits = 1
        func rounded(_ fraction: Double) -> Double {
            let scale = pow(10, Double(digits))
            return (fraction * 100 * scale).rounded() / scale
        }
        while digits < 6 && fractions.contains(where: { rounded($0) <= 0 || rounded($0) >= 100 }) { digits += 1 }
        return fractions.map { fraction in
            let value = rounded(fraction)
            if value == value.rounded() { return String(Int(value)) }
            var text = String(printf: "%.\(digits)f", value)
            while text.hasSuffix("0") { text.removeLast() }
            return text
        }
    }

    static func word(_ text: String) -> String {
        let plain = !text.isEmpty && text.unicodeScalars.allSatisfy { $0.isAlphanumericScalar || "._@-+/:".unicodeScalars.contains($0) }
            && !text.hasSuffix("%")
        return plain ? text : "\"" + text.replacingUTF8("\\", with: "\\\\").replacingUTF8("\"", with: "\\\"") + "\""
    }

    // MARK: - Building it in tmux

    /// One `tmux split-window`: split the pane of leaf `target` (side by side when
    /// `horizontal`), the new pane — right of or below it — taking `percent` of it and
    /// running leaf `leaf`.
    public struct Split: Sendable, Equatable {
        public let target: Int
        public let horizontal: Bool
        public let percent: Int
        public let leaf: Int
        public init(target: Int, horizontal: Bool, percent: Int, leaf: Int) {
            self.target = target
            self.horizontal = horizontal
            self.percent = percent
            self.leaf = leaf
        }
    }

    /// The splits that turn one pane (running leaf 0) into `tree`: each split's top-level
    /// children first, carving the remainder off the previous child, then inside each
    /// child. Leaves are numbered as `PaneTree.leaves` orders them.
    public static func splits(_ tree: PaneTree) -> [Split] {
        var result: [Split] = []
        func build(_ node: PaneTree, first: Int) {
            guard case .split(let horizontal, let children) = node else { return }
            var firsts: [Int] = []
            var leaf = first
            for child in children {
                firsts.append(leaf)
                leaf += child.tree.leaves.count
            }
            for index in 1..<children.count {
                let remainder = children[(index - 1)...].reduce(0) { $0 + $1.fraction }
                let carved = children[index...].reduce(0) { $0 + $1.fraction }
                let percent = min(99, max(1, Int((carved / remainder * 100).rounded())))
                result.append(Split(target: firsts[index - 1], horizontal: horizontal, percent: percent, leaf: firsts[index]))
            }
            for (child, start) in zip(children, firsts) { build(child.tree, first: start) }
        }
        build(tree, first: 0)
        return result
    }
}
