import CCrypto
import FoundationEssentials
import TermindCore

extension SSHPrivateKey {
    /// The key as an unencrypted OpenSSH private key file ("-----BEGIN OPENSSH PRIVATE
    /// KEY-----", openssh-key-v1, cipher none), the format `ssh-keygen` writes by default.
    public func openSSHPrivateKeyText() -> Secret {
        // Cannot fail: init already proved the components export.
        (try? openSSHPrivateKeyText(passphrase: nil)) ?? Secret("")
    }

    /// The key as an OpenSSH private key file, encrypted with aes256-ctr under a key from
    /// bcrypt_pbkdf(`passphrase`, random salt, `rounds`) when a non-empty passphrase is given.
    public func openSSHPrivateKeyText(passphrase: Secret?, rounds: Int = 16) throws -> Secret {
        let body = try withComponents { try OpenSSHKeyFile.encode($0, publicKey: publicKey, comment: comment,
                                                                   passphrase: passphrase, rounds: rounds) }
        defer { wipeStorage(body) }
        return Secret(KeyArmour.armour(body, label: "OPENSSH PRIVATE KEY"))
    }
}

/// The openssh-key-v1 container (OpenSSH's PROTOCOL.key): magic, cipher, KDF and options,
/// one public key in clear, then the private section — two equal check integers, the key,
/// its comment and padding 1, 2, 3… — encrypted when a cipher is named.
enum OpenSSHKeyFile {
    static let magic = Array("openssh-key-v1".utf8) + [0]
    /// The most bcrypt rounds accepted from a file: far above ssh-keygen's default of 16,
    /// low enough that a hostile file cannot stall a decrypt for minutes.
    static let maximumRounds = 4096

    /// The clear part of a file, readable without a passphrase.
    struct Header {
        let cipher: OpenSSHKeyCipher
        let salt: [UInt8]
        let rounds: Int
        let publicKey: SSHPublicKey
        let privateSection: [UInt8]
        let tag: [UInt8]

        init(_ body: [UInt8]) throws {
            var reader = SSHWireReader(body, context: "OpenSSH private key file")
            guard try reader.raw(magic.count) == magic else {
                throw SSHKeyError.malformed("The OpenSSH private key file does not start with 'openssh-key-v1'.")
            }
            cipher = try OpenSSHKeyCipher.named(try reader.text())
            let kdf = try reader.text()
            var options = SSHWireReader(try reader.string(), context: "key derivation options")
            switch (kdf, cipher.isEncrypting) {
            case ("none", false):
                (salt, rounds) = ([], 0)
            case ("bcrypt", true):
                salt = try options.string()
                rounds = Int(try options.uint32())
                try options.expectEnd()
                guard (1...OpenSSHKeyFile.maximumRounds).contains(rounds), !salt.isEmpty else {
                    throw SSHKeyError.unsupported("The private key asks for \(rounds) bcrypt rounds; termind accepts 1 to \(OpenSSHKeyFile.maximumRounds) with a non-empty salt.")
                }
            case ("none", true):
                throw SSHKeyError.malformed("The private key names the cipher \(cipher.name) but no key derivation.")
            case ("bcrypt", false):
                throw SSHKeyError.malformed("The private key names a key derivation but the cipher none.")
            default:
                throw SSHKeyError.unsupported("The private key uses the key derivation '\(SSHKeyAlgorithm.printable(kdf))'; termind reads bcrypt, or none for unencrypted keys.")
            }
            guard try reader.uint32() == 1 else {
                throw SSHKeyError.unsupported("The file holds more than one key; termind reads files with exactly one.")
            }
            publicKey = try SSHPublicKey(blob: try reader.string())
            privateSection = try reader.string()
            tag = try reader.raw(cipher.tagLength)
            try reader.expectEnd()
            guard privateSection.count % cipher.blockSize == 0 else {
                throw SSHKeyError.malformed("The private section's length is not a multiple of the cipher's block size: the file was truncated or altered.")
            }
        }
    }

    static func decode(_ body: [UInt8], passphrase: Secret?) throws -> SSHPrivateKey {
        let header = try Header(body)
        var plain = header.privateSection
        defer { wipeStorage(plain) }
        if header.cipher.isEncrypting {
            guard let passphrase, !passphrase.isEmpty else { throw SSHKeyError.passphraseRequired() }
            let material = try derive(passphrase, cipher: header.cipher, salt: header.salt, rounds: header.rounds)
            defer { wipeStorage(material) }
            guard let decrypted = header.cipher.decrypt(plain, tag: header.tag, keyAndIV: material) else {
                throw SSHKeyError.wrongPassphrase()
            }
            plain = decrypted
        }
        var reader = SSHWireReader(plain, context: "private key section")
        guard try reader.uint32() == reader.uint32() else {
            throw header.cipher.isEncrypting ? SSHKeyError.wrongPassphrase()
                : SSHKeyError.corrupt("The private key's check integers differ: the file is damaged.")
        }
        do {
            var components = try readComponents(&reader, expected: header.publicKey.algorithm)
            defer { components.wipe() }
            let comment = try reader.text()
            let padding = reader.rest()
            guard padding.count < header.cipher.blockSize, padding.enumerated().allSatisfy({ $1 == UInt8($0 + 1) }) else {
                throw SSHKeyError.corrupt("The private section's padding is wrong: the file is damaged.")
            }
            let key = try SSHPrivateKey(taking: EVPKeys.make(components), comment: comment)
            guard key.publicKey == header.publicKey else {
                throw SSHKeyError.corrupt("The private key does not match the public key stored beside it: the file is damaged.")
            }
            return key
        } catch let error as TermindError where header.cipher.isEncrypting && error.is(.keyMalformed) {
            throw SSHKeyError.wrongPassphrase()
        }
    }

