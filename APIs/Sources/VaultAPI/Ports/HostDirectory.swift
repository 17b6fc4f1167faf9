import Foundation
import TermindCore

/// A saved host as other features see it: public metadata only, never credentials.
public struct HostSummary: Sendable, Equatable, Codable {
    public var id: String
    public var label: String
    public var address: String
    public var port: Int
    public var user: String?
    public var tags: [String]

    public init(id: String, label: String, address: String, port: Int = 22, user: String? = nil, tags: [String] = []) {
        self.id = id
        self.label = label
        self.address = address
        self.port = port
        self.user = user
        self.tags = tags
    }

    /// The value of a `key=value` tag, e.g. `mac` for `mac=00:11:22:33:44:55`.
    public func tagValue(_ key: String) -> String? {
        for tag in tags {
            let parts = tag.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0] == key { return String(parts[1]) }
        }
        return nil
    }
}

/// Host lookup, provided by the Vault feature.
public protocol HostDirectory: Sendable {
    /// The host whose id or label equals `name`, or nil.
    func host(named name: String) async throws -> HostSummary?
    func allHosts() async throws -> [HostSummary]
}

extension PortKey where P == any HostDirectory {
    public static var hostDirectory: Self { PortKey("vault.hosts") }
}
