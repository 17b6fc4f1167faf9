import CCrypto
import FoundationEssentials
import TermindCore

/// scrypt (RFC 7914) through OpenSSL, for keys derived from passphrases.
///
/// The default cost is N = 2^15, r = 8, p = 1: 32 MiB of memory and about 0.1 s per
/// derivation here, stored beside the salt so it can be raised later without breaking
/// existing stores.
public enum KeyDerivation {
    public struct ScryptParameters: Sendable, Codable, Equatable {
        public var logN: Int
        public var r: Int
        public var p: Int
        public init(logN: Int, r: Int, p: Int) {
            self.logN = logN
            self.r = r
            self.p = p
        }
        public static let standard = ScryptParameters(logN: 15, r: 8, p: 1)
        /// Memory the derivation needs: 128 · r · N bytes.
        public var memoryBytes: Int { 128 * r * (1 << logN) }
    }

    public struct DerivationFailed: Error, Sendable {}

    public static func scrypt(passphrase: Secret, salt: Data, parameters: ScryptParameters = .standard) throws -> SymmetricKey {
        BlockingCheck.blocking("scrypt")
        guard (10...22).contains(parameters.logN), (1...32).contains(parameters.r), (1...16).contains(parameters.p) else {
            throw DerivationFailed()
        }
        var output = [UInt8](repeating: 0, count: AEAD.keyLength)
        defer { output.withUnsafeMutableBytes { secureZero($0) } }
        let ok = passphrase.withPlaintext { text -> Bool in
            var bytes = Array(text.utf8)
            defer { bytes.withUnsafeMutableBytes { secureZero($0) } }
            return bytes.withUnsafeBufferPointer { pw in
                salt.withUnsafeBytes { s in
                    pw.withMemoryRebound(to: CChar.self) { pwc in
                        EVP_PBE_scrypt(pwc.baseAddress, pwc.count, s.bindMemory(to: UInt8.self).baseAddress, s.count,
                                       UInt64(1) << UInt64(parameters.logN), UInt64(parameters.r), UInt64(parameters.p),
                                       UInt64(parameters.memoryBytes + (1 << 20)), &output, output.count) == 1
                    }
                }
            }
        }
        guard ok else { throw DerivationFailed() }
        return SymmetricKey(bytes: Data(output))
    }
}

