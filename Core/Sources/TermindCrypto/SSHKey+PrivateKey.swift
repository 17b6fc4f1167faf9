import CCrypto
import FoundationEssentials
import Synchronization
import TermindCore

/// An SSH private key, owning its OpenSSL `EVP_PKEY` (freed on deinit; the pointer never
/// leaves this module). Immutable apart from `comment`, so it can be shared across tasks.
/// It never prints its key material: `description` shows only type and fingerprint.
/// Files are written by `openSSHPrivateKeyText` and read by `parse` (openssh-key-v1, PEM).
///
/// `@unchecked Sendable`: `key`, an OpaquePointer Swift cannot check, is only read after
/// init (OpenSSL allows concurrent reads of one EVP_PKEY); `comment` is under a Mutex.
public final class SSHPrivateKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// Owned; only read after init, which is what makes sharing it across threads safe.
    let key: OpaquePointer
    public let algorithm: SSHKeyAlgorithm
    public let publicKey: SSHPublicKey
    private let storedComment: Mutex<String>

    /// Free text stored beside the key in OpenSSH files (often user@host).
    public var comment: String {
        get { storedComment.withLock { $0 } }
        set { storedComment.withLock { $0 = newValue } }
    }

    /// Takes ownership of `key` (freeing it if the key turns out unusable).
    init(taking key: OpaquePointer, comment: String) throws {
        do {
            let algorithm = try EVPKeys.algorithm(of: key)
            EVPKeys.prepareForExport(key, algorithm)
            var components = try EVPKeys.components(of: key, algorithm)
            components.wipe()
            self.publicKey = try SSHPublicKey(blob: EVPKeys.publicBlob(of: key, algorithm))
            self.algorithm = algorithm
        } catch {
            EVP_PKEY_free(key)
            throw error
        }
        self.key = key
        self.storedComment = Mutex(comment)
    }

    deinit { EVP_PKEY_free(key) }

    /// A new random key. ECDSA keys use the named curve; RSA keys have e = 65537 and
    /// `rsaBits` (2048...16384, a multiple of 8) bits.
    public static func generate(_ algorithm: SSHKeyAlgorithm, rsaBits: Int = 4096, comment: String = "") throws -> SSHPrivateKey {
        if algorithm == .rsa, !(2048...16384).contains(rsaBits) || rsaBits % 8 != 0 {
            throw SSHKeyError.generationFailed("RSA keys must have 2048 to 16384 bits, a multiple of 8 (asked for \(rsaBits)).")
        }
        return try SSHPrivateKey(taking: EVPKeys.generate(algorithm, rsaBits: rsaBits), comment: comment)
    }

    /// Runs `body` with the key's SSH components, wiping the private ones afterwards.
    func withComponents<R>(_ body: (SSHPrivateComponents) throws -> R) throws -> R {
        var components = try EVPKeys.components(of: key, algorithm)
        defer { components.wipe() }
        return try body(components)
    }

    public var description: String { "SSHPrivateKey(\(publicKey.description))" }
    public var debugDescription: String { description }
}

extension SSHPrivateKey {
    /// Parses a private key file: openssh-key-v1 (unencrypted, or encrypted with the bcrypt
    /// KDF and aes256-ctr, aes128-ctr or aes256-gcm@openssh.com) and PEM (PKCS#1 RSA,
    /// SEC1 EC, PKCS#8, each possibly encrypted). An encrypted file without a passphrase is
    /// `key.passphrase_required`; with one that does not decrypt it, `key.wrong_passphrase`.
    public static func parse(_ text: Secret, passphrase: Secret?) throws -> SSHPrivateKey {
        let armoured = try text.withPlaintext { try KeyArmour(parsing: $0) }
        defer { wipeStorage(armoured.body) }
        switch armoured.kind {
        case .openSSH:
            return try OpenSSHKeyFile.decode(armoured.body, passphrase: passphrase)
        case .pem(let encrypted):
            return try text.withPlaintext { try PEMKeyFile.decode($0, encrypted: encrypted, passphrase: passphrase) }
        }
    }

    /// Whether a key file needs a passphrase, and its public key when that is readable
    /// without one: always for openssh-key-v1 (it stores the public key in clear), for PEM
    /// only when the file is not encrypted. Throws the same format errors as `parse`.
    public static func inspect(_ text: Secret) throws -> (encrypted: Bool, publicKey: SSHPublicKey?) {
        let armoured = try text.withPlaintext { try KeyArmour(parsing: $0) }
        switch armoured.kind {
        case .openSSH:
            let header = try OpenSSHKeyFile.Header(armoured.body)
            return (header.cipher.isEncrypting, header.publicKey)
        case .pem(let encrypted):
            if encrypted { return (true, nil) }
            return (false, try parse(text, passphrase: nil).publicKey)
        }
    }
}
