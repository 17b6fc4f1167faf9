#if canImport(Glibc)
import Glibc
#endif
import TermindHelpText

/// `termind help` (and `termind`, `--help`, `-h`) when no server takes it: written by the
/// launcher from Registry.json beside the executable, with no library of termind's loaded.
/// The full client would boot every feature only to list their commands. A server that
/// answers writes it from the features it runs instead (its plugins too), and so does the
/// client when the boot is shaped (`--registry`, `--plugins`, `--features` or their
/// variables). A feature is listed when its manifest names a library that is there; one
/// that would fail to start is still listed, and its commands say why when run.
public enum LauncherHelp {
    /// Global flags that change nothing in the help, and options that take a value (any
    /// other option, or one the client would refuse, is the client's to judge).
    static let flags: Set<String> = ["--json", "--debug", "--yes", "-y", "--local"]
    static let valued: Set<String> = ["--socket", "--store", "--secrets", "--secrets-key", "--secrets-passphrase-file", "--log-file", "--answers"]

    /// Whether `arguments` ask for the general help alone, with a boot that is not shaped.
    public static func request(_ arguments: [String], environment: [String: String]) -> Bool {
        if LaunchPlan.localEnvironment.contains(where: { !(environment[$0] ?? "").isEmpty }) { return false }
        var words: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            let name = argument.split(separator: "=", maxSplits: 1).first.map(String.init) ?? argument
            if flags.contains(argument) {
            } else if valued.contains(argument) {
                guard index + 1 < arguments.count else { return false }  // the client says it needs a value
                index += 1
            } else if argument.hasPrefix("--"), valued.contains(name), argument.count > name.count + 1 {
            } else {
                words.append(argument)
            }
            index += 1
        }
        return words.isEmpty || words == ["help"] || words == ["--help"] || words == ["-h"]
    }

    /// Prints the help and says the exit code; nil when Registry.json cannot be read as a
    /// registry (the full client then says what is wrong with it).
    public static func run() -> Int32? {
        let folder = ClientLibrary.directory()
        guard let bytes = LauncherFile.read(folder + "/Registry.json", limit: 4 << 20),
              let features = features(registry: bytes, folder: folder) else { return nil }
        LauncherTerminal.write(HelpText.general(features) + "\n", to: STDOUT_FILENO)
        return 0
    }

    /// The features of a registry whose libraries are there, as the help shows them; nil
    /// when it is not a registry.
    public static func features(registry bytes: [UInt8], folder: String) -> [HelpText.Feature]? {
        guard let document = LauncherJSON.parse(bytes), case .array(let entries)? = document["features"] else { return nil }
        var seen: Set<String> = []
        return entries.compactMap { entry -> HelpText.Feature? in
            guard let id = entry["id"]?.string, seen.insert(id).inserted, let library = entry["library"]?.string,
                  access(library.hasPrefix("/") ? library : folder + "/" + library, R_OK) == 0 else { return nil }
            let commands: [HelpText.Command] = items(entry["commands"]).compactMap { command in
                guard let name = command["name"]?.string else { return nil }
                return HelpText.Command(name: name, arguments: items(command["arguments"]).compactMap(\.string), summary: command["summary"]?.string)
            }
            let options: [(name: String, value: String, summary: String)] = items(entry["serveOptions"]).compactMap { option in
                guard let name = option["name"]?.string, let value = option["value"]?.string, let summary = option["summary"]?.string else { return nil }
                return (name, value, summary)
            }
            return HelpText.Feature(id: id, title: entry["help"]?["title"]?.string, rank: entry["help"]?["rank"]?.int32.map(Int.init),
                                    isPlugin: false, commands: commands, serveOptions: options)
        }
    }

    private static func items(_ value: LauncherJSON?) -> [LauncherJSON] {
        if case .array(let items)? = value { items } else { [] }
    }
}

/// A small file read whole, for the launcher: nil when it cannot be read or is larger than
/// `limit`.
enum LauncherFile {
    static func read(_ path: String, limit: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= limit else { return nil }
        }
    }
}
