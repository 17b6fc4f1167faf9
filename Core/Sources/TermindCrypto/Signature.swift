import CCrypto
import FoundationEssentials
import TermindCore

/// Signatures with a PEM private key, through OpenSSL's EVP interface: what a service
/// account's token request needs (JWT `RS256`). The key is read from memory for the one
/// call and freed; it is never logged or kept.
public enum PEMSignature {
    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message` with the PKCS#8 or traditional PEM
    /// RSA private key in `key`. Throws `key.malformed` for a key OpenSSL cannot read, `key.unsupported` for one that
    /// is not RSA.
    public static func rs256(_ message: Data, key: Secret) throws -> Data {
        let pkey = try key.withPlaintext { pem -> OpaquePointer in
            let bio = pem.withCString { BIO_new_mem_buf($0, Int32(strlen($0))) }
            defer { BIO_free(bio) }
            guard let bio, let pkey = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else {
                ERR_clear_error()
                throw TermindError(.keyMalformed, "The private key is not a PEM private key OpenSSL can read.")
            }
            return pkey
        }
        defer { EVP_PKEY_free(pkey) }
        guard EVP_PKEY_is_a(pkey, "RSA") == 1 else { throw TermindError(.keyUnsupported, "The private key is not an RSA key (RS256 needs one).") }
        let context = EVP_MD_CTX_new()
        defer { EVP_MD_CTX_free(context) }
        var length = 0
        var signature = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(pkey)))
        let ok = message.withUnsafeBytes { bytes in
            EVP_DigestSignInit_ex(context, nil, "SHA256", nil, nil, pkey, nil) == 1
                && EVP_DigestSignUpdate(context, bytes.baseAddress, bytes.count) == 1
                && EVP_DigestSignFinal(context, nil, &length) == 1 && length <= signature.count
                && EVP_DigestSignFinal(context, &signature, &length) == 1
        }
        guard ok else {
            ERR_clear_error()
            throw TermindError(.keyMalformed, "OpenSSL could not sign with the private key.")
        }
        return Data(signature.prefix(length))
    }
}
