import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCrypto

// MARK: - Hashing and writing (mirrors hostfile.c host_hash and write_host_entry)

extension KnownHosts {
    /// `|1|salt|hash` for `lookupName` as `ssh-keygen -H` writes it: HMAC-SHA1 keyed with the
    /// salt over the name, both in padded base64. `salt` must be 20 bytes (OpenSSH rejects
    /// other lengths when reading). The name is used as given: pass `lookupName(host:port:)`.
    public static func hashedName(_ lookupName: String, salt: Data) -> String {
        precondition(salt.count == saltLength, "known_hosts salts are \(saltLength) bytes")
        let hash = Digest.hmac(.sha1, key: salt, data: Data(lookupName.utf8))
        return "|1|\(salt.base64EncodedString())|\(hash.base64EncodedString())"
    }

    /// Renders entries as known_hosts lines, one per entry, each ending in a newline:
    /// `[marker ]names type base64[ comment]`. Problems are not rendered.
    public static func render(_ entries: [KnownHostEntry]) -> String {
        entries.map { $0.lineText + "\n" }.joined()
    }
}

extension KnownHostEntry {
    /// An entry for `host:port` as ssh adds one (write_host_entry): the lowercased lookup name
    /// (`host`, or `[host]:port` off port 22), plain or hashed with a fresh 20-byte salt.
    public init(host: String, port: Int, key: HostKey, hashed: Bool, comment: String? = nil) {
        self.init(host: host, port: port, key: key, salt: hashed ? SecureRandom.bytes(KnownHosts.saltLength) : nil, comment: comment)
    }

    /// As `init(host:port:key:hashed:comment:)` with a given salt (nil: plain), for reproducible output.
    public init(host: String, port: Int, key: HostKey, salt: Data?, comment: String? = nil) {
        let name = KnownHosts.lookupName(host: host, port: port)
        let names: Names
        if let salt {
            precondition(salt.count == KnownHosts.saltLength, "known_hosts salts are \(KnownHosts.saltLength) bytes")
            names = .hashed(salt: salt, hash: Digest.hmac(.sha1, key: salt, data: Data(name.utf8)))
        } else {
            names = .patterns(name)
        }
        self.init(names: names, key: key, comment: comment)
    }

    /// The host field as written in the file.
    public var namesText: String {
        switch names {
        case .patterns(let list): return list
        case .hashed(let salt, let hash): return "|1|\(salt.base64EncodedString())|\(hash.base64EncodedString())"
        }
    }

    /// The entry as one known_hosts line, without the newline.
    public var lineText: String {
        var parts: [String] = []
        if marker != .none { parts.append(marker.rawValue) }
        parts.append(namesText)
        parts.append(key.openSSHText)
        if let comment, !comment.isEmpty { parts.append(comment) }
        return parts.joined(separator: " ")
    }
}
