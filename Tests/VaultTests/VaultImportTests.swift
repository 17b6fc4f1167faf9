import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import XCTest

/// ssh_config import through the Vault: preview → selection → commit, on real files.
final class VaultImportTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        let manifest = try FeatureHarness.registryManifest(id: "vault")
        session = try await FeatureHarness.boot(manifest)
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    private func writeConfig() throws -> String {
        let marker = directory.file("proxycommand-ran")
        try directory.write("conf.d/gpu.conf", """
        Host gpu
            HostName 10.20.0.5
            User ml
            ProxyJump bastion
        """)
        return try directory.write("config", """
        Include \(directory.file("conf.d"))/*.conf

        Host bastion
            HostName bastion.example.com
            Port 2222
            User jump

        Host legacy
            HostName legacy.example.com
            ProxyCommand touch \(marker)

        Host existing
            HostName new-address.example.com

        Host *
            User default-user
            IdentityFile ~/.ssh/id_ed25519
        """)
    }

    func testPreviewShowsCandidatesAndNeverRunsCommands() async throws {
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "old.example.com", label: "existing"))
        let path = try writeConfig()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        XCTAssertEqual(preview.candidates.map(\.alias), ["gpu", "bastion", "legacy", "existing"])
        let gpu = try XCTUnwrap(preview.candidates.first { $0.alias == "gpu" })
        XCTAssertEqual(gpu.hostname, "10.20.0.5")
        XCTAssertEqual(gpu.user, "ml")
        XCTAssertEqual(gpu.jump, ["bastion"])
        let bastion = try XCTUnwrap(preview.candidates.first { $0.alias == "bastion" })
        XCTAssertEqual(bastion.port, 2222)
        XCTAssertEqual(bastion.user, "jump", "first obtained value wins over Host *")
        XCTAssertTrue(preview.candidates.first { $0.alias == "existing" }?.exists ?? false)
        XCTAssertTrue(preview.warnings.contains { $0.contains("ProxyCommand") }, "\(preview.warnings)")
        XCTAssertEqual(preview.files.count, 2, "the config and its Include are digested")
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("proxycommand-ran")), "nothing was executed")
        let saved = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(saved.count, 1, "a preview saves nothing")
    }

    func testCommitImportsTheSelectionInOrderNeverOverwritingOrTakingCredentials() async throws {
        let original = try await session.call(VaultContracts.HostAdd.self, .init(address: "old.example.com", label: "existing"))
        let path = try writeConfig()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        let result = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["gpu", "bastion", "existing"], files: preview.files))
        XCTAssertEqual(result.created.map(\.label), ["bastion", "gpu"], "the jump host is created before the host that uses it")
        XCTAssertEqual(result.skipped.map(\.alias), ["existing"])
        let gpu = try XCTUnwrap(result.created.first { $0.label == "gpu" })
        XCTAssertEqual(gpu.jump, [result.created[0].id])
        XCTAssertNil(gpu.identity, "selecting a host never selects credentials")
        let existing = try await session.call(VaultContracts.HostGet.self, .init(host: "existing"))
        XCTAssertEqual(existing, original, "an existing record is never overwritten")
        let identities = try await session.call(VaultContracts.IdentityList.self, Empty()).identities
        XCTAssertEqual(identities, [])
    }

    func testACommitFailsClosedWhenAFileChangedSinceThePreview() async throws {
        let path = try writeConfig()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        try directory.write("conf.d/gpu.conf", "Host gpu\n    HostName 10.66.6.6\n")
        do {
            _ = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["gpu", "bastion"], files: preview.files))
            XCTFail("the commit must refuse a changed file")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.import_changed")
            XCTAssertTrue(error.message.contains("gpu.conf"), error.message)
        }
        let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(hosts, [])
    }

    func testAMissingJumpHostImportsNothing() async throws {
        let path = try writeConfig()
        do {
            _ = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["legacy", "gpu"]))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.import_jump_missing")
            XCTAssertTrue(error.message.contains("'bastion' of 'gpu'"), error.message)
        }
        let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(hosts, [], "one transaction: legacy was not kept either")
        do {
            _ = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["nope"]))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("'nope' is not a host"), error.message)
        }
    }
}

