import FoundationEssentials
import TermindCore

/// The SSH key types termind generates, reads and writes, named as on the wire.
/// DSA, security-key (`sk-*`) and certificate types are not among them and are
/// reported as `key.unsupported`.
public enum SSHKeyAlgorithm: String, Sendable, CaseIterable {
    case ed25519 = "ssh-ed25519"
    case ecdsaP256 = "ecdsa-sha2-nistp256"
    case ecdsaP384 = "ecdsa-sha2-nistp384"
    case ecdsaP521 = "ecdsa-sha2-nistp521"
    case rsa = "ssh-rsa"

    /// The curve identifier inside ECDSA blobs ("nistp256"), nil for other types.
    public var curveName: String? {
        switch self {
        case .ecdsaP256: "nistp256"
        case .ecdsaP384: "nistp384"
        case .ecdsaP521: "nistp521"
        case .ed25519, .rsa: nil
        }
    }

    /// OpenSSL's group name for the curve.
    var openSSLGroup: String? {
        switch self {
        case .ecdsaP256: "P-256"
        case .ecdsaP384: "P-384"
        case .ecdsaP521: "P-521"
        case .ed25519, .rsa: nil
        }
    }

    /// Bytes of one coordinate of a curve point (the field size).
    var fieldBytes: Int {
        switch self {
        case .ecdsaP256: 32
        case .ecdsaP384: 48
        case .ecdsaP521: 66
        case .ed25519: 32
        case .rsa: 0
        }
    }

    /// The type name `ssh-keygen -l` prints in parentheses.
    var displayName: String {
        switch self {
        case .ed25519: "ED25519"
        case .ecdsaP256, .ecdsaP384, .ecdsaP521: "ECDSA"
        case .rsa: "RSA"
        }
    }

    /// Parses a wire name, reporting an unknown one as `key.unsupported`.
    static func named(_ name: String) throws -> SSHKeyAlgorithm {
        if let algorithm = SSHKeyAlgorithm(rawValue: name) { return algorithm }
        throw SSHKeyError.unsupported("SSH key type '\(printable(name))' is not supported; termind handles "
            + allCases.map(\.rawValue).joined(separator: ", ") + ".")
    }

    /// A name from a file, safe to quote in a message: printable ASCII, at most 64 characters.
    static func printable(_ name: String) -> String {
        String(name.unicodeScalars.prefix(64).map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7f ? Character($0) : "?" })
    }
}

/// An SSH public key: its algorithm and its wire-format blob (what fingerprints hash and
/// what `authorized_keys` lines carry in base64). Creating one validates the blob's
/// structure, so every value names a well-formed key of a supported type.
public struct SSHPublicKey: Sendable, Hashable, CustomStringConvertible {
    public let algorithm: SSHKeyAlgorithm
    public let blob: Data
    /// Key size as `ssh-keygen -l` reports it: the modulus length for RSA, the curve size otherwise.
    public let bits: Int

    public init(blob: some DataProtocol) throws {
        let bytes = [UInt8](blob)
        var reader = SSHWireReader(bytes, context: "public key blob")
        let algorithm = try SSHKeyAlgorithm.named(try reader.text())
        switch algorithm {
        case .ed25519:
            guard try reader.string().count == 32 else {
                throw SSHKeyError.malformed("The Ed25519 public key is not 32 bytes long.")
            }
            bits = 256
        case .ecdsaP256, .ecdsaP384, .ecdsaP521:
            guard try reader.text() == algorithm.curveName else {
                throw SSHKeyError.malformed("The ECDSA public key names a curve other than its type's (\(algorithm.rawValue)).")
            }
            let point = try reader.string()
            guard point.count == 1 + 2 * algorithm.fieldBytes, point.first == 0x04 else {
                throw SSHKeyError.malformed("The ECDSA public key is not an uncompressed point on \(algorithm.curveName ?? "its curve").")
            }
            bits = algorithm == .ecdsaP521 ? 521 : algorithm.fieldBytes * 8
        case .rsa:
            let exponent = try reader.unsignedMPInt()
            let modulus = try reader.unsignedMPInt()
            guard !exponent.isEmpty, let top = modulus.first else {
                throw SSHKeyError.malformed("The RSA public key has a zero exponent or modulus.")
            }
            bits = modulus.count * 8 - top.leadingZeroBitCount
            guard bits >= 1024 else {
                throw SSHKeyError.unsupported("RSA keys shorter than 1024 bits are not supported (this one has \(bits)).")
            }
        }
        try reader.expectEnd()
        self.algorithm = algorithm
        self.blob = Data(bytes)
    }

    /// Parses `type base64 [comment]`, the format of `.pub` files and `authorized_keys` lines
    /// without options. The comment is ignored; the type must match the blob's.
    public init(openSSHLine: String) throws {
        let fields = openSSHLine.split(whereSeparator: { $0 == " " || $0 == "\t" || $0.isNewline })
        guard fields.count >= 2 else {
            throw SSHKeyError.malformed("An OpenSSH public key line needs a key type and base64 data.")
        }
        guard let blob = Data(base64Encoded: String(fields[1])) else {
            throw SSHKeyError.malformed("The public key's data is not valid base64.")
        }
        try self.init(blob: blob)
        guard algorithm.rawValue == fields[0] else {
            throw SSHKeyError.malformed("The line says '\(SSHKeyAlgorithm.printable(String(fields[0])))' but its data is a \(algorithm.rawValue) key.")
        }
    }

    /// "SHA256:" and the unpadded base64 SHA-256 of the blob, as `ssh-keygen -l -E sha256` prints it.
    public var fingerprintSHA256: String { Digest.sshFingerprint(ofBlob: blob) }

    /// `type base64` and, when given and non-empty, ` comment` (no trailing newline).
    public func openSSHLine(comment: String?) -> String {
        let line = "\(algorithm.rawValue) \(blob.base64EncodedString())"
        guard let comment, !comment.isEmpty else { return line }
        return line + " " + comment
    }

    public var description: String { "\(algorithm.rawValue) \(fingerprintSHA256)" }
}
