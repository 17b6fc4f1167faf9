import CTermindSystem
import TermindCore

/// An opened shared library. Never closed: Swift images cannot be unloaded safely, and a
/// plugin's static data may be referenced for the life of the process.
///
/// `@unchecked Sendable`: `handle`, a raw dlopen handle Swift cannot check, is set once and only
/// passed to dlsym (thread-safe in glibc); the library is never closed.
struct DynamicLibrary: @unchecked Sendable {
    let path: String
    private let handle: UnsafeMutableRawPointer

    /// Opens `path` (absolute) with RTLD_NOW | RTLD_LOCAL.
    static func open(_ path: String, feature: String) throws -> DynamicLibrary {
        guard path.hasPrefix("/") else {
            throw FeatureProblem(featureID: feature, field: "library", code: .manifestLibraryMissing,
                                 message: "feature '\(feature)': field \"library\" must name a library file (resolved to an absolute path), got '\(path)'.")
        }
        var error = [CChar](repeating: 0, count: 1024)
        guard let handle = termind_dlopen_now_local(path, &error, UInt(error.count)) else {
            throw FeatureProblem(featureID: feature, field: "library", code: .featureLoadFailed,
                                 message: "feature '\(feature)': cannot load \(path): \(String(nulTerminated: error)).")
        }
        return DynamicLibrary(path: path, handle: handle)
    }

    /// The entry symbol `name`.
    func symbol(_ name: String, feature: String) throws -> UnsafeMutableRawPointer {
        try symbol(name, feature: feature, field: "library", code: .featureEntryMissing, role: "the entry symbol '\(name)'")
    }

    /// The symbol a manifest function names.
    func symbol(_ name: String, function: String, feature: String) throws -> UnsafeMutableRawPointer {
        try symbol(name, feature: feature, field: "functions", code: .pluginFunctionMissing,
                   role: "the symbol '\(name)' that function '\(function)' names in \"functions\"")
    }

    private func symbol(_ name: String, feature: String, field: String, code: ErrorCode, role: String) throws -> UnsafeMutableRawPointer {
        var error = [CChar](repeating: 0, count: 1024)
        guard let symbol = termind_dlsym(handle, name, &error, UInt(error.count)) else {
            throw FeatureProblem(featureID: feature, field: field, code: code,
                                 message: "feature '\(feature)': \(path) does not export \(role).")
        }
        return symbol
    }
}
