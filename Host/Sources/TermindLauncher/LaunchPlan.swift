#if canImport(Glibc)
import Glibc
#endif

/// Where an invocation runs: handed to a running `termind serve` (the launcher's fast path),
/// or in this process through the full client library. The server decides for itself too
/// (it sends a command that must run here back with `local`), so this is only the shortcut
/// that spares a connection when the answer is known from the words alone.
public enum LaunchPlan: Equatable, Sendable {
    case server(socket: String)
    case inProcess

    /// Options that make a command boot a kernel of its own (`Invocation.shapesBoot`) or ask
    /// for one (`--local`); after `--` words belong to the command.
    static let localFlags: Set<String> = ["--local", "--registry", "--plugins", "--features"]
    /// Environment variables that shape the boot like those flags.
    static let localEnvironment = ["TERMIND_REGISTRY", "TERMIND_PLUGINS", "TERMIND_FEATURES"]

    public static func decide(_ arguments: [String], environment: [String: String], uid: uid_t = getuid()) -> LaunchPlan {
        if localEnvironment.contains(where: { !(environment[$0] ?? "").isEmpty }) { return .inProcess }
        var socket: String?
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--" { break }
            let name = argument.split(separator: "=", maxSplits: 1).first.map(String.init) ?? argument
            if localFlags.contains(name) { return .inProcess }
            if argument == "--socket", index + 1 < arguments.count {
                socket = arguments[index + 1]
                index += 1
            } else if argument.hasPrefix("--socket=") {
                socket = String(argument.dropFirst("--socket=".count))
            }
            index += 1
        }
        return .server(socket: socketPath(given: socket, environment: environment, uid: uid))
    }

    /// The control socket, as the full client finds it (`ExecutablePaths.defaultSocketPath`):
    /// `--socket`, `$TERMIND_SOCKET`, `$XDG_RUNTIME_DIR/termind/control.sock`, else
    /// `/tmp/termind-UID/control.sock`.
    static func socketPath(given: String?, environment: [String: String], uid: uid_t) -> String {
        if let given, !given.isEmpty { return given }
        if let path = environment["TERMIND_SOCKET"], !path.isEmpty { return path }
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") { return "\(runtime)/termind/control.sock" }
        return "/tmp/termind-\(uid)/control.sock"
    }

    /// The environment the server's run of the client sees: everything but variables whose
    /// names say they may hold a secret (a command can never ask for those: BootPlan refuses
    /// them in a manifest's `environment`), and none that is not `NAME=value`.
    public static func forwardedEnvironment(_ environment: [String: String]) -> [String: String] {
        let words = ["KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH"].map { Array($0.utf8) }
        return environment.filter { name, _ in
            let upper = Array(name.uppercased().utf8)
            return !name.isEmpty && !words.contains { word in
                upper.count >= word.count && (0...(upper.count - word.count)).contains { upper[$0..<$0 + word.count].elementsEqual(word) }
            }
        }
    }

    /// This process's environment (`environ`), as `NAME=value` pairs.
    public static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            cursor += 1
        }
        return result
    }
}
