import Foundation
import TermindCore

/// Checks a plugin the way termind will treat it, so an author can run it before
/// shipping (`termind plugins check DIR`, or `FeatureHarness.conformance`): the manifest
/// reads and validates, the library loads and its descriptor matches, it starts, every
/// declared contract is routed and answers an empty request with a reply or a clear
/// `request.invalid` (not a crash or `contract.unknown`), and it stops.
public enum PluginConformance {
    public struct Check: Sendable, Codable, Equatable {
        public var name: String
        public var passed: Bool
        public var detail: String
    }

    public static func check(pluginDirectory: String, libraryDirectory: String? = nil, fakes: [InProcessFeature] = []) async -> [Check] {
        var checks: [Check] = []
        let path = (pluginDirectory as NSString).appendingPathComponent("plugin.json")
        guard let data = FileManager.default.contents(atPath: path) else {
            return [Check(name: "manifest", passed: false, detail: "no plugin.json in \(pluginDirectory)")]
        }
        let manifest: FeatureManifest
        switch ManifestReader.readPlugin(data, source: path, baseDirectory: libraryDirectory ?? pluginDirectory) {
        case .success(let m):
            manifest = m
            checks.append(Check(name: "manifest", passed: true, detail: "'\(m.id)' \(m.version), \(m.kind.rawValue) ABI \(m.abi)"))
        case .failure(let problem):
            return [Check(name: "manifest", passed: false, detail: problem.message)]
        }

        var configuration = KernelConfiguration(registryPath: nil, hostVersion: "conformance")
        configuration.manifests = [manifest]
        configuration.inProcessFeatures = fakes
        let kernel = Kernel(configuration: configuration, sink: .disabled())
        let status: FeatureStatus?
        do {
            status = try await kernel.boot().first { $0.id == manifest.id }
        } catch {
            return checks + [Check(name: "boot", passed: false, detail: String(describing: error))]
        }
        guard let status, status.state == .running else {
            return checks + [Check(name: "load and start", passed: false, detail: status?.reason ?? "the plugin did not run")]
        }
        checks.append(Check(name: "load and start", passed: true, detail: "descriptor matches the manifest; started"))

        for contract in status.contracts {
            let routed = kernel.contractInfos().contains { $0.id == contract }
            guard routed else {
                checks.append(Check(name: contract, passed: false, detail: "declared but not routed"))
                continue
            }
            do {
                _ = try await kernel.call(contract, body: Data("{}".utf8))
                checks.append(Check(name: contract, passed: true, detail: "answers an empty request"))
            } catch let error as TermindError where error.code == "request.invalid" {
                checks.append(Check(name: contract, passed: true, detail: "rejects an empty request clearly: \(error.message)"))
            } catch let error as TermindError {
                let ok = error.code != "contract.unknown" && error.code != "internal"
                checks.append(Check(name: contract, passed: ok, detail: "\(error.code): \(error.message)"))
            } catch {
                checks.append(Check(name: contract, passed: false, detail: "threw \(type(of: error))"))
            }
        }
        await kernel.shutdown()
        checks.append(Check(name: "stop", passed: true, detail: "stopped"))
        return checks
    }
}
