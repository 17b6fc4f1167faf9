/// The codes a stream's client may get (docs/contracts.md, Streams).
extension ErrorCode {
    /// The client cancelled (Ctrl-C, SIGTERM) or went away.
    public static let streamCancelled: ErrorCode = "stream.cancelled"
    /// No running feature serves the stream.
    public static let streamUnknown: ErrorCode = "stream.unknown"
    /// A stream with this id already runs on the connection.
    public static let streamDuplicateId: ErrorCode = "stream.duplicate_id"
    /// The stream emitted an event or asked a question it does not declare (a feature's bug:
    /// it is stopped rather than let it send the client what nobody reviewed).
    public static let streamUndeclared: ErrorCode = "stream.undeclared"
    /// The client sent more input than the server granted.
    public static let streamInputOverrun: ErrorCode = "stream.input_overrun"
}

extension ErrorCode {
    /// The client handed descriptors to a stream that does not take them, or named roles
    /// that do not match the descriptors it sent.
    public static let streamDescriptorsRefused: ErrorCode = "stream.descriptors_refused"
}
