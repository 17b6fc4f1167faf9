import TermindCore

/// The secret store's codes (wrong key or passphrase, damage, permissions).
extension ErrorCode {
    public static let secretDenied: ErrorCode = "secret.denied"
    public static let secretKdfFailed: ErrorCode = "secret.kdf_failed"
    public static let secretKeyCreateFailed: ErrorCode = "secret.key_create_failed"
    public static let secretKeyInvalid: ErrorCode = "secret.key_invalid"
    public static let secretKeyMissing: ErrorCode = "secret.key_missing"
    public static let secretKeyPermissions: ErrorCode = "secret.key_permissions"
    public static let secretMissing: ErrorCode = "secret.missing"
    public static let secretPassphraseEmpty: ErrorCode = "secret.passphrase_empty"
    public static let secretStoreDamaged: ErrorCode = "secret.store_damaged"
    public static let secretTampered: ErrorCode = "secret.tampered"
    public static let secretWrongKey: ErrorCode = "secret.wrong_key"
    public static let secretWrongPassphrase: ErrorCode = "secret.wrong_passphrase"
}
