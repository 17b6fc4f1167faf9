import TermindCore

/// The Vault's error codes other features and the host react to.
extension ErrorCode {
    public static let vaultHostNotFound: ErrorCode = "vault.host_not_found"
    public static let vaultImportUnreadable: ErrorCode = "vault.import_unreadable"
    public static let vaultImportInvalidHost: ErrorCode = "vault.import_invalid_host"
    public static let vaultExportFailed: ErrorCode = "vault.export_failed"
    public static let vaultHostInUse: ErrorCode = "vault.host_in_use"
    public static let vaultIdentityInUse: ErrorCode = "vault.identity_in_use"
    public static let vaultIdentityNotFound: ErrorCode = "vault.identity_not_found"
    public static let vaultImportChanged: ErrorCode = "vault.import_changed"
    public static let vaultImportJumpCycle: ErrorCode = "vault.import_jump_cycle"
    public static let vaultImportJumpMissing: ErrorCode = "vault.import_jump_missing"
    public static let vaultKeyInUse: ErrorCode = "vault.key_in_use"
    public static let vaultKeyNotFound: ErrorCode = "vault.key_not_found"
    public static let vaultKeyUnreadable: ErrorCode = "vault.key_unreadable"
    public static let vaultKnownhostNotFound: ErrorCode = "vault.knownhost_not_found"
    public static let vaultLabelTaken: ErrorCode = "vault.label_taken"
    public static let vaultSnippetNotFound: ErrorCode = "vault.snippet_not_found"
}
