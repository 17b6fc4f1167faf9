import CCrypto
import Foundation
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
        let cipher = EVP_CIPHER_fetch(nil, openSSLName, nil)
        defer { EVP_CIPHER_free(cipher) }
        let ctx = EVP_CIPHER_CTX_new()
        defer { EVP_CIPHER_CTX_free(ctx) }
        var output = [UInt8](repeating: 0, count: input.count + 32)
        var tagOut = [UInt8](repeating: 0, count: tagLength)
        var inputTag = tag ?? []
        var total: Int32 = 0
        let ok: Bool = keyAndIV.withUnsafeBufferPointer { material in
            let key = material.baseAddress!, iv = key + keyLength
            guard cipher != nil, ctx != nil,
                  EVP_CipherInit_ex2(ctx, cipher, key, iv, encrypting ? 1 : 0, nil) == 1 else { return false }
            var length: Int32 = 0
            if !input.isEmpty {
                guard EVP_CipherUpdate(ctx, &output, &length, input, Int32(input.count)) == 1 else { return false }
                total = length
            }
            if tagLength > 0, !encrypting {
                guard inputTag.count == tagLength,
                      EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_set_tag(), Int32(tagLength), &inputTag) == 1 else { return false }
            }
            let finished = output.withUnsafeMutableBufferPointer { buffer in
                EVP_CipherFinal_ex(ctx, buffer.baseAddress! + Int(total), &length) == 1
            }
            guard finished else { return false }
            total += length
            if tagLength > 0, encrypting {
                return EVP_CIPHER_CTX_ctrl(ctx, termind_evp_ctrl_gcm_get_tag(), Int32(tagLength), &tagOut) == 1
            }
            return true
        }
        guard ok else {
            ERR_clear_error()
            output.withUnsafeMutableBytes { secureZero($0) }
            return nil
        }
        return (Array(output.prefix(Int(total))), tagOut)
    }
}
