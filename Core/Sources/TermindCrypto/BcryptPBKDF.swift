import CCrypto
import FoundationEssentials
import TermindCore

/// Blowfish's initial state: the first 1042 32-bit words of the hexadecimal fraction of
/// pi (the 18-word P-array, then the four 256-word S-boxes). Computed once, on first use,
/// with Machin's formula on OpenSSL big numbers rather than pasted in as tables.
public enum BlowfishTables {
    public static let pWords = 18
    public static let sBoxWords = 256

    /// P[0...17] followed by S[0][0...255] ... S[3][0...255].
    public static let initialState: [UInt32] = piFractionWords(pWords + 4 * sBoxWords)

    public static func p(_ index: Int) -> UInt32 { initialState[index] }
    public static func s(_ box: Int, _ index: Int) -> UInt32 { initialState[pWords + box * sBoxWords + index] }

    /// The first `count` 32-bit words of pi's fractional part, big-endian digit order.
    /// pi = 16·atan(1/5) − 4·atan(1/239), each series summed in fixed point with 64 guard
    /// bits, far more than the accumulated truncation error of the ~10⁴ terms.
    static func piFractionWords(_ count: Int) -> [UInt32] {
        let fractionBits = count * 32
        let scaleBits = Int32(fractionBits + 64)
        guard let sum = BN_new(), let part = BN_new() else { preconditionFailure("OpenSSL BN_new failed") }
        defer { BN_free(sum); BN_free(part) }
        arctanInverse(5, scaleBits: scaleBits, into: sum)
        precondition(BN_lshift(sum, sum, 4) == 1)                     // 16·atan(1/5)
        arctanInverse(239, scaleBits: scaleBits, into: part)
        precondition(BN_lshift(part, part, 2) == 1)                   // 4·atan(1/239)
        precondition(BN_sub(sum, sum, part) == 1)
        precondition(BN_rshift(sum, sum, 64) == 1)                    // drop the guard bits
        precondition(BN_set_word(part, 3) == 1 && BN_lshift(part, part, Int32(fractionBits)) == 1)
        precondition(BN_sub(sum, sum, part) == 1)                     // drop the integer part 3
        var bytes = [UInt8](repeating: 0, count: count * 4)
        precondition(BN_bn2binpad(sum, &bytes, Int32(bytes.count)) == Int32(bytes.count))
        return (0..<count).map { i in
            bytes[4 * i ..< 4 * i + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
    }

    /// atan(1/x) · 2^scaleBits = Σ (−1)^k / ((2k+1)·x^(2k+1)), truncated term by term.
    private static func arctanInverse(_ x: UInt, scaleBits: Int32, into result: OpaquePointer) {
        guard let power = BN_new(), let term = BN_new() else { preconditionFailure("OpenSSL BN_new failed") }
        defer { BN_free(power); BN_free(term) }
        precondition(BN_set_word(power, 1) == 1 && BN_lshift(power, power, scaleBits) == 1)
        _ = BN_div_word(power, UInt(x))
        precondition(BN_copy(result, power) != nil)
        var k: UInt = 1
        while BN_is_zero(power) == 0 {
            _ = BN_div_word(power, UInt(x * x))
            precondition(BN_copy(term, power) != nil)
            _ = BN_div_word(term, UInt(2 * k + 1))
            precondition((k % 2 == 1 ? BN_sub(result, result, term) : BN_add(result, result, term)) == 1)
            k += 1
        }
    }
}

/// OpenBSD's bcrypt_pbkdf: the passphrase KDF of encrypted openssh-key-v1 files.
/// PBKDF2-like over SHA-512 and an expensive Blowfish key schedule; output bytes are
/// interleaved across blocks as OpenBSD does. `rounds` is the cost stored in the file.
public enum BcryptPBKDF {
    private static let blockSize = 32

    /// Derives `length` (1...1024) bytes. Password and salt must not be empty.
    public static func deriveKey(password: some DataProtocol, salt: some DataProtocol, rounds: Int, length: Int) throws -> Data {
        let password = [UInt8](password)
        defer { wipeStorage(password) }
        let key = try derive(password: password, salt: [UInt8](salt), rounds: rounds, length: length)
        defer { wipeStorage(key) }
        return Data(key)
    }

    /// `deriveKey` for callers that wipe the result themselves.
    static func derive(password: [UInt8], salt: [UInt8], rounds: Int, length: Int) throws -> [UInt8] {
        BlockingCheck.blocking("bcrypt_pbkdf")
        guard rounds >= 1, !password.isEmpty, !salt.isEmpty, (1...blockSize * blockSize).contains(length) else {
            throw SSHKeyError.unsupported("bcrypt_pbkdf needs a non-empty passphrase and salt, at least one round and 1 to 1024 output bytes.")
        }
        let stride = (length + blockSize - 1) / blockSize
        let amount = (length + stride - 1) / stride
        let shaPass = [UInt8](Digest.sha512(password))
        var key = [UInt8](repeating: 0, count: length)
        var out = [UInt8](repeating: 0, count: blockSize)
        var produced = 0
        defer { [shaPass, out].forEach(wipeStorage) }
        var count: UInt32 = 1
        while produced < length {
            let countSalt = [UInt8(count >> 24), UInt8(truncatingIfNeeded: count >> 16),
                             UInt8(truncatingIfNeeded: count >> 8), UInt8(truncatingIfNeeded: count)]
            var block = bcryptHash(pass: shaPass, salt: [UInt8](Digest.sha512(salt + countSalt)))
            out = block
            for _ in 1..<rounds {
                block = bcryptHash(pass: shaPass, salt: [UInt8](Digest.sha512(block)))
                for j in 0..<blockSize { out[j] ^= block[j] }
            }
            var written = 0
            for i in 0..<min(amount, length - produced) {
                let destination = i * stride + Int(count - 1)
                if destination >= length { break }
                key[destination] = out[i]
                written += 1
            }
            wipeStorage(block)   // may share storage with `out`: only after `out` is used
            produced += written
            count += 1
        }
        return key
    }

    /// One bcrypt block: an expensive key schedule over (salt, pass), then 64 encryptions
    /// of the constant "OxychromaticBlowfishSwatDynamite"; words are output little-endian.
    static func bcryptHash(pass: [UInt8], salt: [UInt8]) -> [UInt8] {
        let state = BlowfishState()
        pass.withUnsafeBufferPointer { p in
            salt.withUnsafeBufferPointer { s in
                state.expand(data: s, key: p)
                for _ in 0..<64 {
                    state.expand(data: nil, key: s)
                    state.expand(data: nil, key: p)
                }
            }
        }
        let magic = Array("OxychromaticBlowfishSwatDynamite".utf8)
        var words = (0..<8).map { i in magic[4 * i ..< 4 * i + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
        for _ in 0..<64 {
            for b in 0..<4 {
                var (l, r) = (words[2 * b], words[2 * b + 1])
                state.encipher(&l, &r)
                (words[2 * b], words[2 * b + 1]) = (l, r)
            }
        }
        return words.flatMap { w in
            [UInt8(truncatingIfNeeded: w), UInt8(truncatingIfNeeded: w >> 8),
             UInt8(truncatingIfNeeded: w >> 16), UInt8(truncatingIfNeeded: w >> 24)]
        }
    }
}

/// A Blowfish key schedule in one wiped-on-release allocation: 18 P words, then the
/// four S-boxes, contiguous, so the key-expansion pass runs over all 1042 words at once.
final class BlowfishState {
    private static let totalWords = BlowfishTables.pWords + 4 * BlowfishTables.sBoxWords
    private let words: UnsafeMutablePointer<UInt32>

    init() {
        words = .allocate(capacity: Self.totalWords)
        BlowfishTables.initialState.withUnsafeBufferPointer {
            words.initialize(from: $0.baseAddress!, count: Self.totalWords)
        }
    }

    deinit {
        secureZero(UnsafeMutableRawBufferPointer(start: words, count: Self.totalWords * 4))
        words.deallocate()
    }

    func encipher(_ left: inout UInt32, _ right: inout UInt32) {
        let p = words, s0 = words + 18, s1 = s0 + 256, s2 = s1 + 256, s3 = s2 + 256
        var l = left ^ p[0], r = right
        var i = 1
        while i < 17 {
            r ^= ((s0[Int(l >> 24)] &+ s1[Int((l >> 16) & 0xff)]) ^ s2[Int((l >> 8) & 0xff)]) &+ s3[Int(l & 0xff)]
            r ^= p[i]
            l ^= ((s0[Int(r >> 24)] &+ s1[Int((r >> 16) & 0xff)]) ^ s2[Int((r >> 8) & 0xff)]) &+ s3[Int(r & 0xff)]
            l ^= p[i + 1]
            i += 2
        }
        left = r ^ p[17]
        right = l
    }

    /// Eksblowfish's expansion: XOR the key into P, then re-encrypt the whole state,
    /// mixing in `data` (the salt) when given.
    func expand(data: UnsafeBufferPointer<UInt8>?, key: UnsafeBufferPointer<UInt8>) {
        var j = 0
        for i in 0..<BlowfishTables.pWords { words[i] ^= Self.streamWord(key, &j) }
        j = 0
        var l: UInt32 = 0, r: UInt32 = 0
        var i = 0
        while i < Self.totalWords {
            if let data {
                l ^= Self.streamWord(data, &j)
                r ^= Self.streamWord(data, &j)
            }
            encipher(&l, &r)
            words[i] = l
            words[i + 1] = r
            i += 2
        }
    }

    /// The next four bytes of `data` as a big-endian word, wrapping around at its end.
    private static func streamWord(_ data: UnsafeBufferPointer<UInt8>, _ j: inout Int) -> UInt32 {
        var word: UInt32 = 0
        for _ in 0..<4 {
            if j >= data.count { j = 0 }
            word = word << 8 | UInt32(data[j])
            j += 1
        }
        return word
    }
}
