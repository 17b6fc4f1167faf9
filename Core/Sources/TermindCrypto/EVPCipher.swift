import CCrypto
import FoundationEssentials

/// The one OpenSSL symmetric cipher routine: AES-GCM for the secret store (AEAD) and the
/// ciphers of openssh-key-v1 private keys (OpenSSHKeyCipher) both run through it.
enum EVPCipher {
    /// One pass of the OpenSSL cipher `name` ("AES-256-GCM", "AES-128-CTR", …) with `key` and
    /// `iv` of its sizes (GCM's IV is its default 12 bytes). For an AEAD cipher (`tagLength`
    /// > 0) `aad` is authenticated too; decryption checks `tag`, encryption returns one.
    /// nil on any failure, a tag that does not authenticate included; the output is wiped then.
    static func run(_ name: String, key: UnsafePointer<UInt8>, iv: UnsafePointer<UInt8>, input: some ContiguousBytes, aad: Data = Data(),
                    encrypting: Bool, tagLength: Int = 0, tag: [UInt8]? = nil) -> (output: [UInt8], tag: [UInt8])? {
        guard let cipher = EVP_CIPHER_fetch(nil, name, nil) else { return nil }
        defer { EVP_CIPHER_free(cipher) }
        guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let count = input.withUnsafeBytes { $0.count }
        var output = [UInt8](repeating: 0, count: count + 32)
        var tagOut = [UInt8](repeating: 0, count: tagLength)
        var inputTag = tag ?? []
        var total: Int32 = 0
        let ok: Bool = {
            guard EVP_CipherInit_ex2(ctx, cipher, key, iv, encrypting ? 1 : 0, nil) == 1 else { return false }
            var length: Int32 = 0
            if tagLength > 0, !aad.isEmpty {
                let added = aad.withUnsafeBytes { a in
                    EVP_CipherUpdate(ctx, nil, &length, a.bindMemory(to: UInt8.self).baseAddress, Int32(a.count)) == 1
                }
                guard added else { return false }
            }
            if count > 0 {
                let updated = input.withUnsafeBytes { i in
                    EVP_CipherUpdate(ctx, &output, &length, i.bindMemory(to: UInt8.self).baseAddress, Int32(count)) == 1
                }
                guard updated else { return false }
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
        }()
        guard ok else {
            ERR_clear_error()
            output.withUnsafeMutableBytes { secureZero($0) }
            return nil
        }
        let result = Array(output.prefix(Int(total)))
        output.withUnsafeMutableBytes { secureZero($0) }
        return (result, tagOut)
    }
}
