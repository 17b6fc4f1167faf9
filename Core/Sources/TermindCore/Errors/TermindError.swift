/// The error every Termind layer reports across a boundary (CLI, control socket, MCP, plugins).
///
/// `code` is a stable, dotted English identifier scripts can match on
/// (`registry.duplicate_id`); `message` is for people: it names the input and what is
/// wrong and never contains secrets, statement arguments or remote output.
public struct TermindError: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    public let code: String
    public let message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

extension TermindError {
    public static func badRequest(_ message: String) -> TermindError {
        TermindError(code: "request.invalid", message: message)
    }
    public static func unknownContract(_ id: String) -> TermindError {
        TermindError(code: "contract.unknown", message: "No loaded feature handles contract '\(id)'. Run 'termind contracts' to list the available ones.")
    }
    public static func portUnavailable(_ id: String) -> TermindError {
        TermindError(code: "port.unavailable", message: "Port '\(id)' has no provider: the feature that provides it is not loaded or is disabled.")
    }
    public static func internalFailure(_ message: String) -> TermindError {
        TermindError(code: "internal", message: message)
    }
}
