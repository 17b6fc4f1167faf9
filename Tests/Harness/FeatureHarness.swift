import Foundation
import TermindCore
import VaultAPI
import TermindKernel

/// Boots a real kernel with one feature library (loaded with dlopen, exactly as termind
/// does) and scripted fakes for the ports it requires. Our own features' tests use it, and
/// so can a plugin author: point it at a plugin.json and its built library.
///
///     let session = try await FeatureHarness.boot(
///         pluginDirectory: "/path/to/my-plugin",
///         fakes: [.port(.hostDirectory, FakeHosts([...]))])
///     let reply = try await session.call(WakeOnLAN.self, .init(target: "gpu-box"))
public enum FeatureHarness {
    /// The folder holding the built libraries: `TERMIND_BUILD_DIR`, else the folder of the
    /// running test binary (SwiftPM puts both in `.build/<triple>/<config>`).
    public static var buildDirectory: String {
        // Absolute, also when given relative: tests spawn programs from other folders.
        if let dir = ProcessInfo.processInfo.environment["TERMIND_BUILD_DIR"], !dir.isEmpty { return URL(fileURLWithPath: dir).standardizedFileURL.path }
        var dir = ExecutablePaths.executableDirectory()
        // An .xctest bundle path on Linux is the executable itself.
        if dir.hasSuffix(".xctest") { dir = (dir as NSString).deletingLastPathComponent }
        return dir
    }

    /// `<buildDirectory>/lib<product>.so`.
    public static func libraryPath(product: String) -> String {
        (buildDirectory as NSString).appendingPathComponent("lib\(product).so")
    }

    /// Reads a plugin.json; `library` resolves against `libraryDirectory` (default: the
    /// build folder, where SwiftPM put the freshly built library).
    public static func manifest(pluginJSON path: String, libraryDirectory: String? = nil) throws -> FeatureManifest {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TermindError(code: "harness.manifest_missing", message: "No plugin manifest at \(path).")
        }
        switch ManifestReader.readPlugin(data, source: path, baseDirectory: libraryDirectory ?? buildDirectory) {
        case .success(let m): return m
        case .failure(let problem): throw TermindError(code: problem.code, message: problem.message)
        }
    }

    /// A feature's entry in the checkout's Registry.json, its library resolved in the build
    /// folder: what our own features' tests boot.
    public static func registryManifest(id: String) throws -> FeatureManifest {
        let path = Repository.path("Registry.json")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TermindError(code: "harness.registry_missing", message: "No Registry.json at \(path).")
        }
        let registry = try ManifestReader.readRegistry(data, source: "Registry.json", baseDirectory: buildDirectory)
        guard let manifest = registry.manifests.first(where: { $0.id == id }) else {
            throw TermindError(code: "harness.feature_missing", message: "Registry.json declares no feature '\(id)'.")
        }
        return manifest
    }

    /// Boots the kernel with `feature` plus an in-process feature providing `fakes`.
    /// `storeDirectory` holds the database, secret store and key file behind the kernel's
    /// store ports (a fresh temporary folder when nil, removed at shutdown).
    /// `inProcess`: features of the test's own (one registering records with the feature
    /// under test, say), booted alongside.
    public static func boot(_ feature: FeatureManifest, fakes: [PortFake] = [], others: [FeatureManifest] = [], inProcess: [InProcessFeature] = [],
                            storeDirectory: String? = nil, logSink: LogSink = .disabled()) async throws -> HarnessSession {
        var configuration = KernelConfiguration(registryPath: nil, hostVersion: "harness")
        let temporary = storeDirectory == nil ? try TemporaryDirectory("termind-harness") : nil
        let directory = storeDirectory ?? temporary!.path
        configuration.storePath = directory + "/termind.sqlite"
        configuration.secretsPath = directory + "/secrets.sqlite"
        configuration.secretsKey = .keyFile(directory + "/secrets.key")
        if !fakes.isEmpty {
            let manifest = FeatureManifest(id: "harness-fakes", library: "", order: 0, ports: .init(provides: fakes.map(\.portID)),
                                           source: "harness")
            configuration.inProcessFeatures.append(InProcessFeature(manifest: manifest) { FakePortsFeature(fakes: fakes) })
        }
        configuration.inProcessFeatures += inProcess
        configuration.manifests = [feature] + others
        let kernel = Kernel(configuration: configuration, sink: logSink)
        let statuses = try await kernel.boot()
        return HarnessSession(kernel: kernel, statuses: statuses, featureID: feature.id, temporary: temporary, storeDirectory: directory)
    }
}

/// A scripted port implementation handed to the feature under test.
public struct PortFake: Sendable {
    public let portID: String
    let value: any Sendable

    public static func port<P: Sendable>(_ key: PortKey<P>, _ implementation: P) -> PortFake {
        PortFake(portID: key.id, value: implementation)
    }
}

final class FakePortsFeature: Feature {
    let fakes: [PortFake]
    init(fakes: [PortFake]) { self.fakes = fakes }
    func register(_ registrar: FeatureRegistrar) throws {
        for fake in fakes { registrar.provideErased(fake.portID, fake.value) }
    }
}

/// A booted kernel around the feature under test.
public final class HarnessSession: Sendable {
    public let kernel: Kernel
    /// Statuses as boot returned them (the feature's reason, if it was disabled).
    public let statuses: [FeatureStatus]
    public let featureID: String
    /// Where the database and secret store of this session live.
    public let storeDirectory: String
    private let temporary: TemporaryDirectory?

    init(kernel: Kernel, statuses: [FeatureStatus], featureID: String, temporary: TemporaryDirectory?, storeDirectory: String) {
        self.kernel = kernel
        self.statuses = statuses
        self.featureID = featureID
        self.temporary = temporary
        self.storeDirectory = storeDirectory
    }

    public var status: FeatureStatus? { statuses.first { $0.id == featureID } }

    public func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
        try await kernel.call(contract, request)
    }

    /// Calls a contract with a raw JSON body, as a client or C plugin would.
    public func call(_ contract: String, json: String) async throws -> Data {
        try await kernel.call(contract, body: Data(json.utf8))
    }

    /// Stops the features and removes a temporary store folder.
    public func shutdown() async {
        await kernel.shutdown()
        temporary?.remove()
    }
}

extension TemporaryDirectory {
    /// A Registry.json with only the fixture stream feature (libTermindFixtureStreams.so: one
    /// stream sending each event kind and asking each kind of question) and its `show`
    /// command; returns its path.
    public func fixtureStreamsRegistry() throws -> String {
        try write("Registry.json", #"""
        {"schema": 1, "features": [{"id": "fixture-streams", "version": "1.0.0", "abi": 1, "library": "libTermindFixtureStreams.so", "order": 10,
          "streams": ["fixture-streams.show@1"],
          "commands": [{"name": "show", "stream": "fixture-streams.show@1", "arguments": [], "summary": "Show each event kind."}]}]}
        """#)
    }
}
