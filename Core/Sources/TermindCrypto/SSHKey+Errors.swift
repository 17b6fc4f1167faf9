import TermindCore

/// The errors SSH key handling throws, as `TermindError`s with stable codes:
/// `key.passphrase_required`, `key.wrong_passphrase`, `key.unsupported`, `key.malformed`,
/// `key.corrupt`, `key.not_a_private_key`, `key.generation_failed`. Messages name the
/// problem and never contain key material or passphrases.
public enum SSHKeyError {
    public static func passphraseRequired() -> TermindError {
        TermindError(.keyPassphraseRequired,
                     "The private key is encrypted: a passphrase is required to read it.")
    }

    public static func wrongPassphrase() -> TermindError {
        TermindError(.keyWrongPassphrase,
                     "The passphrase does not decrypt the private key. Check it and try again.")
    }

    public static func unsupported(_ what: String) -> TermindError {
        TermindError(.keyUnsupported, what)
    }

    /// The file's structure is broken (bad base64, truncated, impossible lengths, mismatched armour).
    public static func malformed(_ what: String) -> TermindError {
        TermindError(.keyMalformed, what)
    }

    /// The file is well-formed but its contents disagree with themselves (check integers,
    /// public key copies, private and public halves): it was damaged or edited.
    public static func corrupt(_ what: String) -> TermindError {
        TermindError(.keyCorrupt, what)
    }

    public static func notAPrivateKey(_ what: String) -> TermindError {
        TermindError(.keyNotAPrivateKey, what)
    }

    public static func generationFailed(_ what: String) -> TermindError {
        TermindError(.keyGenerationFailed, what)
    }
}
