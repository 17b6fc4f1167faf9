import Foundation
import AssistantAPI
import MetricsAPI
import SFTPAPI
import SettingsAPI
import TermindCore
import TermindHarness
import TermindKernel
import TermindCrypto
import TermindStore
import WorkspacesAPI
import XCTest

/// A feature of the test's own that registers records with Settings as SFTP and Workspaces
/// do, and hands the port to the test.
final class RecordOwner: Feature, @unchecked Sendable {
    static let shared = Box()
    final class Box: @unchecked Sendable {
        var port: (any SettingsValues)?
        var lateRegistration: (() throws -> Void)?
    }

    func register(_ registrar: FeatureRegistrar) throws {}

    func start(_ context: FeatureContext) async throws {
        let settings = try context.ports.require(.settingsValues)
        try settings.register(SFTPSettings.Limits.self, owner: context.featureID)
        try settings.register(SFTPSettings.Topology.self, owner: context.featureID)
        try settings.register(TerminalSettings.Preferences.self, owner: context.featureID)
        try settings.register(TerminalSettings.Device.self, owner: context.featureID)
        try settings.register(AssistantSettings.Providers.self, owner: context.featureID)
        try settings.register(AssistantSettings.Models.self, owner: context.featureID)
        try settings.register(AssistantSettings.Roles.self, owner: context.featureID)
        try settings.register(AssistantSettings.MCPServers.self, owner: context.featureID)
        try settings.register(AssistantSettings.Local.self, owner: context.featureID)
        try settings.register(MetricsSettings.Preferences.self, owner: context.featureID)
        Self.shared.port = settings
        Self.shared.lateRegistration = { try settings.register(SFTPSettings.Limits.self, owner: "late") }
    }

    static var manifest: InProcessFeature {
        InProcessFeature(manifest: FeatureManifest(id: "record-owner", library: "", order: 50, ports: .init(requires: ["settings.values"]))) { RecordOwner() }
    }
}

/// Settings against a real SQLite file: defaults, validation naming the field, nothing
/// written on failure, revisions with compare-and-set, a journal row per synced change in
/// the same transaction, quarantine of stored values that no longer validate, repair,
/// export/import all or nothing, the port's typed reads and change notifications.
/// What every Settings test class boots: Settings from the checkout's registry on a fresh
/// store folder, with `RecordOwner` registering the records under test.
class SettingsTestCase: XCTestCase {
    var session: HarnessSession!
    var directory: TemporaryDirectory!
    var values: any SettingsValues { RecordOwner.shared.port! }
    /// Where the kernel logs (nothing by default).
    var logSink: LogSink { get throws { .disabled() } }

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        session = try await boot()
    }

    override func tearDown() async throws {
        await session?.shutdown()
        directory?.remove()
    }

    func boot() async throws -> HarnessSession {
        let session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "settings"), inProcess: [RecordOwner.manifest],
                                                    storeDirectory: directory.path, logSink: try logSink)
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
        return session
    }

    /// The database as another program sees it.
    func sql(_ query: String) throws -> [Row] {
        try StoreAccess.database(path: directory.file("termind.sqlite")).query(query)
    }

    func set(_ key: String, _ json: String, replace: Bool? = nil, revision: Int? = nil) async throws -> SettingsValue {
        guard case .object(let fields) = try JSONCoding.parse(Data(json.utf8), source: "test") else { throw TermindError.internalFailure("not an object") }
        return try await session.call(SettingsContracts.Set.self, .init(key: key, value: fields, replace: replace, revision: revision))
    }
}

final class SettingsFeatureTests: SettingsTestCase {
    private var port: any SettingsValues { values }

    private func expectFailure(_ code: String, _ mentions: [String] = [], file: StaticString = #filePath, line: UInt = #line,
                               _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected \(code)", file: file, line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, code, error.message, file: file, line: line)
            for text in mentions { XCTAssertTrue(error.message.contains(text), "'\(text)' missing from: \(error.message)", file: file, line: line) }
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }

