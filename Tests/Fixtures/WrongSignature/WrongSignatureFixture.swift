import Foundation
import TermindCore

/// Test fixture: a feature whose descriptor claims another compiler and contracts, as a
/// library built by a different toolchain would. The kernel must refuse it.
final class WrongSignatureFeature: Feature {
    func register(_ registrar: FeatureRegistrar) throws {}
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    let signature = BuildSignature(compiler: "Swift version 5.9 (swift-5.9-RELEASE)", target: TermindLibrary.signature.target,
                                   contractsHash: "0000000000000000")
    let descriptor = FeatureDescriptor(id: "fixture-wrong-signature", version: "1.0.0", abi: FeatureDescriptor.abiVersion,
                                       signature: signature) { WrongSignatureFeature() }
    let record = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
    record.storeBytes(of: FeatureDescriptor.entryMagic, as: UInt64.self)
    record.storeBytes(of: UInt64(FeatureDescriptor.abiVersion), toByteOffset: 8, as: UInt64.self)
    record.storeBytes(of: Unmanaged.passRetained(descriptor).toOpaque(), toByteOffset: 16, as: UnsafeMutableRawPointer.self)
    return record
}
