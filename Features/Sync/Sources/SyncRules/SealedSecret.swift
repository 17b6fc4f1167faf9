import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// A secret field (a password, a private key, a provider's API key) as sync stores and sends
/// it, when the user chose `sync zones --secrets on`: `{"$sealed": BASE64, "$mac": HEX}`.
/// The value is sealed under the sync key (AES-256-GCM) with the zone, kind, id and field
/// bound as associated data, so a sealed value moved to another field does not open; the
/// MAC (HMAC-SHA-256 under a key derived from the sync key) lets a device see that its own
/// secret is the one the devices agreed on without opening it, and without sealing it
/// again (a fresh nonce each time would make every capture look like a change: an echo).
/// Plaintext never reaches `sync_entities`, the outgoing batches or the folder.
public struct SecretSealer: Sendable {
    public static let sealedField = "$sealed"
    public static let macField = "$mac"

    private let key: SymmetricKey
    private let macKey: Data

    public init(key: SymmetricKey) {
        self.key = key
        macKey = Digest.hmac(.sha256, key: key.data, data: Data("termind sync secret mac".utf8))
    }

    /// Whether `value` is a sealed secret (with secrets off it is carried, never compared or applied).
    public static func isSealed(_ value: JSONValue?) -> Bool {
        guard case .object(let fields)? = value, fields.count == 2, case .string? = fields[sealedField], case .string? = fields[macField] else { return false }
        return true
    }

    /// The MAC a sealed value of `plaintext` in this field carries.
    public func mac(_ plaintext: JSONValue, zone: String, kind: String, id: String, field: String) throws -> String {
        let bytes = try JSONCoding.encode(plaintext)
        let place = Self.place(zone: zone, kind: kind, id: id, field: field)
        return Digest.hmac(.sha256, key: macKey, data: place + [0] + bytes).hexEncoded
    }

    /// The MAC of a sealed value (nil when it is not one).
    public static func mac(of sealed: JSONValue?) -> String? {
        guard isSealed(sealed), case .object(let fields)? = sealed, case .string(let mac)? = fields[macField] else { return nil }
        return mac
    }

    /// `plaintext` sealed for one field of one entity; `previous` (the agreed value) is kept
    /// as it is when it seals the same plaintext.
    public func seal(_ plaintext: JSONValue, zone: String, kind: String, id: String, field: String, previous: JSONValue? = nil) throws -> JSONValue {
        let bytes = try JSONCoding.encode(plaintext)
        let place = Self.place(zone: zone, kind: kind, id: id, field: field)
        let mac = try self.mac(plaintext, zone: zone, kind: kind, id: id, field: field)
        if Self.mac(of: previous) == mac { return previous! }
        let box = AEAD.seal(bytes, key: key, associatedData: place)
        return .object([Self.sealedField: .string(box.combined.base64EncodedString()), Self.macField: .string(mac)])
    }

    /// The plaintext of a sealed value; throws when it does not open here (tampered, moved
    /// to another field, sealed under another key).
    public func open(_ sealed: JSONValue, zone: String, kind: String, id: String, field: String) throws -> JSONValue {
        guard Self.isSealed(sealed), case .object(let fields) = sealed, case .string(let text)? = fields[Self.sealedField],
              let data = Data(base64Encoded: text), let box = AEAD.SealedBox(combined: data),
              let bytes = try? AEAD.open(box, key: key, associatedData: Self.place(zone: zone, kind: kind, id: id, field: field)) else {
            throw TermindError.badRequest("\(field): a sealed secret that does not open with this device's sync key")
        }
        return try JSONCoding.parse(bytes, source: "the sealed secret \(field)")
    }

    private static func place(zone: String, kind: String, id: String, field: String) -> Data {
        Data("termind-sync-secret\u{0}\(zone)\u{0}\(kind)\u{0}\(id)\u{0}\(field)".utf8)
    }
}
