import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Source checks of the layering. They read the checkout and fail closed: a root that
/// should hold sources but is missing or empty is a failure, not a pass.
final class ArchitectureTests: XCTestCase {
    /// Modules any feature or plugin may import: Core's public modules (not the kernel's
    /// internals), the toolchain's, and every feature's API module (APIs/Sources/*).
    private var featureAllowed: Set<String> {
        let apis = (try? FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources"))) ?? []
        return Set(["Foundation", "FoundationEssentials", "Glibc", "Dispatch", "Synchronization",
                    "TermindCore", "TermindCrypto", "TermindStore", "TermindSSH"]).union(apis.filter { $0.hasSuffix("API") })
    }
    /// C wrapper modules and the one Swift module allowed to import each.
    private let cModuleOwners: [String: String] = [
        "CFFI": "Core/Sources/TermindKernel",
        "CTermindSystem": "Core/Sources/TermindKernel",
        "CTermindPluginABI": "Core/Sources/TermindKernel",
        "CCrypto": "Core/Sources/TermindCrypto",
        "CSQLite": "Core/Sources/TermindStore",
        "CLibSSH2": "Core/Sources/TermindSSH",
        "CVTerm": "Features/Workspaces/Sources/TerminalScreen",
    ]

    struct Import: CustomStringConvertible {
        let file: String
        let line: Int
        let module: String
        var description: String { "\(file):\(line) imports \(module)" }
    }

    private func swiftFiles(in relative: String) throws -> [String] {
        let root = Repository.path(relative)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw TermindError(code: "architecture.root_missing", message: "source root \(relative) is missing")
        }
        let files = (FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? [])
            .filter { $0.hasSuffix(".swift") }.map { "\(relative)/\($0)" }
        guard !files.isEmpty else { throw TermindError(code: "architecture.root_empty", message: "source root \(relative) has no Swift files") }
        return files
    }

    private func imports(in relative: String) throws -> [Import] {
        let pattern = try NSRegularExpression(pattern: #"^\s*(?:@[A-Za-z_]+(?:\([^)]*\))?\s+)*import\s+(?:(?:typealias|struct|class|enum|protocol|let|var|func)\s+)?([A-Za-z_][A-Za-z0-9_]*)"#)
        var found: [Import] = []
        for file in try swiftFiles(in: relative) {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let l = String(line)
                if let m = pattern.firstMatch(in: l, range: NSRange(l.startIndex..., in: l)), let r = Range(m.range(at: 1), in: l) {
                    found.append(Import(file: file, line: index + 1, module: String(l[r])))
                }
            }
        }
        return found
    }

    /// Feature and plugin source roots: Features/* and Plugins/Examples/*/Sources.
    private func featureRoots() throws -> [String] {
        var roots: [String] = []
        let fm = FileManager.default
        let featuresRoot = Repository.path("Features")
        XCTAssertTrue(fm.fileExists(atPath: featuresRoot), "Features/ is missing")
        let folders = ((try? fm.contentsOfDirectory(atPath: featuresRoot)) ?? []).sorted().filter { name in
            var isDirectory: ObjCBool = false
            return !name.hasPrefix(".") && fm.fileExists(atPath: "\(featuresRoot)/\(name)", isDirectory: &isDirectory) && isDirectory.boolValue
        }
        // Each feature folder must hold Swift sources (swiftFiles fails closed otherwise).
        roots += folders.map { "Features/\($0)" }
        // Fail closed: every feature the registry declares needs its folder here.
        let registry = try XCTUnwrap(fm.contents(atPath: Repository.path("Registry.json")))
        let declared = try ManifestReader.readRegistry(registry, source: "Registry.json", baseDirectory: "/").manifests
        XCTAssertTrue(declared.count <= folders.count, "Registry.json declares \(declared.map(\.id)) but Features/ holds only \(folders)")
        let examples = try fm.contentsOfDirectory(atPath: Repository.path("Plugins/Examples")).sorted().filter { !$0.hasPrefix(".") }
        roots += examples.compactMap { name in
            let sources = "Plugins/Examples/\(name)/Sources"
            return (try? swiftFiles(in: sources)) != nil ? sources : nil
        }
        XCTAssertFalse(roots.isEmpty, "no feature or plugin sources found: the check would pass vacuously")
        return roots
    }

