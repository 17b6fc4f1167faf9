import CCrypto
import FoundationEssentials
import TermindCore

/// The ciphers an openssh-key-v1 file may name for its private section, with the key,
/// IV and tag sizes OpenSSH uses (key and IV both come from one bcrypt_pbkdf output).
/// GCM's tag follows the encrypted section and authenticates it without associated data.
struct OpenSSHKeyCipher: Sendable, Equatable {
    let name: String
    let openSSLName: String?
    let keyLength: Int
    let ivLength: Int
    let tagLength: Int
    let blockSize: Int

    static let none = OpenSSHKeyCipher(name: "none", openSSLName: nil, keyLength: 0, ivLength: 0, tagLength: 0, blockSize: 8)
    static let aes256CTR = OpenSSHKeyCipher(name: "aes256-ctr", openSSLName: "AES-256-CTR", keyLength: 32, ivLength: 16, tagLength: 0, blockSize: 16)
    static let aes128CTR = OpenSSHKeyCipher(name: "aes128-ctr", openSSLName: "AES-128-CTR", keyLength: 16, ivLength: 16, tagLength: 0, blockSize: 16)
    static let aes256GCM = OpenSSHKeyCipher(name: "aes256-gcm@openssh.com", openSSLName: "AES-256-GCM", keyLength: 32, ivLength: 12, tagLength: 16, blockSize: 16)

    var isEncrypting: Bool { openSSLName != nil }

    static func named(_ name: String) throws -> OpenSSHKeyCipher {
        guard let cipher = [none, aes256CTR, aes128CTR, aes256GCM].first(where: { $0.name == name }) else {
            throw SSHKeyError.unsupported("The private key is encrypted with '\(SSHKeyAlgorithm.printable(name))'; termind reads aes256-ctr, aes128-ctr and aes256-gcm@openssh.com.")
        }
        return cipher
    }

    /// Encrypts `input` (a whole number of blocks) and returns ciphertext ‖ tag.
    func encrypt(_ input: [UInt8], keyAndIV: [UInt8]) throws -> [UInt8] {
        guard let (output, tag) = run(input, keyAndIV: keyAndIV, encrypting: true, tag: nil) else {
            throw SSHKeyError.generationFailed("OpenSSL could not encrypt the private key with \(name).")
        }
        return output + tag
    }

    /// Decrypts; nil when GCM's tag does not authenticate (a wrong passphrase or damage).
    func decrypt(_ input: [UInt8], tag: [UInt8], keyAndIV: [UInt8]) -> [UInt8]? {
        run(input, keyAndIV: keyAndIV, encrypting: false, tag: tag)?.output
    }

    private func run(_ input: [UInt8], keyAndIV: [UInt8], encrypting: Bool, tag: [UInt8]?) -> (output: [UInt8], tag: [UInt8])? {
        guard let openSSLName, keyAndIV.count == keyLength + ivLength else { return nil }
        return keyAndIV.withUnsafeBufferPointer { material in
            EVPCipher.run(openSSLName, key: material.baseAddress!, iv: material.baseAddress! + keyLength, input: input,
                          encrypting: encrypting, tagLength: tagLength, tag: tag)
        }
    }
}
