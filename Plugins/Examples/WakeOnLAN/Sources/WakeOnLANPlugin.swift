import Foundation
import Synchronization
import TermindCore
import VaultAPI

/// wol — an example termind plugin written in Swift.
///
/// Wakes a machine (a GPU box that sleeps at night, say) with a Wake-on-LAN magic
/// packet: six 0xFF bytes then the MAC address sixteen times, sent over UDP. The target is
/// a MAC address, or the label of a Vault host tagged `mac=aa:bb:cc:dd:ee:ff` (optionally
/// `wol-broadcast=10.0.0.255`), looked up through the optional `vault.hosts` port.
///
///     termind --plugins DIR wol 00:11:22:33:44:55
///     termind --plugins DIR wol gpu-box --broadcast 192.168.1.255
public enum WakeOnLAN: Contract {
    public struct Request: Codable, Sendable, Equatable {
        /// A MAC address (`aa:bb:cc:dd:ee:ff` or `aa-bb-...`) or a Vault host label.
        public var target: String
        /// Where to send the packet; default 255.255.255.255 (or the host's `wol-broadcast` tag).
        public var broadcast: String?
        /// UDP port; default 9.
        public var port: Int?
        public init(target: String, broadcast: String? = nil, port: Int? = nil) {
            self.target = target
            self.broadcast = broadcast
            self.port = port
        }
    }

    public struct Response: Codable, Sendable, Equatable {
        public var mac: String
        public var broadcast: String
        public var port: Int
        public var bytes: Int
    }

    public static let name = "wol.wake"

    public static let effect: Effect = Effect(.write, network: true)
    public static let version = 1
    public static let summary = "Send a Wake-on-LAN magic packet to a MAC address or a Vault host tagged mac=…."
}

final class WakeOnLANFeature: Feature {
    private let state = Mutex<FeatureContext?>(nil)

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.handle(WakeOnLAN.self) { [self] request, _ in try await wake(request) }
    }

    func start(_ context: FeatureContext) async throws {
        state.withLock { $0 = context }
    }

    private func wake(_ request: WakeOnLAN.Request) async throws -> WakeOnLAN.Response {
        guard let context = state.withLock({ $0 }) else { throw TermindError.internalFailure("wol is not started.") }
        var mac = MagicPacket.parseMAC(request.target)
        var broadcast = request.broadcast
        if mac == nil {
            guard let hosts = context.ports.optional(.hostDirectory) else {
                throw TermindError.badRequest("'\(request.target)' is not a MAC address (aa:bb:cc:dd:ee:ff), and no Vault is loaded to look it up as a host.")
            }
            guard let host = try await hosts.host(named: request.target) else {
                throw TermindError(code: "wol.unknown_host", message: "'\(request.target)' is neither a MAC address nor a saved host.")
            }
            guard let tagged = host.tagValue("mac"), let parsed = MagicPacket.parseMAC(tagged) else {
                throw TermindError(code: "wol.no_mac", message: "Host '\(host.label)' has no valid 'mac=aa:bb:cc:dd:ee:ff' tag; add one to wake it.")
            }
            mac = parsed
            broadcast = broadcast ?? host.tagValue("wol-broadcast")
        }
        let port = request.port ?? 9
        guard (1...65_535).contains(port) else { throw TermindError.badRequest("body.port: \(port) is not a UDP port (1–65535).") }
        let address = broadcast ?? "255.255.255.255"
        let packet = MagicPacket.build(mac: mac!)
        try MagicPacket.send(packet, to: address, port: UInt16(port))
        context.logger.info("wol.sent", ["bytes": .int(packet.count)])
        return .init(mac: MagicPacket.format(mac!), broadcast: address, port: port, bytes: packet.count)
    }
}

enum MagicPacket {
    static func parseMAC(_ text: String) -> [UInt8]? {
        let parts = text.split(whereSeparator: { $0 == ":" || $0 == "-" })
        guard parts.count == 6 else { return nil }
        let bytes = parts.compactMap { $0.count == 2 ? UInt8($0, radix: 16) : nil }
        return bytes.count == 6 ? bytes : nil
    }

    static func format(_ mac: [UInt8]) -> String { mac.map { String(format: "%02x", $0) }.joined(separator: ":") }

    static func build(mac: [UInt8]) -> [UInt8] {
        [UInt8](repeating: 0xFF, count: 6) + Array([[UInt8]](repeating: mac, count: 16).joined())
    }

    static func send(_ packet: [UInt8], to address: String, port: UInt16) throws {
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_port = port.bigEndian
        guard inet_pton(AF_INET, address, &target.sin_addr) == 1 else {
            throw TermindError.badRequest("body.broadcast: '\(address)' is not an IPv4 address.")
        }
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw TermindError(code: "wol.socket", message: "Cannot open a UDP socket: \(String(cString: strerror(errno))).") }
        defer { close(fd) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &yes, socklen_t(MemoryLayout<Int32>.size))
        let sent = packet.withUnsafeBytes { raw in
            withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard sent == packet.count else {
            throw TermindError(code: "wol.send", message: "Sending the magic packet to \(address):\(port) failed: \(String(cString: strerror(errno))).")
        }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "wol", version: "1.0.0", signature: TermindLibrary.signature) { WakeOnLANFeature() }
}
