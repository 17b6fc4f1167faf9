import FoundationEssentials
import TermindCore

/// The `-----BEGIN label-----` … `-----END label-----` wrapping of a key file: which format
/// it announces, whether PEM headers say it is encrypted, and the base64-decoded body.
/// Only private key labels termind reads are accepted; everything else gets a precise error.
struct KeyArmour {
    enum Kind: Equatable {
        case openSSH
        /// A PEM private key OpenSSL decodes (PKCS#1, SEC1, PKCS#8).
        case pem(encrypted: Bool)
    }

    let kind: Kind
    let body: [UInt8]

    private static let pemLabels: Set = ["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY"]
    private static let publicLabels: Set = ["PUBLIC KEY", "RSA PUBLIC KEY", "SSH2 PUBLIC KEY", "CERTIFICATE", "OPENSSH PUBLIC KEY"]

    init(parsing text: String) throws {
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            .map { $0.trimmedWhitespace }
        guard let begin = lines.firstIndex(where: { $0.hasPrefix("-----BEGIN ") && $0.hasSuffix("-----") && $0.count > 16 }) else {
            throw Self.unrecognised(text)
        }
        let label = String(lines[begin].dropFirst("-----BEGIN ".count).dropLast(5))
        guard let end = lines[(begin + 1)...].firstIndex(where: { $0.hasPrefix("-----END") }) else {
            throw SSHKeyError.malformed("The key file is truncated: it has no '-----END \(SSHKeyAlgorithm.printable(label))-----' line.")
        }
        guard lines[end] == "-----END \(label)-----" else {
            throw SSHKeyError.malformed("The key file's armour does not match: it begins with '\(SSHKeyAlgorithm.printable(label))' but ends with '\(SSHKeyAlgorithm.printable(lines[end]))'.")
        }
        var content = Array(lines[(begin + 1)..<end])
        var headers: [String] = []
        if content.first?.contains(":") == true, let blank = content.firstIndex(of: "") {
            headers = Array(content[..<blank])
            content.removeSubrange(...blank)
        }
        let base64 = content.joined()
        guard !base64.isEmpty, let body = Data(base64Encoded: base64) else {
            throw SSHKeyError.malformed("The key file's body is not valid base64: it was truncated or altered.")
        }
        switch label {
        case "OPENSSH PRIVATE KEY":
            kind = .openSSH
        case _ where Self.pemLabels.contains(label):
            let encrypted = label == "ENCRYPTED PRIVATE KEY"
                || headers.contains { $0.hasPrefix("Proc-Type:") && $0.contains("ENCRYPTED") }
            kind = .pem(encrypted: encrypted)
        case "DSA PRIVATE KEY":
            throw SSHKeyError.unsupported("DSA keys are not supported (OpenSSH disabled them as insecure); use an Ed25519, ECDSA or RSA key.")
        case "SSH2 ENCRYPTED PRIVATE KEY":
            throw SSHKeyError.unsupported("SSH.com (SECSH) private keys are not supported; convert the key with 'ssh-keygen -i -f FILE'.")
        case _ where Self.publicLabels.contains(label):
            throw SSHKeyError.notAPrivateKey("This is a public key or certificate ('\(label)'), not a private key.")
        default:
            throw SSHKeyError.unsupported("'\(SSHKeyAlgorithm.printable(label))' files are not a private key format termind reads.")
        }
        self.body = [UInt8](body)
    }

    private static func unrecognised(_ text: String) -> TermindError {
        let start = text.drop { $0.isWhitespace }
        if start.hasPrefix("PuTTY-User-Key-File") {
            return SSHKeyError.unsupported("PuTTY .ppk keys are not supported; export the key in OpenSSH format with puttygen.")
        }
        if SSHKeyAlgorithm.allCases.contains(where: { start.hasPrefix($0.rawValue + " ") }) || start.hasPrefix("ssh-") {
            return SSHKeyError.notAPrivateKey("This is an OpenSSH public key line, not a private key.")
        }
        return SSHKeyError.notAPrivateKey("This is not a private key file: it has no '-----BEGIN … PRIVATE KEY-----' line.")
    }

    /// `body` base64-encoded in 70-column lines between BEGIN and END lines, as OpenSSH writes it.
    static func armour(_ body: [UInt8], label: String) -> String {
        let base64 = Array(Data(body).base64EncodedString())
        var text = "-----BEGIN \(label)-----\n"
        var index = 0
        while index < base64.count {
            text += String(base64[index..<min(index + 70, base64.count)]) + "\n"
            index += 70
        }
        return text + "-----END \(label)-----\n"
    }
}
