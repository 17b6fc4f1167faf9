import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import TermindKernel
import XCTest

/// The build signature covers the whole ABI surface a library is built against — every
/// Core module's sources and every feature API module — and a library built against other
/// sources is refused at load with a message, never loaded to crash later.
final class BuildSignatureTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    /// What the BuildSignature plugin hashes: every Swift, C, header and module map file
    /// under Core/Sources and APIs/Sources, in byte order of their paths.
    private func expectedHash() throws -> String {
        var files: [String] = []
        for root in ["Core/Sources", "APIs/Sources"] {
            let base = Repository.path(root)
            for name in FileManager.default.enumerator(atPath: base)?.compactMap({ $0 as? String }) ?? []
            where [".swift", ".h", ".c", ".modulemap"].contains(where: { name.hasSuffix($0) }) {
                files.append(base + "/" + name)
            }
        }
        XCTAssertTrue(files.contains { $0.hasSuffix("APIs/Sources/VaultAPI/Contracts/VaultContracts.swift") })
        XCTAssertTrue(files.contains { $0.hasSuffix("Core/Sources/TermindSSH/SSHConnection.swift") })
        var all = Data()
        for file in files.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
            all += try XCTUnwrap(FileManager.default.contents(atPath: file))
        }
        return String(Digest.sha256(all).hexEncoded.prefix(16))
    }

    func testTheSignatureHashesEveryCoreAndAPISource() throws {
        XCTAssertEqual(BuildSignature.host.contractsHash, try expectedHash(),
                       "a Core or API source changed without changing the hash, or the hash covers other files")
    }

    func testALibraryBuiltAgainstOtherCoreOrAPISourcesIsRefusedWithAClearMessage() async throws {
        // The fixture exactly as a build against a changed Core would produce it: the same
        // code with another ABI hash in its signature (patched in a copy of the library).
        let original = try Data(contentsOf: URL(fileURLWithPath: FeatureHarness.libraryPath(product: "TermindFixtureEcho")))
        let hash = Data(BuildSignature.host.contractsHash.utf8)
        let other = Data(String(repeating: "f", count: hash.count).utf8)
        var patched = original
        var replaced = 0
        while let range = patched.range(of: hash) {
            patched.replaceSubrange(range, with: other)
            replaced += 1
        }
        XCTAssertGreaterThan(replaced, 0, "the signature is embedded in the library")
        let path = directory.file("libTermindFixtureEcho.so")
        try patched.write(to: URL(fileURLWithPath: path))
        var configuration = KernelConfiguration(registryPath: nil)
        configuration.manifests = [FeatureManifest(id: "fixture-echo", version: "1.0.0", library: path, order: 10,
                                                   ports: .init(provides: ["vault.hosts"]), contracts: ["fixture-echo.echo@1"], source: "test")]
        let kernel = Kernel(configuration: configuration, sink: .disabled())
        let statuses = try await kernel.boot()
        XCTAssertEqual(statuses.first?.state, .disabled)
        XCTAssertEqual(statuses.first?.reasonCode, "feature.signature_mismatch")
        let reason = statuses.first?.reason ?? ""
        XCTAssertTrue(reason.contains("built against other Core or feature API sources"), reason)
        XCTAssertTrue(reason.contains(String(repeating: "f", count: 16)), reason)
        await kernel.shutdown()
    }
}
