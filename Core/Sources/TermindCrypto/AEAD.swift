import CCrypto
import FoundationEssentials

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
        let sealed = key.withBytes { k in
            nonce.withUnsafeBytes { n in
                EVPCipher.run("AES-256-GCM", key: k, iv: n.bindMemory(to: UInt8.self).baseAddress!, input: plaintext, aad: associatedData,
                              encrypting: true, tagLength: tagLength)
            }
        }
        guard let sealed else { preconditionFailure("OpenSSL AES-256-GCM encryption failed") }
        return SealedBox(nonce: nonce, ciphertext: Data(sealed.output), tag: Data(sealed.tag))
    }

    /// Decrypts and authenticates; throws `AuthenticationFailure` on any mismatch.
    public static func open(_ box: SealedBox, key: SymmetricKey, associatedData: Data = Data()) throws -> Data {
        guard box.nonce.count == nonceLength, box.tag.count == tagLength else { throw AuthenticationFailure() }
        let opened = key.withBytes { k in
            box.nonce.withUnsafeBytes { n in
                EVPCipher.run("AES-256-GCM", key: k, iv: n.bindMemory(to: UInt8.self).baseAddress!, input: box.ciphertext, aad: associatedData,
                              encrypting: false, tagLength: tagLength, tag: [UInt8](box.tag))
            }
        }
        guard let opened else { throw AuthenticationFailure() }
        return Data(opened.output)
    }
}

/// Key material that is wiped when released. Never printed.
///
/// `@unchecked Sendable`: `bytes` is written only in init and wiped in deinit, when nothing else
/// holds the key; in between it is only read.
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
