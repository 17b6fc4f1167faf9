import TermindCore

/// The Vault's error codes other features and the host react to.
extension ErrorCode {
    public static let vaultHostNotFound: ErrorCode = "vault.host_not_found"
    public static let vaultImportUnreadable: ErrorCode = "vault.import_unreadable"
    public static let vaultImportInvalidHost: ErrorCode = "vault.import_invalid_host"
}