/// Identities and keys from an ssh_config: only with selected keys, re-read at commit.
final class VaultImportIdentityTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    private func setUpConfig() throws -> (config: String, key: String, locked: String) {
        let key = directory.file("id_ed25519"), locked = directory.file("id_locked")
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]).status, 0)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "secret pass", "-f", locked]).status, 0)
        let config = try directory.write("config", """
        Host app
            HostName app.example.com
            User deploy
            IdentityFile \(key)
            IdentityFile \(locked)
        Host nouser
            HostName nouser.example.com
            IdentityFile \(key)
        """)
        return (config, key, locked)
    }

    func testAnIdentityIsImportedOnlyWithSelectedKeysAndAttachedToItsNewHost() async throws {
        let (config, key, _) = try setUpConfig()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: config))
        XCTAssertTrue(preview.files.contains { $0.path == key }, "the key file is digested by the preview")
        // Selecting the host imports no credentials.
        let hostOnly = try await session.call(ImportContracts.Commit.self, .init(path: config, select: ["app"], files: preview.files))
        XCTAssertNil(hostOnly.created.first?.identity)
        XCTAssertEqual(hostOnly.identities, [])
        _ = try await session.call(VaultContracts.HostDelete.self, .init(host: "app"))

        let result = try await session.call(ImportContracts.Commit.self, .init(
            path: config, select: ["app"], identities: [.init(alias: "app", keys: [key])], files: preview.files))
        XCTAssertEqual(result.identities.map(\.username), ["deploy"])
        XCTAssertEqual(result.keys.count, 1)
        XCTAssertEqual(result.keys[0].label, "id_ed25519")
        let listed = try ProcessRunner.run("/usr/bin/ssh-keygen", ["-l", "-E", "sha256", "-f", key]).stdout
        XCTAssertTrue(listed.contains(result.keys[0].fingerprint), listed)
        XCTAssertEqual(result.created.first?.identity, result.identities[0].id)
    }

    func testTheCommitFailsClosedWhenAKeyChangedOrIsNotSelectable() async throws {
        let (config, key, locked) = try setUpConfig()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: config))
        // The key is replaced between preview and commit.
        try FileManager.default.removeItem(atPath: key)
        XCTAssertEqual(try ProcessRunner.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]).status, 0)
        await expect("vault.import_changed", "changed since the preview",
                     .init(path: config, select: ["app"], identities: [.init(alias: "app", keys: [key])], files: preview.files))
        let fresh = try await session.call(ImportContracts.Preview.self, .init(path: config))
        await expect("key.passphrase_required", "vault key import",
                     .init(path: config, select: ["app"], identities: [.init(alias: "app", keys: [locked])], files: fresh.files))
        await expect("request.invalid", "needs at least one selected key",
                     .init(path: config, select: [], identities: [.init(alias: "app", keys: [])], files: fresh.files))
        await expect("request.invalid", "has no User",
                     .init(path: config, select: [], identities: [.init(alias: "nouser", keys: [key])], files: fresh.files))
        await expect("request.invalid", "is not an IdentityFile",
                     .init(path: config, select: [], identities: [.init(alias: "app", keys: ["/etc/passwd"])], files: fresh.files))
        await expect("request.invalid", "needs the digests the preview returned",
                     .init(path: config, select: ["app"], identities: [.init(alias: "app", keys: [key])], files: nil))
        // Nothing was written by any of the failed commits: no host, identity, key or secret.
        let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
        let identities = try await session.call(VaultContracts.IdentityList.self, Empty()).identities
        let keys = try await session.call(KeyContracts.List.self, Empty()).keys
        XCTAssertEqual(hosts.count + identities.count + keys.count, 0)
        let secrets = try await session.call(SecretStoreContracts.Status.self, Empty())
        XCTAssertEqual(secrets.secrets, 0)
    }

    private func expect(_ code: String, _ text: String, _ request: ImportContracts.Commit.Request, line: UInt = #line) async {
        do {
            _ = try await session.call(ImportContracts.Commit.self, request)
            XCTFail("expected \(code)", line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, code, error.message, line: line)
            XCTAssertTrue(error.message.contains(text), error.message, line: line)
        } catch {
            XCTFail("\(error)", line: line)
        }
    }
}

