import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `make install` (scripts/install) lays out a working termind with the plugin header, and
/// the hello example in docs/plugins.md builds against that header without warnings and
/// prints what the page says it prints.
final class InstalledPluginSDKTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
    }

    override func tearDown() {
        directory?.remove()
    }

    /// The fenced block of `language` that follows `marker` in the page.
    private func block(_ page: String, after marker: String, language: String) throws -> String {
        let start = try XCTUnwrap(page.range(of: marker), "docs/plugins.md has no '\(marker)'")
        let rest = page[start.upperBound...]
        let open = try XCTUnwrap(rest.range(of: "```\(language)\n"), "no \(language) block after '\(marker)'")
        let body = rest[open.upperBound...]
        let close = try XCTUnwrap(body.range(of: "\n```"))
        return String(body[..<close.lowerBound]) + "\n"
    }

    /// A packager's install: staged under DESTDIR, the user service pointing at the final
    /// prefix, completion scripts that complete the installed commands, a binary that runs
    /// from `/`, and an uninstall that removes exactly what was installed.
    func testAStagedInstallHasTheServiceAndCompletionsAndUninstallRemovesExactlyWhatItInstalled() throws {
        let stage = directory.file("stage")
        var environment = ProcessInfo.processInfo.environment
        environment["DESTDIR"] = stage
        environment["HOME"] = directory.file("home")
        let install = try ProcessRunner.run(Repository.path("scripts/install"), ["--from", FeatureHarness.buildDirectory, "--prefix", "/opt/termind"],
                                            environment: environment)
        XCTAssertEqual(install.status, 0, install.stderr)
        let root = stage + "/opt/termind"
        let unit = try String(contentsOfFile: root + "/lib/systemd/user/termind.service", encoding: .utf8)
        XCTAssertTrue(unit.contains("Type=notify\n"), unit)
        XCTAssertTrue(unit.contains("ExecStart=/opt/termind/bin/termind serve\n"), "the unit names the final prefix, not the stage: \(unit)")

        // The installed binary works from / without the build folder.
        var plain = ProcessInfo.processInfo.environment
        plain["HOME"] = directory.file("home")
        plain["TERMIND_SOCKET"] = directory.file("none.sock")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_STORE", "TERMIND_SECRETS", "TERMIND_SECRETS_KEY"] { plain.removeValue(forKey: name) }
        let version = try ProcessRunner.run(root + "/bin/termind", ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "--json", "features"],
                                            environment: plain, currentDirectory: "/")
        XCTAssertEqual(version.status, 0, version.stderr)
        XCTAssertTrue(version.stdout.contains("\"workspaces\""), version.stdout)
        // A plugin in a process of its own runs from the install (termind-plugin-host beside termind).
        let isolated = directory.file("isolated/digest")
        try FileManager.default.createDirectory(atPath: isolated, withIntermediateDirectories: true)
        let manifest = try String(contentsOfFile: root + "/lib/termind/plugins/Digest/plugin.json", encoding: .utf8)
        try manifest.replacingOccurrences(of: "\"kind\": \"c\",", with: "\"kind\": \"c\", \"isolation\": \"process\",").write(toFile: isolated + "/plugin.json", atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: root + "/lib/termind/plugins/Digest/libTermindDigest.so", toPath: isolated + "/libTermindDigest.so")
        let crc = try ProcessRunner.run(root + "/bin/termind", ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "--plugins", directory.file("isolated"),
                                                               "--json", "call", "digest.fn.crc32@1", #"{"args": ["hello"]}"#], environment: plain, currentDirectory: "/")
        XCTAssertEqual(crc.status, 0, crc.stderr)
        XCTAssertTrue(crc.stdout.contains("907060870"), crc.stdout)

        // The bash completion completes command words, a command's options and global ones.
        let completion = root + "/share/bash-completion/completions/termind"
        func complete(_ words: [String]) throws -> [String] {
            let line = words.map { "'\($0)'" }.joined(separator: " ")
            let script = "source '\(completion)'; COMP_WORDS=(\(line)); COMP_CWORD=\(words.count - 1); _termind; printf '%s\\n' \"${COMPREPLY[@]}\""
            return try ProcessRunner.run("/bin/bash", ["-c", script]).stdout.split(separator: "\n").map(String.init)
        }
        XCTAssertEqual(try complete(["termind", "vault", "ho"]), ["host"])
        XCTAssertEqual(try complete(["termind", "--json", "vault", "host", "a"]), ["add"])
        XCTAssertEqual(try complete(["termind", "exec", "box", "--acc"]), ["--accept-host-key"])
        XCTAssertEqual(try complete(["termind", "--store", "vault", "ex"]), ["exec"], "an option's value is not a command word")
        XCTAssertTrue(try complete(["termind", "vault", "host", "add", "--"]).contains("--label"))
        let zsh = try String(contentsOfFile: root + "/share/zsh/site-functions/_termind", encoding: .utf8)
        XCTAssertTrue(zsh.hasPrefix("#compdef termind\n"), zsh)

        // Uninstall removes what was installed and nothing else.
        try directory.write("stage/opt/termind/bin/someone-elses-tool", "#!/bin/sh\n")
        let uninstall = try ProcessRunner.run(Repository.path("scripts/install"), ["--prefix", "/opt/termind", "--uninstall"], environment: environment)
        XCTAssertEqual(uninstall.status, 0, uninstall.stderr)
        let left = try FileManager.default.subpathsOfDirectory(atPath: root).sorted()
        XCTAssertEqual(left, ["bin", "bin/someone-elses-tool"])
    }

    func testInstallLaysOutTermindAndTheHeaderAndTheDocumentedHelloPluginWorks() throws {
        let prefix = directory.file("prefix")
        let install = try ProcessRunner.run(Repository.path("scripts/install"), ["--from", FeatureHarness.buildDirectory, "--prefix", prefix])
        XCTAssertEqual(install.status, 0, install.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: prefix + "/include/termind_plugin.h"),
                       FileManager.default.contents(atPath: Repository.path("Core/Sources/CTermindPluginABI/include/termind_plugin.h")))
        for file in ["lib/termind/termind", "lib/termind/libTermindCore.so", "lib/termind/libTermindVault.so", "lib/termind/libTermindWorkspaces.so", "lib/termind/Registry.json",
                     "lib/termind/plugins/Digest/plugin.json", "lib/termind/plugins/Digest/libTermindDigest.so"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: prefix + "/" + file), file)
        }
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: prefix + "/bin/termind"), "../lib/termind/termind")

        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        environment["TERMIND_SOCKET"] = directory.file("no-server.sock")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_STORE", "TERMIND_SECRETS", "TERMIND_SECRETS_KEY"] {
            environment.removeValue(forKey: name)
        }
        let termind = prefix + "/bin/termind"
        let store = ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("secrets.key")]
        let features = try ProcessRunner.run(termind, store + ["--plugins", prefix + "/lib/termind/plugins", "--json", "features"], environment: environment)
        XCTAssertEqual(features.status, 0, features.stderr)
        let listed = try JSONCoding.parse(Data(features.stdout.utf8), source: "features")
        guard case .array(let statuses)? = listed["features"] else { return XCTFail(features.stdout) }
        // Every feature of the checkout's registry, and the two example plugins.
        let registry = try JSONCoding.parse(try Data(contentsOf: URL(fileURLWithPath: Repository.path("Registry.json"))), source: "Registry.json")
        guard case .array(let declared)? = registry["features"] else { return XCTFail("Registry.json has no features") }
        XCTAssertEqual(Set(statuses.compactMap { $0["id"]?.stringValue }), Set(declared.compactMap { $0["id"]?.stringValue }).union(["digest", "wol"]))
        XCTAssertTrue(statuses.allSatisfy { $0["state"] == .string("running") }, features.stdout)

        // The hello example, exactly as the page shows it, against the installed header.
        let page = try String(contentsOfFile: Repository.path("docs/plugins.md"), encoding: .utf8)
        let source = try block(page, after: "## In C", language: "c")
        let manifest = try block(page, after: "`hello/plugin.json`:", language: "json")
        let commands = try block(page, after: "`hello/plugin.json`:", language: "sh").split(separator: "\n").map(String.init)
        let expected = try block(page, after: "`hello/plugin.json`:", language: "text")
        XCTAssertEqual(commands.count, 2, "\(commands)")
        try directory.write("hello.c", source)
        try directory.write("hello/plugin.json", manifest)
        // Run the page's two command lines with the installed termind on PATH.
        var shell = environment
        shell["PREFIX"] = prefix
        shell["PATH"] = prefix + "/bin:" + (environment["PATH"] ?? "/usr/bin:/bin")
        let built = try ProcessRunner.run("/bin/bash", ["-c", commands[0] + " -Werror"], environment: shell, currentDirectory: directory.path)
        XCTAssertEqual(built.status, 0, "the example compiles without warnings: \(built.stderr)")
        let greeted = try ProcessRunner.run("/bin/bash", ["-c", commands[1]], environment: shell, currentDirectory: directory.path)
        XCTAssertEqual(greeted.status, 0, greeted.stderr)
        XCTAssertEqual(greeted.stdout, expected)
        let check = try ProcessRunner.run(termind, ["plugins", "check", "hello"], environment: environment, currentDirectory: directory.path)
        XCTAssertEqual(check.status, 0, check.stdout)
        XCTAssertTrue(check.stdout.contains("4 passed, 0 failed"), check.stdout)
        let call = try ProcessRunner.run(termind, store + ["--plugins", "hello", "call", "hello.greet@1", #"{"name": 7}"#], environment: environment,
                                         currentDirectory: directory.path)
        XCTAssertEqual(call.status, 2)
        XCTAssertTrue(call.stderr.contains("Invalid request for hello.greet@1: body.name: expected string, got integer."), call.stderr)
    }
}
