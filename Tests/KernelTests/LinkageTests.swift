import Foundation
import TermindHarness
import XCTest

/// Proves the shape DESIGN.md depends on: one libTermindCore.so in the process. Every
/// Swift image links it dynamically and defines none of its symbols globally; C plugins
/// do not touch it at all.
final class LinkageTests: XCTestCase {
    private let coreSymbolPrefixes = ["$s11TermindCore", "$s13TermindKernel"]

    private func tool(_ name: String, _ arguments: [String]) throws -> String {
        let result = try ProcessRunner.run("/usr/bin/\(name)", arguments)
        XCTAssertEqual(result.status, 0, "\(name) \(arguments): \(result.stderr)")
        return result.stdout
    }

    private func needed(_ path: String) throws -> [String] {
        try tool("readelf", ["-d", path]).split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap { line in
            line.split(separator: "[").last?.split(separator: "]").first.map(String.init)
        }
    }

    /// Defined Core symbols: (in the dynamic table, with global binding).
    /// Mangled names of the API modules: their extensions of Core types (a port key on
    /// `PortKey`) are theirs, not Core's.
    private var apiModuleManglings: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources"))) ?? []).map { "\($0.utf8.count)\($0)" }
    }

    private func coreDefinitions(_ path: String) throws -> (dynamic: [String], global: [String]) {
        let apis = apiModuleManglings
        let isCore: (Substring) -> Bool = { line in
            self.coreSymbolPrefixes.contains { line.contains($0) } && !apis.contains { line.contains($0) }
        }
        let dynamic = try withoutAPIExtensions(try tool("nm", ["-D", "--defined-only", path]).split(separator: "\n").filter(isCore).map(String.init))
        let global = try withoutAPIExtensions(try tool("nm", ["--defined-only", path]).split(separator: "\n").filter(isCore).filter { line in
            let parts = line.split(separator: " ")
            return parts.count >= 3 && parts[1].first.map { $0.isUppercase } == true
        }.map(String.init))
        return (dynamic, global)
    }

    /// `lines` less the symbols an API module defines in an extension of a Core type (a
    /// `PortKey` accessor): their mangling may abbreviate the module's name by substitution
    /// (`PortForwardingAPI` beside `PortKey`), so they are told apart demangled.
    private func withoutAPIExtensions(_ lines: [String]) throws -> [String] {
        guard !lines.isEmpty else { return [] }
        let apis = ((try? FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources"))) ?? []).filter { $0.hasSuffix("API") }
        let demangler = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/swift-demangle" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let demangler else { return lines }
        let names = lines.map { String($0.split(separator: " ").last ?? "") }
        let demangled = try ProcessRunner.run(demangler, ["--compact"] + names).stdout.split(separator: "\n", omittingEmptySubsequences: false)
        guard demangled.count >= names.count else { return lines }
        return zip(lines, demangled).filter { _, text in !apis.contains { text.contains("(extension in \($0))") } }.map(\.0)
    }

    func testEverySwiftImageUsesTheOneSharedCore() throws {
        let dir = FeatureHarness.buildDirectory
        let libraries = try FileManager.default.contentsOfDirectory(atPath: dir)
            .filter { $0.hasPrefix("libTermind") && $0.hasSuffix(".so") && $0 != "libTermindCore.so" && $0 != "libTermindDigest.so" }
        for expected in ["libTermindWakeOnLAN.so", "libTermindFixtureEcho.so", "libTermindFixtureFailingStart.so"] {
            XCTAssertTrue(libraries.contains(expected), "\(expected) was not built")
        }
        XCTAssertTrue(libraries.contains("libTermindClient.so"), "the client library was not built")
        for image in libraries.sorted() {
            let path = dir + "/" + image
            XCTAssertTrue(try needed(path).contains("libTermindCore.so"), "\(image) does not link libTermindCore.so")
            let defs = try coreDefinitions(path)
            XCTAssertEqual(defs.dynamic, [], "\(image) exports Core symbols")
            XCTAssertEqual(defs.global, [], "\(image) embeds Core definitions")
        }
    }

    func testTheCPluginDoesNotTouchCoreAndCoreReallyHoldsTheSymbols() throws {
        let dir = FeatureHarness.buildDirectory
        let digest = dir + "/libTermindDigest.so"
        XCTAssertFalse(try needed(digest).contains("libTermindCore.so"))
        XCTAssertEqual(try coreDefinitions(digest).dynamic, [])
        // Sanity: the same check finds Core's own symbols where they belong.
        let core = try coreDefinitions(dir + "/libTermindCore.so")
        XCTAssertGreaterThan(core.dynamic.count, 100)
        XCTAssertTrue(core.dynamic.contains { $0.contains("$s13TermindKernel") }, "the kernel module lives in the same library")
    }

    func testFeatureAPIModulesLiveInOneSharedLibraryToo() throws {
        let dir = FeatureHarness.buildDirectory
        let apis = try FileManager.default.contentsOfDirectory(atPath: Repository.path("APIs/Sources")).filter { $0.hasSuffix("API") }
        XCTAssertTrue(apis.contains("VaultAPI"))
        let prefixes = apis.map { "$s\($0.utf8.count)\($0)" }
        func apiDefinitions(_ path: String, dynamicOnly: Bool) throws -> [String] {
            try tool("nm", (dynamicOnly ? ["-D"] : []) + ["--defined-only", path]).split(separator: "\n").filter { line in
                let parts = line.split(separator: " ")
                return prefixes.contains { line.contains($0) } && parts.count >= 3 && parts[1].first.map { $0.isUppercase } == true
            }.map(String.init)
        }
        // The API library holds them...
        XCTAssertGreaterThan(try apiDefinitions(dir + "/libTermindAPIs.so", dynamicOnly: true).count, 50)
        // ...and every image that uses them links it instead of carrying its own copy.
        for image in ["libTermindClient.so", "libTermindVault.so", "libTermindWakeOnLAN.so", "libTermindFixtureEcho.so"] {
            let path = dir + "/" + image
            XCTAssertTrue(try needed(path).contains("libTermindAPIs.so"), "\(image) does not link libTermindAPIs.so")
            XCTAssertEqual(try apiDefinitions(path, dynamicOnly: false), [], "\(image) embeds API module definitions")
        }
    }

    /// What a one-shot command loads in process (the client, Core, the APIs and the built-in
    /// features) links FoundationEssentials, never the whole of Foundation with ICU (issue 40:
    /// about 6 MiB and a good part of a one-shot command's start).
    func testAOneShotCommandsLibrariesLinkNoFoundationBeyondItsEssentials() throws {
        let dir = FeatureHarness.buildDirectory
        for image in ["libTermindClient.so", "libTermindCore.so", "libTermindAPIs.so", "libTermindVault.so", "libTermindPortForwarding.so",
                      "libTermindSettings.so", "libTermindSync.so", "libTermindMetrics.so", "libTermindSFTP.so", "libTermindWorkspaces.so", "libTermindAssistant.so"] {
            let linked = try needed(dir + "/" + image)
            XCTAssertFalse(linked.contains { $0.hasPrefix("libFoundation.") || $0.hasPrefix("libFoundationInternationalization") || $0.hasPrefix("lib_FoundationICU") },
                           "\(image) links \(linked)")
        }
    }

    /// The launcher starts with the Swift runtime and Glibc only: Foundation, ICU, Dispatch,
    /// OpenSSL, SQLite, libffi and termind's own libraries come with libTermindClient.so,
    /// which it loads only for a command no server takes — that is the start-up a command
    /// run by `termind serve` saves.
    func testTheLauncherLinksNeitherFoundationNorTermindsLibraries() throws {
        let dir = FeatureHarness.buildDirectory
        let launcher = try needed(dir + "/termind")
        XCTAssertTrue(launcher.contains("libswiftCore.so"))
        let heavy = launcher.filter { name in
            ["libFoundation", "libTermind", "libdispatch", "libicu", "libcrypto", "libssl", "libsqlite3", "libffi", "libxml2",
             // Nor the runtime's Concurrency and StringProcessing: it imports neither (Package.swift's launcherSettings).
             "libswift_Concurrency", "libswift_StringProcessing", "libswift_RegexParser"].contains { name.hasPrefix($0) }
        }
        XCTAssertEqual(heavy, [], "the launcher links \(heavy)")
        let client = try needed(dir + "/libTermindClient.so")
        XCTAssertTrue(client.contains("libTermindCore.so") && client.contains("libFoundationEssentials.so"), "\(client)")
        XCTAssertTrue(try tool("nm", ["-D", "--defined-only", dir + "/libTermindClient.so"]).contains("termind_client_main"),
                      "the launcher's entry into the client is not exported")
    }

    func testNoImageCarriesAStaticSwiftRuntime() throws {
        let dir = FeatureHarness.buildDirectory
        for image in ["termind", "libTermindClient.so", "libTermindCore.so", "libTermindWakeOnLAN.so"] {
            XCTAssertTrue(try needed(dir + "/" + image).contains("libswiftCore.so"), "\(image) must use the shared Swift runtime")
        }
    }
}
