import TermindCore

/// What the kernel's boot can end with beyond the plan's rules (ManifestErrorCodes.swift):
/// finding plugins, loading, registering and starting features, opening the stores.
extension ErrorCode {
    /// Registry.json cannot be read (boot stops).
    public static let registryMissing: ErrorCode = "registry.missing"
    public static let registryStreamConflict: ErrorCode = "registry.stream_conflict"
    // Finding plugins (--plugins, TERMIND_PLUGINS).
    public static let pluginsFolderMissing: ErrorCode = "plugins.folder_missing"
    public static let pluginsNotAFolder: ErrorCode = "plugins.not_a_folder"
    public static let pluginsNoneFound: ErrorCode = "plugins.none_found"
    /// A plugin's folder or files are writable by others or not this user's.
    public static let pluginInsecure: ErrorCode = "plugin.insecure"
    public static let pluginManifestUnreadable: ErrorCode = "plugin.manifest_unreadable"
    public static let pluginFunctionMissing: ErrorCode = "plugin.function_missing"
    // Loading, registering and starting a feature.
    public static let featureLoadFailed: ErrorCode = "feature.load_failed"
    public static let featureEntryMissing: ErrorCode = "feature.entry_missing"
    /// The library was built by another toolchain or against other Core or API sources.
    public static let featureSignatureMismatch: ErrorCode = "feature.signature_mismatch"
    public static let featureDescriptorMismatch: ErrorCode = "feature.descriptor_mismatch"
    public static let featureRegisterFailed: ErrorCode = "feature.register_failed"
    public static let featureUndeclaredContract: ErrorCode = "feature.undeclared_contract"
    public static let featureMissingContract: ErrorCode = "feature.missing_contract"
    public static let featureUndeclaredStream: ErrorCode = "feature.undeclared_stream"
    public static let featureMissingStream: ErrorCode = "feature.missing_stream"
    public static let featureUndeclaredPort: ErrorCode = "feature.undeclared_port"
    public static let featureMissingPort: ErrorCode = "feature.missing_port"
    public static let featureStartFailed: ErrorCode = "feature.start_failed"
    /// A plugin's start did not return within its bound (KernelConfiguration.pluginStartSeconds).
    public static let featureStartTimeout: ErrorCode = "feature.start_timeout"
    // The kernel's ports.
    /// A feature requires `kernel.store` but no database path is configured.
    public static let storeUnconfigured: ErrorCode = "store.unconfigured"
    /// A feature requires `kernel.secrets` but no secret store is configured.
    public static let secretUnconfigured: ErrorCode = "secret.unconfigured"
    /// The secret store's contracts were called but no loaded feature opened it.
    public static let secretUnavailable: ErrorCode = "secret.unavailable"
}
