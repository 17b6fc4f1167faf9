import Foundation
import SyncRules
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// Sync's pure rules: the clock, per-field merge, change detection and sealed files.
final class SyncRulesTests: XCTestCase {
    private let a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    private let b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

    func testTheClockIsMonotonicAcrossABackwardWallClockAndAfterWhatItSaw() {
        var clock = HybridClock(device: a)
        let first = clock.tick(now: 1_000)
        let second = clock.tick(now: 900)
        XCTAssertGreaterThan(second, first, "a wall clock that went back does not make an earlier stamp")
        XCTAssertEqual(second.wall, 1_000)
        clock.observe(HLC(wall: 5_000, counter: 7, device: b), now: 1_100)
        let third = clock.tick(now: 1_200)
        XCTAssertGreaterThan(third, HLC(wall: 5_000, counter: 7, device: b))
        XCTAssertEqual(third.device, a)
        XCTAssertEqual(HLC(third.description), third)
        XCTAssertNil(HLC("12-x-"))
        // Text sorts as stamps do.
        let stamps = [HLC(wall: 10, counter: 2, device: a), HLC(wall: 9, counter: 50, device: b), HLC(wall: 10, counter: 2, device: b)]
        XCTAssertEqual(stamps.sorted(), stamps.sorted { $0.description < $1.description })
    }

    private func put(_ id: String, _ fields: [String: JSONValue], _ clock: HLC) -> SyncRecord {
        SyncRecord(zone: "vault", kind: "host", id: id, op: .put, fields: fields.mapValues { .init(value: $0, clock: clock) }, clock: clock, device: clock.device)
    }

    func testConcurrentEditsOfDifferentFieldsBothSurviveAndTheSameFieldGoesToTheLaterClock() {
        let base = EntityState()
        let t0 = HLC(wall: 100, counter: 0, device: a)
        var origin = base
        origin.merge(put("h", ["label": "web", "port": 22, "user": "root"], t0))
        // A changes the port, B the user and the label at the same wall time: B's device id wins the label.
        let onA = origin.change(to: ["label": "web-a", "port": 2222, "user": "root"], zone: "vault", kind: "host", id: "h", clock: HLC(wall: 200, counter: 0, device: a))!
        let onB = origin.change(to: ["label": "web-b", "port": 22, "user": "admin"], zone: "vault", kind: "host", id: "h", clock: HLC(wall: 200, counter: 0, device: b))!
        var x = origin, y = origin
        x.merge(onA); x.merge(onB)
        y.merge(onB); y.merge(onA)
        XCTAssertEqual(x, y)
        XCTAssertEqual(x.value, ["label": "web-b", "port": 2222, "user": "admin"])
        // Taking a record twice changes nothing.
        XCTAssertFalse(x.merge(onA))
    }

    func testDeleteAgainstEditGoesByClockWhicheverArrivesFirst() {
        var origin = EntityState()
        origin.merge(put("h", ["label": "web", "port": 22], HLC(wall: 100, counter: 0, device: a)))
        let delete = origin.change(to: nil, zone: "vault", kind: "host", id: "h", clock: HLC(wall: 200, counter: 0, device: a))!
        XCTAssertEqual(delete.op, .delete)
        let laterEdit = origin.change(to: ["label": "web", "port": 2200], zone: "vault", kind: "host", id: "h", clock: HLC(wall: 300, counter: 0, device: b))!
        let earlierEdit = origin.change(to: ["label": "web", "port": 2100], zone: "vault", kind: "host", id: "h", clock: HLC(wall: 150, counter: 0, device: b))!
        for (edit, survives) in [(laterEdit, true), (earlierEdit, false)] {
            var x = origin, y = origin
            x.merge(delete); x.merge(edit)
            y.merge(edit); y.merge(delete)
            XCTAssertEqual(x, y)
            XCTAssertEqual(x.isLive, survives)
            if survives { XCTAssertEqual(x.value, ["label": "web", "port": 2200], "the later edit brings the whole host back") }
        }
    }

