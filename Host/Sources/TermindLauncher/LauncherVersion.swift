#if canImport(Glibc)
import Glibc
#endif

/// `termind version` (and `--version`, `--json`) answered by the launcher itself: no client
/// library, no Foundation, no Core and no feature loaded — it needs none of them. What it
/// prints is what the kernel's `kernel.version@1` says, word for word (a test compares the
/// two): the build's facts come from constants the build wrote (`LauncherBuildFacts`), and
/// the shared libraries termind runs with (OpenSSL, SQLite) are asked for their versions
/// through `dlopen`, as the running process would see them.
public enum LauncherVersion {
    /// termind's own version (`KernelConfiguration.termindVersion`, read when built).
    static let termind = LauncherBuildFacts.termind

    /// Whether `arguments` ask only for the version: its `--json` flag, or nil when they ask
    /// for anything else (which the client handles, usage errors included).
    static func request(_ arguments: [String]) -> Bool? {
        let rest = arguments.filter { $0 != "--json" }
        guard rest == ["version"] || rest == ["--version"], arguments.count - rest.count <= 1 else { return nil }
        return arguments.count == 2
    }

    /// The library versions as `kernel.version@1` names them.
    static func libraries() -> [(String, String)] {
        [("libssh2", LauncherBuildFacts.libssh2),
         ("openssl", loaded("libcrypto.so.3", "OpenSSL_version", argument: 0) ?? "unknown"),
         ("sqlite", loaded("libsqlite3.so.0", "sqlite3_libversion", argument: nil) ?? "unknown")]
    }

    /// The build, as `BuildSignature`'s description writes it.
    static var build: String {
        "\(LauncherBuildFacts.compiler) / \(LauncherBuildFacts.target) / ABI \(LauncherBuildFacts.contractsHash)"
    }

    /// The text `termind version` prints (with `--json`: the reply object, as the client
    /// prints JSON — pretty, keys sorted).
    static func text(json: Bool) -> String {
        let libraries = libraries()
        guard json else {
            return "termind \(termind)\nbuild: \(build)\nplugin ABI: \(LauncherBuildFacts.pluginABI)\n"
                + libraries.map { "\($0.0): \($0.1)\n" }.joined()
        }
        let q = LauncherJSON.quoted
        return """
        {
          "libraries" : {
        \(libraries.map { "    \(q($0.0)) : \(q($0.1))" }.joined(separator: ",\n"))
          },
          "pluginABI" : \(LauncherBuildFacts.pluginABI),
          "signature" : {
            "compiler" : \(q(LauncherBuildFacts.compiler)),
            "contractsHash" : \(q(LauncherBuildFacts.contractsHash)),
            "target" : \(q(LauncherBuildFacts.target))
          },
          "termind" : \(q(termind))
        }

        """
    }

    /// Prints the version and says the exit code.
    static func run(json: Bool) -> Int32 {
        LauncherTerminal.write(text(json: json), to: STDOUT_FILENO)
        return 0
    }

    /// The string a C function of `library` returns (`const char *f(int)` or `f(void)`),
    /// asked through dlopen: nil when the library or the function is not there.
    private static func loaded(_ library: String, _ function: String, argument: Int32?) -> String? {
        guard let handle = dlopen(library, RTLD_LAZY | RTLD_LOCAL) else { return nil }
        defer { dlclose(handle) }
        guard let symbol = dlsym(handle, function) else { return nil }
        let text: UnsafePointer<CChar>?
        if let argument {
            typealias WithArgument = @convention(c) (Int32) -> UnsafePointer<CChar>?
            text = unsafeBitCast(symbol, to: WithArgument.self)(argument)
        } else {
            typealias WithoutArgument = @convention(c) () -> UnsafePointer<CChar>?
            text = unsafeBitCast(symbol, to: WithoutArgument.self)()
        }
        return text.map { String(cString: $0) }
    }
}
