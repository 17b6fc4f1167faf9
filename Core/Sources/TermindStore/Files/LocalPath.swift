import Foundation

/// A path as a person typed it, made absolute: `~` and `~/…` in the home folder (as a shell
/// expands them, for paths that arrive unexpanded, like `-i ~/.ssh/id` inside a
/// quick-connect line), a relative path in `directory` (the client's working folder, never
/// a server's), standardized. `home`: the client's `$HOME` (this process's by default).
public enum LocalPath {
    public static func absolute(_ path: String, relativeTo directory: String? = nil, home: String? = nil) -> String {
        if path == "~" || path.hasPrefix("~/") {
            let home = (home ?? ProcessInfo.processInfo.environment["HOME"]).flatMap { $0.hasPrefix("/") ? $0 : nil } ?? NSHomeDirectory()
            return ((home as NSString).appendingPathComponent(String(path.dropFirst(2))) as NSString).standardizingPath
        }
        if path.hasPrefix("/") { return (path as NSString).standardizingPath }
        let base = directory ?? FileManager.default.currentDirectoryPath
        return ((base as NSString).appendingPathComponent(path) as NSString).standardizingPath
    }
}