    func testAChangeIsOnlyWhatDiffersAndAClearIsExplicit() {
        var state = EntityState()
        let t0 = HLC(wall: 100, counter: 0, device: a)
        let created = state.change(to: ["label": "web", "user": "root"], zone: "vault", kind: "host", id: "h", clock: t0)!
        state.merge(created)
        XCTAssertNil(state.change(to: ["label": "web", "user": "root"], zone: "vault", kind: "host", id: "h", clock: HLC(wall: 101, counter: 0, device: a)),
                     "the same value read back is no change (no echo)")
        let t1 = HLC(wall: 102, counter: 0, device: a)
        let cleared = state.change(to: ["label": "web"], zone: "vault", kind: "host", id: "h", clock: t1)!
        XCTAssertEqual(cleared.fields["user"], .init(value: .null, clock: t1))
        XCTAssertEqual(cleared.fields["label"], .init(value: "web", clock: t0), "an unchanged field keeps its clock")
        XCTAssertEqual(cleared.clock, t1)
        XCTAssertNil(cleared.problem(zone: "vault", device: a))
        XCTAssertNotNil(cleared.problem(zone: "settings", device: a))
        XCTAssertNotNil(cleared.problem(zone: "vault", device: b))
    }

    func testRandomRecordsInAnyOrderReachTheSameState() {
        var generator = SeededGenerator(seed: 20261206)
        let devices = [a, b, "cccccccccccccccccccccccccccccccc"]
        var records: [SyncRecord] = []
        for step in 0..<300 {
            let device = devices[Int(generator.next() % 3)]
            let clock = HLC(wall: Int64(generator.next() % 50), counter: Int32(step), device: device)
            if generator.next() % 5 == 0 {
                records.append(SyncRecord(zone: "vault", kind: "host", id: "h", op: .delete, fields: [:], clock: clock, device: device))
            } else {
                let field = ["label", "port", "user", "tags"][Int(generator.next() % 4)]
                records.append(put("h", [field: .integer(Int64(generator.next() % 1000))], clock))
            }
        }
        var reference = EntityState()
        for record in records { reference.merge(record) }
        for _ in 0..<20 {
            var shuffled = records
            shuffled.shuffle(using: &generator)
            var state = EntityState()
            for record in shuffled + shuffled.prefix(30) { state.merge(record) }
            XCTAssertEqual(state, reference)
        }
    }

    // MARK: Sealed files

    private func batch(index: Int = 3) -> SyncBatch {
        SyncBatch(device: a, zone: "vault", index: index, records: [put("h", ["label": "web"], HLC(wall: 1, counter: 0, device: a))])
    }

    func testASealedFileOpensOnlyWithItsKeyAtItsPlace() throws {
        let key = SymmetricKey.random()
        let sealed = try SyncEnvelope.seal(batch(), key: key)
        XCTAssertFalse(String(decoding: sealed, as: UTF8.self).contains("web"), "no plaintext on the server")
        XCTAssertEqual(try SyncEnvelope.open(sealed, key: key, device: a, zone: "vault", index: 3), batch())
        func refused(_ data: Data, key: SymmetricKey = key, device: String? = nil, zone: String = "vault", index: Int = 3, _ expected: String) {
            do {
                _ = try SyncEnvelope.open(data, key: key, device: device ?? a, zone: zone, index: index)
                XCTFail("opened: \(expected)")
            } catch {
                XCTAssertTrue(error.reason.contains(expected), "\(error.reason) does not say \(expected)")
            }
        }
        refused(sealed, key: .random(), "does not open with the sync key")
        refused(sealed, index: 4, "does not open with the sync key")
        refused(sealed, device: b, "does not open with the sync key")
        refused(sealed, zone: "settings", "does not open with the sync key")
        refused(sealed.prefix(sealed.count / 2), "truncated")
        var flipped = sealed
        flipped[flipped.count - 20] ^= 0x01
        refused(flipped, "fail authentication")
        refused(Data("{\"format\": \"termind-sync/1\"}".utf8), "not a sealed record file")
    }

