import FoundationEssentials
import TermindCore

/// An SSH key pair in the Vault. The private key lives only in the secret store; records
/// carry the public key and its fingerprint as `ssh-keygen -l` prints them.
public struct KeyRecord: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    /// "ssh-ed25519", "ecdsa-sha2-nistp256", …, "ssh-rsa".
    public var algorithm: String
    public var bits: Int
    /// "SHA256:…".
    public var fingerprint: String
    /// The OpenSSH public key line (for authorized_keys).
    public var publicKey: String
    public var createdAt: String

    public init(id: String, label: String, algorithm: String, bits: Int, fingerprint: String, publicKey: String, createdAt: String) {
        self.id = id
        self.label = label
        self.algorithm = algorithm
        self.bits = bits
        self.fingerprint = fingerprint
        self.publicKey = publicKey
        self.createdAt = createdAt
    }
}

/// Key kinds the Vault generates.
public enum KeyKind: String, Sendable, Codable, SchemaEnum {
    case ed25519, ecdsa256 = "ecdsa-p256", ecdsa384 = "ecdsa-p384", ecdsa521 = "ecdsa-p521", rsa
}

public enum KeyContracts {
    public enum List: Contract {
        public typealias Request = Empty
        public struct Response: Codable, Sendable, Equatable {
            public var keys: [KeyRecord]
            public init(keys: [KeyRecord]) { self.keys = keys }
        }
        public static let name = "vault.key.list"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "List SSH keys with their fingerprints."
    }

    public enum Generate: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var kind: KeyKind
            /// RSA only: 2048–8192, default 4096.
            public var bits: Int?
            /// Blank: the algorithm name.
            public var label: String?
            public var comment: String?
            public init(kind: KeyKind, bits: Int? = nil, label: String? = nil, comment: String? = nil) {
                self.kind = kind
                self.bits = bits
                self.label = label
                self.comment = comment
            }
        }
        public typealias Response = KeyRecord
        public static let name = "vault.key.generate"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Generate an ed25519, ECDSA or RSA key pair (OpenSSH format) into the Vault."
    }

    public enum Import: Contract {
        public struct Request: Codable, Sendable, Equatable {
            /// An OpenSSH or PEM private key file.
            public var path: String
            /// Needed when the file is passphrase-protected; used once, never stored.
            public var passphrase: Secret?
            public var label: String?
            public init(path: String, passphrase: Secret? = nil, label: String? = nil) {
                self.path = path
                self.passphrase = passphrase
                self.label = label
            }
        }
        public typealias Response = KeyRecord
        public static let name = "vault.key.import"
        public static let effect: Effect = Effect(.write, secrets: true)
        public static let version = 1
        public static let summary = "Import a private key file (OpenSSH or PEM, with or without a passphrase)."
    }

    public enum Show: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            public init(key: String) { self.key = key }
        }
        public typealias Response = KeyRecord
        public static let name = "vault.key.show"
        public static let effect: Effect = .read
        public static let version = 1
        public static let summary = "Show a key's public key and fingerprint."
    }

    public enum Delete: Contract {
        public struct Request: Codable, Sendable, Equatable {
            public var key: String
            public init(key: String) { self.key = key }
        }
        public struct Response: Codable, Sendable, Equatable {
            public var deleted: String
            public init(deleted: String) { self.deleted = deleted }
        }
        public static let name = "vault.key.delete"
        public static let effect: Effect = Effect(.destructive, secrets: true)
        public static let version = 1
        public static let summary = "Delete a key and its private part; refused while identities use it (they are named)."
    }
}
