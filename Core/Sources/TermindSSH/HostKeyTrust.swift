import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A server's public host key as presented in the SSH handshake.
public struct PublicHostKey: Sendable, Hashable, Codable {
    /// SSH algorithm name, e.g. "ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa".
    public var algorithm: String
    /// The key in SSH wire format.
    public var blob: Data

    public init(algorithm: String, blob: Data) {
        self.algorithm = algorithm
        self.blob = blob
    }
}

/// The trust decision for a host key, made with OpenSSH's exact known_hosts rules.
public enum TrustVerdict: Sendable, Equatable {
    /// A known_hosts entry for this host and port holds this key.
    case trusted
    /// Only a port-less entry holds this key (OpenSSH: "found matching key w/out port").
    case trustedWithoutPort
    /// No entry for this host: the caller asks the user (accept once, accept and save, reject).
    case unknown
    /// An entry for this host holds another key of the same type: fail closed. Fingerprints
    /// (SHA256) of the known keys of that type.
    case changed(knownFingerprints: [String])
    /// Entries for this host hold keys of other types only, and none of the presented type:
    /// fail closed, as OpenSSH does (HOST_CHANGED). The transport asks for the known types
    /// first (`knownKeyTypes`), so a server that still had them would have presented one.
    /// Fingerprints (SHA256) of the known keys, each with its type.
    case otherKeyTypes(known: [KnownKey])
    /// The key is marked @revoked: refuse.
    case revoked

    /// The verdict's stable name, as `vault.knownhost.check@1` reports it and logs show it.
    public var name: String {
        switch self {
        case .trusted: "trusted"
        case .trustedWithoutPort: "trusted-without-port"
        case .unknown: "unknown"
        case .changed: "changed"
        case .otherKeyTypes: "other-key-types"
        case .revoked: "revoked"
        }
    }
}

/// A trusted key as a verdict names it.
public struct KnownKey: Sendable, Hashable {
    /// The key type as known_hosts records it, e.g. "ssh-ed25519".
    public var algorithm: String
    public var fingerprint: String
    public init(algorithm: String, fingerprint: String) {
        self.algorithm = algorithm
        self.fingerprint = fingerprint
    }
}

/// Host-key trust as the SSH transport asks for it inside the handshake. The Vault provides
/// it (`vault.trust`, see VaultAPI): independent of saved hosts (editing or deleting a host
/// never changes trust). Once-only acceptance is the caller's and is never saved.
public protocol HostKeyTrust: Sendable {
    func verdict(host: String, port: Int, key: PublicHostKey) async throws -> TrustVerdict
    /// The key types trusted for host:port (port-less entries count when nothing names
    /// `[host]:port`), so the handshake can ask for them first as OpenSSH does.
    func knownKeyTypes(host: String, port: Int) async throws -> [String]
    /// Saves the key for host:port after the user approved it.
    func trust(host: String, port: Int, key: PublicHostKey) async throws
    /// SHA256 fingerprint as `ssh-keygen -l` prints it.
    func fingerprint(_ key: PublicHostKey) -> String
    /// For a changed or revoked key: the message to fail closed with, naming the presented and
    /// the known fingerprints and how to resolve it; nil when the key is not refused.
    func refusal(host: String, port: Int, key: PublicHostKey) async throws -> String?
}