    func testAFieldChangedWithItsRecordCarriesNoClockOfItsOwnOnTheWire() throws {
        let t0 = HLC(wall: 100, counter: 0, device: a), t1 = HLC(wall: 200, counter: 0, device: b)
        let record = SyncRecord(zone: "vault", kind: "host", id: "h", op: .put,
                                fields: ["label": .init(value: "web", clock: t0), "port": .init(value: 22, clock: t1)], clock: t1, device: b)
        let text = String(decoding: try JSONCoding.encode(record), as: UTF8.self)
        XCTAssertEqual(text.components(separatedBy: t1.description).count - 1, 1, "the record's own clock once: \(text)")
        XCTAssertTrue(text.contains(t0.description))
        XCTAssertEqual(try JSONDecoder().decode(SyncRecord.self, from: Data(text.utf8)), record)
    }

    func testTheFolderCheckTellsAWrongPassphraseBeforeAnythingIsRead() throws {
        let salt = Data(repeating: 7, count: 16)
        let cheap = KeyDerivation.ScryptParameters(logN: 10, r: 8, p: 1)
        let key = try KeyDerivation.scrypt(passphrase: Secret("correct horse"), salt: salt, parameters: cheap)
        let folder = SyncEnvelope.Folder.make(key: key, salt: salt, scrypt: cheap)
        let parsed = try SyncEnvelope.Folder.parse(try JSONCoding.encode(folder), shown: "box:/sync/sync.json")
        XCTAssertTrue(parsed.accepts(try KeyDerivation.scrypt(passphrase: Secret("correct horse"), salt: salt, parameters: cheap)))
        XCTAssertFalse(parsed.accepts(try KeyDerivation.scrypt(passphrase: Secret("wrong horse"), salt: salt, parameters: cheap)))
        XCTAssertThrowsError(try SyncEnvelope.Folder.parse(Data("{}".utf8), shown: "box:/sync/sync.json")) { error in
            XCTAssertTrue(TermindError.from(error).message.contains("box:/sync/sync.json"))
        }
    }

    func testASealedSecretOpensOnlyAtItsFieldAndTheSamePlaintextKeepsItsSealedValue() throws {
        let key = SymmetricKey.random()
        let sealer = SecretSealer(key: key)
        let sealed = try sealer.seal("hunter2-pw", zone: "vault", kind: "identity", id: "i1", field: "password")
        XCTAssertTrue(SecretSealer.isSealed(sealed))
        XCTAssertFalse(String(decoding: try JSONCoding.encode(sealed), as: UTF8.self).contains("hunter2"), "no plaintext in the sealed form")
        XCTAssertEqual(try sealer.open(sealed, zone: "vault", kind: "identity", id: "i1", field: "password"), "hunter2-pw")
        // Moved to another field or entity, or opened with another key: it does not open.
        XCTAssertThrowsError(try sealer.open(sealed, zone: "vault", kind: "identity", id: "i2", field: "password"))
        XCTAssertThrowsError(try sealer.open(sealed, zone: "vault", kind: "identity", id: "i1", field: "key"))
        XCTAssertThrowsError(try SecretSealer(key: .random()).open(sealed, zone: "vault", kind: "identity", id: "i1", field: "password"))
        // The same plaintext again keeps the agreed sealed value (no echo); another one does not.
        XCTAssertEqual(try sealer.seal("hunter2-pw", zone: "vault", kind: "identity", id: "i1", field: "password", previous: sealed), sealed)
        let other = try sealer.seal("other-pw", zone: "vault", kind: "identity", id: "i1", field: "password", previous: sealed)
        XCTAssertNotEqual(other, sealed)
        // Without the previous value, a new seal (fresh nonce) with the same MAC.
        let again = try sealer.seal("hunter2-pw", zone: "vault", kind: "identity", id: "i1", field: "password")
        XCTAssertNotEqual(again, sealed)
        guard case .object(let x) = again, case .object(let y) = sealed else { return XCTFail() }
        XCTAssertEqual(x[SecretSealer.macField], y[SecretSealer.macField])
    }

