import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What `fetch` may reach (docs/assistant.md, "fetch"): public HTTP(S) only. Every hop's
/// URL is checked, and every address its host resolves to: loopback, private, shared
/// (CGNAT), link-local (with the cloud metadata address), multicast, broadcast, reserved,
/// unspecified, documentation and IPv6 unique-local, site-local and mapped/translated forms
/// of them are refused.
public enum FetchRules {
    /// Why `url` may not be fetched (nil: its shape is fine; its addresses are checked apart).
    public static func urlProblem(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return "\(url.scheme ?? "a URL without a scheme") is not http or https"
        }
        guard let host = url.host, !host.isEmpty else { return "the URL has no host" }
        if url.user != nil || url.password != nil { return "the URL carries a user name or password" }
        if let port = url.port, !(1...65535).contains(port) { return "port \(port) is not a port" }
        return nil
    }

    /// Why the numeric address `text` (IPv4 or IPv6) is not public; nil when it is.
    public static func addressProblem(_ text: String) -> String? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            let b = withUnsafeBytes(of: v4.s_addr) { Array($0) }
            return v4Problem(b)
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return "\(text) is not an address" }
        let b = withUnsafeBytes(of: v6) { Array($0) }
        if b.allSatisfy({ $0 == 0 }) { return "\(text) is unspecified" }
        if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return "\(text) is loopback" }
        // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96) carry an IPv4 address.
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF { return v4Problem(Array(b[12..<16])).map { "\(text): \($0)" } }
        if b[0..<12].allSatisfy({ $0 == 0 }) { return v4Problem(Array(b[12..<16])).map { "\(text): \($0)" } ?? "\(text) is IPv4-compatible (deprecated)" }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4..<12].allSatisfy({ $0 == 0 }) {
            return v4Problem(Array(b[12..<16])).map { "\(text): \($0)" }
        }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4] == 0x00 && b[5] == 0x01 { return "\(text) is local-use NAT64 (64:ff9b:1::/48)" }
        // SIIT's IPv4-translated (::ffff:0:a.b.c.d).
        if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xFF && b[9] == 0xFF && b[10] == 0 && b[11] == 0 {
            return v4Problem(Array(b[12..<16])).map { "\(text): \($0)" } ?? "\(text) is IPv4-translated"
        }
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00 { return "\(text) is Teredo (2001::/32)" }
        if b[0] == 0xFF { return "\(text) is multicast" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return "\(text) is link-local" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return "\(text) is site-local" }
        if b[0] & 0xFE == 0xFC { return "\(text) is unique-local (private)\(text.lowercased().hasPrefix("fd00:ec2:") ? ", a cloud metadata address" : "")" }
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return "\(text) is for documentation" }
        if b[0] == 0x20 && b[1] == 0x02 { return v4Problem(Array(b[2..<6])).map { "\(text) (6to4): \($0)" } }
        if b[0] == 0x01 && b[1..<8].allSatisfy({ $0 == 0 }) { return "\(text) is discard-only" }
        return nil
    }

    private static func v4Problem(_ b: [UInt8]) -> String? {
        let text = b.map(String.init).joined(separator: ".")
        switch (b[0], b[1]) {
        case (0, _): return "\(text) is unspecified or this network"
        case (10, _): return "\(text) is private"
        case (100, 64...127): return "\(text) is shared address space (CGNAT)"
        case (127, _): return "\(text) is loopback"
        case (169, 254): return b[2] == 169 && b[3] == 254 ? "\(text) is the cloud metadata address" : "\(text) is link-local"
        case (172, 16...31): return "\(text) is private"
        case (192, 0) where b[2] == 0: return "\(text) is reserved (IETF)"
        case (192, 0) where b[2] == 2: return "\(text) is for documentation"
        case (192, 168): return "\(text) is private"
        case (198, 18...19): return "\(text) is for benchmarking"
        case (192, 88) where b[2] == 99: return "\(text) is the 6to4 relay anycast (deprecated)"
        case (198, 51) where b[2] == 100: return "\(text) is for documentation"
        case (203, 0) where b[2] == 113: return "\(text) is for documentation"
        case (224...239, _): return "\(text) is multicast"
        case (240...255, _): return b == [255, 255, 255, 255] ? "\(text) is broadcast" : "\(text) is reserved"
        default: return nil
        }
    }

    /// Request headers a model may not set (credentials, cookies, hop-by-hop, routing).
    public static let refusedHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie", "host", "x-api-key", "api-key",
                                                     "x-goog-api-key", "connection", "transfer-encoding", "te", "upgrade", "forwarded",
                                                     "x-forwarded-for", "x-forwarded-host", "x-real-ip"]

    /// Response headers the model is shown only as "[redacted]".
    public static let sensitiveResponseHeaders: Set<String> = ["set-cookie", "authorization", "proxy-authenticate", "www-authenticate", "x-api-key"]
}