    /// A record read again and again (the Assistant reads its policy on every tool call) is
    /// kept while the database file is unchanged, yet every change by another process — the
    /// sqlite3 tool here, a `--local` command or an older termind elsewhere — applies at the
    /// very next read, with no wait.
    func testAChangeByAnotherProcessAppliesAtTheNextReadOfAKeptRecord() async throws {
        let path = directory.file("termind.sqlite")
        XCTAssertNotNil(StoreChangeWatch.stamp(of: path), "records are kept between reads on this machine")
        _ = try await set("terminal.preferences", #"{"scrollbackLines": 500}"#)
        for round in 1...20 {
            let lines = 1000 + round
            let edited = try ProcessRunner.run("/usr/bin/sqlite3", [path, "UPDATE settings_records SET value = '{\"scrollbackLines\": \(lines)}' WHERE key = 'terminal.preferences'"])
            XCTAssertEqual(edited.status, 0, edited.stderr)
            for _ in 0..<3 {
                let read = try await port.current("terminal.preferences")
                XCTAssertEqual(read.value["scrollbackLines"], .integer(Int64(lines)), "round \(round)")
            }
            let typed = try await port.read(TerminalSettings.Preferences.self)
            XCTAssertEqual(typed.scrollbackLines, lines)
        }
        // A stored value another process broke is quarantined at once too.
        let broken = try ProcessRunner.run("/usr/bin/sqlite3", [path, "UPDATE settings_records SET value = '{\"scrollbackLines\": \"lots\"}' WHERE key = 'terminal.preferences'"])
        XCTAssertEqual(broken.status, 0, broken.stderr)
        let quarantined = try await port.current("terminal.preferences")
        XCTAssertEqual(quarantined.state, .quarantined)
        XCTAssertEqual(quarantined.value["scrollbackLines"], .integer(10_000), "the defaults apply meanwhile")
    }

    func testUnsavedRecordsGiveTheirDefaultsAndListShowsEveryRecord() async throws {
        let limits = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(limits, SFTPSettings.Limits(active: 30, perHost: 10))
        let topology = try await port.read(SFTPSettings.Topology.self)
        XCTAssertEqual(topology.strategy, .smart)
        let list = try await session.call(SettingsContracts.List.self, .init()).records
        XCTAssertEqual(list.map(\.key), ["assistant.local", "assistant.mcpServers", "assistant.models", "assistant.providers", "assistant.roles",
                                           "metrics.preferences", "sftp.limits", "sftp.topology", "terminal.device", "terminal.preferences"])
        XCTAssertEqual(list.filter { $0.scope == .deviceLocal }.map(\.key), ["assistant.local", "metrics.preferences", "terminal.device"],
                       "the approval mode, the listener and UI preferences stay on the device")
        XCTAssertTrue(list.allSatisfy { $0.state == .default && $0.revision == 0 })
        XCTAssertEqual(list.first { $0.key == "terminal.device" }?.scope, .deviceLocal)
        XCTAssertEqual(try sql("SELECT * FROM settings_records").count, 0, "reading defaults writes nothing")
    }

    func testAnInvalidChangeNamesTheFieldAndWritesNothing() async throws {
        await expectFailure("settings.invalid", ["sftp.limits.perHost", "at most active"]) {
            _ = try await self.set("sftp.limits", #"{"active": 8, "perHost": 9}"#)
        }
        await expectFailure("settings.invalid", ["sftp.limits.active", "1 to 100"]) { _ = try await self.set("sftp.limits", #"{"active": 101}"#) }
        await expectFailure("settings.invalid", ["sftp.limits.perHost: expected integer, got string"]) {
            _ = try await self.set("sftp.limits", #"{"perHost": "ten"}"#)
        }
        await expectFailure("settings.invalid", ["sftp.topology.strategy", "not one of"]) { _ = try await self.set("sftp.topology", #"{"strategy": "fast"}"#) }
        await expectFailure("settings.invalid", ["sftp.limits.color: unknown field"]) { _ = try await self.set("sftp.limits", #"{"color": 1}"#) }
        await expectFailure("settings.unknown_key", ["sftp.limits"]) { _ = try await self.set("sftp.limit", #"{}"#) }
        XCTAssertEqual(try sql("SELECT * FROM settings_records").count, 0)
        XCTAssertEqual(try sql("SELECT * FROM settings_outbox").count, 0)
    }

    func testEachChangeBumpsTheRevisionAndJournalsSyncedRecordsInTheSameTransaction() async throws {
        // Read (and decoded) once before: a read after each change still gets the new value.
        let before = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(before, SFTPSettings.Limits.defaults)
        let first = try await set("sftp.limits", #"{"perHost": 4}"#)
        XCTAssertEqual(first.state, .saved)
        XCTAssertEqual(first.revision, 1)
        XCTAssertEqual(first.value, try JSONCoding.parse(Data(#"{"active": 30, "perHost": 4}"#.utf8), source: "x"), "merged into the defaults")
        let second = try await set("sftp.limits", #"{"active": 50}"#)
        XCTAssertEqual(second.revision, 2)
        let read995 = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(read995, SFTPSettings.Limits(active: 50, perHost: 4))

        let device = try await set("terminal.device", #"{"fontSize": 16}"#)
        XCTAssertEqual(device.revision, 1)

        let outbox = try sql("SELECT key, revision, tombstone, digest, device_id FROM settings_outbox ORDER BY seq")
        XCTAssertEqual(outbox.map { $0.string("key") }, ["sftp.limits", "sftp.limits"], "a device-local record is never journaled for sync")
        XCTAssertEqual(outbox.map { $0.int("revision") }, [1, 2])
        let stored = try XCTUnwrap(try sql("SELECT value, device_id FROM settings_records WHERE key = 'sftp.limits'").first)
        let digest = Digest.sha256(Data((stored.string("value") ?? "").utf8)).map { String(format: "%02x", $0) }.joined()
        XCTAssertEqual(outbox.last?.string("digest"), digest, "the journal row names the stored value by its digest")
        XCTAssertEqual(outbox.last?.string("device_id"), stored.string("device_id"))
        XCTAssertEqual(try sql("SELECT id FROM settings_device").first?.string("id"), stored.string("device_id"))

        let reset = try await session.call(SettingsContracts.Reset.self, .init(key: "sftp.limits"))
        XCTAssertEqual(reset.state, .default)
        XCTAssertEqual(reset.revision, 3, "a reset is a change: a tombstone with the next revision")
        let tombstone = try XCTUnwrap(try sql("SELECT tombstone, digest FROM settings_outbox ORDER BY seq DESC").first)
        XCTAssertEqual(tombstone.int("tombstone"), 1)
        XCTAssertEqual(tombstone["digest"], .null)
        let read326 = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(read326, SFTPSettings.Limits.defaults)
    }

    func testAChangeBasedOnAStaleRevisionIsRefused() async throws {
        _ = try await set("terminal.preferences", #"{"theme": "dark"}"#)
        _ = try await set("terminal.preferences", #"{"theme": "light"}"#, revision: 1)
        await expectFailure("settings.stale_revision", ["revision 2", "based on revision 1"]) {
            _ = try await self.set("terminal.preferences", #"{"theme": "solarized"}"#, revision: 1)
        }
        await expectFailure("settings.stale_revision") { _ = try await self.session.call(SettingsContracts.Reset.self, .init(key: "terminal.preferences", revision: 0)) }
        let now = try await port.current("terminal.preferences")
        XCTAssertEqual(now.revision, 2)
        XCTAssertEqual(now.value["theme"], .string("light"))
        XCTAssertEqual(try sql("SELECT * FROM settings_outbox").count, 2)
    }

    func testAStoredValueThatNoLongerValidatesIsQuarantinedNeverAppliedNeverDeleted() async throws {
        // As another termind, or a person with sqlite3, could leave them.
        let db = try StoreAccess.database(path: directory.file("termind.sqlite"))
        let broken = [("sftp.limits", #"{"active": 20, "perHost": 40}"#, "sftp.limits.perHost"),
                      ("sftp.topology", #"{"strategy": 3}"#, "sftp.topology.strategy: expected string"),
                      ("terminal.preferences", "{not json", "not JSON"),
                      ("terminal.device", #"{"fontSize": 13, "ligatures": true}"#, "terminal.device.ligatures: unknown field")]
        for (key, value, _) in broken {
            try db.execute("INSERT INTO settings_records (key, value, revision, device_id) VALUES (?, ?, 7, 'elsewhere')", [key, value])
        }
        let list = try await session.call(SettingsContracts.List.self, .init()).records
        for (key, value, reason) in broken {
            let record = try XCTUnwrap(list.first { $0.key == key })
            XCTAssertEqual(record.state, .quarantined, key)
            XCTAssertTrue(record.reason?.contains(reason) == true, "\(key): \(record.reason ?? "no reason")")
            XCTAssertEqual(record.revision, 7)
            XCTAssertEqual(try sql("SELECT value FROM settings_records WHERE key = '\(key)'").first?.string("value"), value, "\(key) was changed")
        }
        let read824 = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(read824, SFTPSettings.Limits.defaults, "a quarantined value is never applied")

        // A change is built on the defaults, not on the quarantined value, and replaces it.
        let fixed = try await set("sftp.limits", #"{"perHost": 12}"#)
        XCTAssertEqual(fixed.state, .saved)
        XCTAssertEqual(fixed.revision, 8)
        let read110 = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(read110, SFTPSettings.Limits(active: 30, perHost: 12))

        // Repair: keep leaves it as it is; reset drops it.
        let kept = try await session.call(SettingsContracts.Repair.self, .init(key: "sftp.topology", action: .keep))
        XCTAssertEqual(kept.state, .quarantined)
        XCTAssertEqual(try sql("SELECT value FROM settings_records WHERE key = 'sftp.topology'").first?.string("value"), #"{"strategy": 3}"#)
        let repaired = try await session.call(SettingsContracts.Repair.self, .init(key: "sftp.topology", action: .reset))
        XCTAssertEqual(repaired.state, .default)
        XCTAssertEqual(repaired.revision, 8)
        await expectFailure("settings.not_quarantined") { _ = try await self.session.call(SettingsContracts.Repair.self, .init(key: "sftp.topology", action: .reset)) }
    }

    func testAStoredRecordMissingAFieldReadsWithItsDefaultAndStaysAsStored() async throws {
        let db = try StoreAccess.database(path: directory.file("termind.sqlite"))
        try db.execute("INSERT INTO settings_records (key, value, revision, device_id) VALUES ('sftp.topology', '{}', 1, 'older')")
        let topology = try await session.call(SettingsContracts.Get.self, .init(key: "sftp.topology")).record
        XCTAssertEqual(topology.state, .saved)
        XCTAssertEqual(topology.value["strategy"], .string("smart"), "a missing strategy decodes as Smart")
        XCTAssertEqual(try sql("SELECT value FROM settings_records WHERE key = 'sftp.topology'").first?.string("value"), "{}",
                       "an existing saved value is never silently changed")
    }

    func testRegistrationIsCheckedAndFrozenOnceBootIsOver() async throws {
        _ = try await session.call(SettingsContracts.List.self, .init())
        XCTAssertThrowsError(try RecordOwner.shared.lateRegistration?()) { error in
            XCTAssertEqual((error as? TermindError)?.code, "settings.registration")
        }
        XCTAssertThrowsError(try port.register(SettingsRecordDeclaration(key: "Bad Key", scope: .synced, summary: "", schema: .any, defaults: .object([:])) { .valid($0) },
                                               owner: "test")) { error in
            XCTAssertTrue((error as? TermindError)?.message.contains("not a settings key") == true, "\(error)")
        }
    }

    func testRunningWorkHearsOfEachChange() async throws {
        var updates = port.updates(SFTPSettings.Limits.self).makeAsyncIterator()
        _ = try await set("sftp.limits", #"{"active": 60, "perHost": 20}"#)
        let first = await updates.next()
        XCTAssertEqual(first, SFTPSettings.Limits(active: 60, perHost: 20))
        _ = try await session.call(SettingsContracts.Reset.self, .init(key: "sftp.limits"))
        let second = await updates.next()
        XCTAssertEqual(second, SFTPSettings.Limits.defaults)
    }

    func testExportThenImportRestoresTheSavedRecordsAndABadDocumentImportsNothing() async throws {
        _ = try await set("sftp.limits", #"{"active": 40, "perHost": 5}"#)
        _ = try await set("terminal.device", #"{"fontFamily": "Iosevka"}"#)
        let synced = try await session.call(SettingsContracts.Export.self, .init())
        XCTAssertEqual(synced.records.keys.sorted(), ["sftp.limits"], "device-local records only when asked for")
        let everything = try await session.call(SettingsContracts.Export.self, .init(includeDeviceLocal: true))
        XCTAssertEqual(everything.records.keys.sorted(), ["sftp.limits", "terminal.device"])
        let file = directory.file("settings.json")
        try JSONCoding.encode(everything).write(to: URL(fileURLWithPath: file))

        _ = try await session.call(SettingsContracts.Reset.self, .init(key: "sftp.limits"))
        _ = try await session.call(SettingsContracts.Reset.self, .init(key: "terminal.device"))
        let imported = try await session.call(SettingsContracts.Import.self, .init(path: file))
        XCTAssertEqual(imported.changed.map(\.key), ["sftp.limits", "terminal.device"])
        let read282 = try await port.read(SFTPSettings.Limits.self)
        XCTAssertEqual(read282, SFTPSettings.Limits(active: 40, perHost: 5))
        let again = try await session.call(SettingsContracts.Import.self, .init(path: file))
        XCTAssertEqual(again.unchanged, ["sftp.limits", "terminal.device"])

        let before = try sql("SELECT key, value, revision FROM settings_records ORDER BY key").map { "\($0.values)" }
        var bad = everything
        bad.records["sftp.limits"] = .object(["active": .integer(0), "perHost": .integer(1)])
        bad.records["terminal.device"] = .object(["fontFamily": .string("Mono")])
        await expectFailure("settings.invalid", ["Nothing was imported", "sftp.limits.active"]) {
            _ = try await self.session.call(SettingsContracts.Import.self, .init(document: bad))
        }
        XCTAssertEqual(try sql("SELECT key, value, revision FROM settings_records ORDER BY key").map { "\($0.values)" }, before,
                       "a valid record of a bad document is not written either")
        try Data("{\"records\": ".utf8).write(to: URL(fileURLWithPath: file))
        await expectFailure("settings.import_unreadable", ["Nothing was imported"]) {
            _ = try await self.session.call(SettingsContracts.Import.self, .init(path: file))
        }
    }

    func testTheVersionOneFixtureOpensWithItsRecordsAndDevice() async throws {
        await session.shutdown()
        session = nil
        directory.remove()
        directory = try TemporaryDirectory()
        let dump = try String(contentsOfFile: Repository.path("Tests/SettingsTests/Fixtures/settings-v1.sql"), encoding: .utf8)
        try StoreAccess.database(path: directory.file("termind.sqlite")).executeScript(dump)
        session = try await boot()
        let preferences = try await port.read(TerminalSettings.Preferences.self)
        XCTAssertEqual(preferences, TerminalSettings.Preferences(theme: "solarized", scrollbackLines: 50_000))
        let device = try await port.current("terminal.device")
        XCTAssertEqual(device.state, .default)
        XCTAssertEqual(device.revision, 4, "a reset record keeps its revision (a tombstone)")
        let changed = try await set("terminal.preferences", #"{"theme": "dark"}"#)
        XCTAssertEqual(changed.revision, 5)
        XCTAssertEqual(try sql("SELECT device_id FROM settings_records WHERE key = 'terminal.preferences'").first?.string("device_id"),
                       "74e3a0ff258174ada79dfae4d4cfa045", "the device keeps its id")
        XCTAssertEqual(try sql("SELECT count(*) AS n FROM settings_outbox").first?.int("n"), 5)
        XCTAssertEqual(try StoreAccess.database(path: directory.file("termind.sqlite")).schemaVersion(of: "settings"), 1)
    }
}

/// The path sync will use: local changes read from the journal; other devices' records
/// applied without a journal row (no echo), only when newer, quarantined when they do not
/// validate here.
final class SettingsSyncTests: SettingsTestCase {
    private var sync: any SettingsSync { session.kernel.port(.settingsSync)! }

    func testRemoteChangesApplyWhenNewerWithoutAJournalRowAndTheOutboxListsLocalOnes() async throws {
        _ = try await session.call(SettingsContracts.Set.self, .init(key: "sftp.limits", value: ["perHost": .integer(6)]))
        let local = try await sync.outbox(after: 0, limit: 100)
        XCTAssertEqual(local.map(\.key), ["sftp.limits"])
        XCTAssertEqual(local.first?.revision, 1)

        var updates = values.updates(SFTPSettings.Limits.self).makeAsyncIterator()
        let applied = try await sync.applyRemote(.init(key: "sftp.limits", revision: 5, value: .object(["active": .integer(70), "perHost": .integer(35)]),
                                                       device: "other-device"))
        XCTAssertEqual(applied.state, .saved)
        XCTAssertEqual(applied.revision, 5)
        let heard = await updates.next()
        XCTAssertEqual(heard, SFTPSettings.Limits(active: 70, perHost: 35))
        let afterRemote = try await sync.outbox(after: 0, limit: 100)
        XCTAssertEqual(afterRemote, local, "a remote change is not journaled again (no echo)")

        let stale = try await sync.applyRemote(.init(key: "sftp.limits", revision: 4, value: .object(["active": .integer(1), "perHost": .integer(1)]), device: "old"))
        XCTAssertEqual(stale.revision, 5, "an older revision does not replace a newer one")
        // Two devices changed it from the same revision: the higher device id wins everywhere.
        let lower = try await sync.applyRemote(.init(key: "sftp.limits", revision: 5, value: .object(["active": .integer(2), "perHost": .integer(2)]), device: "aaa"))
        XCTAssertEqual(lower.value["active"], .integer(70), "'aaa' sorts before 'other-device', which wrote revision 5")
        let higher = try await sync.applyRemote(.init(key: "sftp.limits", revision: 5, value: .object(["active": .integer(70), "perHost": .integer(35)]), device: "zzz"))
        XCTAssertEqual(higher.value["active"], .integer(70))
        let settled = try await values.current("sftp.limits")
        XCTAssertEqual(settled.revision, 5)
        let limits = try await values.read(SFTPSettings.Limits.self)
        XCTAssertEqual(limits, SFTPSettings.Limits(active: 70, perHost: 35))

        // A newer device's value this termind cannot read is kept, quarantined.
        let unknown = try await sync.applyRemote(.init(key: "sftp.topology", revision: 2, value: .object(["strategy": .string("quantum")]), device: "newer"))
        XCTAssertEqual(unknown.state, .quarantined)
        XCTAssertEqual(unknown.stored?["strategy"], .string("quantum"))
        let tombstone = try await sync.applyRemote(.init(key: "sftp.limits", revision: 6, value: nil, device: "other-device"))
        XCTAssertEqual(tombstone.state, .default)

        // The next local change continues from the remote revision.
        let next = try await session.call(SettingsContracts.Set.self, .init(key: "sftp.limits", value: ["perHost": .integer(3)]))
        XCTAssertEqual(next.revision, 7)
        let journal = try await sync.outbox(after: local.last?.sequence ?? 0, limit: 100)
        XCTAssertEqual(journal.map(\.revision), [7])

        do {
            _ = try await sync.applyRemote(.init(key: "terminal.device", revision: 9, value: .object([:]), device: "other-device"))
            XCTFail("a device-local record took another device's change")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.invalid")
        }
    }
}

/// Provider records hold secret references, never secrets: the key goes to the encrypted
/// secret store and the record gets its handle; an empty reference is anonymous; a
/// reference to nothing readable is an error; a replaced or deleted provider's secret is
/// removed; the plaintext is in no file of the store, the journal or any reply.
final class SettingsSecretTests: SettingsTestCase {
    private let plaintext = "sk-termind-test-9f8e7d6c5b4a"
    // Everything logged, at debug, goes into the store folder, which the test searches.
    override var logSink: LogSink { get throws { try LogSink.file(at: directory.file("debug.log"), level: .debug) } }

    private var secretStore: SecretStore {
        get throws { try StoreAccess.secrets(path: directory.file("secrets.sqlite"), keySource: .keyFile(directory.file("secrets.key"))) }
    }

    private func providers(_ json: String, replace: Bool = true) async throws -> SettingsValue {
        guard case .object(let fields) = try JSONCoding.parse(Data(json.utf8), source: "test") else { throw TermindError.internalFailure("not an object") }
        return try await session.call(SettingsContracts.Set.self, .init(key: "assistant.providers", value: fields, replace: replace))
    }

    private func reference(_ value: SettingsValue, _ id: String) -> String? { value.value["providers"]?[id]?["secretRef"]?.stringValue }

    func testAKeyLivesInTheSecretStoreAndTheRecordHoldsOnlyItsHandle() async throws {
        let anonymous = try await providers(#"{"providers": {"local": {"kind": "ollama", "baseURL": "http://127.0.0.1:11434"}, "openai": {"kind": "openai"}}}"#)
        XCTAssertEqual(reference(anonymous, "local"), "")
        let none = try await values.secret("", key: "assistant.providers", field: "providers.local.secretRef")
        XCTAssertNil(none, "an empty reference is anonymous")

        var replies: [Data] = []
        let keyed = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.secretRef", secret: Secret(plaintext)))
        replies.append(try JSONCoding.encode(keyed))
        let handle = try XCTUnwrap(reference(keyed, "openai"))
        XCTAssertTrue(handle.hasPrefix("sec_"), handle)
        let read = try await values.secret(handle, key: "assistant.providers", field: "providers.openai.secretRef")
        XCTAssertEqual(read, Secret(plaintext))
        replies.append(try JSONCoding.encode(try await session.call(SettingsContracts.List.self, .init())))
        replies.append(try JSONCoding.encode(try await session.call(SettingsContracts.Export.self, .init(includeDeviceLocal: true))))

        // A new key replaces the old one, whose secret goes.
        let rotated = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.secretRef", secret: Secret(plaintext + "-2")))
        let newHandle = try XCTUnwrap(reference(rotated, "openai"))
        XCTAssertNotEqual(newHandle, handle)
        XCTAssertFalse(try secretStore.handles().contains(handle), "the replaced key is still in the secret store")

        // Deleting the provider deletes its secret.
        _ = try await providers(#"{"providers": {"local": {"kind": "ollama", "baseURL": "http://127.0.0.1:11434"}}}"#)
        XCTAssertFalse(try secretStore.handles().contains(newHandle), "a deleted provider's key is still in the secret store")
        await session.shutdown()
        session = nil

        // The plaintext is nowhere: database, WAL, secret store file, journal, debug log, replies.
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.file("debug.log")))
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: directory.file(name)))
            XCTAssertNil(bytes.range(of: Data(plaintext.utf8)), "the key is readable in \(name)")
        }
        for reply in replies { XCTAssertNil(reply.range(of: Data(plaintext.utf8)), "a reply carries the key") }
    }

    func testSecretsNoRecordReferencesAreSweptOnceTheyAreOldAndTheirRecordIsRegistered() async throws {
        _ = try await providers(#"{"providers": {"openai": {"kind": "openai"}}}"#)
        let keyed = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.secretRef", secret: Secret(plaintext)))
        let referenced = try XCTUnwrap(reference(keyed, "openai"))
        await session.shutdown()
        session = nil

        // What a crash between a write's commit and its cleanup leaves: secrets of Settings'
        // that nothing references; one just stored (a writer elsewhere may be about to use
        // it) and one of a record this boot does not register (a lookalike key).
        let store = try StoreAccess.scoped(secretStore, to: "settings")
        let orphan = try store.store(Secret("orphan"), purpose: "settings:assistant.providers:providers.gone.secretRef")
        let young = try store.store(Secret("young"), purpose: "settings:assistant.providers:providers.new.secretRef")
        let unregistered = try store.store(Secret("other"), purpose: "settings:assistant.providersv2:providers.a.secretRef")
        try StoreAccess.database(path: directory.file("secrets.sqlite")).execute("UPDATE secrets SET created_at = '2000-01-01T00:00:00.000Z' WHERE handle != ?", [young])

        session = try await boot()
        _ = try await session.call(SettingsContracts.List.self, .init())
        let left = Set(try secretStore.handles())
        XCTAssertTrue(left.contains(referenced), "a referenced key was swept")
        XCTAssertFalse(left.contains(orphan), "an old secret nothing references is still kept")
        XCTAssertTrue(left.contains(young), "a secret stored a moment ago was swept")
        XCTAssertTrue(left.contains(unregistered), "a secret of a record not registered in this boot was swept")
        let read = try await values.secret(referenced, key: "assistant.providers", field: "providers.openai.secretRef")
        XCTAssertEqual(read, Secret(plaintext))
    }

    func testARemoteChangeKeepsThisDevicesKeyAndAHandleOfAnotherFieldNeverCounts() async throws {
        _ = try await providers(#"{"providers": {"openai": {"kind": "openai"}}}"#)
        let keyed = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.secretRef", secret: Secret(plaintext)))
        let mine = try XCTUnwrap(reference(keyed, "openai"))

        // Another device changed the base URL; its value carries its own handle.
        let sync = try XCTUnwrap(session.kernel.port(.settingsSync))
        let remote = try await sync.applyRemote(.init(key: "assistant.providers", revision: keyed.revision + 1, value: .object(["providers": .object([
            "openai": .object(["kind": .string("openai"), "baseURL": .string("https://proxy.example/v1"), "secretRef": .string("sec_of_the_laptop")])])]),
                                                       device: "laptop"))
        XCTAssertEqual(remote.value["providers"]?["openai"]?["baseURL"], .string("https://proxy.example/v1"))
        XCTAssertEqual(reference(remote, "openai"), mine, "this device keeps its own key's handle")
        XCTAssertTrue(try secretStore.handles().contains(mine), "a remote change deleted this device's key")
        let read = try await values.secret(mine, key: "assistant.providers", field: "providers.openai.secretRef")
        XCTAssertEqual(read, Secret(plaintext))

        // The provider's key may not go where an MCP server's token goes.
        do {
            _ = try await session.call(SettingsContracts.Set.self, .init(key: "assistant.mcpServers", value: ["servers": .object([
                "evil": .object(["transport": .string("http"), "url": .string("https://evil.example/mcp"), "tokenRef": .string(mine)])])]))
            XCTFail("another field's secret was accepted as a reference")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.secret_missing")
        }
        do {
            _ = try await values.secret(mine, key: "assistant.mcpServers", field: "servers.evil.tokenRef")
            XCTFail("another field's secret was resolved")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.secret_missing")
        }
    }

    func testTheSweepKeepsTheSecretsOfAQuarantinedRecord() async throws {
        _ = try await providers(#"{"providers": {"openai": {"kind": "openai"}}}"#)
        let keyed = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.secretRef", secret: Secret(plaintext)))
        let mine = try XCTUnwrap(reference(keyed, "openai"))
        await session.shutdown()
        session = nil
        // A newer termind's value this one cannot read, and the key stored long ago.
        try StoreAccess.database(path: directory.file("termind.sqlite")).execute("UPDATE settings_records SET value = ? WHERE key = 'assistant.providers'",
                                                                     [#"{"providers": {"openai": {"kind": "openai", "secretRef": "\#(mine)", "region": "eu"}}}"#])
        try StoreAccess.database(path: directory.file("secrets.sqlite")).execute("UPDATE secrets SET created_at = '2000-01-01T00:00:00.000Z'")
        session = try await boot()
        let list = try await session.call(SettingsContracts.List.self, .init()).records
        XCTAssertEqual(list.first { $0.key == "assistant.providers" }?.state, .quarantined)
        XCTAssertTrue(try secretStore.handles().contains(mine), "the sweep deleted a quarantined record's key")
    }

    func testAReferenceMustNameASecretAndAMissingOneIsAnError() async throws {
        _ = try await providers(#"{"providers": {"openai": {"kind": "openai"}}}"#)
        do {
            _ = try await providers(#"{"providers": {"openai": {"kind": "openai", "secretRef": "sec_00000000000000000000000000000000"}}}"#)
            XCTFail("a made-up handle was accepted")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.secret_missing")
            XCTAssertTrue(error.message.contains("assistant.providers.providers.openai.secretRef"), error.message)
        }
        do {
            _ = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.claude.secretRef", secret: Secret(plaintext)))
            XCTFail("a secret for a provider that does not exist was kept")
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("providers.claude does not exist"), error.message)
        }
        do {
            _ = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.providers", field: "providers.openai.kind", secret: Secret(plaintext)))
            XCTFail("a secret went into a field that is not a reference")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.invalid")
        }
        XCTAssertEqual(try secretStore.handles(), [], "a refused secret is not kept")

        // From another device the reference arrives without its secret (secrets never sync).
        let sync = try XCTUnwrap(session.kernel.port(.settingsSync))
        let remote = try await sync.applyRemote(.init(key: "assistant.providers", revision: 9,
                                                      value: .object(["providers": .object(["openai": .object(["kind": .string("openai"), "secretRef": .string("sec_from_elsewhere")])])]),
                                                      device: "laptop"))
        let ref = try XCTUnwrap(reference(remote, "openai"))
        do {
            _ = try await values.secret(ref, key: "assistant.providers", field: "providers.openai.secretRef")
            XCTFail("a missing secret read as present")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.secret_missing")
            XCTAssertFalse(error.message.contains(ref), "the error names no handle")
        }
    }
}

/// The assistant's and metrics' records: explicit role choices only (a legacy guardian read
/// under its old name), MCP servers checked per transport with a token reference, the
/// device-local assistant and metrics preferences.
final class SettingsRecordRulesTests: SettingsTestCase {
    private func refused(_ key: String, _ json: String, mentioning field: String, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            _ = try await set(key, json, replace: true)
            XCTFail("\(json) was accepted", file: file, line: line)
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "settings.invalid", file: file, line: line)
            XCTAssertTrue(error.message.contains(field), "\(field) not named: \(error.message)", file: file, line: line)
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }

    func testRolesStoreExplicitChoicesAndALegacyGuardianReadsUnderItsNewName() async throws {
        let empty = try await values.read(AssistantSettings.Roles.self)
        XCTAssertNil(empty.generator)
        XCTAssertNil(empty.guardian, "no guardian stored means automatic")
        let chosen = try await set("assistant.roles", #"{"chat": "sonnet"}"#)
        XCTAssertEqual(chosen.value, .object(["chat": .string("sonnet")]), "no resolved fallback is written")
        let roles = try await values.read(AssistantSettings.Roles.self)
        XCTAssertEqual(roles.effectiveGenerator, "sonnet", "no generator means the same as chat")

        let db = try StoreAccess.database(path: directory.file("termind.sqlite"))
        try db.execute("UPDATE settings_records SET value = ? WHERE key = 'assistant.roles'", [#"{"chat": "sonnet", "securityReview": "opus"}"#])
        let legacy = try await values.read(AssistantSettings.Roles.self)
        XCTAssertEqual(legacy.guardian, "opus")
        XCTAssertEqual(try db.query("SELECT value FROM settings_records WHERE key = 'assistant.roles'").first?.string("value"),
                       #"{"chat": "sonnet", "securityReview": "opus"}"#, "reading never rewrites the stored record")
        guard case .object(let patch) = try JSONCoding.parse(Data(#"{"generator": "haiku"}"#.utf8), source: "patch") else { return XCTFail() }
        let migrated = try await session.call(SettingsContracts.Set.self, .init(key: "assistant.roles", value: patch))
        XCTAssertEqual(migrated.value, .object(["chat": .string("sonnet"), "generator": .string("haiku"), "guardian": .string("opus")]),
                       "the next write stores the canonical guardian")
        await refused("assistant.roles", #"{"chat": "Not An Id"}"#, mentioning: "assistant.roles.chat")
    }

    func testModelsAndMCPServersAreCheckedPerField() async throws {
        _ = try await set("assistant.models", #"{"models": {"sonnet": {"provider": "anthropic", "model": "claude-sonnet-4", "contextTokens": 200000}}}"#)
        await refused("assistant.models", #"{"models": {"big": {"provider": "x", "model": "m", "contextTokens": 5}}}"#, mentioning: "assistant.models.models.big.contextTokens")
        _ = try await set("assistant.mcpServers", #"{"servers": {"files": {"transport": "stdio", "command": ["mcp-files", "--root", "/srv"]}, "docs": {"transport": "http", "url": "https://docs.example/mcp", "headers": {"X-Team": "ml"}}}}"#)
        await refused("assistant.mcpServers", #"{"servers": {"files": {"transport": "stdio"}}}"#, mentioning: "assistant.mcpServers.servers.files.command")
        await refused("assistant.mcpServers", #"{"servers": {"docs": {"transport": "http", "url": "ftp://x"}}}"#, mentioning: "assistant.mcpServers.servers.docs.url")
        await refused("assistant.mcpServers", #"{"servers": {"docs": {"transport": "http", "url": "https://d/mcp", "headers": {"X-Bad": "a\nb"}}}}"#,
                      mentioning: "assistant.mcpServers.servers.docs.headers.X-Bad")
        let keyed = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.mcpServers", field: "servers.docs.tokenRef", secret: Secret("mcp-token-1")))
        let handle = try XCTUnwrap(keyed.value["servers"]?["docs"]?["tokenRef"]?.stringValue)
        let token = try await values.secret(handle, key: "assistant.mcpServers", field: "servers.docs.tokenRef")
        XCTAssertEqual(token, Secret("mcp-token-1"))
    }

    func testTheAssistantsLocalRecordAndMetricsPreferencesStayOnTheDevice() async throws {
        let local = try await session.call(SettingsContracts.SetSecret.self, .init(key: "assistant.local", field: "listenerTokenRef", secret: Secret("listener-token")))
        XCTAssertEqual(local.scope, .deviceLocal)
        XCTAssertEqual(local.value["approval"], .string("ask"))
        _ = try await set("metrics.preferences", #"{"intervalSeconds": 5, "order": ["host_a", "host_b"], "interfaces": {"host_a": ["eth0", "docker0"]}}"#)
        await refused("metrics.preferences", #"{"intervalSeconds": 0.5}"#, mentioning: "metrics.preferences.intervalSeconds")
        await refused("metrics.preferences", #"{"order": ["a", "a"]}"#, mentioning: "metrics.preferences.order")
        let exported = try await session.call(SettingsContracts.Export.self, .init())
        XCTAssertNil(exported.records["assistant.local"])
        XCTAssertNil(exported.records["metrics.preferences"])
        let journal = try StoreAccess.database(path: directory.file("termind.sqlite")).query("SELECT key FROM settings_outbox")
        XCTAssertEqual(journal.count, 0, "device-local changes are never journaled for sync")
    }
}
