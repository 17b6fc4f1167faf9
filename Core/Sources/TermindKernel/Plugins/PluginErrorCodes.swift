import TermindCore

/// What a C plugin's call can end with besides its own answer (docs/plugins.md).
extension ErrorCode {
    /// Its threads are all busy and its queue full.
    public static let pluginBusy: ErrorCode = "plugin.busy"
    /// It answered TERMIND_ERR_FAILED (or a status that is no TERMIND_* code).
    public static let pluginFailed: ErrorCode = "plugin.failed"
    /// It answered TERMIND_ERR_UNKNOWN for a contract its manifest declares.
    public static let pluginUnhandled: ErrorCode = "plugin.unhandled"
    /// Its reply is missing, too large, not UTF-8 JSON, or not what its schema says.
    public static let pluginBadReply: ErrorCode = "plugin.bad_reply"
    /// A libffi function could not be bound or called as declared.
    public static let pluginFunctionBind: ErrorCode = "plugin.function_bind"
}
