import FoundationEssentials
import TermindCore

/// What the SSH transport asks the Vault for before it authenticates.
///
/// Rules (seed, "Connection and authentication"): an explicit password always wins;
/// the identity in play is the explicitly chosen one, else the host's own; a stored
/// password is used only for that identity's own username — custom input never borrows
/// the password of an identity that is not selected. Secrets are returned as `Secret`
/// and used once; callers never cache, log or store them.
public struct CredentialRequest: Sendable, Equatable {
    /// A saved host's id or label.
    public var host: String
    /// Typed by the user for this connection (quick-connect, `-l`), overriding the host's.
    public var explicitUser: String?
    /// Typed by the user for this connection.
    public var explicitPassword: Secret?
    /// An identity (id or label) the user chose for this connection.
    public var explicitIdentity: String?

    public init(host: String, explicitUser: String? = nil, explicitPassword: Secret? = nil, explicitIdentity: String? = nil) {
        self.host = host
        self.explicitUser = explicitUser
        self.explicitPassword = explicitPassword
        self.explicitIdentity = explicitIdentity
    }
}

public struct HostCredentials: Sendable {
    public enum PasswordSource: String, Sendable, Equatable {
        case explicit, identity, none
    }
    public var address: String
    public var port: Int
    /// nil when nothing names a user: the transport falls back to the local user name.
    public var username: String?
    public var password: Secret?
    public var passwordSource: PasswordSource
    /// The identity whose secrets were considered, if any.
    public var identity: String?
    /// The selected identity's private key (unencrypted OpenSSH text), if it has one.
    public var privateKey: Secret?

    public init(address: String, port: Int, username: String?, password: Secret?, passwordSource: PasswordSource, identity: String?,
                privateKey: Secret? = nil) {
        self.address = address
        self.port = port
        self.username = username
        self.password = password
        self.passwordSource = passwordSource
        self.identity = identity
        self.privateKey = privateKey
    }
}

/// Credentials for saved hosts, provided by the Vault.
public protocol CredentialProvider: Sendable {
    func credentials(for request: CredentialRequest) async throws -> HostCredentials
}

extension PortKey where P == any CredentialProvider {
    public static var credentials: Self { PortKey("vault.credentials") }
}