    private static func readComponents(_ reader: inout SSHWireReader, expected: SSHKeyAlgorithm) throws -> SSHPrivateComponents {
        let type = try reader.text()
        guard type == expected.rawValue else {
            _ = try SSHKeyAlgorithm.named(type)
            throw SSHKeyError.corrupt("The private key is \(type) but its public key is \(expected.rawValue): the file is damaged.")
        }
        switch expected {
        case .ed25519:
            let publicKey = try reader.string()
            let both = try reader.string()
            guard publicKey.count == 32, both.count == 64, Array(both[32...]) == publicKey else {
                throw SSHKeyError.corrupt("The Ed25519 private key's halves are inconsistent: the file is damaged.")
            }
            return .ed25519(seed: Array(both[..<32]), publicKey: publicKey)
        case .ecdsaP256, .ecdsaP384, .ecdsaP521:
            guard try reader.text() == expected.curveName else {
                throw SSHKeyError.corrupt("The ECDSA private key names another curve than its type: the file is damaged.")
            }
            let point = try reader.string()
            return .ecdsa(expected, point: point, scalar: try reader.unsignedMPInt())
        case .rsa:
            return .rsa(n: try reader.unsignedMPInt(), e: try reader.unsignedMPInt(), d: try reader.unsignedMPInt(),
                        iqmp: try reader.unsignedMPInt(), p: try reader.unsignedMPInt(), q: try reader.unsignedMPInt())
        }
    }

    static func encode(_ components: SSHPrivateComponents, publicKey: SSHPublicKey, comment: String,
                       passphrase: Secret?, rounds: Int) throws -> [UInt8] {
        let encrypting = passphrase.map { !$0.isEmpty } ?? false
        let cipher = encrypting ? OpenSSHKeyCipher.aes256CTR : .none
        guard !encrypting || (1...maximumRounds).contains(rounds) else {
            throw SSHKeyError.unsupported("bcrypt rounds must be 1 to \(maximumRounds) (asked for \(rounds)).")
        }
        let salt = encrypting ? [UInt8](SecureRandom.bytes(16)) : []
        var section = SSHWireWriter()
        defer { section.wipe() }
        let check = [UInt8](SecureRandom.bytes(4))
        section.raw(check)
        section.raw(check)
        section.string(publicKey.algorithm.rawValue)
        switch components {
        case .ed25519(let seed, let publicBytes):
            section.string(publicBytes)
            section.uint32(UInt32(seed.count + publicBytes.count))   // seed ‖ public key, without a joined copy
            section.raw(seed)
            section.raw(publicBytes)
        case .ecdsa(let algorithm, let point, let scalar):
            section.string(algorithm.curveName ?? "")
            section.string(point)
            section.mpint(unsigned: scalar)
        case .rsa(let n, let e, let d, let iqmp, let p, let q):
            for value in [n, e, d, iqmp, p, q] { section.mpint(unsigned: value) }
        }
        section.string(comment)
        var pad: UInt8 = 1
        while section.bytes.count % cipher.blockSize != 0 {
            section.raw([pad])
            pad += 1
        }
        var sealed = section.bytes
        if let passphrase, encrypting {
            let material = try derive(passphrase, cipher: cipher, salt: salt, rounds: rounds)
            defer { wipeStorage(material) }
            sealed = try cipher.encrypt(sealed, keyAndIV: material)
        }
        var options = SSHWireWriter()
        if encrypting {
            options.string(salt)
            options.uint32(UInt32(rounds))
        }
        var file = SSHWireWriter()
        file.raw(magic)
        file.string(cipher.name)
        file.string(encrypting ? "bcrypt" : "none")
        file.string(options.bytes)
        file.uint32(1)
        file.string(publicKey.blob)
        file.string(sealed.prefix(sealed.count - cipher.tagLength))
        file.raw(sealed.suffix(cipher.tagLength))
        return file.bytes
    }

    private static func derive(_ passphrase: Secret, cipher: OpenSSHKeyCipher, salt: [UInt8], rounds: Int) throws -> [UInt8] {
        let password = passphrase.withPlaintext { Array($0.utf8) }
        defer { wipeStorage(password) }
        return try BcryptPBKDF.derive(password: password, salt: salt, rounds: rounds, length: cipher.keyLength + cipher.ivLength)
    }
}
