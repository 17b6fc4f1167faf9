import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// `kernel.command@1`: the CLI's one round trip before it runs a feature's command — the
/// longest declared command starting the line with its target's schemas, else what may
/// follow, else what is available.
final class CommandResolutionTests: XCTestCase {
    func testTheLongestDeclaredCommandWinsWithItsTargetsSchemas() async throws {
        let session = try await FeatureHarness.boot(try FeatureHarness.registryManifest(id: "settings"))
        let set = try await session.call(KernelContracts.Command.self, .init(words: ["settings", "set", "terminal.preferences", "{}", "--revision", "2"]))
        XCTAssertEqual(set.command?.name, "settings set")
        XCTAssertEqual(set.target?.id, "settings.set@1")
        XCTAssertNotNil(set.target?.request["properties"]?["revision"], "the request schema comes with it")

        let partial = try await session.call(KernelContracts.Command.self, .init(words: ["settings", "--json"]))
        XCTAssertNil(partial.command)
        XCTAssertTrue(partial.partial.map(\.name).contains("settings list"), "\(partial.partial.map(\.name))")
        XCTAssertEqual(partial.partial.map(\.name), partial.partial.map(\.name).sorted())

        let unknown = try await session.call(KernelContracts.Command.self, .init(words: ["nope"]))
        XCTAssertNil(unknown.command)
        XCTAssertEqual(unknown.partial, [])
        XCTAssertEqual(unknown.available, ["settings"])
        XCTAssertNil(unknown.disabledFeature)
        await session.shutdown()
    }
}
