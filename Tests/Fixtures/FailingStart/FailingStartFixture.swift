import Foundation
import TermindCore

/// Test fixture: a Swift feature that registers fine and throws from `start`.
final class FailingStartFeature: Feature {
    func register(_ registrar: FeatureRegistrar) throws {}
    func start(_ context: FeatureContext) async throws {
        throw TermindError(code: "fixture.start_refused", message: "the fixture refuses to start (as designed)")
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-failing", version: "1.0.0", signature: TermindLibrary.signature) { FailingStartFeature() }
}
