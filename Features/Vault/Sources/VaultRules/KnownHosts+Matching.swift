import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCrypto

// MARK: - Host names and patterns (mirrors match.c and hostfile.c match_maybe_hashed)

extension KnownHosts {
    /// The name ssh looks up for `host:port` (misc.c put_host_port, lowercased as ssh.c does):
    /// `host` for port 22 (or 0), `[host]:port` otherwise. Lowercasing is ASCII-only, as C's tolower.
    public static func lookupName(host: String, port: Int) -> String {
        let name = SSHPattern.asciiLowercased(host)
        return port == 0 || port == 22 ? name : "[\(name)]:\(port)"
    }

    /// Whether an entry's host field names `lookupName` (hostfile.c match_maybe_hashed): a hashed
    /// name must hash to the same value; a pattern list must match positively with no negated
    /// pattern matching (match.c match_hostname). Pattern matching ignores ASCII case.
    public static func matches(_ entry: KnownHostEntry, lookupName: String) -> Bool {
        switch entry.names {
        case .hashed(let salt, let hash):
            return Digest.hmac(.sha1, key: salt, data: Data(lookupName.utf8)) == hash
        case .patterns(let list):
            return SSHPattern.matchList(SSHPattern.asciiLowercased(lookupName), list, lowercasePatterns: true) == 1
        }
    }
}

// MARK: - Trust decision (mirrors sshconnect.c check_host_key and hostfile.c check_hostkeys_by_key_or_type)

extension KnownHosts {
    /// Decides whether `key`, presented by `host:port`, is trusted by `entries`, as OpenSSH 9's
    /// `ssh` decides with these lines in its known_hosts files (CheckHostIP off, no HostKeyAlias).
    ///
    /// - Lines whose key type OpenSSH cannot read are ignored, as OpenSSH drops them.
    /// - The lookup name's lines decide: the key on a plain line → `.trusted`; a `@revoked` line
    ///   with the key → `.revoked` (whatever else matches); other plain keys of any type and none
    ///   equal → `.changed`; `@cert-authority` lines never vouch for a plain key.
    /// - Only when nothing is known for `[host]:port` (HOST_NEW) on a non-22 port, the port-less
    ///   `host` lines are consulted: the same key → `.trustedWithoutPort` ("found matching key
    ///   w/out port"); a different key there is still `.unknown`, not `.changed`.
    /// - Deliberate difference: if that port-less lookup finds the key `@revoked`, OpenSSH warns
    ///   "REVOKED HOST KEY DETECTED" and then treats the host as new; we return `.revoked` so no
    ///   caller offers to trust a key its user revoked.
    /// - Certificates are not validated here (no signature or principal checks): a certificate is
    ///   never trusted, only reported `.revoked` or `.unknown`.
    public static func check(host: String, port: Int, key: HostKey, entries: [KnownHostEntry]) -> TrustDecision {
        let status = hostStatus(lookupName: lookupName(host: host, port: port), key: key, entries: entries)
        switch status {
        case .ok(let entry): return .trusted(entry)
        case .revoked(let entry): return .revoked(entry)
        case .changed(let known):
            // OpenSSH says HOST_CHANGED for both; which one it is matters to the person told.
            let sameType = known.filter { $0.algorithm == key.publicPart.algorithm }
            return sameType.isEmpty ? .otherKeyTypes(known: known) : .changed(known: sameType)
        case .new:
            guard port != 0, port != 22 else { return .unknown }
            // sshconnect.c: "checking without port identifier", a read-only recursive check.
            switch hostStatus(lookupName: lookupName(host: host, port: 22), key: key, entries: entries) {
            case .ok(let entry): return .trustedWithoutPort(entry)
            case .revoked(let entry): return .revoked(entry)
            case .changed, .new: return .unknown
            }
        }
    }

    /// The key types of the plain lines that name `host:port`, in line order without repeats —
    /// what sshconnect2.c `order_hostkeyalgs` prefers in the handshake. When no line names
    /// `[host]:port` (a non-22 port), the port-less lines' types count, as `check` then
    /// consults them. Revoked and @cert-authority lines never count.
    public static func knownKeyTypes(host: String, port: Int, entries: [KnownHostEntry]) -> [String] {
        func types(_ name: String) -> [String] {
            var seen: [String] = []
            for entry in entries where entry.marker == .none && entry.key.isSupported && !entry.key.isCertificate
                && matches(entry, lookupName: name) && !seen.contains(entry.key.algorithm) {
                seen.append(entry.key.algorithm)
            }
            return seen
        }
        let exact = types(lookupName(host: host, port: port))
        guard exact.isEmpty, port != 0, port != 22 else { return exact }
        return types(lookupName(host: host, port: 22))
    }

    enum HostStatus {
        case ok(KnownHostEntry), new, changed([HostKey]), revoked(KnownHostEntry)
    }

    /// load_hostkeys (lines naming `lookupName` whose key parses) then check_key_in_hostkeys.
    static func hostStatus(lookupName: String, key: HostKey, entries: [KnownHostEntry]) -> HostStatus {
        let loaded = entries.filter { $0.key.isSupported && matches($0, lookupName: lookupName) }
        let presented = key.publicPart
        // check_key_not_revoked compares public parts (sshkey_equal_public), before anything else wins.
        if let revoked = loaded.first(where: { $0.marker == .revoked && $0.key.publicPart == presented }) {
            return .revoked(revoked)
        }
        if key.isCertificate { return .new } // want_cert: only CA lines, and we do not verify certificates
        var status = HostStatus.new
        var others: [HostKey] = []
        for entry in loaded where entry.marker == .none {
            // sshkey_equal: same plain type and public material (a certificate line compares its key).
            if entry.key.publicPart == presented { return .ok(entry) }
            others.append(entry.key)
            status = .changed(others)
        }
        return status
    }
}

extension HostKey {
    /// The plain public key: itself, or for a certificate the key it certifies (the fields
    /// after the nonce, under the plain type name). Used where OpenSSH compares public parts.
    var publicPart: HostKey {
        guard isCertificate else { return self }
        let plainType = String(algorithm.dropLast("-cert-v01@openssh.com".count))
        let fieldCount: Int
        switch plainType {
        case "ssh-ed25519": fieldCount = 1
        case "sk-ssh-ed25519@openssh.com", "ssh-rsa": fieldCount = 2
        case "sk-ecdsa-sha2-nistp256@openssh.com": fieldCount = 3
        case "ssh-dss": fieldCount = 4
        default: fieldCount = 2 // ecdsa-sha2-*: curve, point
        }
        var reader = SSHWireReader(blob, context: "certificate")
        guard (try? reader.string()) != nil, (try? reader.string()) != nil else { return self } // type, nonce
        var plain = SSHWireWriter()
        plain.string(plainType)
        for _ in 0..<fieldCount {
            guard let field = try? reader.string() else { return self }
            plain.string(field)
        }
        return (try? HostKey(algorithm: plainType, blob: Data(plain.bytes))) ?? self
    }
}
