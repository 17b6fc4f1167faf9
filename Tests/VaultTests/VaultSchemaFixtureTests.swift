import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import TermindKernel
import TermindStore
import XCTest

/// Every past schema version of the Vault has a fixture (a text dump of a real database
/// at that version, with data). Booting the current Vault on each must migrate it and keep
/// every record.
final class VaultSchemaFixtureTests: XCTestCase {
    func testEveryPastSchemaVersionMigratesAndKeepsItsRecords() async throws {
        let manifest = try FeatureHarness.registryManifest(id: "vault")
        // The fixtures on disk, vault-v1.sql, vault-v2.sql, …: none may be missing in between.
        let fixtures = try FileManager.default.contentsOfDirectory(atPath: Repository.path("Tests/VaultTests/Fixtures"))
            .filter { $0.hasPrefix("vault-v") && $0.hasSuffix(".sql") }
            .sorted { Int($0.dropFirst(7).dropLast(4)) ?? 0 < Int($1.dropFirst(7).dropLast(4)) ?? 0 }
        XCTAssertEqual(fixtures, (1...max(1, fixtures.count)).map { "vault-v\($0).sql" }, "one fixture per past schema version, from v1")
        for fixture in fixtures {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let dump = try String(contentsOfFile: Repository.path("Tests/VaultTests/Fixtures/\(fixture)"), encoding: .utf8)
            do {
                let restored = try StoreAccess.database(path: directory.file("termind.sqlite"))
                try restored.executeScript(dump)
            }
            let session = try await FeatureHarness.boot(manifest, storeDirectory: directory.path)
            XCTAssertEqual(session.status?.state, .running, "\(fixture): \(session.status?.reason ?? "")")

            let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
            XCTAssertEqual(hosts.map(\.label), ["10.0.0.5", "gpu-box"], fixture)
            let gpu = try XCTUnwrap(hosts.first { $0.label == "gpu-box" })
            XCTAssertEqual(gpu.jump, [hosts[0].id])
            XCTAssertEqual(gpu.shellIntegration, .enabled)
            XCTAssertEqual(hosts[0].port, 2222)
            XCTAssertEqual(hosts[0].tags, ["gpu", "mac=00:11:22:33:44:55"])
            let identities = try await session.call(VaultContracts.IdentityList.self, Empty()).identities
            XCTAssertEqual(identities.map(\.username), ["deploy"])
            XCTAssertEqual(gpu.identity, identities[0].id)
            let snippets = try await session.call(VaultContracts.SnippetList.self, Empty()).snippets
            XCTAssertEqual(snippets.map(\.body), ["nvidia-smi"])
            let known = try await session.call(KnownHostContracts.List.self, .init(host: "gpu.example.com")).entries
            XCTAssertEqual(known.count, 1)
            XCTAssertEqual(known.first?.keyType, "ssh-ed25519")

            // From v2 on: an SSH key, given to the identity.
            if fixture != "vault-v1.sql" {
                let keys = try await session.call(KeyContracts.List.self, Empty()).keys
                XCTAssertEqual(keys.map(\.label), ["fixture-key"], fixture)
                XCTAssertEqual(identities.first?.key, keys.first?.id, fixture)
            }
            // v3: workspaces, saved on the migrated hosts.
            let saved = try await session.call(VaultContracts.WorkspaceSave.self, .init(name: "gpus", layout: .grid([
                WorkspacePane(kind: .ssh, host: gpu.id), WorkspacePane(kind: .sftp, host: gpu.id)])))
            let workspaces = try await session.call(VaultContracts.WorkspaceList.self, Empty()).workspaces
            XCTAssertEqual(workspaces.filter { $0.name == "gpus" }, [saved], fixture)
            // From v3 on: a workspace saved before, agent forwarding on for gpu-box.
            if !["vault-v1.sql", "vault-v2.sql"].contains(fixture) {
                XCTAssertEqual(workspaces.map(\.name).sorted(), ["fixture-pair", "gpus"], fixture)
                XCTAssertEqual(gpu.forwardAgent, true, fixture)
            }

            let db = try StoreAccess.database(path: directory.file("termind.sqlite"))
            XCTAssertEqual(try db.schemaVersion(of: "vault"), 4, "migrated to the latest Vault schema version")
            // v4: sync's journal, empty after a migration (nothing of before is in it), then a
            // row per change: the workspace saved above, a host edited now.
            _ = try await session.call(VaultContracts.HostUpdate.self, .init(host: "gpu-box", port: 2200))
            XCTAssertEqual(try db.query("SELECT kind, id FROM vault_sync_outbox ORDER BY seq").map { [$0.string("kind"), $0.string("id")] },
                           [["workspace", saved.id], ["host", gpu.id]], fixture)
            XCTAssertEqual(try db.scalar("PRAGMA integrity_check"), .text("ok"))
            await session.shutdown()
        }
    }
}
