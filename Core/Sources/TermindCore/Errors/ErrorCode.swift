/// A stable error code (`ssh.timeout`, `store.denied`): what scripts and other modules match
/// on. Each module declares its codes as constants (`ErrorCode.sshTimeout`) next to what
/// raises them, and code that reacts to an error compares constants, never retyped strings.
public struct ErrorCode: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }
}

extension TermindError {
    public init(_ code: ErrorCode, _ message: String) {
        self.init(code: code.rawValue, message: message)
    }

    /// Whether this error has `code`.
    public func `is`(_ code: ErrorCode) -> Bool { self.code == code.rawValue }

    /// Whether this error has one of `codes`.
    public func isAny(of codes: Set<ErrorCode>) -> Bool { codes.contains(ErrorCode(code)) }
}

// The kernel's own codes, which any layer may raise or match.
extension ErrorCode {
    public static let requestInvalid: ErrorCode = "request.invalid"
    public static let contractUnknown: ErrorCode = "contract.unknown"
    public static let portUnavailable: ErrorCode = "port.unavailable"
    public static let capabilityDenied: ErrorCode = "capability.denied"
    public static let internalFailure: ErrorCode = "internal"
    public static let cancelled: ErrorCode = "cancelled"
}
