/// The codes of Core's values and helpers: JSON text, schemas, C function signatures, the
/// blocking executor, the log file.
extension ErrorCode {
    /// The text is not JSON (the message names the source, line and column).
    public static let jsonMalformed: ErrorCode = "json.malformed"
    /// A declared JSON schema cannot be read.
    public static let schemaInvalid: ErrorCode = "schema.invalid"
    // A C function signature in a plugin manifest (`uint32(string, uint64)`).
    public static let signatureMalformed: ErrorCode = "signature.malformed"
    public static let signatureType: ErrorCode = "signature.type"
    public static let signatureArity: ErrorCode = "signature.arity"
    /// The blocking executor's queue is full: try again.
    public static let blockingBusy: ErrorCode = "blocking.busy"
    /// The log file (TERMIND_LOG_FILE, --log-file) cannot be opened.
    public static let logOpenFailed: ErrorCode = "log.open_failed"
    /// A program termind starts (tmux, an editor) could not be started.
    public static let processSpawnFailed: ErrorCode = "process.spawn_failed"
}
