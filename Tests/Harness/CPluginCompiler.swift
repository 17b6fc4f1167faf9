import Foundation
import TermindCore

/// Compiles a C plugin with the system compiler (warnings are errors) into a plugin
/// folder beside its plugin.json, as a third-party author would build one.
public enum CPluginCompiler {
    /// Writes `source`, compiles it into `<folder>/lib<name>.so` with `defines`, and writes
    /// `manifest` as `<folder>/plugin.json` (when given). Returns the library path.
    @discardableResult
    public static func build(source: String, folder: String, name: String, defines: [String] = [], manifest: String? = nil,
                             include: String = Repository.path("Core/Sources/CTermindPluginABI/include")) throws -> String {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let sourcePath = (folder as NSString).appendingPathComponent("\(name).c")
        try Data(source.utf8).write(to: URL(fileURLWithPath: sourcePath))
        let library = (folder as NSString).appendingPathComponent("lib\(name).so")
        let flags = ["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-Wno-unused-function",
                     "-I", include] + defines.map { "-D\($0)" }
        let result = try ProcessRunner.run("/usr/bin/cc", flags + ["-o", library, sourcePath])
        guard result.status == 0 else {
            throw TermindError(code: "test.cc", message: "cc failed for \(name): \(result.stderr)")
        }
        try? FileManager.default.removeItem(atPath: sourcePath)
        if let manifest {
            try Data(manifest.utf8).write(to: URL(fileURLWithPath: (folder as NSString).appendingPathComponent("plugin.json")))
        }
        return library
    }
}
