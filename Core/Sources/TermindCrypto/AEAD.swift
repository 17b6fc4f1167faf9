import CCrypto
import Foundation

/// AES-256-GCM, the one authenticated cipher termind uses (secret store, key wrapping).
/// A fresh 96-bit random nonce per message; the 128-bit tag authenticates ciphertext and
/// associated data, so any change to either fails `open` instead of yielding garbage.
public enum AEAD {
    public static let keyLength = 32
    public static let nonceLength = 12
    public static let tagLength = 16

    public struct SealedBox: Sendable, Equatable {
        public let nonce: Data
        public let ciphertext: Data
        public let tag: Data

        public init(nonce: Data, ciphertext: Data, tag: Data) {
            self.nonce = nonce
            self.ciphertext = ciphertext
            self.tag = tag
        }

        /// nonce ‖ ciphertext ‖ tag.
        public var combined: Data { nonce + ciphertext + tag }

        public init?(combined: Data) {
            guard combined.count >= AEAD.nonceLength + AEAD.tagLength else { return nil }
            let bytes = Data(combined)
            nonce = bytes.prefix(AEAD.nonceLength)
            tag = bytes.suffix(AEAD.tagLength)
            ciphertext = bytes.dropFirst(AEAD.nonceLength).dropLast(AEAD.tagLength)
        }
    }

    public struct AuthenticationFailure: Error, Sendable {}

    public static func seal(_ plaintext: Data, key: SymmetricKey, associatedData: Data = Data()) -> SealedBox {
        let nonce = SecureRandom.bytes(nonceLength)
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var tag = [UInt8](repeating: 0, count: tagLength)
        let ctx = EVP_CIPHER_CTX_new()
        defer { EVP_CIPHER_CTX_free(ctx) }
        let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
        defer { EVP_CIPHER_free(cipher) }
        var total: Int32 = 0
        let ok: Bool = key.withBytes { k in
            nonce.withUnsafeBytes { n in
                guard EVP_EncryptInit_ex2(ctx, cipher, nil, nil, nil) == 1,
                      EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_set_ivlen(), Int32(nonceLength), nil) == 1,
                      EVP_EncryptInit_ex2(ctx, nil, k, n.bindMemory(to: UInt8.self).baseAddress, nil) == 1 else { return false }
                var length: Int32 = 0
                if !associatedData.isEmpty {
                    let okAAD = associatedData.withUnsafeBytes { a in
                        EVP_EncryptUpdate(ctx, nil, &length, a.bindMemory(to: UInt8.self).baseAddress, Int32(a.count)) == 1
                    }
                    guard okAAD else { return false }
                }
                if !plaintext.isEmpty {
                    let okData = plaintext.withUnsafeBytes { p in
                        EVP_EncryptUpdate(ctx, &output, &length, p.bindMemory(to: UInt8.self).baseAddress, Int32(p.count)) == 1
                    }
                    guard okData else { return false }
                    total = length
                }
                let okFinal = output.withUnsafeMutableBufferPointer { o in
                    EVP_EncryptFinal_ex(ctx, o.baseAddress! + Int(total), &length) == 1
                }
                guard okFinal else { return false }
                total += length
                return EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_get_tag(), Int32(tagLength), &tag) == 1
            }
        }
        precondition(ok, "OpenSSL AES-256-GCM encryption failed")
        return SealedBox(nonce: nonce, ciphertext: Data(output.prefix(Int(total))), tag: Data(tag))
    }

    /// Decrypts and authenticates; throws `AuthenticationFailure` on any mismatch.
    public static func open(_ box: SealedBox, key: SymmetricKey, associatedData: Data = Data()) throws -> Data {
        guard box.nonce.count == nonceLength, box.tag.count == tagLength else { throw AuthenticationFailure() }
        var output = [UInt8](repeating: 0, count: box.ciphertext.count + 16)
        var tag = [UInt8](box.tag)
        let ctx = EVP_CIPHER_CTX_new()
        defer { EVP_CIPHER_CTX_free(ctx) }
        let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
        defer { EVP_CIPHER_free(cipher) }
        var total: Int32 = 0
        let ok: Bool = key.withBytes { k in
            box.nonce.withUnsafeBytes { n in
                guard EVP_DecryptInit_ex2(ctx, cipher, nil, nil, nil) == 1,
                      EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_set_ivlen(), Int32(nonceLength), nil) == 1,
                      EVP_DecryptInit_ex2(ctx, nil, k, n.bindMemory(to: UInt8.self).baseAddress, nil) == 1 else { return false }
                var length: Int32 = 0
                if !associatedData.isEmpty {
                    let okAAD = associatedData.withUnsafeBytes { a in
                        EVP_DecryptUpdate(ctx, nil, &length, a.bindMemory(to: UInt8.self).baseAddress, Int32(a.count)) == 1
                    }
                    guard okAAD else { return false }
                }
                if !box.ciphertext.isEmpty {
                    let okData = box.ciphertext.withUnsafeBytes { c in
                        EVP_DecryptUpdate(ctx, &output, &length, c.bindMemory(to: UInt8.self).baseAddress, Int32(c.count)) == 1
                    }
                    guard okData else { return false }
                    total = length
                }
                guard EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_set_tag(), Int32(tagLength), &tag) == 1 else { return false }
                return output.withUnsafeMutableBufferPointer { o in
                    EVP_DecryptFinal_ex(ctx, o.baseAddress! + Int(total), &length) == 1
                }
            }
        }
        guard ok else {
            output.withUnsafeMutableBytes { secureZero($0) }
            throw AuthenticationFailure()
        }
        return Data(output.prefix(Int(total)))
    }
}

/// Key material that is wiped when released. Never printed.
public final class SymmetricKey: @unchecked Sendable, CustomStringConvertible {
    private var bytes: [UInt8]

    public init(bytes: Data) {
        precondition(bytes.count == AEAD.keyLength, "AES-256 keys are 32 bytes")
        self.bytes = [UInt8](bytes)
    }

    public static func random() -> SymmetricKey { SymmetricKey(bytes: SecureRandom.bytes(AEAD.keyLength)) }

    deinit { bytes.withUnsafeMutableBytes { secureZero($0) } }

    public func withBytes<R>(_ body: (UnsafePointer<UInt8>) throws -> R) rethrows -> R {
        try bytes.withUnsafeBufferPointer { try body($0.baseAddress!) }
    }

    /// The raw key, for wrapping it under another key.
    public var data: Data { Data(bytes) }

    public var description: String { "<key redacted>" }
}

/// Zeroes memory in a way the optimizer does not remove.
func secureZero(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    OPENSSL_cleanse(base, buffer.count)
}
