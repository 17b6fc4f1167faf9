import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import TermindSSH
import XCTest

/// Boots real kernels that dlopen the fixture and example libraries from the build folder.
final class KernelLifecycleTests: XCTestCase {
    private func manifest(_ id: String, product: String, order: Int = 100, requires: [String] = [], provides: [String] = [],
                          needsPorts: [String] = [], optionalPorts: [String] = [], contracts: [String] = [], permanent: Bool = false,
                          version: String = "1.0.0") -> FeatureManifest {
        FeatureManifest(id: id, version: version, library: FeatureHarness.libraryPath(product: product), order: order, permanent: permanent,
                        dependencies: .init(required: requires), ports: .init(provides: provides, requires: needsPorts, optional: optionalPorts),
                        contracts: contracts, source: "test")
    }

    private var echo: FeatureManifest {
        manifest("fixture-echo", product: "TermindFixtureEcho", order: 10, provides: ["vault.hosts"], contracts: ["fixture-echo.echo@1"])
    }

    private func boot(_ manifests: [FeatureManifest], sink: LogSink = .disabled()) async throws -> (Kernel, [FeatureStatus]) {
        var configuration = KernelConfiguration(registryPath: nil)
        configuration.manifests = manifests
        let kernel = Kernel(configuration: configuration, sink: sink)
        return (kernel, try await kernel.boot())
    }

