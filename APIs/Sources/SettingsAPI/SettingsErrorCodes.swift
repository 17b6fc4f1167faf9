import TermindCore

/// The Settings feature's error codes.
extension ErrorCode {
    /// No record is registered under the key.
    public static let settingsUnknownKey: ErrorCode = "settings.unknown_key"
    /// The value breaks the record's schema or rules (the message names each field).
    public static let settingsInvalid: ErrorCode = "settings.invalid"
    /// The change was based on another revision than the stored one (compare-and-set).
    public static let settingsStaleRevision: ErrorCode = "settings.stale_revision"
    /// The settings document to import could not be read or is not one.
    public static let settingsImportUnreadable: ErrorCode = "settings.import_unreadable"
    /// A secret reference names no readable, non-empty secret on this device.
    public static let settingsSecretMissing: ErrorCode = "settings.secret_missing"
    /// `repair` on a record that is not quarantined.
    public static let settingsNotQuarantined: ErrorCode = "settings.not_quarantined"
    /// A record registered twice, outside its owner's namespace, or after boot.
    public static let settingsRegistration: ErrorCode = "settings.registration"
}
