import CCrypto
import FoundationEssentials
import TermindCore

/// A private key's components in the order and encoding the SSH formats use (unsigned
/// big-endian integers). Short-lived: built to encode or decode a file, then wiped.
enum SSHPrivateComponents {
    case ed25519(seed: [UInt8], publicKey: [UInt8])
    case ecdsa(SSHKeyAlgorithm, point: [UInt8], scalar: [UInt8])
    case rsa(n: [UInt8], e: [UInt8], d: [UInt8], iqmp: [UInt8], p: [UInt8], q: [UInt8])

    /// Zeroes the private components' storage (best effort, see `wipeStorage`).
    mutating func wipe() {
        switch self {
        case .ed25519(let seed, _): wipeStorage(seed)
        case .ecdsa(_, _, let scalar): wipeStorage(scalar)
        case .rsa(_, _, let d, let iqmp, let p, let q): [d, iqmp, p, q].forEach(wipeStorage)
        }
        self = .ed25519(seed: [], publicKey: [])
    }
}

/// The thin layer over OpenSSL's EVP_PKEY: generation, import from components, export
/// to components. Every function returns an owned `EVP_PKEY*` or borrows one; callers
/// free what they own. Failures become `TermindError`s and clear OpenSSL's error queue.
enum EVPKeys {
    static func generate(_ algorithm: SSHKeyAlgorithm, rsaBits: Int) throws -> OpaquePointer {
        let name = switch algorithm {
        case .ed25519: "ED25519"
        case .ecdsaP256, .ecdsaP384, .ecdsaP521: "EC"
        case .rsa: "RSA"
        }
        let ctx = EVP_PKEY_CTX_new_from_name(nil, name, nil)
        defer { EVP_PKEY_CTX_free(ctx) }
        var ok = ctx != nil && EVP_PKEY_keygen_init(ctx) == 1
        if ok, let group = algorithm.openSSLGroup { ok = EVP_PKEY_CTX_set_group_name(ctx, group) == 1 }
        if ok, algorithm == .rsa { ok = EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(rsaBits)) == 1 }
        var key: OpaquePointer?
        guard ok, EVP_PKEY_generate(ctx, &key) == 1, let key else {
            ERR_clear_error()
            throw SSHKeyError.generationFailed("OpenSSL could not generate a \(algorithm.rawValue) key.")
        }
        return key
    }

    /// Builds a key from SSH components and checks that its private and public halves agree.
    static func make(_ components: SSHPrivateComponents) throws -> OpaquePointer {
        switch components {
        case .ed25519(let seed, let publicKey):
            guard seed.count == 32,
                  let key = EVP_PKEY_new_raw_private_key_ex(nil, "ED25519", nil, seed, seed.count) else {
                ERR_clear_error()
                throw SSHKeyError.malformed("The Ed25519 private key is not a 32-byte seed.")
            }
            guard (try? rawPublicKey(key)) == publicKey else {
                EVP_PKEY_free(key)
                throw SSHKeyError.corrupt("The Ed25519 private key does not match its public key: the file is damaged.")
            }
            return key
        case .ecdsa(let algorithm, let point, let scalar):
            let params = OSSLParams()
            params.utf8(OSSL_PKEY_PARAM_GROUP_NAME, algorithm.openSSLGroup ?? "")
            params.octets(OSSL_PKEY_PARAM_PUB_KEY, point)
            params.unsignedInteger(OSSL_PKEY_PARAM_PRIV_KEY, scalar)
            return try fromData("EC", params, algorithm: algorithm)
        case .rsa(let n, let e, let d, let iqmp, let p, let q):
            let params = OSSLParams()
            params.unsignedInteger(OSSL_PKEY_PARAM_RSA_N, n)
            params.unsignedInteger(OSSL_PKEY_PARAM_RSA_E, e)
            params.unsignedInteger(OSSL_PKEY_PARAM_RSA_D, d)
            params.unsignedInteger("rsa-factor1", p)
            params.unsignedInteger("rsa-factor2", q)
            let dmp1 = try crtExponent(d: d, prime: p), dmq1 = try crtExponent(d: d, prime: q)
            defer { [dmp1, dmq1].forEach(wipeStorage) }
            params.unsignedInteger("rsa-exponent1", dmp1)
            params.unsignedInteger("rsa-exponent2", dmq1)
            params.unsignedInteger("rsa-coefficient1", iqmp)
            return try fromData("RSA", params, algorithm: .rsa)
        }
    }

    /// Which supported SSH type an OpenSSL key is; anything else is `key.unsupported`.
    static func algorithm(of key: OpaquePointer) throws -> SSHKeyAlgorithm {
        if EVP_PKEY_is_a(key, "ED25519") == 1 { return .ed25519 }
        if EVP_PKEY_is_a(key, "RSA") == 1 { return .rsa }
        if EVP_PKEY_is_a(key, "EC") == 1 {
            switch try? utf8Param(key, OSSL_PKEY_PARAM_GROUP_NAME) {
            case "prime256v1", "P-256", "secp256r1": return .ecdsaP256
            case "secp384r1", "P-384": return .ecdsaP384
            case "secp521r1", "P-521": return .ecdsaP521
            default: throw SSHKeyError.unsupported("The EC key is on a curve SSH does not use; only NIST P-256, P-384 and P-521 are supported.")
            }
        }
        let type = EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown"
        throw SSHKeyError.unsupported("\(SSHKeyAlgorithm.printable(type)) keys are not supported; termind handles Ed25519, ECDSA and RSA keys.")
    }

    static func components(of key: OpaquePointer, _ algorithm: SSHKeyAlgorithm) throws -> SSHPrivateComponents {
        switch algorithm {
        case .ed25519:
            var seed = [UInt8](repeating: 0, count: 32)
            var length = seed.count
            guard EVP_PKEY_get_raw_private_key(key, &seed, &length) == 1, length == 32 else { throw exportFailed(algorithm) }
            return .ed25519(seed: seed, publicKey: try rawPublicKey(key))
        case .ecdsaP256, .ecdsaP384, .ecdsaP521:
            return .ecdsa(algorithm, point: try ecPoint(key), scalar: try bnParam(key, OSSL_PKEY_PARAM_PRIV_KEY))
        case .rsa:
            return .rsa(n: try bnParam(key, OSSL_PKEY_PARAM_RSA_N), e: try bnParam(key, OSSL_PKEY_PARAM_RSA_E),
                        d: try bnParam(key, OSSL_PKEY_PARAM_RSA_D), iqmp: try bnParam(key, "rsa-coefficient1"),
                        p: try bnParam(key, "rsa-factor1"), q: try bnParam(key, "rsa-factor2"))
        }
    }

    /// The SSH public key blob of an OpenSSL key.
    static func publicBlob(of key: OpaquePointer, _ algorithm: SSHKeyAlgorithm) throws -> [UInt8] {
        var writer = SSHWireWriter()
        writer.string(algorithm.rawValue)
        switch algorithm {
        case .ed25519:
            writer.string(try rawPublicKey(key))
        case .ecdsaP256, .ecdsaP384, .ecdsaP521:
            writer.string(algorithm.curveName ?? "")
            writer.string(try ecPoint(key))
        case .rsa:
            writer.mpint(unsigned: try bnParam(key, OSSL_PKEY_PARAM_RSA_E))
            writer.mpint(unsigned: try bnParam(key, OSSL_PKEY_PARAM_RSA_N))
        }
        return writer.bytes
    }

    // MARK: - Parameters

    private static func rawPublicKey(_ key: OpaquePointer) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 32)
        var length = bytes.count
        guard EVP_PKEY_get_raw_public_key(key, &bytes, &length) == 1, length == 32 else { throw exportFailed(.ed25519) }
        return bytes
    }

    /// Makes EC keys export their public point uncompressed (04 ‖ x ‖ y), as SSH needs,
    /// whatever format they were read in. Changes the key: call before it is shared.
    static func prepareForExport(_ key: OpaquePointer, _ algorithm: SSHKeyAlgorithm) {
        guard algorithm.curveName != nil else { return }
        _ = EVP_PKEY_set_utf8_string_param(key, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, "uncompressed")
        ERR_clear_error()
    }

    private static func ecPoint(_ key: OpaquePointer) throws -> [UInt8] {
        var length = 0
        guard EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, nil, 0, &length) == 1 else {
            throw exportFailed(.ecdsaP256)
        }
        var point = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, &point, point.count, &length) == 1 else {
            throw exportFailed(.ecdsaP256)
        }
        return Array(point.prefix(length))
    }

    private static func utf8Param(_ key: OpaquePointer, _ name: String) throws -> String {
        var buffer = [CChar](repeating: 0, count: 80)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(key, name, &buffer, buffer.count, &length) == 1 else {
            ERR_clear_error()
            throw SSHKeyError.unsupported("The key has no '\(name)' parameter.")
        }
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func bnParam(_ key: OpaquePointer, _ name: String) throws -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, name, &bn) == 1, let bn else {
            ERR_clear_error()
            throw SSHKeyError.unsupported("The key has no '\(name)' component (multi-prime RSA and public-only keys cannot be used here).")
        }
        defer { BN_clear_free(bn) }
        return bytes(of: bn)
    }

    private static func bytes(of bn: OpaquePointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        _ = BN_bn2bin(bn, &out)
        return out
    }

    /// d mod (prime − 1), the CRT exponent OpenSSH files leave out.
    private static func crtExponent(d: [UInt8], prime: [UInt8]) throws -> [UInt8] {
        let bnD = BN_bin2bn(d, Int32(d.count), nil), bnP = BN_bin2bn(prime, Int32(prime.count), nil)
        let result = BN_new(), ctx = BN_CTX_new()
        defer { BN_clear_free(bnD); BN_clear_free(bnP); BN_clear_free(result); BN_CTX_free(ctx) }
        guard let bnD, let bnP, let result, BN_sub_word(bnP, 1) == 1, BN_is_zero(bnP) == 0,
              BN_div(nil, result, bnD, bnP, ctx) == 1 else {
            ERR_clear_error()
            throw SSHKeyError.malformed("The RSA private key has an invalid prime factor.")
        }
        return bytes(of: result)
    }

    private static func fromData(_ type: String, _ params: OSSLParams, algorithm: SSHKeyAlgorithm) throws -> OpaquePointer {
        let ctx = EVP_PKEY_CTX_new_from_name(nil, type, nil)
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        let built = params.withParams { list in
            ctx != nil && EVP_PKEY_fromdata_init(ctx) == 1 && EVP_PKEY_fromdata(ctx, &key, keyPairSelection, list) == 1
        }
        guard built, let key else {
            ERR_clear_error()
            throw SSHKeyError.malformed("OpenSSL rejected the \(algorithm.rawValue) key's components.")
        }
        let check = EVP_PKEY_CTX_new_from_pkey(nil, key, nil)
        defer { EVP_PKEY_CTX_free(check) }
        guard check != nil, EVP_PKEY_pairwise_check(check) == 1 else {
            ERR_clear_error()
            EVP_PKEY_free(key)
            throw SSHKeyError.corrupt("The \(algorithm.rawValue) private key does not match its public key: the file is damaged.")
        }
        return key
    }

    /// EVP_PKEY_KEYPAIR, a compound macro Swift does not import.
    private static let keyPairSelection = OSSL_KEYMGMT_SELECT_PRIVATE_KEY | OSSL_KEYMGMT_SELECT_PUBLIC_KEY
        | OSSL_KEYMGMT_SELECT_DOMAIN_PARAMETERS | OSSL_KEYMGMT_SELECT_OTHER_PARAMETERS

    private static func exportFailed(_ algorithm: SSHKeyAlgorithm) -> TermindError {
        ERR_clear_error()
        return SSHKeyError.unsupported("OpenSSL could not export the \(algorithm.displayName) key's components.")
    }
}