    /// The Swift modules a feature or plugin root defines (its own, importable within it).
    private func ownModules(of root: String) -> Set<String> {
        let sources = root.hasSuffix("/Sources") ? root : root + "/Sources"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: Repository.path(sources))) ?? []
        return Set(names).union([((root.hasSuffix("/Sources") ? (root as NSString).deletingLastPathComponent : root) as NSString).lastPathComponent])
    }

    func testAPIModulesImportOnlyCoreAndEachOther() throws {
        let apis = try FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources")).filter { !$0.hasPrefix(".") }
        XCTAssertTrue(apis.contains("VaultAPI"), "the Vault's API module is missing: \(apis)")
        var violations: [String] = []
        for api in apis {
            for i in try imports(in: "APIs/Sources/\(api)") where !featureAllowed.contains(i.module) {
                violations.append("\(i) (an API module may import Core's public modules and other API modules only)")
            }
        }
        XCTAssertEqual(violations, [])
    }

    func testTheTransportRaisesOnlyErrorCodesItDeclares() throws {
        // Codes other modules match on are constants (SSHErrorCodes.swift), never retyped strings.
        var literal: [String] = []
        for file in try swiftFiles(in: "Core/Sources/TermindSSH") {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where line.contains("SSHError.make(\"") || line.contains("code == \"ssh.") {
                literal.append("\(file):\(index + 1)")
            }
        }
        XCTAssertEqual(literal, [])
    }

    func testCoreNamesNoFeature() throws {
        // Core's sources declare no feature's types, contracts or ports (their API modules do).
        let features = try FileManager.default.contentsOfDirectory(atPath: Repository.path("Features")).filter { !$0.hasPrefix(".") }
        XCTAssertFalse(features.isEmpty)
        var found: [String] = []
        for file in try swiftFiles(in: "Core/Sources") {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            for feature in features {
                let declaration = try NSRegularExpression(pattern: #"(enum|struct|protocol|class|actor|typealias) +[A-Za-z]*\#(feature)[A-Za-z]*"#)
                let contract = try NSRegularExpression(pattern: #"PortKey\("\#(feature.lowercased())\.|name = "\#(feature.lowercased())\."#)
                for regex in [declaration, contract] where regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil {
                    found.append("\(file) names \(feature)")
                }
            }
        }
        XCTAssertEqual(found, [])
    }

    /// The host is a generic client: it imports no feature API and not the SSH transport, and
    /// its sources name no feature's contracts, streams or ports (it reaches them only through
    /// generic calls, streams and the commands features declare).
    func testTheHostHoldsNoFeatureOrTransportCode() throws {
        let apis = try FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources")).filter { $0.hasSuffix("API") }
        XCTAssertFalse(apis.isEmpty)
        let forbidden = Set(apis + ["TermindSSH", "TermindCrypto"])
        let hostRoots = ["Host/Sources/termind", "Host/Sources/TermindLauncher", "Host/Sources/TermindHelpText", "Host/Sources/TermindClient"]
        XCTAssertEqual(try hostRoots.flatMap { try imports(in: $0) }.filter { forbidden.contains($0.module) }.map(\.description), [])
        let registry = try XCTUnwrap(FileManager.default.contents(atPath: Repository.path("Registry.json")))
        let ids = try ManifestReader.readRegistry(registry, source: "Registry.json", baseDirectory: "/").manifests.map(\.id)
        XCTAssertTrue(ids.contains("workspaces"))
        var found: [String] = []
        for file in try hostRoots.flatMap({ try swiftFiles(in: $0) }) {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            for id in ids {
                let named = try NSRegularExpression(pattern: #""\#(id)\.[a-z]"#)
                if named.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil { found.append("\(file) names \(id)'s contracts or ports") }
            }
        }
        XCTAssertEqual(found, [])
    }

    /// The launcher is what starts for every command: it imports the Swift runtime's Glibc,
    /// its own module and the help text (pure Swift, linked into it) only, so it loads no
    /// Foundation and no termind library (LinkageTests checks the linked result).
    func testTheLauncherImportsOnlyGlibc() throws {
        let found = try ["Host/Sources/termind", "Host/Sources/TermindLauncher", "Host/Sources/TermindHelpText"].flatMap { try imports(in: $0) }
        XCTAssertFalse(found.isEmpty)
        XCTAssertEqual(found.filter { !["Glibc", "TermindLauncher", "TermindHelpText"].contains($0.module) }.map(\.description), [])
    }

    func testFeaturesAndPluginsImportOnlyCoreAndTheToolchain() throws {
        let roots = try featureRoots() + ["Tests/Fixtures"]
        let moduleNames = roots.reduce(into: Set<String>()) { $0.formUnion(ownModules(of: $1)) }
        var violations: [String] = []
        for root in roots {
            let own = ownModules(of: root)
            for i in try imports(in: root) where !featureAllowed.contains(i.module) && !own.contains(i.module) {
                let why = i.module == "TermindKernel" ? "kernel internals" : moduleNames.contains(i.module) ? "another feature" : i.module.first == "C" ? "a C module outside its wrapper" : "not an allowed module"
                violations.append("\(i) (\(why))")
            }
        }
        XCTAssertEqual(violations, [])
    }

    func testCoreValuesImportNoKernelAndNoCLibrary() throws {
        let violations = try imports(in: "Core/Sources/TermindCore").filter {
            ["TermindKernel", "TermindStore", "TermindCrypto", "TermindSSH"].contains($0.module) || cModuleOwners[$0.module] != nil
        }
        XCTAssertEqual(violations.map(\.description), [])
    }

    func testEachCModuleIsImportedByExactlyOneSwiftModule() throws {
        let roots = ["Core/Sources/TermindCore", "Core/Sources/TermindKernel", "Core/Sources/TermindCrypto", "Core/Sources/TermindStore",
                     "Core/Sources/TermindSSH",
                     "Features/Workspaces/Sources/TerminalScreen", "Features/Workspaces/Sources/Workspaces", "Features/Workspaces/Sources/WorkspacesRules",
                     "Host/Sources/termind", "Host/Sources/TermindLauncher", "Host/Sources/TermindClient",
                     "Tests/Harness", "Tests/KernelTests", "Tests/PluginTests"]
        var importers: [String: Set<String>] = [:]
        for root in roots {
            for i in try imports(in: root) where cModuleOwners[i.module] != nil || (i.module.hasPrefix("C") && i.module.dropFirst().first?.isUppercase == true) {
                importers[i.module, default: []].insert(root)
            }
        }
        for (module, owners) in importers {
            XCTAssertEqual(owners, [cModuleOwners[module] ?? "(no declared owner)"], "\(module) is imported by \(owners.sorted())")
        }
        XCTAssertFalse(importers.isEmpty, "no C module import found at all: the check would pass vacuously")
    }

    func testTheCheckFailsClosedOnAMissingOrEmptyRoot() throws {
        XCTAssertThrowsError(try swiftFiles(in: "Features/DoesNotExist"))
        let empty = try TemporaryDirectory()
        defer { empty.remove() }
        let relative = "Tests/.architecture-empty-\(getpid())"
        try FileManager.default.createDirectory(atPath: Repository.path(relative), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: Repository.path(relative)) }
        XCTAssertThrowsError(try swiftFiles(in: relative)) { XCTAssertEqual(($0 as? TermindError)?.code, "architecture.root_empty") }
    }

    /// A feature reaches its database, secrets and SSH connections only through the views the
    /// kernel hands it: nothing public in the store or the transport opens another database,
    /// widens a view or hands out the pool's kernel-only operations as a port.
    func testNoPublicSymbolLetsAFeatureWidenItsViews() throws {
        let forbidden: [(pattern: String, why: String)] = [
            (#"public\s+(convenience\s+)?init\s*\(\s*path:"#, "opens a database or secret store"),
            (#"public\s+func\s+scoped\s*\(\s*to"#, "widens a view to another owner"),
            (#"public\s+func\s+claimUnowned"#, "claims secrets for an owner"),
            (#"extension\s+PortKey\s+where\s+P\s*==\s*SSHConnectionPool"#, "hands features the pool itself"),
        ]
        var found: [String] = []
        for file in try swiftFiles(in: "Core/Sources/TermindStore") + swiftFiles(in: "Core/Sources/TermindSSH") {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            for (pattern, why) in forbidden where text.range(of: pattern, options: .regularExpression) != nil {
                found.append("\(file) \(why)")
            }
        }
        XCTAssertEqual(found, [])
    }
}
