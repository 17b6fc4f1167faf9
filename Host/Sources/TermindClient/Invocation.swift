import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel
import TermindStore

/// The parsed command line. Global options may appear anywhere before `--`.
struct Invocation {
    /// Whose streams, terminal, environment and folder this run uses.
    let console: Console
    /// The `termind serve` kernel this run is inside (a launcher's command), if any: calls
    /// and streams go to it directly instead of over the socket.
    var server: Kernel?
    var registryPath: String?
    var pluginDirectories: [String] = []
    /// --plugin-isolation / TERMIND_PLUGIN_ISOLATION: where every C plugin's code runs,
    /// whatever its manifest says.
    var pluginIsolation: FeatureManifest.Isolation?
    var selection: Set<String>?
    var socketPath: String
    var local = false
    var json = false
    var debug = false
    var logFile: String?
    var storePath: String
    var secretsPath: String?
    var secretsKeyPath: String
    var passphraseFile: String?
    var help = false
    /// `--yes`: yes/no confirmations a stream asks are answered yes (never host keys or secrets).
    var assumeYes = false
    /// `--answers FILE`: answers to a stream's questions by topic (Questions).
    var answersPath: String?
    /// True when --registry/--plugins/--features (or TERMIND_REGISTRY/_PLUGINS/_FEATURES) were
    /// given: the result depends on a boot shaped by this invocation, so it runs in-process
    /// rather than on a running server.
    var shapesBoot = false
    var command: String?
    var arguments: [String] = []

    static let version = KernelConfiguration.termindVersion

    /// Exit codes: 0 success, 1 the operation failed, 2 bad usage, 3 termind could not boot;
    /// a remote command's own status (128 + a signal's number when one ended it).
    struct Exit: RawRepresentable, Equatable, Sendable {
        let rawValue: Int32
        init(rawValue: Int32) { self.rawValue = rawValue }
        static let success = Exit(rawValue: 0), failure = Exit(rawValue: 1), usage = Exit(rawValue: 2), bootFailed = Exit(rawValue: 3)
    }

    struct UsageError: Error, CustomStringConvertible {
        /// Its code in `--json` output.
        static let code: ErrorCode = "usage"
        let description: String
        /// The command it is about, whose own `--help` explains it (nil: termind's).
        var command: String? = nil
    }

    static func parse(_ argv: [String], console: Console, server: Kernel? = nil) throws -> Invocation {
        let environment = console.environment
        func env(_ name: String) -> String? { console.variable(name) }
        let home = env("HOME") ?? LocalUser.home
        let dataHome = env("XDG_DATA_HOME").flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "\(home)/.local/share"
        let configHome = env("XDG_CONFIG_HOME").flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "\(home)/.config"
        var inv = Invocation(console: console, server: server,
                             socketPath: env("TERMIND_SOCKET") ?? ExecutablePaths.defaultSocketPath(environment: environment),
                             storePath: env("TERMIND_STORE") ?? "\(dataHome)/termind/termind.sqlite",
                             secretsPath: env("TERMIND_SECRETS"),
                             secretsKeyPath: env("TERMIND_SECRETS_KEY") ?? "\(configHome)/termind/secrets.key",
                             passphraseFile: env("TERMIND_SECRETS_PASSPHRASE_FILE"))
        // Like their flags, these shape the boot: with them a command runs in-process, since
        // a running server booted with its own set.
        inv.registryPath = environment["TERMIND_REGISTRY"].flatMap { $0.isEmpty ? nil : $0 }
        if let plugins = environment["TERMIND_PLUGINS"], !plugins.isEmpty {
            inv.pluginDirectories = plugins.split(separator: ":").map(String.init)
        }
        if let features = environment["TERMIND_FEATURES"], !features.isEmpty {
            inv.selection = Set(features.split(separator: ",").map { $0.trimmedWhitespace })
        }
        if let mode = environment["TERMIND_PLUGIN_ISOLATION"], !mode.isEmpty {
            guard let isolation = FeatureManifest.Isolation(rawValue: mode) else {
                throw UsageError(description: "TERMIND_PLUGIN_ISOLATION is '\(mode)'; it is process or inline.")
            }
            inv.pluginIsolation = isolation
        }
        inv.shapesBoot = inv.registryPath != nil || !inv.pluginDirectories.isEmpty || inv.selection != nil || inv.pluginIsolation != nil
        inv.debug = ["1", "true", "yes"].contains(environment["TERMIND_DEBUG"]?.lowercased() ?? "")
        inv.logFile = environment["TERMIND_LOG_FILE"].flatMap { $0.isEmpty ? nil : $0 }

        var rest: [String] = []
        var index = 0
        func value(_ flag: String) throws -> String {
            index += 1
            guard index < argv.count, !argv[index].isEmpty else { throw UsageError(description: "\(flag) needs a value.") }
            return argv[index]
        }
        var afterSeparator = false
        var askedVersion = false
        while index < argv.count {
            let arg = argv[index]
            if afterSeparator { rest.append(arg); index += 1; continue }
            // `--flag=value` form.
            var flag = arg
            var inline: String?
            if arg.hasPrefix("--"), let eq = arg.firstIndex(of: "=") {
                flag = String(arg[..<eq])
                inline = String(arg[arg.index(after: eq)...])
            }
            func take(_ name: String) throws -> String {
                if let inline { guard !inline.isEmpty else { throw UsageError(description: "\(name) needs a value.") }; return inline }
                return try value(name)
            }
            switch flag {
            case "--registry": inv.registryPath = try take(flag); inv.shapesBoot = true
            case "--plugins": inv.pluginDirectories.append(try take(flag)); inv.shapesBoot = true
            case "--features":
                let list = try take(flag).split(separator: ",").map { $0.trimmedWhitespace }.filter { !$0.isEmpty }
                guard !list.isEmpty else { throw UsageError(description: "--features needs a comma-separated list of feature ids.") }
                inv.selection = Set(list)
                inv.shapesBoot = true
            case "--plugin-isolation":
                let mode = try take(flag)
                guard let isolation = FeatureManifest.Isolation(rawValue: mode) else {
                    throw UsageError(description: "--plugin-isolation is '\(mode)'; it is process (each C plugin in a sandboxed process of its own) or inline.")
                }
                inv.pluginIsolation = isolation
                inv.shapesBoot = true
            case "--socket": inv.socketPath = try take(flag)
            case "--log-file": inv.logFile = try take(flag)
            case "--store": inv.storePath = try take(flag)
            case "--secrets" where !rest.isEmpty && ["on", "off"].contains(inline ?? (index + 1 < argv.count ? argv[index + 1] : "")):
                // After a command word, `--secrets on|off` is the command's switch (`sync
                // zones --secrets on`), not the secret store's path: a store file named
                // `on` is written `./on`, or given before the command.
                rest.append(arg)
            case "--secrets": inv.secretsPath = try take(flag)
            case "--secrets-key": inv.secretsKeyPath = try take(flag)
            case "--secrets-passphrase-file": inv.passphraseFile = try take(flag)
            case "--local": inv.local = true
            case "--json": inv.json = true
            case "--debug": inv.debug = true
            case "--yes", "-y": inv.assumeYes = true
            case "--answers": inv.answersPath = try take(flag)
            case "-h", "--help": inv.help = true
            case "--version": askedVersion = true
            case "--": afterSeparator = true; rest.append(arg)
            default: rest.append(arg)
            }
            index += 1
        }
        if let first = rest.first, first != "--" {
            inv.command = first
            inv.arguments = Array(rest.dropFirst())
        } else if askedVersion {
            inv.command = "version"
        } else {
            inv.arguments = rest
        }
        inv.pluginDirectories = inv.pluginDirectories.map(console.absolute)
        inv.registryPath = inv.registryPath.map(console.absolute)
        inv.socketPath = console.absolute(inv.socketPath)
        inv.storePath = console.absolute(inv.storePath)
        inv.secretsPath = inv.secretsPath.map(console.absolute)
        inv.secretsKeyPath = console.absolute(inv.secretsKeyPath)
        inv.passphraseFile = inv.passphraseFile.map(console.absolute)
        inv.answersPath = inv.answersPath.map(console.absolute)
        return inv
    }

