import TermindCore

/// What reading, decrypting or generating an SSH key can end with (SSHKeyError).
extension ErrorCode {
    public static let keyCorrupt: ErrorCode = "key.corrupt"
    public static let keyGenerationFailed: ErrorCode = "key.generation_failed"
    public static let keyMalformed: ErrorCode = "key.malformed"
    public static let keyNotAPrivateKey: ErrorCode = "key.not_a_private_key"
    public static let keyPassphraseRequired: ErrorCode = "key.passphrase_required"
    public static let keyUnsupported: ErrorCode = "key.unsupported"
    public static let keyWrongPassphrase: ErrorCode = "key.wrong_passphrase"
}
