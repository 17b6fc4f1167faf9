import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import TermindStore
import XCTest

final class SecretStoreTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var storePath: String { directory.file("secrets.sqlite") }
    private var keyPath: String { directory.file("secrets.key") }
    private let password = "correct-horse-\(UUID().uuidString)"

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    /// Every byte termind wrote for the store: the database, its WAL and shared memory.
    private func storeBytes() -> Data {
        ["", "-wal", "-shm"].reduce(into: Data()) { all, suffix in
            if let data = FileManager.default.contents(atPath: storePath + suffix) { all += data }
        }
    }

    func testSecretsRoundTripAndNeverReachTheFilesInPlaintext() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        let handle = try store.store(Secret(password), purpose: "identity.password")
        XCTAssertTrue(handle.hasPrefix("sec_"))
        XCTAssertEqual(try store.secret(handle).withPlaintext { $0 }, password)
        XCTAssertNil(storeBytes().range(of: Data(password.utf8)), "plaintext found in the store files")
        // A fresh process (new instance) with the same key file reads it.
        let reopened = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        XCTAssertEqual(try reopened.secret(handle).withPlaintext { $0 }, password)
        var info = stat()
        XCTAssertEqual(stat(keyPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
    }

    func testAWrongPassphraseIsClearAndChangesNothing() throws {
        let handle: String
        do {
            let store = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("first passphrase")))
            handle = try store.store(Secret(password), purpose: "key.passphrase")
        }
        let attempt = "attempt-\(UUID().uuidString)"
        XCTAssertThrowsError(try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret(attempt)))) { error in
            XCTAssertEqual((error as? TermindError)?.code, "secret.wrong_passphrase")
            XCTAssertFalse("\(error)".contains(attempt), "the attempted passphrase is not echoed")
        }
        XCTAssertThrowsError(try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))) {
            XCTAssertEqual(($0 as? TermindError)?.code, "secret.wrong_key")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyPath), "a failed open creates no key file")
        let store = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("first passphrase")))
        XCTAssertEqual(try store.secret(handle).withPlaintext { $0 }, password)
    }

    func testChangingThePassphraseKeepsEverySecret() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("old")))
        let handles = try (0..<20).map { try store.store(Secret("secret-\($0)"), purpose: "test") }
        try store.changeProtection(to: .passphrase(Secret("new")))
        XCTAssertThrowsError(try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("old"))))
        let reopened = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("new")))
        for (index, handle) in handles.enumerated() {
            XCTAssertEqual(try reopened.secret(handle).withPlaintext { $0 }, "secret-\(index)")
        }
        // And from a passphrase to a key file.
        try reopened.changeProtection(to: .keyFile(keyPath))
        let keyed = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        XCTAssertEqual(try keyed.secret(handles[7]).withPlaintext { $0 }, "secret-7")
        XCTAssertEqual(try keyed.protection(), "key file")
    }

    func testATamperedOrSwappedSecretFailsAuthenticationAndOthersStillOpen() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        let a = try store.store(Secret("alpha"), purpose: "t")
        let b = try store.store(Secret("bravo"), purpose: "t")
        let c = try store.store(Secret("charlie"), purpose: "t")
        // Edit the file behind the store's back, as an attacker or a disk fault would.
        let raw = try StoreAccess.database(path: storePath)
        let sealedA = try XCTUnwrap(raw.query("SELECT sealed FROM secrets WHERE handle = ?", [a]).first?.data("sealed"))
        var flipped = sealedA
        flipped[flipped.count - 20] ^= 0x01
        try raw.execute("UPDATE secrets SET sealed = ? WHERE handle = ?", [flipped, a])
        try raw.execute("UPDATE secrets SET sealed = ? WHERE handle = ?", [sealedA, b]) // a's sealed value under b's handle
        for handle in [a, b] {
            XCTAssertThrowsError(try store.secret(handle)) { error in
                XCTAssertEqual((error as? TermindError)?.code, "secret.tampered")
                XCTAssertFalse("\(error)".contains("alpha") || "\(error)".contains("bravo"))
            }
        }
        XCTAssertEqual(try store.secret(c).withPlaintext { $0 }, "charlie")
        XCTAssertThrowsError(try store.secret("sec_missing")) { XCTAssertEqual(($0 as? TermindError)?.code, "secret.missing") }
    }

    func testAKeyFileOthersCanReadIsRefusedAndAMissingOneIsNamed() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        _ = try store.store(Secret("x"), purpose: "t")
        chmod(keyPath, 0o644)
        XCTAssertThrowsError(try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))) {
            XCTAssertEqual(($0 as? TermindError)?.code, "secret.key_permissions")
            XCTAssertTrue("\($0)".contains("chmod 600"))
        }
        chmod(keyPath, 0o600)
        try FileManager.default.moveItem(atPath: keyPath, toPath: keyPath + ".moved")
        XCTAssertThrowsError(try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))) {
            XCTAssertEqual(($0 as? TermindError)?.code, "secret.key_missing")
        }
    }

    func testUpdateAndDelete() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        let handle = try store.store(Secret("one"), purpose: "t")
        try store.update(handle, to: Secret("two"))
        XCTAssertEqual(try store.secret(handle).withPlaintext { $0 }, "two")
        try store.delete(handle)
        XCTAssertEqual(try store.handles(), [])
        XCTAssertThrowsError(try store.update(handle, to: Secret("three")))
    }

    func testChangingProtectionRotatesTheDataKeySoAnOldKeyFileAndCopyOpenNothingNew() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        let before = try store.store(Secret("stored-before"), purpose: "t")
        let firstRotation = try XCTUnwrap(store.keyRotatedAt())
        // What an attacker kept: the key file and a copy of the store from before protection.
        let oldKey = directory.file("old.key"), oldCopy = directory.file("old-copy.sqlite")
        try FileManager.default.copyItem(atPath: keyPath, toPath: oldKey)
        let raw = try StoreAccess.database(path: storePath)
        try raw.execute("VACUUM INTO ?", [oldCopy])

        Thread.sleep(forTimeInterval: 0.01)
        try store.changeProtection(to: .passphrase(Secret("a long passphrase")))
        let after = try store.store(Secret("stored-after"), purpose: "t")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyPath), "the key file given up is removed")
        XCTAssertNotEqual(try store.keyRotatedAt(), firstRotation)
        XCTAssertEqual(try store.secret(before).withPlaintext { $0 }, "stored-before", "every secret survives the rotation")

        // The old key opens the old copy (that data was exposed already), but not a secret
        // sealed since: planted under its handle in the old copy, it fails authentication.
        let old = try StoreAccess.secrets(path: oldCopy, keySource: .keyFile(oldKey))
        let sealedAfter = try XCTUnwrap(raw.query("SELECT sealed FROM secrets WHERE handle = ?", [after]).first?.data("sealed"))
        let sealedBefore = try XCTUnwrap(raw.query("SELECT sealed FROM secrets WHERE handle = ?", [before]).first?.data("sealed"))
        let copy = try StoreAccess.database(path: oldCopy)
        try copy.execute("INSERT INTO secrets (handle, purpose, sealed) VALUES (?, 't', ?)", [after, sealedAfter])
        try copy.execute("UPDATE secrets SET sealed = ? WHERE handle = ?", [sealedBefore, before])
        for handle in [after, before] {
            XCTAssertThrowsError(try old.secret(handle), handle) { XCTAssertEqual(($0 as? TermindError)?.code, "secret.tampered") }
        }
        let reopened = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("a long passphrase")))
        XCTAssertEqual(try reopened.secret(after).withPlaintext { $0 }, "stored-after")
    }

    func testARotationToANewKeyFileThatCrashedBeforeTheRenameIsFinishedAndAStrayOneIgnored() throws {
        let store = try StoreAccess.secrets(path: storePath, keySource: .passphrase(Secret("passphrase one")))
        let handle = try store.store(Secret("kept"), purpose: "t")
        try store.changeProtection(to: .keyFile(keyPath))
        // As if termind died after the commit, before moving the staged file into place.
        XCTAssertEqual(rename(keyPath, keyPath + ".new"), 0)
        let finished = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        XCTAssertEqual(try finished.secret(handle).withPlaintext { $0 }, "kept")
        XCTAssertTrue(FileManager.default.fileExists(atPath: keyPath))
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyPath + ".new"))
        // A staged file from a rotation that never committed opens nothing: it is discarded.
        let stray = open(keyPath + ".new", O_WRONLY | O_CREAT | O_EXCL, 0o600)
        XCTAssertEqual(write(stray, [UInt8](repeating: 7, count: 32), 32), 32)
        close(stray)
        let intact = try StoreAccess.secrets(path: storePath, keySource: .keyFile(keyPath))
        XCTAssertEqual(try intact.secret(handle).withPlaintext { $0 }, "kept")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyPath + ".new"))
    }
}
