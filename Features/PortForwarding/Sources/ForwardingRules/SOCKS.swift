import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The SOCKS server side of a dynamic forward, as a pure state machine over the bytes a
/// client sends: SOCKS5 (RFC 1928; no authentication; CONNECT; IPv4, IPv6 and domain names,
/// which the SSH server resolves) and SOCKS4/4a. Anything else is refused with the
/// protocol's own reply where it has one. The whole handshake is at most `maximumBytes`.
public struct SOCKSHandshake: Sendable {
    public enum Version: Sendable, Equatable { case four, five }

    public enum Step: Sendable, Equatable {
        /// Send `reply` (if any) and read more.
        case more(reply: [UInt8])
        /// The client wants `host`:`port`; answer with `success` or `failure` once known.
        case connect(host: String, port: Int, version: Version)
        /// Send `reply` (if any), then close: `reason` says why (for the log, never the bytes).
        case refuse(reply: [UInt8], reason: String)
    }

    /// A request is at most 4 + 255 + 2 bytes for SOCKS5 after its greeting; SOCKS4a user
    /// ids and names are capped so a client cannot make us buffer without bound.
    public static let maximumBytes = 1024

    private var buffer: [UInt8] = []
    private var phase = Phase.start
    private enum Phase { case start, socks5Request, done }

    public init() {}

    /// Feeds what arrived; returns what to do. After `.connect` or `.refuse`, feeding more is an error.
    public mutating func feed(_ bytes: [UInt8]) -> Step {
        guard phase != .done else { return .refuse(reply: [], reason: "data after the request") }
        buffer += bytes
        if buffer.count > Self.maximumBytes {
            phase = .done
            return .refuse(reply: [], reason: "a handshake longer than \(Self.maximumBytes) bytes")
        }
        switch phase {
        case .start:
            guard let version = buffer.first else { return .more(reply: []) }
            switch version {
            case 5: return greeting5()
            case 4: return request4()
            default:
                phase = .done
                return .refuse(reply: [], reason: "not a SOCKS request (version byte \(version))")
            }
        case .socks5Request:
            return request5()
        case .done:
            return .refuse(reply: [], reason: "data after the request")
        }
    }

    private mutating func greeting5() -> Step {
        guard buffer.count >= 2 else { return .more(reply: []) }
        let count = Int(buffer[1])
        guard buffer.count >= 2 + count else { return .more(reply: []) }
        let methods = buffer[2..<(2 + count)]
        buffer.removeFirst(2 + count)
        guard methods.contains(0) else {
            phase = .done
            return .refuse(reply: [5, 0xFF], reason: "the client offers no method without authentication")
        }
        phase = .socks5Request
        if buffer.isEmpty { return .more(reply: [5, 0]) }
        // Pipelined: the request came with the greeting.
        switch request5() {
        case .more: return .more(reply: [5, 0])
        case .connect(let host, let port, let version):
            methodReplyPending = true
            return .connect(host: host, port: port, version: version)
        case .refuse(let reply, let reason): return .refuse(reply: [5, 0] + reply, reason: reason)
        }
    }

    /// The method choice still to send before the connect's reply (a client that sent its
    /// request with its greeting).
    private var methodReplyPending = false
    private var version: Version = .five

    private mutating func request5() -> Step {
        guard buffer.count >= 4 else { return .more(reply: []) }
        guard buffer[0] == 5 else {
            phase = .done
            return .refuse(reply: Self.reply5(1), reason: "a request with version \(buffer[0])")
        }
        let command = buffer[1]
        let length: Int
        switch buffer[3] {
        case 1: length = 4
        case 4: length = 16
        case 3:
            guard buffer.count >= 5 else { return .more(reply: []) }
            length = 1 + Int(buffer[4])
        default:
            phase = .done
            return .refuse(reply: Self.reply5(8), reason: "address type \(buffer[3])")
        }
        guard buffer.count >= 4 + length + 2 else { return .more(reply: []) }
        phase = .done
        guard command == 1 else { return .refuse(reply: Self.reply5(7), reason: "command \(command) (only CONNECT is served)") }
        let address = Array(buffer[4..<(4 + length)])
        let port = Int(buffer[4 + length]) << 8 | Int(buffer[5 + length])
        let host: String
        switch buffer[3] {
        case 1: host = address.map(String.init).joined(separator: ".")
        case 4: host = Self.ipv6(address)
        default:
            let name = Array(address.dropFirst())
            guard !name.isEmpty, name.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                return .refuse(reply: Self.reply5(1), reason: "a domain name that is empty or not printable ASCII")
            }
            host = String(decoding: name, as: UTF8.self)
        }
        guard port > 0 else { return .refuse(reply: Self.reply5(1), reason: "port 0") }
        buffer.removeFirst(4 + length + 2)
        version = .five
        return .connect(host: host, port: port, version: .five)
    }

    private mutating func request4() -> Step {
        // VN CD DSTPORT(2) DSTIP(4) USERID NUL [HOST NUL]
        guard buffer.count >= 9 else { return .more(reply: []) }
        guard let userEnd = buffer[8...].firstIndex(of: 0) else { return .more(reply: []) }
        let command = buffer[1]
        let port = Int(buffer[2]) << 8 | Int(buffer[3])
        let ip = Array(buffer[4..<8])
        var host = ip.map(String.init).joined(separator: ".")
        var consumed = userEnd + 1
        if ip[0] == 0 && ip[1] == 0 && ip[2] == 0 && ip[3] != 0 {
            // SOCKS4a: the name follows the user id.
            guard let nameEnd = buffer[(userEnd + 1)...].firstIndex(of: 0) else { return .more(reply: []) }
            let name = Array(buffer[(userEnd + 1)..<nameEnd])
            phase = .done
            guard !name.isEmpty, name.count <= 255, name.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                return .refuse(reply: Self.reply4(granted: false), reason: "a SOCKS4a name that is empty, too long or not printable ASCII")
            }
            host = String(decoding: name, as: UTF8.self)
            consumed = nameEnd + 1
        }
        phase = .done
        guard command == 1 else { return .refuse(reply: Self.reply4(granted: false), reason: "command \(command) (only CONNECT is served)") }
        guard port > 0 else { return .refuse(reply: Self.reply4(granted: false), reason: "port 0") }
        buffer.removeFirst(consumed)
        version = .four
        return .connect(host: host, port: port, version: .four)
    }

    /// Bytes after the request (a client that spoke before the reply): they belong to the flow.
    public var leftover: [UInt8] { buffer }

    /// The reply once the connection through the server is open, after `.connect`.
    public var success: [UInt8] {
        (methodReplyPending ? [5, 0] : []) + (version == .five ? Self.reply5(0) : Self.reply4(granted: true))
    }

    /// The reply when it could not be opened: `refused` when the server said the target
    /// refused or could not be reached (SOCKS5 code 5), else a general failure (1).
    public func failure(refused: Bool) -> [UInt8] {
        (methodReplyPending ? [5, 0] : []) + (version == .five ? Self.reply5(refused ? 5 : 1) : Self.reply4(granted: false))
    }

    static func reply5(_ code: UInt8) -> [UInt8] { [5, code, 0, 1, 0, 0, 0, 0, 0, 0] }
    static func reply4(granted: Bool) -> [UInt8] { [0, granted ? 0x5A : 0x5B, 0, 0, 0, 0, 0, 0] }

    static func ipv6(_ bytes: [UInt8]) -> String {
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return "::" }
        return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