    func testASealedFieldADeviceDoesNotHaveIsNoClearAndARescanOnlyAddsFields() throws {
        let sealed = try SecretSealer(key: .random()).seal("pw", zone: "vault", kind: "identity", id: "i", field: "password")
        var state = EntityState()
        let t0 = HLC(wall: 100, counter: 0, device: a)
        state.merge(SyncRecord(zone: "vault", kind: "identity", id: "i", op: .put,
                               fields: ["label": .init(value: "ops", clock: t0), "password": .init(value: sealed, clock: t0)], clock: t0, device: a))
        // A device with secrets off has no password field: its edit keeps the sealed one as it was.
        let edit = state.change(to: ["label": "ops-2"], zone: "vault", kind: "identity", id: "i", clock: HLC(wall: 200, counter: 0, device: b))!
        XCTAssertEqual(edit.fields["password"], .init(value: sealed, clock: t0))
        XCTAssertEqual(edit.fields["label"]?.value, "ops-2")
        XCTAssertNil(state.change(to: ["label": "ops"], zone: "vault", kind: "identity", id: "i", clock: HLC(wall: 200, counter: 0, device: b)),
                     "no secrets here is no change")
        // A rescan adds fields the devices have not agreed on and changes none they have.
        let t1 = HLC(wall: 300, counter: 0, device: b)
        let rescan = state.change(to: ["label": "mine", "password": "other", "key": "k1"], zone: "vault", kind: "identity", id: "i", clock: t1, onlyNewFields: true)!
        XCTAssertEqual(rescan.fields["key"], .init(value: "k1", clock: t1))
        XCTAssertEqual(rescan.fields["label"], .init(value: "ops", clock: t0))
        XCTAssertEqual(rescan.fields["password"], .init(value: sealed, clock: t0))
        XCTAssertNil(state.change(to: ["label": "mine"], zone: "vault", kind: "identity", id: "i", clock: t1, onlyNewFields: true))
        XCTAssertNil(state.change(to: nil, zone: "vault", kind: "identity", id: "i", clock: t1, onlyNewFields: true), "a rescan deletes nothing")
        // An entity the devices deleted is not brought back by a rescan; one they never saw is sent whole.
        var deleted = state
        deleted.merge(SyncRecord(zone: "vault", kind: "identity", id: "i", op: .delete, fields: [:], clock: HLC(wall: 150, counter: 0, device: a), device: a))
        XCTAssertNil(deleted.change(to: ["label": "ops", "key": "k1"], zone: "vault", kind: "identity", id: "i", clock: t1, onlyNewFields: true))
        XCTAssertEqual(EntityState().change(to: ["label": "new"], zone: "vault", kind: "key", id: "k", clock: t1, onlyNewFields: true)?.fields.count, 1)
    }

    func testLogFileNamesSortAsTheirIndexAndStraysAreIgnored() {
        XCTAssertEqual(SyncEnvelope.fileName(42), "000000000042.tsr")
        XCTAssertEqual(SyncEnvelope.index(ofFile: "000000000042.tsr"), 42)
        XCTAssertNil(SyncEnvelope.index(ofFile: ".000000000042.tsr.termind-part-1a2b"))
        XCTAssertNil(SyncEnvelope.index(ofFile: "000000000000.tsr"))
        XCTAssertNil(SyncEnvelope.index(ofFile: "42.tsr"))
        XCTAssertTrue(SyncEnvelope.isDeviceID(a))
        XCTAssertFalse(SyncEnvelope.isDeviceID("sync.json"))
    }
}
extension JSONValue: @retroactive ExpressibleByStringLiteral, @retroactive ExpressibleByIntegerLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
}
