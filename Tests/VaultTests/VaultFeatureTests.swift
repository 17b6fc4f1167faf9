import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindStore
import XCTest

/// The Vault loaded from its .so through the harness, on a real SQLite store and secret
/// store in a temporary folder.
final class VaultFeatureTests: XCTestCase {
    private var session: HarnessSession!

    private static func manifest() throws -> FeatureManifest {
        try FeatureHarness.registryManifest(id: "vault")
    }

    override func setUp() async throws {
        session = try await FeatureHarness.boot(try Self.manifest())
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
    }

    override func tearDown() async throws {
        await session?.shutdown()
    }

    private func expectError(_ code: String, containing text: String, line: UInt = #line, _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected \(code)", line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, code, error.message, line: line)
            XCTAssertTrue(error.message.contains(text), error.message, line: line)
        } catch {
            XCTFail("\(error)", line: line)
        }
    }

    func testABlankLabelSavesTheAddressAndClearingRestoresTheDefault() async throws {
        let host = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.1.2.3"))
        XCTAssertEqual(host.label, "10.1.2.3")
        XCTAssertEqual(host.port, 22)
        let renamed = try await session.call(VaultContracts.HostUpdate.self, .init(host: host.id, label: "db-primary"))
        XCTAssertEqual(renamed.label, "db-primary")
        let moved = try await session.call(VaultContracts.HostUpdate.self, .init(host: "db-primary", address: "10.9.9.9"))
        XCTAssertEqual(moved.label, "db-primary", "a non-empty label stays as typed when the address changes")
        let cleared = try await session.call(VaultContracts.HostUpdate.self, .init(host: host.id, label: ""))
        XCTAssertEqual(cleared.label, "10.9.9.9", "clearing asks for the default again, from the current address")
        // Same address on another port: the default becomes address:port.
        let second = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.9.9.9", port: 2222))
        XCTAssertEqual(second.label, "10.9.9.9:2222")
    }

    func testHostsAreFoundByIDOrLabelAndListedByTag() async throws {
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "a.example", label: "Alpha", tags: ["gpu", "prod"]))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "b.example", label: "beta", tags: ["prod"]))
        let byLabel = try await session.call(VaultContracts.HostGet.self, .init(host: "alpha"))
        XCTAssertEqual(byLabel.address, "a.example", "labels match case-insensitively")
        let labelByID = try await session.call(VaultContracts.HostGet.self, .init(host: byLabel.id)).label
        XCTAssertEqual(labelByID, "Alpha")
        let gpuHosts = try await session.call(VaultContracts.HostList.self, .init(tag: "gpu")).hosts.map(\.label)
        XCTAssertEqual(gpuHosts, ["Alpha"])
        let allLabels = try await session.call(VaultContracts.HostList.self, .init()).hosts.map(\.label)
        XCTAssertEqual(allLabels, ["Alpha", "beta"])
        await expectError("vault.label_taken", containing: "'ALPHA' is already used") {
            _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "c.example", label: "ALPHA"))
        }
    }

    /// The host list is kept between calls (an agent lists hosts on its calls) only while
    /// the database file is unchanged: an edit by another process (the sqlite3 tool here, a
    /// `--local` command elsewhere) shows at the very next list, as does one made here.
    func testTheHostListShowsEveryChangeByAnyProcessAtTheNextList() async throws {
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "a.example", label: "Alpha", tags: ["gpu"]))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "b.example", label: "beta"))
        let directory = try XCTUnwrap(session.kernel.port(.hostDirectory))
        let path = session.storeDirectory + "/termind.sqlite"
        func labels() async throws -> ([String], [String]) {
            let listed = try await session.call(VaultContracts.HostList.self, .init()).hosts.map(\.label)
            let ported = try await directory.allHosts().map(\.label)
            return (listed, ported)
        }
        var seen = try await labels()
        XCTAssertEqual(seen.0, ["Alpha", "beta"])
        XCTAssertEqual(seen.1, ["Alpha", "beta"])
        for round in 1...10 {
            let edit = try ProcessRunner.run("/usr/bin/sqlite3", [path, "UPDATE vault_hosts SET label = 'gamma-\(round)' WHERE address = 'b.example'"])
            XCTAssertEqual(edit.status, 0, edit.stderr)
            seen = try await labels()
            XCTAssertEqual(seen.0, ["Alpha", "gamma-\(round)"], "round \(round)")
            XCTAssertEqual(seen.1, ["Alpha", "gamma-\(round)"], "round \(round)")
        }
        let gone = try ProcessRunner.run("/usr/bin/sqlite3", [path, "DELETE FROM vault_hosts WHERE address = 'a.example'"])
        XCTAssertEqual(gone.status, 0, gone.stderr)
        let tagged = try await session.call(VaultContracts.HostList.self, .init(tag: "gpu")).hosts
        XCTAssertEqual(tagged, [])
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "c.example", label: "Delta", tags: ["gpu"]))
        seen = try await labels()
        XCTAssertEqual(seen.0, ["Delta", "gamma-10"])
        XCTAssertEqual(seen.1, ["Delta", "gamma-10"])
        let gpu = try await session.call(VaultContracts.HostList.self, .init(tag: "gpu")).hosts.map(\.label)
        XCTAssertEqual(gpu, ["Delta"])
    }

    func testBadInputIsNamedAndNothingIsStored() async throws {
        await expectError("request.invalid", containing: "port: 70000 is not a TCP port") {
            _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "x.example", port: 70_000))
        }
        await expectError("request.invalid", containing: "address: 'bad host' is not a host name") {
            _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "bad host"))
        }
        await expectError("request.invalid", containing: "tags: 'has space'") {
            _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "x.example", tags: ["has space"]))
        }
        await expectError("vault.identity_not_found", containing: "'nobody'") {
            _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "x.example", identity: "nobody"))
        }
        let stored = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(stored, [])
    }

    func testJumpRoutesAreBoundedAndAcyclicAndJumpHostsCannotBeDeleted() async throws {
        var hops: [String] = []
        for i in 0..<8 { hops.append(try await session.call(VaultContracts.HostAdd.self, .init(address: "hop\(i).example")).id) }
        let target = try await session.call(VaultContracts.HostAdd.self, .init(address: "target.example", jump: Array(hops.prefix(7))))
        XCTAssertEqual(target.jump.count, 7)
        await expectError("request.invalid", containing: "at most 8 hosts") {
            _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: target.id, jump: hops))
        }
        await expectError("request.invalid", containing: "through the host itself") {
            _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: hops[0], jump: [hops[0]]))
        }
        await expectError("request.invalid", containing: "appears twice") {
            _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: "target.example", jump: [hops[1], hops[1]]))
        }
        await expectError("vault.host_in_use", containing: "'target.example'") {
            _ = try await session.call(VaultContracts.HostDelete.self, .init(host: hops[3]))
        }
    }

    func testIdentityPasswordsLiveOnlyInTheSecretStoreAndInUseIdentitiesAreNotDeleted() async throws {
        let password = "pw-\(UUID().uuidString)"
        let identity = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "deploy", password: Secret(password)))
        XCTAssertEqual(identity.label, "deploy")
        XCTAssertTrue(identity.hasPassword)
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "a.example", label: "web-1", identity: "deploy"))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "b.example", label: "web-2", identity: identity.id))
        await expectError("vault.identity_in_use", containing: "hosts 'web-1', 'web-2'") {
            _ = try await session.call(VaultContracts.IdentityDelete.self, .init(identity: "deploy"))
        }
        // The plaintext is nowhere on disk but (encrypted) in the secret store.
        let files = try FileManager.default.contentsOfDirectory(atPath: session.storeDirectory)
        XCTAssertTrue(files.contains("termind.sqlite") && files.contains("secrets.sqlite"), "\(files)")
        for file in files {
            let bytes = try XCTUnwrap(FileManager.default.contents(atPath: session.storeDirectory + "/" + file))
            XCTAssertNil(bytes.range(of: Data(password.utf8)), "password in plaintext in \(file)")
        }
        // Replies say whether a password is stored, never what it is.
        let listing = try await session.call("vault.identity.list@1", json: "{}")
        XCTAssertNil(listing.range(of: Data(password.utf8)))
        // Clearing the password removes the secret; deleting after detaching works.
        let cleared = try await session.call(VaultContracts.IdentityUpdate.self, .init(identity: "deploy", password: Secret("")))
        XCTAssertFalse(cleared.hasPassword)
        for host in ["web-1", "web-2"] { _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: host, identity: "")) }
        _ = try await session.call(VaultContracts.IdentityDelete.self, .init(identity: "deploy"))
        let remaining = try await session.call(VaultContracts.IdentityList.self, Empty()).identities
        XCTAssertEqual(remaining, [])
    }

    func testTheHostDirectoryPortServesOtherFeatures() async throws {
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.0.0.7", label: "gpu-box", user: "ml", tags: ["mac=00:11:22:33:44:55"]))
        let directory = try XCTUnwrap(session.kernel.port(.hostDirectory))
        let host = try await directory.host(named: "gpu-box")
        XCTAssertEqual(host?.address, "10.0.0.7")
        XCTAssertEqual(host?.tagValue("mac"), "00:11:22:33:44:55")
        let hostCount = try await directory.allHosts().count
        XCTAssertEqual(hostCount, 1)
    }

    func testCredentialRulesExplicitPasswordWinsAndNothingIsBorrowed() async throws {
        let ops = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "ops", password: Secret("ops-pw")))
        _ = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "bob", password: Secret("bob-pw")))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.0.0.9", label: "app", port: 2200, identity: ops.id))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.0.0.10", label: "bare", user: "root"))
        let credentials = try XCTUnwrap(session.kernel.port(.credentials))

        let saved = try await credentials.credentials(for: CredentialRequest(host: "app"))
        XCTAssertEqual(saved.username, "ops")
        XCTAssertEqual(saved.passwordSource, .identity)
        XCTAssertEqual(saved.password?.withPlaintext { $0 }, "ops-pw")
        XCTAssertEqual(saved.port, 2200)

        let explicit = try await credentials.credentials(for: CredentialRequest(host: "app", explicitPassword: Secret("typed")))
        XCTAssertEqual(explicit.passwordSource, .explicit)
        XCTAssertEqual(explicit.password?.withPlaintext { $0 }, "typed")

        // A custom user name does not borrow the host identity's password, nor bob's.
        let custom = try await credentials.credentials(for: CredentialRequest(host: "app", explicitUser: "bob"))
        XCTAssertEqual(custom.username, "bob")
        XCTAssertEqual(custom.passwordSource, .none)
        XCTAssertNil(custom.password)

        // Choosing bob's identity explicitly selects it, password included.
        let chosen = try await credentials.credentials(for: CredentialRequest(host: "bare", explicitIdentity: "bob"))
        XCTAssertEqual(chosen.username, "bob")
        XCTAssertEqual(chosen.password?.withPlaintext { $0 }, "bob-pw")

        let userOnly = try await credentials.credentials(for: CredentialRequest(host: "bare"))
        XCTAssertEqual(userOnly.username, "root")
        XCTAssertEqual(userOnly.passwordSource, .none)
    }

    func testSnippetsDefaultTheirLabelToTheFirstLine() async throws {
        let snippet = try await session.call(VaultContracts.SnippetAdd.self, .init(body: "nvidia-smi --query-gpu=utilization.gpu --format=csv\nuptime"))
        XCTAssertEqual(snippet.label, "nvidia-smi --query-gpu=utilization.gpu --format=csv")
        _ = try await session.call(VaultContracts.SnippetDelete.self, .init(snippet: snippet.id))
        let snippets = try await session.call(VaultContracts.SnippetList.self, Empty()).snippets
        XCTAssertEqual(snippets, [])
    }

    func testACorruptStoreStopsBootWithTheReasonAndIsLeftUntouched() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = try directory.write("termind.sqlite", String(repeating: "garbage ", count: 512))
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            _ = try await FeatureHarness.boot(try Self.manifest(), storeDirectory: directory.path)
            XCTFail("the permanent Vault cannot run without its store")
        } catch let failure as BootFailure {
            XCTAssertTrue(failure.description.contains("Permanent feature 'vault' cannot run"), failure.description)
            XCTAssertTrue(failure.description.contains("is not a readable termind database"), failure.description)
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before)
    }

    func testRecordsSurviveARestartOnTheSameStore() async throws {
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "persist.example"))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let first = try await FeatureHarness.boot(try Self.manifest(), storeDirectory: directory.path)
        _ = try await first.call(VaultContracts.IdentityAdd.self, .init(username: "root", password: Secret("pw")))
        await first.shutdown()
        let second = try await FeatureHarness.boot(try Self.manifest(), storeDirectory: directory.path)
        let usernames = try await second.call(VaultContracts.IdentityList.self, Empty()).identities.map(\.username)
        XCTAssertEqual(usernames, ["root"])
        await second.shutdown()
    }
}
