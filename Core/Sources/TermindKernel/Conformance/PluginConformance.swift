import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Checks a plugin the way termind will treat it, so an author can run it before
/// shipping (`termind plugins check DIR`): it boots a kernel with DIR as its only plugin
/// folder — the very discovery, permission checks, validation and loading of a real boot,
/// so it passes nothing termind would refuse — then checks that each plugin started,
/// that every declared contract is routed and answers an empty request with a reply or a
/// clear `request.invalid` (not a crash, `contract.unknown` or a bad reply), and that it stops.
public enum PluginConformance {
    public struct Check: Sendable, Codable, Equatable {
        public var name: String
        public var passed: Bool
        public var detail: String
    }

    /// `calling` is told each contract before it is called and `checked` each check as it is
    /// made, so that a plugin that crashes the process leaves what it was doing on screen.
    public static func check(pluginDirectory: String, fakes: [InProcessFeature] = [], calling: @Sendable (String) -> Void = { _ in },
                             checked: @Sendable (Check) -> Void = { _ in }) async -> [Check] {
        var checks: [Check] = [] {
            didSet { if let last = checks.last, checks.count > oldValue.count { checked(last) } }
        }
        var configuration = KernelConfiguration(registryPath: nil, pluginDirectories: [pluginDirectory], hostVersion: "conformance")
        configuration.inProcessFeatures = fakes
        let kernel = Kernel(configuration: configuration, sink: .disabled())
        let statuses: [FeatureStatus]
        do {
            statuses = try await kernel.boot()
        } catch {
            checks.append(Check(name: "boot", passed: false, detail: String(describing: error)))
            return checks
        }
        let fakeIDs = Set(fakes.map(\.manifest.id))
        let plugins = statuses.filter { !fakeIDs.contains($0.id) }
        // What discovery refused (permissions, plugin.json, reserved ids) never became a plugin.
        let refused = await kernel.unattributed
        for problem in refused {
            checks.append(Check(name: "manifest", passed: false, detail: problem.message))
        }
        for status in plugins {
            checks.append(Check(name: "manifest", passed: true, detail: "'\(status.id)' \(status.version), \(status.kind.rawValue); files and permissions as termind requires"))
            guard status.state == .running else {
                checks.append(Check(name: "load and start", passed: false, detail: status.reason ?? "the plugin did not run"))
                continue
            }
            checks.append(Check(name: "load and start", passed: true, detail: "descriptor matches the manifest; started"))
            for contract in status.contracts {
                calling(contract)
                checks.append(await call(contract, on: kernel))
            }
        }
        if plugins.isEmpty && refused.isEmpty {
            checks.append(Check(name: "manifest", passed: false, detail: "no plugin found in \(pluginDirectory)"))
        }
        await kernel.shutdown()
        if plugins.contains(where: { $0.state == .running }) {
            checks.append(Check(name: "stop", passed: true, detail: "stopped"))
        }
        return checks
    }

    private static func call(_ contract: String, on kernel: Kernel) async -> Check {
        guard kernel.contractInfos().contains(where: { $0.id == contract }) else {
            return Check(name: contract, passed: false, detail: "declared but not routed")
        }
        do {
            _ = try await kernel.call(contract, body: Data("{}".utf8))
            return Check(name: contract, passed: true, detail: "answers an empty request")
        } catch let error as TermindError where error.is(.requestInvalid) {
            return Check(name: contract, passed: true, detail: "rejects an empty request clearly: \(error.message)")
        } catch let error as TermindError {
            let ok = !error.isAny(of: [.contractUnknown, .internalFailure, .pluginBadReply, .pluginUnhandled])
            return Check(name: contract, passed: ok, detail: "\(error.code): \(error.message)")
        } catch {
            return Check(name: contract, passed: false, detail: "threw \(type(of: error))")
        }
    }
}
