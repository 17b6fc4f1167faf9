import TermindCore

/// The host-key algorithms termind offers in the handshake, ordered as OpenSSH's
/// sshconnect2.c `order_hostkeyalgs` orders them: the algorithms whose key type the trusted
/// keys for this host already hold come first, in default order, then the rest. Without
/// this, libssh2's own order (ECDSA first) would make a server with several host keys
/// present a type other than the one OpenSSH recorded, and a correct known_hosts entry
/// would look like a changed key.
///
/// The default list is OpenSSH 9's plain-key part of `HostKeyAlgorithms`: certificates are
/// never offered (termind does not validate host certificates), and neither are ssh-rsa
/// with SHA-1 signatures nor ssh-dss, which OpenSSH 8.8+ refuses by default.
public enum HostKeyAlgorithms {
    public static let defaults = [
        "ssh-ed25519",
        "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
        "rsa-sha2-512", "rsa-sha2-256",
    ]

    /// The key type (as known_hosts records it) that `algorithm` signs with.
    public static func keyType(of algorithm: String) -> String {
        algorithm.hasPrefix("rsa-sha2-") ? "ssh-rsa" : algorithm
    }

    /// `defaults` (limited to what `supported` lists, when given) with the algorithms for
    /// `knownKeyTypes` first, keeping the default order inside each group.
    public static func preference(knownKeyTypes: [String], supported: [String]? = nil) -> [String] {
        let offered = supported.map { list in defaults.filter(list.contains) } ?? defaults
        let known = Set(knownKeyTypes)
        let first = offered.filter { known.contains(keyType(of: $0)) }
        return first + offered.filter { !known.contains(keyType(of: $0)) }
    }
}
