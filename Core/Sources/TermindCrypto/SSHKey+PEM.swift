import CCrypto
import FoundationEssentials
import TermindCore

/// PEM private keys, decoded by OpenSSL's PEM_read_bio_PrivateKey: PKCS#1 RSA
/// ("RSA PRIVATE KEY"), SEC1 EC ("EC PRIVATE KEY"), PKCS#8 ("PRIVATE KEY") and encrypted
/// PKCS#8 ("ENCRYPTED PRIVATE KEY"), plus legacy PEM encryption (Proc-Type/DEK-Info).
/// The passphrase reaches OpenSSL through a callback, never a terminal prompt.
enum PEMKeyFile {
    static func decode(_ text: String, encrypted: Bool, passphrase: Secret?) throws -> SSHPrivateKey {
        if encrypted, passphrase?.isEmpty ?? true { throw SSHKeyError.passphraseRequired() }
        // NUL-terminated; handed to the callback only when the file is encrypted.
        var password: [CChar] = encrypted ? (passphrase?.withPlaintext { Array($0.utf8CString) } ?? [0]) : [0]
        defer { password.withUnsafeMutableBytes { secureZero($0) } }
        var bytes = Array(text.utf8)
        defer { bytes.withUnsafeMutableBytes { secureZero($0) } }
        let key: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return password.withUnsafeMutableBufferPointer { pass in
                PEM_read_bio_PrivateKey(bio, nil, { buffer, size, _, user in
                    // Copies the passphrase given as `user`; no passphrase means "none", never a prompt.
                    guard let buffer, let user, size > 0 else { return 0 }
                    let source = user.assumingMemoryBound(to: CChar.self)
                    let length = min(strlen(source), Int(size))
                    memcpy(buffer, source, length)
                    return Int32(length)
                }, encrypted ? UnsafeMutableRawPointer(pass.baseAddress) : nil)
            }
        }
        guard let key else {
            ERR_clear_error()
            if encrypted { throw SSHKeyError.wrongPassphrase() }
            throw SSHKeyError.malformed("OpenSSL could not decode the PEM private key: it is damaged or of an unknown kind.")
        }
        return try SSHPrivateKey(taking: key, comment: "")
    }
}