/// An OSSL_PARAM list and the C memory it points into (names and values), which this
/// object owns: values are wiped and everything is freed on deinit. Use the list only
/// inside `withParams`.
final class OSSLParams {
    private var params: [OSSL_PARAM] = []
    private var allocations: [(UnsafeMutableRawPointer, Int)] = []

    deinit {
        for (pointer, count) in allocations {
            secureZero(UnsafeMutableRawBufferPointer(start: pointer, count: count))
            pointer.deallocate()
        }
    }

    func utf8(_ name: String, _ value: String) {
        let bytes = Array(value.utf8) + [0]
        let buffer = copy(bytes)
        params.append(OSSL_PARAM_construct_utf8_string(cName(name), buffer.assumingMemoryBound(to: CChar.self), bytes.count - 1))
    }

    func octets(_ name: String, _ value: [UInt8]) {
        params.append(OSSL_PARAM_construct_octet_string(cName(name), copy(value), value.count))
    }

    /// An unsigned integer from big-endian bytes (OSSL_PARAM wants native byte order).
    func unsignedInteger(_ name: String, _ bigEndian: [UInt8]) {
        let value = bigEndian.isEmpty ? [0] : bigEndian
        #if _endian(little)
        let native = Array(value.reversed())
        #else
        let native = value
        #endif
        params.append(OSSL_PARAM_construct_BN(cName(name), copy(native).assumingMemoryBound(to: UInt8.self), native.count))
    }

    func withParams<R>(_ body: (UnsafeMutablePointer<OSSL_PARAM>) -> R) -> R {
        var list = params + [OSSL_PARAM_construct_end()]
        return list.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
    }

    private func cName(_ name: String) -> UnsafeMutablePointer<CChar> {
        copy(Array(name.utf8) + [0]).assumingMemoryBound(to: CChar.self)
    }

    private func copy(_ bytes: [UInt8]) -> UnsafeMutableRawPointer {
        let pointer = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 8)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress { pointer.copyMemory(from: base, byteCount: source.count) }
        }
        allocations.append((pointer, max(bytes.count, 1)))
        return pointer
    }
}
