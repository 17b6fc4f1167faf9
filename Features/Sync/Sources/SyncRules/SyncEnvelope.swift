import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// How records sit on the server. The folder holds `sync.json` (the format, the scrypt salt
/// and cost, and a check value sealed under the sync key, so a wrong passphrase is refused
/// before anything is read) and one folder per device with one folder per zone, whose files
/// are numbered: `PATH/DEVICE/ZONE/000000000042.tsr`. Each file is one batch of records,
/// sealed with a key of its own (AES-256-GCM) that is itself sealed under the sync key; the
/// device, zone and index are associated data of both, so a file moved, renamed or copied
/// into another log fails to open. The server sees names, sizes and times, nothing else.
public enum SyncEnvelope {
    public static let format = "termind-sync/1"
    public static let folderFile = "sync.json"
    public static let suffix = ".tsr"
    fileprivate static let checkText = Data("termind sync key check".utf8)

    /// `sync.json`.
    public struct Folder: Codable, Equatable, Sendable {
        public var format: String
        public var scrypt: KeyDerivation.ScryptParameters
        public var salt: String
        public var check: String

        /// A new folder's description for the sync key derived from the passphrase with `salt`.
        public static func make(key: SymmetricKey, salt: Data, scrypt: KeyDerivation.ScryptParameters) -> Folder {
            let check = AEAD.seal(SyncEnvelope.checkText, key: key, associatedData: Data("\(SyncEnvelope.format) check".utf8)).combined
            return Folder(format: SyncEnvelope.format, scrypt: scrypt, salt: salt.base64EncodedString(), check: check.base64EncodedString())
        }

        /// Whether `key` is the key this folder was made with.
        public func accepts(_ key: SymmetricKey) -> Bool {
            guard let data = Data(base64Encoded: check), let box = AEAD.SealedBox(combined: data),
                  let opened = try? AEAD.open(box, key: key, associatedData: Data("\(SyncEnvelope.format) check".utf8)) else { return false }
            return opened == SyncEnvelope.checkText
        }

        public var saltBytes: Data? { Data(base64Encoded: salt) }

        /// A folder description read from the server, or what is wrong with it.
        public static func parse(_ data: Data, shown: String) throws -> Folder {
            let folder: Folder
            do { folder = try JSONDecoder().decode(Folder.self, from: data) } catch {
                throw TermindError(code: "sync.folder_invalid", message: "\(shown) is not a termind sync folder description (\(data.count) bytes that do not decode).")
            }
            guard folder.format == SyncEnvelope.format else {
                throw TermindError(code: "sync.folder_invalid", message: "\(shown) is in format '\(folder.format)'; this termind reads '\(SyncEnvelope.format)' only (update termind).")
            }
            guard folder.saltBytes?.count == 16 else { throw TermindError(code: "sync.folder_invalid", message: "\(shown) has no valid salt.") }
            return folder
        }
    }

    /// A log file's first bytes.
    static let magic = Data("TSR1".utf8)
    /// nonce ‖ file key ‖ tag.
    static let wrappedLength = AEAD.nonceLength + AEAD.keyLength + AEAD.tagLength

    private static func associated(_ part: String, device: String, zone: String, index: Int) -> Data {
        Data("\(format) \(part) \(device) \(zone) \(index)".utf8)
    }

    /// One batch sealed for its place in the log: `TSR1` ‖ the file key sealed under the
    /// sync key ‖ the batch (JSON) sealed under the file key.
    public static func seal(_ batch: SyncBatch, key: SymmetricKey) throws -> Data {
        let fileKey = SymmetricKey.random()
        let body = try JSONCoding.encode(batch)
        let wrapped = AEAD.seal(fileKey.data, key: key, associatedData: associated("key", device: batch.device, zone: batch.zone, index: batch.index))
        let sealed = AEAD.seal(body, key: fileKey, associatedData: associated("body", device: batch.device, zone: batch.zone, index: batch.index))
        return magic + wrapped.combined + sealed.combined
    }

    /// Why a log file could not be taken in: it stays where it is, is never applied and is
    /// shown by `sync status`.
    public struct Unreadable: Error, Equatable, Sendable {
        public var reason: String
    }

    /// The batch in the file at `index` of `device`'s log of `zone`.
    public static func open(_ data: Data, key: SymmetricKey, device: String, zone: String, index: Int) throws(Unreadable) -> SyncBatch {
        let bytes = Data(data)
        guard bytes.count >= magic.count + wrappedLength + AEAD.nonceLength + AEAD.tagLength, bytes.prefix(magic.count) == magic else {
            throw Unreadable(reason: "not a sealed record file (\(bytes.count) bytes; truncated or not termind's)")
        }
        guard let keyBox = AEAD.SealedBox(combined: bytes.dropFirst(magic.count).prefix(wrappedLength)),
              let fileKeyBytes = try? AEAD.open(keyBox, key: key, associatedData: associated("key", device: device, zone: zone, index: index)),
              fileKeyBytes.count == AEAD.keyLength else {
            throw Unreadable(reason: "its key does not open with the sync key for this place in the log (tampered, moved or sealed under another passphrase)")
        }
        let fileKey = SymmetricKey(bytes: fileKeyBytes)
        guard let bodyBox = AEAD.SealedBox(combined: bytes.dropFirst(magic.count + wrappedLength)),
              let body = try? AEAD.open(bodyBox, key: fileKey, associatedData: associated("body", device: device, zone: zone, index: index)) else {
            throw Unreadable(reason: "its records fail authentication (tampered or truncated)")
        }
        guard let batch = try? JSONDecoder().decode(SyncBatch.self, from: body) else {
            throw Unreadable(reason: "its records do not decode")
        }
        guard batch.version == SyncBatch.version else { throw Unreadable(reason: "record version \(batch.version) is not one this termind reads (\(SyncBatch.version))") }
        guard batch.device == device, batch.zone == zone, batch.index == index else {
            throw Unreadable(reason: "it says it is \(batch.device)/\(batch.zone)/\(batch.index)")
        }
        return batch
    }

    /// `000000000042.tsr` for index 42.
    public static func fileName(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 12 - digits.count)) + digits + suffix
    }

    /// The index a log file's name says, nil for any other name (temporary files, strays).
    public static func index(ofFile name: String) -> Int? {
        guard name.hasSuffix(suffix), name.count == 12 + suffix.count else { return nil }
        let digits = name.dropLast(suffix.count)
        guard digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let index = Int(digits), index >= 1 else { return nil }
        return index
    }

    /// Device ids are 32 lowercase hex digits; any other folder in PATH is not a device's log.
    public static func isDeviceID(_ name: String) -> Bool {
        name.count == 32 && name.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
    }
}
