import CCrypto
import FoundationEssentials

/// Hashes and MACs through OpenSSL's EVP interface. One-shot, allocation-bounded, never
/// logs. These are the only digest implementations in termind.
public enum Digest {
    public enum Algorithm: String, Sendable {
        case sha1 = "SHA1", sha256 = "SHA256", sha384 = "SHA384", sha512 = "SHA512"
    }

    public static func hash(_ algorithm: Algorithm, _ data: some DataProtocol) -> Data {
        let input = Data(data)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let md = EVP_MD_fetch(nil, algorithm.rawValue, nil)
        defer { EVP_MD_free(md) }
        let ok = input.withUnsafeBytes { raw in
            EVP_Digest(raw.baseAddress, raw.count, &output, &length, md, nil)
        }
        precondition(ok == 1, "OpenSSL digest \(algorithm.rawValue) failed")
        return Data(output.prefix(Int(length)))
    }

    public static func sha1(_ data: some DataProtocol) -> Data { hash(.sha1, data) }
    public static func sha256(_ data: some DataProtocol) -> Data { hash(.sha256, data) }

    /// A key blob's fingerprint exactly as `ssh-keygen -l -E sha256` prints it: "SHA256:" and
    /// the unpadded base64 of SHA-256 over the blob.
    public static func sshFingerprint(ofBlob blob: some DataProtocol) -> String {
        var encoded = sha256(blob).base64EncodedString()
        while encoded.hasSuffix("=") { encoded.removeLast() }
        return "SHA256:" + encoded
    }
    public static func sha512(_ data: some DataProtocol) -> Data { hash(.sha512, data) }

    /// HMAC with the given hash (e.g. HMAC-SHA1 for OpenSSH's hashed known_hosts names).
    public static func hmac(_ algorithm: Algorithm, key: some DataProtocol, data: some DataProtocol) -> Data {
        let k = Data(key), d = Data(data)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length = 0
        let result = k.withUnsafeBytes { kr in
            d.withUnsafeBytes { dr in
                EVP_Q_mac(nil, "HMAC", nil, algorithm.rawValue, nil,
                          kr.baseAddress ?? UnsafeRawPointer(bitPattern: 1), kr.count,
                          dr.baseAddress?.assumingMemoryBound(to: UInt8.self), dr.count,
                          &output, output.count, &length)
            }
        }
        precondition(result != nil, "OpenSSL HMAC-\(algorithm.rawValue) failed")
        return Data(output.prefix(length))
    }
}

/// A digest computed over data that arrives in pieces (a transfer, a stream), so that it
/// never has to be held whole.
public final class IncrementalDigest {
    private let context: OpaquePointer
    private var finished = false

    public init(_ algorithm: Digest.Algorithm) {
        let md = EVP_MD_fetch(nil, algorithm.rawValue, nil)
        defer { EVP_MD_free(md) }
        guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, md, nil) == 1 else {
            preconditionFailure("OpenSSL digest \(algorithm.rawValue) could not start")
        }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ data: some DataProtocol) {
        precondition(!finished, "IncrementalDigest.update after finish")
        for region in data.regions {
            region.withUnsafeBytes { raw in
                precondition(EVP_DigestUpdate(context, raw.baseAddress, raw.count) == 1, "OpenSSL digest update failed")
            }
        }
    }

    /// The digest of everything passed to `update`; the object is spent afterwards.
    public func finish() -> Data {
        precondition(!finished, "IncrementalDigest.finish twice")
        finished = true
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        precondition(EVP_DigestFinal_ex(context, &output, &length) == 1, "OpenSSL digest final failed")
        return Data(output.prefix(Int(length)))
    }
}

extension Data {
    /// Lowercase hexadecimal, two digits a byte (digests, ids, checksums).
    public var hexEncoded: String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(count * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// Cryptographically secure random bytes (OpenSSL's DRBG, seeded by the kernel).
public enum SecureRandom {
    public static func bytes(_ count: Int) -> Data {
        var buffer = [UInt8](repeating: 0, count: count)
        precondition(RAND_bytes(&buffer, Int32(count)) == 1, "OpenSSL RAND_bytes failed")
        return Data(buffer)
    }
}

/// The OpenSSL version in use, for `termind version`.
public enum CryptoLibrary {
    public static var version: String { String(cString: termind_openssl_version()) }
}
