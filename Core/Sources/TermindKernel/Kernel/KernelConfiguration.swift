import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindStore

/// What the kernel boots from. Paths are absolute; the host resolves them from the
/// executable's folder and the environment, never from the working directory.
public struct KernelConfiguration: Sendable {
    /// Registry.json; nil boots with plugins only.
    public var registryPath: String?
    /// Folder that Registry.json library names resolve against (default: the registry's folder).
    public var libraryDirectory: String?
    /// Opt-in plugin folders: each holds a plugin.json, or subfolders that do.
    public var pluginDirectories: [String]
    /// Where every C plugin's code runs, whatever its manifest says (`--plugin-isolation`);
    /// nil: as each manifest says (in termind's process unless it asks for its own).
    public var pluginIsolation: FeatureManifest.Isolation?
    /// When set, only these features plus what they require (and permanent ones).
    public var selection: Set<String>?
    public var hostVersion: String
    /// C library versions reported by `kernel.version@1` (libssh2, OpenSSL, ...).
    public var libraryVersions: [String: String]
    /// Features that live in this process instead of a library: the harness's scripted
    /// port fakes. Validated, ordered, registered and started like any other feature.
    public var inProcessFeatures: [InProcessFeature] = []
    /// Manifests given directly rather than read from a file (the harness's feature under test).
    public var manifests: [FeatureManifest] = []
    /// The process database behind the `kernel.store` port, opened only when a loaded
    /// feature lists that port.
    public var storePath: String?
    /// The secret store behind `kernel.secrets`, and how its key is obtained.
    public var secretsPath: String?
    public var secretsKey: SecretStore.KeySource?
    /// The key file used when protection switches from a passphrase to a key file.
    public var secretsKeyFilePath: String?

    /// The files no plugin process may be granted: the database and the secret store with
    /// its key file.
    var protectedFiles: [String] {
        var files = [storePath, secretsPath].compactMap { $0 }.flatMap { [$0, $0 + "-wal", $0 + "-shm", $0 + "-journal"] }
        files += [secretsKeyFilePath].compactMap { $0 }
        if case .keyFile(let path)? = secretsKey { files.append(path) }
        return files
    }
    /// The process serves clients until it is stopped (`termind serve`): features may start
    /// work at boot that outlives any one command (monitors, forwards). False for a one-shot command.
    public var resident = false
    /// The control socket clients reach a resident process on (absolute), for features
    /// that start clients of their own (a workspace's panes).
    public var controlSocket: String?
    /// `termind serve`'s feature options (`--mcp-listen 127.0.0.1:8765` as
    /// `["mcp-listen": "127.0.0.1:8765"]`): each must be declared by a loaded feature's
    /// manifest (`serveOptions`), which alone receives it.
    public var serveOptions: [String: String] = [:]
    /// A one-shot command's words: with no `selection`, only the features it needs are
    /// loaded (`RegistryValidator.selection(forCommand:in:)`).
    public var commandWords: [String]?
    /// How long a third-party plugin's `start` may take before it is disabled, and its
    /// `stop` before it is abandoned (a plugin blocked in C must not hang termind).
    public var pluginStartSeconds: Double = 10
    public var pluginStopSeconds: Double = 5

    /// termind's version: the one place it is written (the launcher's copy is read from
    /// this line when it is built).
    public static let termindVersion = "0.1.0"

    public init(registryPath: String?, libraryDirectory: String? = nil, pluginDirectories: [String] = [], selection: Set<String>? = nil,
                hostVersion: String = KernelConfiguration.termindVersion, libraryVersions: [String: String] = [:]) {
        self.registryPath = registryPath
        self.libraryDirectory = libraryDirectory
        self.pluginDirectories = pluginDirectories
        self.selection = selection
        self.hostVersion = hostVersion
        self.libraryVersions = libraryVersions
    }
}

/// Boot stopped: a permanent feature cannot run, or the registry itself is unusable.
public struct BootFailure: Error, Sendable, CustomStringConvertible {
    public let problems: [FeatureProblem]
    public var description: String { problems.map(\.message).joined(separator: "\n") }
}

/// A feature that is not loaded from a library (test fakes, host-side adapters).
public struct InProcessFeature: Sendable {
    public var manifest: FeatureManifest
    public var make: @Sendable () -> any Feature

    public init(manifest: FeatureManifest, make: @escaping @Sendable () -> any Feature) {
        var manifest = manifest
        manifest.library = ""
        if manifest.source.isEmpty { manifest.source = "in-process" }
        self.manifest = manifest
        self.make = make
    }
}
