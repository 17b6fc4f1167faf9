import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import VaultAPI
import TermindCrypto

/// A public host key as its SSH wire blob, as written in known_hosts and `*.pub` files.
///
/// `algorithm` is the key type name inside the blob (`ssh-ed25519`, `ecdsa-sha2-nistp256`,
/// `ssh-rsa`, ...), which is what OpenSSH writes. Keys of a type OpenSSH 9 knows are checked
/// the way `sshkey_read` checks them (type name matches the blob, fields present, nothing
/// trailing); keys of other types are kept as they are and have `isSupported == false`.
/// Curve points and RSA modulus sizes are not validated.
public struct HostKey: Sendable, Hashable, CustomStringConvertible {
    public let algorithm: String
    public let blob: Data

    /// Wraps a blob; throws `host_key.invalid` if a supported type's blob is malformed or
    /// its embedded type name differs from `algorithm`.
    public init(algorithm: String, blob: Data) throws {
        switch HostKey.decode(typeName: algorithm, blob: blob) {
        case .success(let key): self = key
        case .failure(let reason):
            throw TermindError(.hostKeyInvalid, "Public key of type '\(algorithm)': \(reason.text).")
        }
    }

    /// Parses `type base64 [comment]` (a `*.pub` line or the key part of a known_hosts line).
    public init(openSSHLine: String) throws {
        let fields = openSSHLine.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" })
        guard fields.count >= 2 else {
            throw TermindError(.hostKeyInvalid, "Public key text: expected 'type base64 [comment]', found \(fields.count) field(s).")
        }
        switch HostKey.decode(typeName: String(fields[0]), base64: String(fields[1])) {
        case .success(let key): self = key
        case .failure(let reason):
            throw TermindError(.hostKeyInvalid, "Public key text of type '\(fields[0])': \(reason.text).")
        }
    }

    private init(checkedAlgorithm: String, blob: Data) {
        self.algorithm = checkedAlgorithm
        self.blob = blob
    }

    /// True when OpenSSH 9 can parse this key type; keys of other types never match a host.
    public var isSupported: Bool { HostKey.supportedTypes.contains(algorithm) }

    /// True for `*-cert-v01@openssh.com` keys (these only match `@cert-authority` lines).
    public var isCertificate: Bool { algorithm.hasSuffix("-cert-v01@openssh.com") }

    /// The blob in standard padded base64, as OpenSSH writes it.
    public var base64: String { blob.base64EncodedString() }

    /// `type base64`, the key part of a known_hosts or `*.pub` line.
    public var openSSHText: String { "\(algorithm) \(base64)" }

    /// Exactly what `ssh-keygen -l -E sha256` prints after the bit count: `SHA256:` and the
    /// unpadded base64 of SHA-256 over the blob.
    public var fingerprintSHA256: String { Digest.sshFingerprint(ofBlob: blob) }

    public var description: String { "\(algorithm) \(fingerprintSHA256)" }
}

// MARK: - Decoding (mirrors sshkey.c sshkey_read / sshkey_from_blob_internal)

extension HostKey {
    /// Why a key text or blob was refused; `text` completes "Public key ...: <text>."
    enum DecodeFailure: Error, Equatable {
        case badBase64
        case malformedBlob(String)
        case typeMismatch(line: String, blob: String)

        var text: String {
            switch self {
            case .badBase64: return "the key data is not valid base64"
            case .malformedBlob(let why): return "the key data is malformed (\(why))"
            case .typeMismatch(let line, let blob): return "the line says '\(line)' but the key data is '\(blob)'"
            }
        }
    }

