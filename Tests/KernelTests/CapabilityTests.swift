import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import TermindStore
import VaultAPI
import XCTest

/// Capabilities the kernel enforces: a feature calls only the contracts its manifest lists,
/// reads only its own secrets and touches only its own tables — tried by a fixture feature
/// beside the real Vault.
final class CapabilityTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private func probe(calls: [String], callsFrom: [String: [String]] = [:]) -> FeatureManifest {
        var m = FeatureManifest(id: "fixture-probe", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixtureProbe"), order: 50,
                                ports: .init(requires: ["kernel.store", "kernel.secrets", "kernel.ssh"]),
                                contracts: ["fixture-probe.call@1", "fixture-probe.sql@1", "fixture-probe.secrets@1", "fixture-probe.escape@1"], calls: calls, source: "test")
        m.callsFrom = callsFrom
        return m
    }

    private func boot(calls: [String], callsFrom: [String: [String]] = [:]) async throws -> HarnessSession {
        try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "vault"), others: [probe(calls: calls, callsFrom: callsFrom)],
                                      storeDirectory: directory.path)
    }

    /// A call the manifest allows only from some of the feature's own contracts (`callsFrom`)
    /// goes through from their handlers, JSON and typed alike, and is refused from any other.
    func testACallDeclaredFromSomeContractsIsRefusedFromAnyOther() async throws {
        let served = try await boot(calls: ["kernel.ping@1"], callsFrom: ["kernel.ping@1": ["fixture-probe.call@1"]])
        let allowed = try await call(served, "kernel.ping@1", #"{"payload": "hi"}"#)
        XCTAssertNil(allowed.errorCode, allowed.errorMessage ?? "")
        XCTAssertTrue(allowed.reply?.contains("hi") ?? false)
        let typed = try await served.call("fixture-probe.call@1", json: #"{"contract": "kernel.ping@1", "body": "typed hi", "typed": true}"#)
        XCTAssertEqual(try JSONDecoder().decode(ProbeReply.self, from: typed).reply, "typed hi")
        await served.shutdown()

        let elsewhere = try await boot(calls: ["kernel.ping@1"], callsFrom: ["kernel.ping@1": ["fixture-probe.sql@1"]])
        let refused = try await call(elsewhere, "kernel.ping@1", #"{"payload": "hi"}"#)
        XCTAssertEqual(refused.errorCode, "capability.denied")
        XCTAssertTrue(refused.errorMessage?.contains("'fixture-probe' may call kernel.ping@1 only while serving fixture-probe.sql@1 (its manifest's callsFrom), "
                                                     + "and this call came from fixture-probe.call@1") ?? false, refused.errorMessage ?? "")
        let typedRefused = try JSONDecoder().decode(ProbeReply.self, from: try await elsewhere.call("fixture-probe.call@1",
                                                                                                    json: #"{"contract": "kernel.ping@1", "body": "typed hi", "typed": true}"#))
        XCTAssertEqual(typedRefused.errorCode, "capability.denied", typedRefused.errorMessage ?? "")
        await elsewhere.shutdown()
    }

    private func call(_ session: HarnessSession, _ contract: String, _ body: String = "{}") async throws -> ProbeReply {
        let reply = try await session.call("fixture-probe.call@1", json: try String(decoding: JSONCoding.encode(["contract": contract, "body": body]), as: UTF8.self))
        return try JSONDecoder().decode(ProbeReply.self, from: reply)
    }

    struct ProbeReply: Decodable { var reply: String?; var errorCode: String?; var errorMessage: String? }
    struct SQLReply: Decodable { var rows: Int?; var errorCode: String?; var errorMessage: String? }
    struct SecretsReply: Decodable { var stored: String?; var handles: [String]; var read: String?; var readError: String? }

    func testAFeatureCallsOnlyTheContractsItsManifestLists() async throws {
        let session = try await boot(calls: ["kernel.ping@1"])
        let allowed = try await call(session, "kernel.ping@1", #"{"payload": "hi"}"#)
        XCTAssertNil(allowed.errorCode, allowed.errorMessage ?? "")
        XCTAssertTrue(allowed.reply?.contains("hi") ?? false)
        let refused = try await call(session, "vault.host.list@1")
        XCTAssertEqual(refused.errorCode, "capability.denied")
        XCTAssertTrue(refused.errorMessage?.contains("'fixture-probe' may not call vault.host.list@1") ?? false, refused.errorMessage ?? "")
        // The typed call (no JSON between Swift features) is held to the same list.
        let typed = try await session.call("fixture-probe.call@1", json: #"{"contract": "kernel.ping@1", "body": "typed hi", "typed": true}"#)
        XCTAssertEqual(try JSONDecoder().decode(ProbeReply.self, from: typed).reply, "typed hi")
        let typedRefused = try JSONDecoder().decode(ProbeReply.self, from: try await session.call("fixture-probe.call@1",
                                                                                                  json: #"{"contract": "kernel.plugins.enable@1", "body": "digest", "typed": true}"#))
        XCTAssertEqual(typedRefused.errorCode, "capability.denied", typedRefused.errorMessage ?? "")
        let own = try await call(session, "fixture-probe.sql@1", #"{"sql": "SELECT 1"}"#)
        XCTAssertNil(own.errorCode, "its own contracts need no listing")
        // What it declares is shown.
        let features = await session.kernel.featureStatuses()
        let status = try XCTUnwrap(features.first { $0.id == "fixture-probe" })
        XCTAssertEqual(status.calls, ["kernel.ping@1"])
        XCTAssertEqual(status.requires, ["kernel.store", "kernel.secrets", "kernel.ssh"])
        await session.shutdown()

        let widened = try await boot(calls: ["vault.host.list@1"])
        let listed = try await call(widened, "vault.host.list@1")
        XCTAssertNil(listed.errorCode, listed.errorMessage ?? "")
        await widened.shutdown()
    }

    func testAFeaturesDatabaseConnectionSeesOnlyItsOwnTables() async throws {
        let session = try await boot(calls: [])
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.0.0.9", label: "private-box"))
        func sql(_ statement: String) async throws -> SQLReply {
            let reply = try await session.call("fixture-probe.sql@1", json: try String(decoding: JSONCoding.encode(["sql": statement]), as: UTF8.self))
            return try JSONDecoder().decode(SQLReply.self, from: reply)
        }
        for statement in ["SELECT * FROM vault_hosts", "DELETE FROM vault_identities", "SELECT name, sql FROM sqlite_schema",
                          "UPDATE termind_migrations SET checksum = 'x'", "ATTACH DATABASE '\(directory.file("other.sqlite"))' AS other",
                          "CREATE INDEX fixture_probe_steal ON vault_hosts (label)", "PRAGMA journal_mode = DELETE"] {
            let reply = try await sql(statement)
            XCTAssertEqual(reply.errorCode, "store.denied", "\(statement): \(reply.errorMessage ?? "allowed")")
        }
        // A store failure a handler lets escape reaches the caller in the store's own terms.
        do {
            _ = try await session.call("fixture-probe.sql@1", json: #"{"sql": "SELECT * FROM vault_keys", "rethrow": true}"#)
            XCTFail("the statement was denied")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "store.denied", "not 'internal': \(error.message)")
            XCTAssertTrue(error.message.contains("may use only its own tables"), error.message)
        }
        // No view or trigger (unchecked SQL that could name the Vault's tables and break its
        // table-rebuild migrations), no function beyond SQLite's ordinary ones (fts3_tokenizer
        // hands out a pointer).
        for statement in ["CREATE VIEW fixture_probe_v AS SELECT * FROM vault_hosts", "CREATE VIEW fixture_probe_own AS SELECT * FROM fixture_probe_notes",
                          "CREATE TRIGGER fixture_probe_t AFTER INSERT ON fixture_probe_notes BEGIN DELETE FROM vault_hosts; END",
                          "SELECT fts3_tokenizer('simple')", "SELECT load_extension('x')"] {
            let reply = try await sql(statement)
            XCTAssertEqual(reply.errorCode, "store.denied", "\(statement): \(reply.errorMessage ?? "allowed")")
        }
        // Another feature's table is refused exactly as one that does not exist: the answer
        // never tells which tables there are.
        let existing = try await sql("SELECT * FROM vault_hosts")
        let missing = try await sql("SELECT * FROM vault_nothing_here")
        XCTAssertEqual(existing.errorMessage, missing.errorMessage)
        XCTAssertEqual(missing.errorCode, "store.denied")
        let ordinary = try await sql("SELECT upper('a'), json_array(1), strftime('%Y', 'now')")
        XCTAssertNil(ordinary.errorCode, "ordinary functions work: \(ordinary.errorMessage ?? "")")
        let own = try await sql("INSERT INTO fixture_probe_notes (body) VALUES ('mine')")
        XCTAssertNil(own.errorCode, own.errorMessage ?? "")
        let read = try await sql("SELECT * FROM fixture_probe_notes")
        XCTAssertEqual(read.rows, 1)
        // The Vault's data is intact, and it still reads it.
        let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(hosts.map(\.label), ["private-box"])
        await session.shutdown()
    }

    func testSecretsAreNamespacedByTheFeatureThatStoredThem() async throws {
        let session = try await boot(calls: [])
        let identity = try await session.call(VaultContracts.IdentityAdd.self, .init(username: "deploy", password: Secret("vault-only-pw")))
        XCTAssertTrue(identity.hasPassword)
        let raw = try StoreAccess.database(path: directory.file("termind.sqlite"))
        let vaultHandle = try XCTUnwrap(raw.query("SELECT password_handle FROM vault_identities").first?.string("password_handle"))
        func secrets(store: String? = nil, read: String? = nil) async throws -> SecretsReply {
            var body: [String: String] = [:]
            if let store { body["store"] = store }
            if let read { body["read"] = read }
            let reply = try await session.call("fixture-probe.secrets@1", json: try String(decoding: JSONCoding.encode(body), as: UTF8.self))
            return try JSONDecoder().decode(SecretsReply.self, from: reply)
        }
        let before = try await secrets(read: vaultHandle)
        XCTAssertEqual(before.handles, [], "another feature's handles are not listed")
        XCTAssertNil(before.read)
        XCTAssertEqual(before.readError, "secret.missing", "another feature's secret is simply not there")
        let mine = try await secrets(store: "probe-secret")
        let handle = try XCTUnwrap(mine.stored)
        XCTAssertEqual(mine.handles, [handle])
        let readBack = try await secrets(read: handle)
        XCTAssertEqual(readBack.read, "probe-secret")
        // The kernel's own view sees both.
        let kernelView = try StoreAccess.secrets(path: directory.file("secrets.sqlite"), keySource: .keyFile(directory.file("secrets.key")))
        XCTAssertEqual(Set(try kernelView.handles()), [vaultHandle, handle])
        await session.shutdown()
    }

    func testSecretsStoredBeforeOwnershipBelongToTheBuiltInFeatureThatKeptThem() async throws {
        // A store from before secrets had owners: one row with no owner.
        let legacy = try StoreAccess.secrets(path: directory.file("secrets.sqlite"), keySource: .keyFile(directory.file("secrets.key")))
        let handle = try legacy.store(Secret("old"), purpose: "identity.password")
        let raw = try StoreAccess.database(path: directory.file("secrets.sqlite"))
        try raw.execute("UPDATE secrets SET owner = ''")
        let session = try await boot(calls: [])
        let owner = try raw.query("SELECT owner FROM secrets WHERE handle = ?", [handle]).first?.string("owner")
        XCTAssertEqual(owner, "vault", "the permanent feature requiring the store claims them, never a plugin")
        await session.shutdown()
    }

    func testAFeatureTriesEachFormerWayOutOfItsViewsAndIsRefused() async throws {
        let session = try await boot(calls: [])
        defer { Task { await session.shutdown() } }
        struct Escape: Decodable { var gotThePool: Bool; var gotSSH: Bool; var changedProtection: String }
        let tried = try JSONDecoder().decode(Escape.self, from: try await session.call("fixture-probe.escape@1", json: "{}"))
        XCTAssertTrue(tried.gotSSH)
        XCTAssertFalse(tried.gotThePool, "the SSH port is a view, not the pool with closeAll, closeIdle and routes")
        XCTAssertEqual(tried.changedProtection, "capability.denied", "a feature's secret view cannot re-protect the whole store")
        // The store is still protected by its key file: it opens as before.
        XCTAssertNoThrow(try StoreAccess.secrets(path: directory.file("secrets.sqlite"), keySource: .keyFile(directory.file("secrets.key"))))
    }
}
