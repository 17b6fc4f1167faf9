/// What reading Registry.json and plugin.json and planning the boot can end with: the
/// registry as a whole, one entry's fields, the rules between features (docs/registry.md).
extension ErrorCode {
    // Registry.json as a whole (boot stops).
    public static let registryMalformed: ErrorCode = "registry.malformed"
    public static let registrySchema: ErrorCode = "registry.schema"
    // Between features.
    public static let registryDuplicateID: ErrorCode = "registry.duplicate_id"
    public static let registryDependencyCycle: ErrorCode = "registry.dependency_cycle"
    public static let registryContractConflict: ErrorCode = "registry.contract_conflict"
    public static let registryPortConflict: ErrorCode = "registry.port_conflict"
    public static let registryCommandConflict: ErrorCode = "registry.command_conflict"
    // One entry's fields: the entry is disabled.
    public static let manifestInvalid: ErrorCode = "manifest.invalid"
    public static let manifestInvalidField: ErrorCode = "manifest.invalid_field"
    public static let manifestInvalidID: ErrorCode = "manifest.invalid_id"
    public static let manifestReservedID: ErrorCode = "manifest.reserved_id"
    public static let manifestABI: ErrorCode = "manifest.abi"
    public static let manifestLibraryMissing: ErrorCode = "manifest.library_missing"
    public static let manifestContractID: ErrorCode = "manifest.contract_id"
    public static let manifestPortID: ErrorCode = "manifest.port_id"
    public static let manifestNamespace: ErrorCode = "manifest.namespace"
    public static let manifestFunction: ErrorCode = "manifest.function"
    public static let manifestCommand: ErrorCode = "manifest.command"
    public static let manifestSchema: ErrorCode = "manifest.schema"
    public static let manifestDependencyUnknown: ErrorCode = "manifest.dependency_unknown"
    /// A plugin.json says `"permanent"`, which only Registry.json features may.
    public static let pluginPermanent: ErrorCode = "plugin.permanent"
    // A feature that cannot run.
    /// A permanent feature cannot run, so termind does not start.
    public static let featurePermanentFailed: ErrorCode = "feature.permanent_failed"
    public static let featureDependencyDisabled: ErrorCode = "feature.dependency_disabled"
    public static let featurePortUnprovided: ErrorCode = "feature.port_unprovided"
    /// `--features` / TERMIND_FEATURES names a feature nothing declares (a usage error).
    public static let featuresUnknown: ErrorCode = "features.unknown"
    /// `termind serve --NAME` that no loaded feature declares (a usage error).
    public static let serveOptionUnknown: ErrorCode = "serve.option_unknown"
}