    /// Commands that run in the process that was started, never inside a server: the server
    /// itself, benchmarks, the plugin check (it loads the plugin under test) and `version`
    /// (this build's, not the server's).
    static let processOnly: Set<String> = ["serve", "bench", "plugins", "version"]

    /// Whether a launcher's command must run in the launcher's own process instead of the
    /// server it reached (see `processOnly`; `--local`; options that shape the boot).
    var runsInProcess: Bool { local || shapesBoot || Invocation.processOnly.contains(command ?? "") }

    /// Registry.json: --registry, TERMIND_REGISTRY, beside the executable, or ../share/termind.
    func resolvedRegistry() -> String? {
        if let registryPath { return registryPath }
        let dir = ExecutablePaths.executableDirectory()
        for candidate in ["\(dir)/Registry.json", "\(dir)/../share/termind/Registry.json"] where FileManager.default.fileExists(atPath: candidate) {
            return PathText.standardized(candidate)
        }
        return nil
    }

    func kernelConfiguration() throws -> KernelConfiguration {
        var configuration = KernelConfiguration(
            registryPath: resolvedRegistry(),
            libraryDirectory: ExecutablePaths.executableDirectory(),
            pluginDirectories: pluginDirectories,
            selection: selection,
            hostVersion: Invocation.version)
        configuration.storePath = storePath
        configuration.secretsPath = secretsPath ?? PathText.appending(PathText.deletingLastComponent(storePath), "secrets.sqlite")
        configuration.secretsKey = try secretsKeySource()
        configuration.secretsKeyFilePath = secretsKeyPath
        configuration.pluginIsolation = pluginIsolation
        return configuration
    }

    /// The secret store's key: a passphrase read from --secrets-passphrase-file (first
    /// line), or the key file (created with mode 0600 on first use).
    func secretsKeySource() throws -> SecretStore.KeySource {
        guard let passphraseFile else { return .keyFile(secretsKeyPath) }
        guard let data = FileManager.default.contents(atPath: passphraseFile) else {
            throw UsageError(description: "Cannot read the passphrase file \(passphraseFile).")
        }
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard !line.isEmpty else { throw UsageError(description: "The passphrase file \(passphraseFile) is empty.") }
        return .passphrase(Secret(line))
    }

    func logSink() throws -> LogSink {
        guard debug || logFile != nil else { return .disabled() }
        if let logFile { return try .file(at: console.absolute(logFile), level: debug ? .debug : .info) }
        return .descriptor(STDERR_FILENO, level: .debug)
    }
}
