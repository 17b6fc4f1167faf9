import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import XCTest

/// wol.wake@1 as a client declares it from the published schema (`termind contracts wol.`);
/// the test does not link the plugin's module.
enum WakeOnLAN: Contract {
    struct Request: Codable, Sendable {
        var target: String
        var broadcast: String?
        var port: Int?
        init(target: String, broadcast: String? = nil, port: Int? = nil) {
            self.target = target
            self.broadcast = broadcast
            self.port = port
        }
    }
    struct Response: Codable, Sendable {
        var mac: String
        var broadcast: String
        var port: Int
        var bytes: Int
    }
    static let name = "wol.wake"
    static let effect: Effect = Effect(.write, network: true)
    static let version = 1
    static let summary = "client-side declaration"
}

/// The Swift example plugin with a scripted fake of the Vault's host directory.
final class WakeOnLANPluginTests: XCTestCase {
    struct ScriptedHosts: HostDirectory {
        let hosts: [HostSummary]
        func host(named name: String) async throws -> HostSummary? { hosts.first { $0.label == name || $0.id == name } }
        func allHosts() async throws -> [HostSummary] { hosts }
    }

    private func boot(hosts: [HostSummary]?) async throws -> HarnessSession {
        let manifest = try FeatureHarness.manifest(pluginJSON: Repository.path("Plugins/Examples/WakeOnLAN/plugin.json"))
        let fakes = hosts.map { [PortFake.port(.hostDirectory, ScriptedHosts(hosts: $0))] } ?? []
        let session = try await FeatureHarness.boot(manifest, fakes: fakes)
        XCTAssertEqual(session.status?.state, .running, session.status?.reason ?? "")
        return session
    }

    private func magic(_ mac: [UInt8]) -> [UInt8] {
        [UInt8](repeating: 0xFF, count: 6) + Array([[UInt8]](repeating: mac, count: 16).joined())
    }

    func testWakesAMACAddressWithAMagicPacket() async throws {
        let receiver = try UDPReceiver()
        defer { receiver.close() }
        let session = try await boot(hosts: nil)
        let reply = try await session.call(WakeOnLAN.self, .init(target: "AA-BB-cc-dd-ee-0f", broadcast: "127.0.0.1", port: Int(receiver.port)))
        XCTAssertEqual(reply.mac, "aa:bb:cc:dd:ee:0f")
        XCTAssertEqual(reply.bytes, 102)
        XCTAssertEqual(receiver.receive(), magic([0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0x0F]))
        await session.shutdown()
    }

    func testWakesAVaultHostByItsTagsThroughTheFakePort() async throws {
        let receiver = try UDPReceiver()
        defer { receiver.close() }
        let session = try await boot(hosts: [
            HostSummary(id: "1", label: "gpu-box", address: "10.0.0.5", tags: ["gpu", "mac=0a:0b:0c:0d:0e:0f", "wol-broadcast=127.0.0.1"]),
        ])
        let reply = try await session.call(WakeOnLAN.self, .init(target: "gpu-box", port: Int(receiver.port)))
        XCTAssertEqual(reply.broadcast, "127.0.0.1")
        XCTAssertEqual(receiver.receive(), magic([0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F]))
        await session.shutdown()
    }

    func testExplainsWhatIsMissing() async throws {
        let noVault = try await boot(hosts: nil)
        await assertFails(noVault, .init(target: "gpu-box"), "no Vault is loaded")
        await noVault.shutdown()
        let session = try await boot(hosts: [HostSummary(id: "1", label: "bare", address: "10.0.0.6")])
        await assertFails(session, .init(target: "ghost"), "neither a MAC address nor a saved host")
        await assertFails(session, .init(target: "bare"), "has no valid 'mac=aa:bb:cc:dd:ee:ff' tag")
        await assertFails(session, .init(target: "00:11:22:33:44:55", broadcast: "not-an-ip"), "'not-an-ip' is not an IPv4 address")
        await assertFails(session, .init(target: "00:11:22:33:44:55", port: 70_000), "is not a UDP port")
        await session.shutdown()
    }

    private func assertFails(_ session: HarnessSession, _ request: WakeOnLAN.Request, _ text: String, line: UInt = #line) async {
        do {
            _ = try await session.call(WakeOnLAN.self, request)
            XCTFail("expected failure containing \(text)", line: line)
        } catch {
            XCTAssertTrue("\(error)".contains(text), "\(error)", line: line)
        }
    }
}
