import TermindCore
import TermindSSH

extension PortKey where P == any HostKeyTrust {
    /// The Vault's host-key trust (OpenSSH's known_hosts rules on its trusted keys), the
    /// transport's `HostKeyTrust`.
    public static var hostKeyTrust: Self { PortKey("vault.trust") }
}