/// What the import refuses to read or to import, as OpenSSH would refuse it.
final class VaultImportValidationTests: XCTestCase {
    private var session: HarnessSession!
    private var directory: TemporaryDirectory!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"))
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    func testAHostWithAnInvalidValueIsShownAsNotImportableAndTheCommitRefusesIt() async throws {
        let path = try directory.write("config", "Host ok\n  HostName 10.0.0.1\nHost big\n  HostName 10.0.0.2\n  Port 99999\nHost word\n  Port notanumber\n")
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        let byAlias = Dictionary(uniqueKeysWithValues: preview.candidates.map { ($0.alias, $0) })
        XCTAssertEqual(byAlias["ok"]?.importable, true)
        XCTAssertEqual(byAlias["big"]?.importable, false)
        XCTAssertEqual(byAlias["big"]?.problems, ["\(path) line 5: Bad port '99999' (ports are numbers from 1 to 65535)."])
        XCTAssertEqual(byAlias["word"]?.importable, false)
        do {
            _ = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["ok", "big"], files: preview.files))
            XCTFail("a host OpenSSH would refuse must not be imported with port 22")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.import_invalid_host")
            XCTAssertTrue(error.message.contains("'big'") && error.message.contains("line 5") && error.message.contains("99999"), error.message)
            XCTAssertTrue(error.message.contains("Nothing was imported"), error.message)
        }
        let saved = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(saved, [], "nothing was imported, not even the valid selection")
        let valid = try await session.call(ImportContracts.Commit.self, .init(path: path, select: ["ok"], files: preview.files))
        XCTAssertEqual(valid.created.map(\.label), ["ok"])
    }

    func testIncludesThatAreNotRegularReadableFilesAreErrorsNamingThem() async throws {
        let fifo = directory.file("fifo")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        try FileManager.default.createDirectory(atPath: directory.file("a-directory"), withIntermediateDirectories: true)
        _ = try directory.write("huge", String(repeating: "# padding\n", count: 120_000))
        let path = try directory.write("config", """
            Host a
              Include \(fifo)
            Host b
              Include /dev/zero
            Host c
              Include \(directory.file("a-directory"))
            Host d
              Include \(directory.file("huge"))
            Host e
              User fine
            """)
        let started = Date()
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "a FIFO or /dev/zero is never read")
        let byAlias = Dictionary(uniqueKeysWithValues: preview.candidates.map { ($0.alias, $0) })
        XCTAssertTrue(byAlias["a"]?.problems.first?.contains("\(fifo) is a FIFO") ?? false, "\(byAlias["a"]?.problems ?? [])")
        XCTAssertTrue(byAlias["b"]?.problems.first?.contains("/dev/zero is a character device") ?? false, "\(byAlias["b"]?.problems ?? [])")
        XCTAssertTrue(byAlias["c"]?.problems.first?.contains("is a directory") ?? false, "\(byAlias["c"]?.problems ?? [])")
        XCTAssertTrue(byAlias["d"]?.problems.first?.contains("1200000 bytes; at most 1048576") ?? false, "\(byAlias["d"]?.problems ?? [])")
        XCTAssertEqual(byAlias["e"]?.problems, [])
        XCTAssertEqual(preview.errors.count, 4)
        // The top-level file itself is held to the same rules.
        do {
            _ = try await session.call(ImportContracts.Preview.self, .init(path: fifo))
            XCTFail("a FIFO is not an ssh_config file")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.import_unreadable")
            XCTAssertTrue(error.message.contains(fifo), error.message)
        }
    }

    func testASelfIncludingFileIsReadAndListedOnce() async throws {
        let path = directory.file("config")
        _ = try directory.write("config", "Host a\n  User u\nInclude \(path)\n")
        let preview = try await session.call(ImportContracts.Preview.self, .init(path: path))
        XCTAssertEqual(preview.files.map(\.path), [path])
        XCTAssertEqual(preview.candidates.map(\.alias), ["a"])
        XCTAssertTrue(preview.errors.contains { $0.contains("Too many recursive configuration includes") }, "\(preview.errors)")
    }

    func testAPreviewInsideServeStopsWhenItsClientIsInterrupted() throws {
        // 2,000 hosts under 40,000 Match exec blocks: each host is resolved through every
        // block, a long preview (minutes in a debug build).
        let hosts = (0..<2_000).map { "Host h\($0)\n  HostName 10.0.\($0 / 250).\($0 % 250)\n" }.joined()
        let config = try directory.write("big-config", hosts + String(repeating: "Match exec t\n", count: 40_000))
        let serve = try ServeProcess(directory: directory, arguments: [])
        defer { serve.stop() }
        var environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: serve.socketPath)
        environment["TERMIND_SOCKET"] = serve.socketPath
        let client = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", ["vault", "import", "preview", config],
                                        environment: environment, captureOutput: true)
        // Busy on the preview, then Ctrl-C.
        XCTAssertTrue(waitUntil(seconds: 20) { ProcessCPU.seconds(of: serve.process.pid) > 1.5 }, "the server never got busy")
        client.signal(SIGINT)
        XCTAssertTrue(waitUntil(seconds: 10) { !client.isRunning }, "the client did not end on Ctrl-C")
        XCTAssertEqual(client.wait(), 130)
        // The server stops working on it: almost no CPU from a moment after.
        Thread.sleep(forTimeInterval: 0.5)
        let before = ProcessCPU.seconds(of: serve.process.pid)
        Thread.sleep(forTimeInterval: 2)
        let used = ProcessCPU.seconds(of: serve.process.pid) - before
        XCTAssertLessThan(used, 0.5, "the server went on with the preview after its client's Ctrl-C (\(used) s of CPU in 2 s)")
    }
}
