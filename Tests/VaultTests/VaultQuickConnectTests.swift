import Foundation
import TermindCore
import VaultAPI
import TermindHarness
import XCTest

final class VaultQuickConnectTests: XCTestCase {
    private var session: HarnessSession!

    override func setUp() async throws {
        let manifest = try FeatureHarness.registryManifest(id: "vault")
        session = try await FeatureHarness.boot(manifest)
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "bastion.example.com", label: "bastion", port: 2200, user: "jump"))
        _ = try await session.call(VaultContracts.HostAdd.self, .init(address: "10.0.0.9", label: "db", user: "postgres"))
    }

    override func tearDown() async throws { await session?.shutdown() }

    private func resolve(_ input: String) async throws -> [ConnectContracts.Endpoint] {
        try await session.call(ConnectContracts.Resolve.self, .init(input: input)).route
    }

    func testSavedAliasesSupplyMetadataAndExplicitValuesWin() async throws {
        let plain = try await resolve("db")
        XCTAssertEqual(plain.map(\.address), ["10.0.0.9"])
        XCTAssertEqual(plain[0].user, "postgres")
        XCTAssertNotNil(plain[0].savedHost, "an unchanged alias is the saved host")

        let route = try await resolve("ssh -J bastion -p 5433 -l admin db")
        XCTAssertEqual(route.map(\.address), ["bastion.example.com", "10.0.0.9"])
        XCTAssertEqual(route[0].port, 2200)
        XCTAssertEqual(route[0].user, "jump")
        XCTAssertEqual(route[1].port, 5433, "the explicit port wins over the saved one")
        XCTAssertEqual(route[1].user, "admin")
        XCTAssertNil(route[1].savedHost, "an overridden endpoint is a new one")
        XCTAssertEqual(route[1].alias, "db")

        let literal = try await resolve("carol@[2001:db8::7]:2022")
        XCTAssertEqual(literal[0].address, "2001:db8::7")
        XCTAssertEqual(literal[0].port, 2022)
        let hosts = try await session.call(VaultContracts.HostList.self, .init()).hosts
        XCTAssertEqual(hosts.count, 2, "resolving saves nothing")
    }

    func testRoutesAreBoundedAndCyclesRejectedBeforeAnythingConnects() async throws {
        let nine = (1...8).map { "h\($0).example" }.joined(separator: ",")
        do {
            _ = try await resolve("ssh -J \(nine) target.example")
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "quick_connect.route_too_long", error.message)
        }
        do {
            // The alias and its address are the same host.
            _ = try await resolve("ssh -J db,10.0.0.9 other.example")
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "quick_connect.route_cycle", error.message)
        }
        do {
            _ = try await resolve("ssh -X db")
            XCTFail()
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("-X"), error.message)
        }
    }

    func testSaveCopiesOnlyChangedEndpointsAndLeavesOriginals() async throws {
        let before = try await session.call(VaultContracts.HostGet.self, .init(host: "db"))
        let saved = try await session.call(ConnectContracts.Save.self, .init(input: "ssh -J bastion,new-hop.example -p 5433 db", label: "db-5433"))
        XCTAssertEqual(saved.created.map(\.label), ["new-hop.example", "db-5433"])
        XCTAssertEqual(saved.host.port, 5433)
        XCTAssertEqual(saved.host.address, "10.0.0.9")
        let bastion = try await session.call(VaultContracts.HostGet.self, .init(host: "bastion"))
        XCTAssertEqual(saved.host.jump, [bastion.id, saved.created[0].id])
        let after = try await session.call(VaultContracts.HostGet.self, .init(host: "db"))
        XCTAssertEqual(after, before, "the original is unchanged")

        let unchanged = try await session.call(ConnectContracts.Save.self, .init(input: "db"))
        XCTAssertEqual(unchanged.created, [])
        XCTAssertEqual(unchanged.host.id, before.id)
    }

    func testAFailedSaveLeavesNothingBehind() async throws {
        // The target's label is taken: the new hop must not be kept either.
        do {
            _ = try await session.call(ConnectContracts.Save.self, .init(input: "ssh -J fresh-hop.example target.example", label: "db"))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "vault.label_taken")
        }
        let labels = try await session.call(VaultContracts.HostList.self, .init()).hosts.map(\.label)
        XCTAssertEqual(labels, ["bastion", "db"])
    }
}
