import FoundationEssentials

/// What a Swift feature library hands the kernel from its entry point. Must match the
/// manifest (id, version, ABI); `signature` must equal the host's, because Swift has no
/// stable ABI on Linux.
public final class FeatureDescriptor: Sendable {
    public let id: String
    public let version: String
    public let abi: Int
    public let signature: BuildSignature
    public let makeFeature: @Sendable () -> any Feature

    public init(id: String, version: String, abi: Int, signature: BuildSignature, makeFeature: @escaping @Sendable () -> any Feature) {
        self.id = id
        self.version = version
        self.abi = abi
        self.signature = signature
        self.makeFeature = makeFeature
    }

    /// The value a feature's `@_cdecl("termind_feature_entry_v1")` function returns.
    /// `signature` is `TermindLibrary.signature`, generated into the feature's own module by the
    /// BuildSignature plugin, so it records the compiler and contracts the *feature* was
    /// built with.
    public static func export(id: String, version: String, signature: BuildSignature,
                              makeFeature: @escaping @Sendable () -> any Feature) -> UnsafeMutableRawPointer {
        let descriptor = FeatureDescriptor(id: id, version: version, abi: FeatureDescriptor.abiVersion,
                                           signature: signature, makeFeature: makeFeature)
        // A small record with a magic header, so the kernel can tell a Swift feature's
        // answer from whatever a mislabelled C library returns before touching an object.
        let record = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
        record.storeBytes(of: FeatureDescriptor.entryMagic, as: UInt64.self)
        record.storeBytes(of: UInt64(FeatureDescriptor.abiVersion), toByteOffset: 8, as: UInt64.self)
        record.storeBytes(of: Unmanaged.passRetained(descriptor).toOpaque(), toByteOffset: 16, as: UnsafeMutableRawPointer.self)
        return record
    }

    /// "TRMNDFE1": the first 8 bytes of every Swift feature entry record.
    public static let entryMagic: UInt64 = 0x5452_4D4E_4446_4531

    /// The Swift feature ABI this Core speaks; bumped only with an incompatible change.
    public static let abiVersion = 1
    /// The entry symbol every Swift feature library exports.
    public static let entrySymbol = "termind_feature_entry_v1"
}

/// Compiler, target and contracts a Swift image was built with.
public struct BuildSignature: Sendable, Equatable, Codable, CustomStringConvertible {
    public let compiler: String
    public let target: String
    public let contractsHash: String

    public init(compiler: String, target: String, contractsHash: String) {
        self.compiler = compiler
        self.target = target
        self.contractsHash = contractsHash
    }

    /// The signature of this Core (and so of the host that loaded it).
    public static let host = BuildSignature(compiler: GeneratedBuildSignature.compiler, target: GeneratedBuildSignature.target,
                                            contractsHash: GeneratedBuildSignature.contractsHash)

    public var description: String { "\(compiler) / \(target) / ABI \(contractsHash)" }
}
