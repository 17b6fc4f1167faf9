import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A path as a person typed it, made absolute: `~` and `~/…` in the home folder (as a shell
/// expands them, for paths that arrive unexpanded, like `-i ~/.ssh/id` inside a
/// quick-connect line), a relative path in `directory` (the client's working folder, never
/// a server's), standardized. `home`: the client's `$HOME` (this process's by default).
public enum LocalPath {
    public static func absolute(_ path: String, relativeTo directory: String? = nil, home: String? = nil) -> String {
        if path == "~" || path.hasPrefix("~/") {
            let home = (home ?? ProcessInfo.processInfo.environment["HOME"]).flatMap { $0.hasPrefix("/") ? $0 : nil } ?? LocalUser.home
            return PathText.standardized(PathText.appending(home, String(path.dropFirst(2))))
        }
        if path.hasPrefix("/") { return PathText.standardized(path) }
        let base = directory ?? FileManager.default.currentDirectoryPath
        return PathText.standardized(PathText.appending(base, path))
    }
}