    func testAFeatureLoadsRegistersStartsAndAnswersItsContract() async throws {
        let (kernel, statuses) = try await boot([echo])
        XCTAssertEqual(statuses.map(\.state), [.running])
        let reply = try await kernel.call("fixture-echo.echo@1", body: Data(#"{"message": "hi", "secret": "abc"}"#.utf8))
        XCTAssertEqual(try JSONCoding.parse(reply, source: "t"), .object(["message": .string("hi"), "secretLength": .integer(3)]))
        await kernel.shutdown()
        let after = await kernel.featureStatuses()
        XCTAssertEqual(after.map(\.state), [.stopped])
    }

    func testTheKernelSharesOneSSHConnectionPoolWithFeaturesThatListIt() async throws {
        // Not listed: no pool.
        let (plain, _) = try await boot([echo])
        XCTAssertNil(plain.port(.sshConnections))
        await plain.shutdown()
        var user = echo
        user.ports.requires = ["kernel.ssh"]
        let (kernel, statuses) = try await boot([user])
        XCTAssertEqual(statuses.map(\.state), [.running])
        let view = try XCTUnwrap(kernel.port(.sshConnections))
        // A feature gets a view of the kernel's one pool: opening and leasing, never the pool
        // itself (its routes, closeAll, closeIdle are the kernel's; the pool does not even
        // conform to SSHConnections, so no cast from the port can reach it).
        XCTAssertTrue(view is SSHConnectionsView)
        let routes = await kernel.sshConnections.routes
        XCTAssertEqual(routes, [])
        await kernel.shutdown()
    }

    func testAPortCrossesTwoLibrariesWithoutEitherImportingTheOther() async throws {
        // wol (one .so) looks up "gpu-box" through vault.hosts provided by the echo fixture (another .so);
        // the fixture tags it with mac=00:11:22:33:44:55 and wol-broadcast=127.0.0.1.
        let receiver = try UDPReceiver()
        defer { receiver.close() }
        let wol = try FeatureHarness.manifest(pluginJSON: Repository.path("Plugins/Examples/WakeOnLAN/plugin.json"))
        let (kernel, statuses) = try await boot([echo, wol])
        XCTAssertEqual(statuses.map(\.id), ["fixture-echo", "wol"], "the provider boots before the feature using its port")
        XCTAssertEqual(statuses.map(\.state), [.running, .running])
        let reply = try await kernel.call("wol.wake@1", body: Data(#"{"target": "gpu-box", "port": \#(receiver.port)}"#.utf8))
        XCTAssertEqual(try JSONCoding.parse(reply, source: "t")["mac"], .string("00:11:22:33:44:55"))
        let packet = try XCTUnwrap(receiver.receive())
        XCTAssertEqual(packet, [UInt8](repeating: 0xFF, count: 6) + Array([[UInt8]](repeating: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55], count: 16).joined()))
        await kernel.shutdown()
    }

    func testAFeatureThatThrowsAtStartIsDisabledWithItsDependentsAndTheRestRuns() async throws {
        let failing = manifest("fixture-failing", product: "TermindFixtureFailingStart", order: 1)
        var dependent = echo
        dependent.dependencies.required = ["fixture-failing"]
        let wol = try FeatureHarness.manifest(pluginJSON: Repository.path("Plugins/Examples/WakeOnLAN/plugin.json"))
        let (kernel, statuses) = try await boot([failing, dependent, wol])
        let byID = Dictionary(uniqueKeysWithValues: statuses.map { ($0.id, $0) })
        XCTAssertEqual(byID["fixture-failing"]?.state, .disabled)
        XCTAssertEqual(byID["fixture-failing"]?.reason, "feature 'fixture-failing': the fixture refuses to start (as designed)")
        XCTAssertEqual(byID["fixture-echo"]?.state, .disabled)
        XCTAssertTrue(byID["fixture-echo"]?.reason?.contains("requires 'fixture-failing'") ?? false)
        XCTAssertEqual(byID["wol"]?.state, .running)
        // The dependent's contract was withdrawn; the survivor's is routed.
        let routed = kernel.contractInfos().map(\.id)
        XCTAssertFalse(routed.contains("fixture-echo.echo@1"))
        XCTAssertTrue(routed.contains("wol.wake@1"))
        await kernel.shutdown()
    }

    func testAPermanentFeatureThatFailsToStartStopsBoot() async throws {
        let failing = manifest("fixture-failing", product: "TermindFixtureFailingStart", permanent: true)
        do {
            _ = try await boot([echo, failing])
            XCTFail("boot should fail")
        } catch let failure as BootFailure {
            XCTAssertEqual(failure.problems.first?.featureID, "fixture-failing")
            XCTAssertTrue(failure.description.contains("Permanent feature 'fixture-failing' cannot run"), failure.description)
        }
    }

    func testADescriptorThatDoesNotMatchTheManifestIsRefused() async throws {
        var wrongVersion = echo
        wrongVersion.version = "2.0.0"
        let (_, statuses) = try await boot([wrongVersion])
        XCTAssertEqual(statuses.first?.state, .disabled)
        XCTAssertEqual(statuses.first?.reasonCode, "feature.descriptor_mismatch")
        XCTAssertTrue(statuses.first?.reason?.contains("descriptor says version '1.0.0' but the manifest says '2.0.0'") ?? false)

        var wrongID = manifest("impostor", product: "TermindFixtureEcho", provides: ["vault.hosts"])
        wrongID.order = 1
        let (_, second) = try await boot([wrongID])
        XCTAssertTrue(second.first?.reason?.contains("descriptor says id 'fixture-echo'") ?? false)
    }

    func testASwiftFeatureBuiltByAnotherCompilerIsRefused() async throws {
        let (_, statuses) = try await boot([manifest("fixture-wrong-signature", product: "TermindFixtureWrongSignature")])
        XCTAssertEqual(statuses.first?.reasonCode, "feature.signature_mismatch")
        XCTAssertTrue(statuses.first?.reason?.contains("Swift version 5.9") ?? false, statuses.first?.reason ?? "")
    }

    func testACLibraryLabelledSwiftIsRefusedWithoutCrashing() async throws {
        var mislabelled = manifest("digest", product: "TermindDigest", contracts: ["digest.file@1"])
        mislabelled.kind = .swift
        let (_, statuses) = try await boot([mislabelled])
        XCTAssertEqual(statuses.first?.state, .disabled)
        XCTAssertTrue(statuses.first?.reason?.contains("does not export the entry symbol 'termind_feature_entry_v1'") ?? false, statuses.first?.reason ?? "")
    }

    func testPublishingUndeclaredOrMissingContractsAndPortsIsRefused() async throws {
        var undeclared = echo
        undeclared.contracts = []
        let (_, a) = try await boot([undeclared])
        XCTAssertEqual(a.first?.reasonCode, "feature.undeclared_contract")
        var missing = echo
        missing.contracts.append("fixture-echo.other@1")
        let (_, b) = try await boot([missing])
        XCTAssertEqual(b.first?.reasonCode, "feature.missing_contract")
        var port = echo
        port.ports.provides = []
        let (_, c) = try await boot([port])
        XCTAssertEqual(c.first?.reasonCode, "feature.undeclared_port")
    }

    func testAFeatureOnlySeesPortsItDeclared() async throws {
        // wol without "vault.hosts" in its manifest cannot reach the port, even though it is provided.
        var wol = try FeatureHarness.manifest(pluginJSON: Repository.path("Plugins/Examples/WakeOnLAN/plugin.json"))
        wol.ports.optional = []
        let (kernel, _) = try await boot([echo, wol])
        do {
            _ = try await kernel.call("wol.wake@1", body: Data(#"{"target": "gpu-box"}"#.utf8))
            XCTFail("an undeclared port must not be reachable")
        } catch let error as TermindError {
            XCTAssertTrue(error.message.contains("no Vault is loaded"), error.message)
        }
        await kernel.shutdown()
    }

    func testTheRegistryIsFrozenAndCallsOfUnknownContractsFailClearly() async throws {
        let (kernel, _) = try await boot([echo])
        do {
            _ = try await kernel.call("vault.host.list@1", body: Data("{}".utf8))
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "contract.unknown")
            XCTAssertTrue(error.message.contains("termind contracts"))
        }
        do {
            _ = try await kernel.call("not a contract", body: Data())
            XCTFail()
        } catch let error as TermindError {
            XCTAssertEqual(error.code, "request.invalid")
        }
        await kernel.shutdown()
    }

    func testKernelContractsReportFeaturesContractsAndVersion() async throws {
        let (kernel, _) = try await boot([echo])
        let features = try await kernel.call(KernelContracts.Features.self, Empty())
        XCTAssertEqual(features.features.map(\.id), ["fixture-echo"])
        let contracts = try await kernel.call(KernelContracts.Contracts.self, .init(prefix: "fixture-echo."))
        XCTAssertEqual(contracts.contracts.map(\.id), ["fixture-echo.echo@1"])
        XCTAssertEqual(contracts.contracts.first?.request["required"], .array([.string("message"), .string("secret")]))
        let version = try await kernel.call(KernelContracts.Version.self, Empty())
        XCTAssertTrue(version.signature.compiler.hasPrefix("Swift version 6."), version.signature.compiler)
        XCTAssertEqual(version.signature.contractsHash.count, 16)
        await kernel.shutdown()
    }

    func testASecretPassedThroughAFeatureNeverReachesTheLogOrAnError() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let secret = "S3cr3t-\(UUID().uuidString)"
        let sink = try LogSink.file(at: dir.file("termind.log"), level: .debug)
        let (kernel, _) = try await boot([echo], sink: sink)
        // The secret travels as `Secret`; the fixture logs the message, the secret and the
        // whole request in every way LogValue allows (see Tests/Fixtures/Echo).
        _ = try await kernel.call("fixture-echo.echo@1", body: Data(#"{"message": "hello", "secret": "\#(secret)"}"#.utf8))
        var errorText = ""
        do {
            _ = try await kernel.call("fixture-echo.echo@1", body: Data(#"{"message": 5, "secret": "\#(secret)", "extra": "\#(secret)"}"#.utf8))
        } catch { errorText = "\(error)" }
        await kernel.shutdown()
        let log = try String(contentsOfFile: dir.file("termind.log"), encoding: .utf8)
        XCTAssertTrue(log.contains("fixture.echo.handled message=hello secret=<redacted>"), "the feature did log the call:\n\(log)")
        XCTAssertTrue(log.contains("kernel.feature.started"), log)
        XCTAssertFalse(log.contains(secret), "the secret reached the log")
        XCTAssertFalse(log.contains("S3cr3t"), "part of the secret reached the log")
        XCTAssertTrue(errorText.contains("body.message: expected string"), errorText)
        XCTAssertFalse(errorText.contains(secret), "the secret reached an error message")
    }
}
