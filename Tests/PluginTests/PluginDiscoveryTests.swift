import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// How plugins are found and vetted before any code runs: every folder from the plugin
/// root to the library, resolved first; libraries outside the plugin folder only when the
/// manifest says so; plugin.json bounded and regular; reserved ids and permanence refused;
/// and `plugins check` refusing exactly what a boot refuses.
final class PluginDiscoveryTests: XCTestCase {
    private enum SafeResolve {
        static func path(_ path: String) -> String? {
            guard let resolved = realpath(path, nil) else { return nil }
            defer { free(resolved) }
            return String(cString: resolved)
        }
    }

    static let source = #"""
    #include "termind_plugin.h"
    #include <string.h>
    static const termind_host_api *host;
    static int handle(const char *contract, const char *request, size_t length, char **reply) {
        *reply = host->alloc(3); memcpy(*reply, "{}", 3); return TERMIND_OK;
    }
    static const termind_plugin_descriptor descriptor = {
        sizeof(termind_plugin_descriptor), TERMIND_PLUGIN_ABI_VERSION, PLUGIN_ID, "1.0.0", NULL, NULL, handle, NULL
    };
    const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) { host = api; return &descriptor; }
    """#

    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        // Messages name resolved paths.
        XCTAssertEqual(SafeResolve.path(directory.path), directory.path, "the temporary folder is named by its real path")
    }

    override func tearDown() {
        // Restore modes so the folder can be removed.
        _ = try? ProcessRunner.run("/bin/chmod", ["-R", "u+rwx", directory.path])
        directory?.remove()
    }

    /// A plugin `id` in `folder`; its library is built at `libraryAt` (relative to the
    /// folder, or absolute) and named `library` in plugin.json.
    private func plugin(_ id: String, in folder: String, libraryAt: String? = nil, library: String? = nil, extra: String = "",
                        contracts: [String]? = nil) throws {
        let target = libraryAt.map { $0.hasPrefix("/") ? $0 : (folder as NSString).appendingPathComponent($0) }
            ?? (folder as NSString).appendingPathComponent("lib\(id).so")
        let buildFolder = (target as NSString).deletingLastPathComponent
        try CPluginCompiler.build(source: Self.source, folder: buildFolder, name: "tmp-\(id)", defines: ["PLUGIN_ID=\"\(id)\""])
        try FileManager.default.moveItem(atPath: (buildFolder as NSString).appendingPathComponent("libtmp-\(id).so"), toPath: target)
        let names = (contracts ?? ["\(id).run@1"]).map { "\"\($0)\"" }.joined(separator: ", ")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let manifest = """
        {"id": "\(id)", "version": "1.0.0", "abi": 1, "kind": "c", "library": "\(library ?? libraryAt ?? "lib\(id).so")", "contracts": [\(names)]\(extra)}
        """
        try Data(manifest.utf8).write(to: URL(fileURLWithPath: (folder as NSString).appendingPathComponent("plugin.json")))
    }

    private func boot(_ roots: [String]) async throws -> (statuses: [String: FeatureStatus], problems: [FeatureProblem], kernel: Kernel) {
        let kernel = Kernel(configuration: KernelConfiguration(registryPath: nil, pluginDirectories: roots), sink: .disabled())
        let statuses = try await kernel.boot()
        return (Dictionary(uniqueKeysWithValues: statuses.map { ($0.id, $0) }), await kernel.unattributed, kernel)
    }

    private func problem(_ problems: [FeatureProblem], _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(problems.contains { $0.message.contains(text) }, "no problem says '\(text)': \(problems.map(\.message))", file: file, line: line)
    }

    func testEveryFolderFromThePluginRootToTheLibraryIsChecked() async throws {
        let root = directory.file("plugins")
        try plugin("good", in: root + "/good")
        // A library in a world-writable sub-folder of the plugin.
        try plugin("subfolder", in: root + "/subfolder", libraryAt: "lib/libsubfolder.so")
        chmod(root + "/subfolder/lib", 0o777)
        // A library reached by '..': outside the plugin folder, and not declared so.
        try plugin("dotdot", in: root + "/dotdot", libraryAt: directory.file("shared/libdotdot.so"), library: "../../shared/libdotdot.so")
        // Declared, but the folder outside is world-writable.
        try plugin("outside", in: root + "/outside", libraryAt: directory.file("open/liboutside.so"), extra: #", "libraryOutsidePlugin": true"#)
        chmod(directory.file("open"), 0o777)
        // Declared, and the folder outside is safe: loads.
        try plugin("declared", in: root + "/declared", libraryAt: directory.file("shared/libdeclared.so"), library: "../../shared/libdeclared.so",
                   extra: #", "libraryOutsidePlugin": true"#)
        // A symlink inside the folder that leads to a world-writable place.
        try plugin("linked", in: root + "/linked", libraryAt: directory.file("open/liblinked-real.so"), library: "liblinked.so")
        try FileManager.default.createSymbolicLink(atPath: root + "/linked/liblinked.so", withDestinationPath: directory.file("open/liblinked-real.so"))
        // Group-writable library, plugin.json and folder.
        try plugin("gwlib", in: root + "/gwlib")
        chmod(root + "/gwlib/libgwlib.so", 0o775)
        try plugin("gwjson", in: root + "/gwjson")
        chmod(root + "/gwjson/plugin.json", 0o664)
        try plugin("gwfolder", in: root + "/gwfolder")
        chmod(root + "/gwfolder", 0o775)

        let (statuses, problems, kernel) = try await boot([root])
        XCTAssertEqual(statuses["good"]?.state, .running)
        XCTAssertEqual(statuses["declared"]?.state, .running, statuses["declared"]?.reason ?? "\(problems)")
        for id in ["subfolder", "dotdot", "outside", "linked", "gwlib", "gwjson", "gwfolder"] {
            XCTAssertNil(statuses[id], "\(id) must not load")
        }
        problem(problems, "subfolder/lib is writable by group or others (mode 777)")
        problem(problems, "its library ../../shared/libdotdot.so resolves to \(directory.file("shared/libdotdot.so")), outside the plugin folder")
        problem(problems, "set \"libraryOutsidePlugin\": true in plugin.json to allow that")
        problem(problems, "\(directory.file("open")) is writable by group or others (mode 777)")
        problem(problems, "libgwlib.so is writable by group or others (mode 775)")
        problem(problems, "gwjson/plugin.json is writable by group or others (mode 664)")
        problem(problems, "gwfolder is writable by group or others (mode 775)")
        XCTAssertEqual(problems.filter { $0.code == "plugin.insecure" }.count, 7, "\(problems.map(\.message))")
        await kernel.shutdown()
    }

    func testAWorldWritableFolderOfPluginFoldersLoadsNothing() async throws {
        let root = directory.file("plugins")
        try plugin("good", in: root + "/good")
        chmod(root, 0o777)
        let (statuses, problems, kernel) = try await boot([root])
        XCTAssertTrue(statuses.isEmpty)
        problem(problems, "No plugin in \(root) is loaded: \(root) is writable by group or others (mode 777)")
        await kernel.shutdown()
        // A sticky, root-owned folder above the plugin root (as /tmp is) is fine.
        guard getuid() == 0 else { return }
        chmod(root, 0o755)
        chmod(directory.path, 0o1777)
        let (again, _, second) = try await boot([root])
        XCTAssertEqual(again["good"]?.state, .running)
        await second.shutdown()
        chmod(directory.path, 0o700)
    }

    func testPluginsCheckRefusesExactlyWhatTheLoaderRefuses() async throws {
        let termind = FeatureHarness.buildDirectory + "/termind"
        for (name, mode, path) in [("gwlib", 0o775, "libgwlib.so"), ("gwjson", 0o664, "plugin.json"), ("gwfolder", 0o775, "")] {
            let folder = directory.file(name)
            try plugin(name, in: folder)
            XCTAssertEqual(try ProcessRunner.run(termind, ["plugins", "check", folder]).status, 0, "\(name) passes while it is safe")
            chmod(path.isEmpty ? folder : (folder as NSString).appendingPathComponent(path), mode_t(mode))
            let check = try ProcessRunner.run(termind, ["plugins", "check", folder])
            XCTAssertEqual(check.status, 1, check.stdout)
            XCTAssertTrue(check.stdout.contains("FAIL manifest"), check.stdout)
            XCTAssertTrue(check.stdout.contains("is writable by group or others (mode \(String(mode, radix: 8)))"), check.stdout)
            XCTAssertTrue(check.stdout.contains("0 passed, 1 failed"), check.stdout)
            let loaded = try ProcessRunner.run(termind, ["--registry", try directory.write("Registry.json", #"{"schema": 1, "features": []}"#),
                                                         "--plugins", folder, "features", "--json"])
            XCTAssertTrue(loaded.stdout.contains("is writable by group or others (mode \(String(mode, radix: 8)))"), loaded.stdout)
            XCTAssertFalse(loaded.stdout.contains("\"state\" : \"running\""), loaded.stdout)
        }
    }

    func testPluginJSONMustBeASmallRegularFileAndAMissingFolderIsReported() async throws {
        let root = directory.file("plugins")
        try plugin("good", in: root + "/good")
        try FileManager.default.createDirectory(atPath: root + "/fifo", withIntermediateDirectories: true)
        XCTAssertEqual(mkfifo(root + "/fifo/plugin.json", 0o600), 0)
        try FileManager.default.createDirectory(atPath: root + "/zero", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/zero/plugin.json", withDestinationPath: "/dev/zero")
        if getuid() == 0 {
            try FileManager.default.createDirectory(atPath: root + "/device", withIntermediateDirectories: true)
            XCTAssertEqual(mknod(root + "/device/plugin.json", S_IFCHR | 0o600, dev_t(0x105)), 0, "a copy of /dev/zero (device 1:5)")
        }
        try FileManager.default.createDirectory(atPath: root + "/huge", withIntermediateDirectories: true)
        try Data(repeating: UInt8(ascii: " "), count: 2 << 20).write(to: URL(fileURLWithPath: root + "/huge/plugin.json"))
        let started = Date()
        let (statuses, problems, kernel) = try await boot([root, directory.file("nowhere")])
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "a FIFO is never waited on")
        XCTAssertEqual(statuses["good"]?.state, .running)
        problem(problems, "The plugin manifest \(root)/fifo/plugin.json is a FIFO (named pipe), not a regular file")
        problem(problems, "plugin.json resolves to /dev/zero, outside the plugin folder")
        if getuid() == 0 { problem(problems, "The plugin manifest \(root)/device/plugin.json is a character device, not a regular file") }
        problem(problems, "The plugin manifest \(root)/huge/plugin.json is 2097152 bytes; at most 1048576 bytes are read")
        problem(problems, "The plugin folder \(directory.file("nowhere")) (from --plugins or TERMIND_PLUGINS) does not exist.")
        await kernel.shutdown()

        let empty = directory.file("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let (_, none, third) = try await boot([empty])
        problem(none, "holds no plugin.json, neither itself nor in a subfolder")
        await third.shutdown()
    }

    func testAPluginCannotClaimAReservedIDAnotherNamespaceOrPermanence() async throws {
        let root = directory.file("plugins")
        try plugin("kernel", in: root + "/kernel", contracts: ["kernel.shutdown@1"])
        try plugin("vault", in: root + "/vault", contracts: ["vault.host.purge@1"])
        try plugin("sneaky", in: root + "/sneaky", contracts: ["vault.host.purge@1"])
        try plugin("sticky", in: root + "/sticky", extra: #", "permanent": true"#)
        try plugin("good", in: root + "/good")
        let (statuses, problems, kernel) = try await boot([root])
        XCTAssertEqual(statuses["good"]?.state, .running)
        XCTAssertNil(statuses["kernel"])
        XCTAssertNil(statuses["vault"])
        problem(problems, "field \"id\": 'kernel' is reserved for termind itself")
        problem(problems, "field \"id\": 'vault' is reserved for termind itself")
        XCTAssertEqual(statuses["sneaky"]?.reasonCode, "manifest.namespace")
        XCTAssertEqual(statuses["sticky"]?.state, .disabled, "boot goes on: a plugin is never permanent")
        XCTAssertEqual(statuses["sticky"]?.permanent, false)
        XCTAssertTrue(statuses["sticky"]?.reason?.contains("a plugin can never be permanent") ?? false)
        let contracts = kernel.contractInfos().map(\.id)
        XCTAssertFalse(contracts.contains("kernel.shutdown@1"))
        XCTAssertFalse(contracts.contains("vault.host.purge@1"))
        XCTAssertTrue(contracts.contains("kernel.ping@1"), "the kernel's own contracts stay")
        await kernel.shutdown()
    }
}