    /// Key type names OpenSSH 9.2 parses (sshkey.c keyimpls, without XMSS).
    static let supportedTypes: Set<String> = [
        "ssh-ed25519", "sk-ssh-ed25519@openssh.com",
        "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
        "sk-ecdsa-sha2-nistp256@openssh.com", "ssh-rsa", "ssh-dss",
        "ssh-ed25519-cert-v01@openssh.com", "sk-ssh-ed25519-cert-v01@openssh.com",
        "ecdsa-sha2-nistp256-cert-v01@openssh.com", "ecdsa-sha2-nistp384-cert-v01@openssh.com",
        "ecdsa-sha2-nistp521-cert-v01@openssh.com", "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "ssh-rsa-cert-v01@openssh.com", "ssh-dss-cert-v01@openssh.com",
    ]

    /// Signature names OpenSSH also accepts as the type word of an RSA key line.
    static let typeAliases: [String: String] = [
        "rsa-sha2-256": "ssh-rsa", "rsa-sha2-512": "ssh-rsa",
        "rsa-sha2-256-cert-v01@openssh.com": "ssh-rsa-cert-v01@openssh.com",
        "rsa-sha2-512-cert-v01@openssh.com": "ssh-rsa-cert-v01@openssh.com",
    ]

    static func decode(typeName: String, base64: String) -> Result<HostKey, DecodeFailure> {
        guard let blob = strictBase64(base64) else { return .failure(.badBase64) }
        return decode(typeName: typeName, blob: blob)
    }

    /// Supported types: the blob's own type must be the line's (alias-resolved) type and its
    /// fields must be complete with nothing trailing. Unsupported types are kept verbatim.
    static func decode(typeName: String, blob: Data) -> Result<HostKey, DecodeFailure> {
        let canonical = typeAliases[typeName] ?? typeName
        guard supportedTypes.contains(canonical) else {
            return .success(HostKey(checkedAlgorithm: typeName, blob: blob))
        }
        var reader = SSHWireReader(blob, context: "host key")
        guard let typeBytes = try? reader.string() else { return .failure(.malformedBlob("no key type")) }
        let blobType = String(decoding: typeBytes, as: UTF8.self)
        guard blobType == canonical else { return .failure(.typeMismatch(line: typeName, blob: blobType)) }
        if let why = validateFields(type: canonical, reader: &reader) { return .failure(.malformedBlob(why)) }
        return .success(HostKey(checkedAlgorithm: canonical, blob: blob))
    }

    /// Checks the fields after the type name; nil when complete (sshkey_from_blob_internal).
    private static func validateFields(type: String, reader: inout SSHWireReader) -> String? {
        if type.hasSuffix("-cert-v01@openssh.com") { return nil } // certificate bodies are not checked
        var fields: [(name: String, exactLength: Int?)] = []
        switch type {
        case "ssh-ed25519": fields = [("public key", 32)]
        case "sk-ssh-ed25519@openssh.com": fields = [("public key", 32), ("application", nil)]
        case "ssh-rsa": fields = [("e", nil), ("n", nil)]
        case "ssh-dss": fields = [("p", nil), ("q", nil), ("g", nil), ("y", nil)]
        default: // ECDSA, plain or security-key
            let curve = type.hasPrefix("sk-") ? "nistp256" : String(type.dropFirst("ecdsa-sha2-".count))
            guard let named = try? reader.string() else { return "missing curve name" }
            guard String(decoding: named, as: UTF8.self) == curve else { return "curve does not match the key type" }
            fields = [("point", nil)] + (type.hasPrefix("sk-") ? [("application", nil)] : [])
        }
        for field in fields {
            guard let value = try? reader.string() else { return "missing \(field.name)" }
            if let length = field.exactLength, value.count != length { return "\(field.name) is \(value.count) bytes, expected \(length)" }
        }
        return reader.isAtEnd ? nil : "unexpected data after the key"
    }

    /// Base64 as OpenSSH's b64_pton takes it: padded, canonical, no stray characters.
    static func strictBase64(_ text: String) -> Data? {
        guard !text.isEmpty, let data = Data(base64Encoded: text), data.base64EncodedString() == text else { return nil }
        return data
    }
}
