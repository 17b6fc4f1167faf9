import CTermindPluginABI
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Opens a feature's library and checks that what it hands back matches its manifest.
enum FeatureLoader {
    /// `protected`: termind's database and secret store files, which a plugin in a process
    /// of its own may never be granted access to.
    static func load(_ m: FeatureManifest, sink: LogSink, hostVersion: String, protected: [String] = []) throws -> any Feature {
        // Its code runs in a process of its own: nothing of it is opened here.
        if m.kind == .c && m.isolation == .process {
            return ProcessPluginFeature(manifest: m, hostVersion: hostVersion, logLevel: sink.minimumLevel, protected: protected)
        }
        let library = try DynamicLibrary.open(m.libraryPath, feature: m.id)
        switch m.kind {
        case .swift: return try loadSwift(m, library: library)
        case .c: return try loadC(m, library: library, sink: sink, hostVersion: hostVersion)
        }
    }

    private static func loadSwift(_ m: FeatureManifest, library: DynamicLibrary) throws -> any Feature {
        typealias Entry = @convention(c) () -> UnsafeMutableRawPointer?
        let symbol = try library.symbol(FeatureDescriptor.entrySymbol, feature: m.id)
        let entry = unsafeBitCast(symbol, to: Entry.self)
        guard let record = entry() else {
            throw mismatch(m, "its entry point returned nothing")
        }
        guard record.load(as: UInt64.self) == FeatureDescriptor.entryMagic else {
            throw mismatch(m, "its entry point did not return a Swift feature record (is it a C plugin? then set \"kind\": \"c\")", field: "kind")
        }
        let recordABI = record.load(fromByteOffset: 8, as: UInt64.self)
        guard recordABI == UInt64(FeatureDescriptor.abiVersion) else {
            throw mismatch(m, "it was built for Swift feature ABI \(recordABI), this termind speaks \(FeatureDescriptor.abiVersion)", field: "abi")
        }
        let raw = record.load(fromByteOffset: 16, as: UnsafeMutableRawPointer.self)
        let object = Unmanaged<AnyObject>.fromOpaque(raw).takeRetainedValue()
        guard let descriptor = object as? FeatureDescriptor else {
            throw mismatch(m, "its entry point did not return a FeatureDescriptor of this Core (the library embeds its own copy of TermindCore or was built against another)")
        }
        try check(m, id: descriptor.id, version: descriptor.version, abi: descriptor.abi)
        let host = BuildSignature.host
        guard descriptor.signature == host else {
            let why = descriptor.signature.compiler != host.compiler || descriptor.signature.target != host.target
                ? "it was built by \(descriptor.signature.compiler) for \(descriptor.signature.target), but this termind by \(host.compiler) for \(host.target)"
                : "it was built against other Core or feature API sources (ABI hash \(descriptor.signature.contractsHash), this termind \(host.contractsHash))"
            throw FeatureProblem(featureID: m.id, field: "library", code: .featureSignatureMismatch,
                                 message: "feature '\(m.id)' is not loaded: \(why). Swift's ABI is not stable: rebuild the feature with this toolchain against this Core and APIs.")
        }
        return descriptor.makeFeature()
    }

    private static func loadC(_ m: FeatureManifest, library: DynamicLibrary, sink: LogSink, hostVersion: String) throws -> any Feature {
        typealias Entry = @convention(c) (UnsafePointer<termind_host_api>?) -> UnsafePointer<termind_plugin_descriptor>?
        let symbol = try library.symbol(TERMIND_PLUGIN_ENTRY_SYMBOL, feature: m.id)
        let entry = unsafeBitCast(symbol, to: Entry.self)
        let host = CPluginHost(logger: Logger(label: m.id, sink: sink), hostVersion: hostVersion)
        guard let descriptor = entry(host.table) else {
            throw mismatch(m, "its entry point returned no descriptor")
        }
        // The descriptor only grows at the end: one from a plugin built before a member was
        // added is smaller, and its members are read one by one (never the whole struct),
        // the newer ones only where `size` covers them.
        let d = descriptor
        let base = MemoryLayout<termind_plugin_descriptor>.offset(of: \termind_plugin_descriptor.handle_stream)!
        guard d.pointee.size >= UInt32(base) else {
            throw mismatch(m, "its descriptor is \(d.pointee.size) bytes, smaller than ABI \(m.abi) requires (\(base))")
        }
        guard let idPointer = d.pointee.id, let versionPointer = d.pointee.version else {
            throw mismatch(m, "its descriptor has no id or version")
        }
        try check(m, id: String(cString: idPointer), version: String(cString: versionPointer), abi: Int(d.pointee.abi_version))
        if d.pointee.handle == nil, let first = m.contracts.first {
            throw mismatch(m, "its descriptor has no handle function, but the manifest declares contracts (\(first)\(m.contracts.count > 1 ? ", …" : "")); set .handle or declare no contracts", field: "contracts")
        }
        var functions: [ForeignFunction] = []
        for f in m.functions {
            guard case .success(let signature) = FunctionSignature.parse(f.signature) else { continue }
            let pointer = try library.symbol(f.symbol, function: f.name, feature: m.id)
            functions.append(try ForeignFunction(name: f.name, plugin: m.id, signature: signature, symbol: pointer))
        }
        return CPluginFeature(manifest: m, descriptor: descriptor, functions: functions)
    }

    private static func check(_ m: FeatureManifest, id: String, version: String, abi: Int) throws {
        if id != m.id { throw mismatch(m, "its descriptor says id '\(id)' but the manifest says '\(m.id)'", field: "id") }
        if version != m.version { throw mismatch(m, "its descriptor says version '\(version)' but the manifest says '\(m.version)'", field: "version") }
        if abi != m.abi { throw mismatch(m, "its descriptor speaks ABI \(abi) but the manifest says \(m.abi)", field: "abi") }
    }

    private static func mismatch(_ m: FeatureManifest, _ detail: String, field: String = "library") -> FeatureProblem {
        FeatureProblem(featureID: m.id, field: field, code: .featureDescriptorMismatch, message: "feature '\(m.id)' (\(m.libraryPath)): \(detail).")
    }
}
