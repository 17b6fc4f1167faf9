/// The error every Termind layer reports across a boundary (CLI, control socket, MCP, plugins).
///
/// `code` is a stable, dotted English identifier scripts can match on
/// (`registry.duplicate_id`); `message` is for people: it names the input and what is
/// wrong and never contains secrets, statement arguments or remote output.
public struct TermindError: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    public let code: String
    public let message: String
    /// What a program matches on besides the code, where the error has fields (a refusal's
    /// contract, effect and caller chain); absent for most errors.
    public let details: JSONValue?

    public init(code: String, message: String, details: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { message }
}

extension TermindError {
    public static func badRequest(_ message: String) -> TermindError {
        TermindError(.requestInvalid, message)
    }
    public static func unknownContract(_ id: String) -> TermindError {
        TermindError(code: ErrorCode.contractUnknown.rawValue, message: "No loaded feature handles contract '\(id)'. Run 'termind contracts' to list the available ones.")
    }
    public static func portUnavailable(_ id: String) -> TermindError {
        TermindError(code: ErrorCode.portUnavailable.rawValue, message: "Port '\(id)' has no provider: the feature that provides it is not loaded or is disabled.")
    }
    public static func internalFailure(_ message: String) -> TermindError {
        TermindError(.internalFailure, message)
    }
}

/// An error a lower layer (the store, a transport) can say in user terms: the kernel turns it
/// into its `TermindError` where a call crosses its boundary.
public protocol TermindErrorConvertible: Error {
    var termindError: TermindError { get }
}

extension TermindError {
    /// The one mapping from any error to what a user, a script or a client is told: a
    /// `TermindError` as it is, a convertible one (a store failure) in its own terms, a
    /// cancellation as such, anything else as `internal` naming only its type (no message
    /// that might carry data).
    public static func from(_ error: any Error) -> TermindError {
        switch error {
        case let error as TermindError: error
        case let error as TermindErrorConvertible: error.termindError
        case is CancellationError: TermindError(.cancelled, "The operation was cancelled.")
        default: internalFailure("The operation failed: \(type(of: error)).")
        }
    }
}
