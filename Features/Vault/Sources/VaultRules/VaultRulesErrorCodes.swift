import TermindCore

/// The codes of the Vault's pure rules: quick-connect lines, host keys, ssh_config files.
extension ErrorCode {
    public static let hostKeyInvalid: ErrorCode = "host_key.invalid"
    public static let quickConnectBadHost: ErrorCode = "quick_connect.bad_host"
    public static let quickConnectBadIdentity: ErrorCode = "quick_connect.bad_identity"
    public static let quickConnectBadJump: ErrorCode = "quick_connect.bad_jump"
    public static let quickConnectBadPort: ErrorCode = "quick_connect.bad_port"
    public static let quickConnectBadQuotes: ErrorCode = "quick_connect.bad_quotes"
    public static let quickConnectBadUser: ErrorCode = "quick_connect.bad_user"
    public static let quickConnectConflict: ErrorCode = "quick_connect.conflict"
    public static let quickConnectEmpty: ErrorCode = "quick_connect.empty"
    public static let quickConnectMissingArgument: ErrorCode = "quick_connect.missing_argument"
    public static let quickConnectMissingHost: ErrorCode = "quick_connect.missing_host"
    public static let quickConnectRouteCycle: ErrorCode = "quick_connect.route_cycle"
    public static let quickConnectRouteTooLong: ErrorCode = "quick_connect.route_too_long"
    public static let quickConnectUnexpectedArgument: ErrorCode = "quick_connect.unexpected_argument"
    public static let quickConnectUnsupportedOption: ErrorCode = "quick_connect.unsupported_option"
    public static let sshConfigFileTooLarge: ErrorCode = "ssh_config.file_too_large"
}
