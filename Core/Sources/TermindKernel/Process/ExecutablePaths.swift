import CTermindSystem
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Where the running executable lives (from /proc/self/exe, never the working directory),
/// and the default locations derived from it and from the XDG environment.
public enum ExecutablePaths {
    public static func executable() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = termind_executable_path(&buffer, UInt(buffer.count))
        guard n > 0 else { return nil }
        return String(nulTerminated: buffer)
    }

    public static func executableDirectory() -> String {
        let path = executable() ?? CommandLine.arguments[0]
        return PathText.deletingLastComponent(path)
    }

    /// `$XDG_RUNTIME_DIR/termind/control.sock`, else `/tmp/termind-<uid>/control.sock`.
    public static func defaultSocketPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return "\(runtime)/termind/control.sock"
        }
        return "/tmp/termind-\(getuid())/control.sock"
    }
}
