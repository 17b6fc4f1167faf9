import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import SFTPWire
import TermindCore
import TransferRules

/// `termind sftp HOST` with no action: a prompt on the host's files, as OpenSSH's `sftp`
/// gives, for a workspace's SFTP pane and for a person at a terminal. Each line is asked as a
/// question (`sftp.browse`, one echoed line) on the client's terminal; the metadata commands
/// run as `termind sftp HOST ACTION` does, on the same SFTP session, with paths from the
/// prompt's folder; get and put go through the process scheduler as `termind get`/`put`, on
/// the same pooled connection (nothing authenticates again). Ends on exit, quit, bye or
/// end of input (Ctrl-D).
struct Browser {
    typealias Run = SFTPStreams.Run
    typealias Transfer = @Sendable (SFTPStreams.Transfer.Request) async throws -> SFTPStreams.Transfer.Result

    let request: Run.Request
    let session: StreamSession
    let sftp: SFTPSession
    let transfer: Transfer

    /// What the prompt takes, as `help` shows it.
    static let help: [(String, String)] = [
        ("ls [-L] [PATH...]", "list folders (a file: itself); -L follows links"),
        ("cd [PATH]", "go to a remote folder (none: the home folder)"),
        ("pwd", "the remote folder"),
        ("stat [-L] PATH...", "kind, size, permissions, owner, times"),
        ("mkdir [-p] PATH...", "make folders (-p: with missing parents)"),
        ("rm [-r] PATH...", "remove files and links (-r: folders with everything inside)"),
        ("rmdir PATH...", "remove empty folders"),
        ("mv [-f] SRC DST", "rename or move (-f: replace an existing file, atomically)"),
        ("ln TARGET LINK", "make LINK a symbolic link to TARGET"),
        ("chmod MODE PATH...", "set permissions (octal, e.g. 644)"),
        ("df [PATH...]", "size, used and available space"),
        ("get [-r] [-p] REMOTE [LOCAL]", "download into the local folder (or to LOCAL), through the scheduler"),
        ("put [-r] [-p] LOCAL [REMOTE]", "upload into the remote folder (or to REMOTE), through the scheduler"),
        ("lcd [PATH], lpwd, lls [PATH]", "the local folder: go to (none: home), show, list"),
        ("help, ?", "this list"),
        ("exit, quit, bye", "leave (so does Ctrl-D)"),
        ("", "Paths start at the folder you are in, ~ at the home folder; *, ? and [...] match on the server"),
        ("", "(put: here). Quote a name with blanks: 'my file' or my\\ file."),
    ]

    func run() async throws -> Run.Result {
        let home = SFTPPaths.display(try await sftp.realpath(Array(".".utf8)))
        var folder = home
        var local = request.workingDirectory ?? FileManager.default.currentDirectoryPath
        var asked = false
        let localHome = ProcessInfo.processInfo.environment["HOME"] ?? "/"
        while true {
            let question: JSONValue = .object([
                "topic": .string(Run.browseTopic), "kind": .string("prompts"),
                "prompts": .array([.object(["text": .string("sftp \(request.target):\(folder)> "), "echo": .bool(true)])]),
            ])
            guard let answer = await session.ask(question), case .array(let answers)? = answer["answers"], let line = answers.first?.stringValue else {
                guard asked else {
                    throw TermindError.badRequest("termind sftp \(request.target) without an action is a prompt, and no line was read (no terminal to type on, or the input ended); give an action (ls, stat, mkdir, rm, rmdir, mv, ln, chmod, df) or use termind get/put.")
                }
                return Run.Result(exitStatus: 0)
            }
            asked = true
            let words: [String]
            do { words = try BrowseLine.words(line) } catch {
                await say("\(error.description); nothing was done.")
                continue
            }
            guard let command = words.first else { continue }
            let (flags, rest) = BrowseLine.options(words.dropFirst())
            /// A remote path from the prompt's folder; `pattern`: it will be matched (its
            /// folder's own glob characters escaped).
            func remote(_ path: String, pattern: Bool = false) -> String { BrowseLine.resolve(path, folder: folder, home: home, pattern: pattern) }
            func localPath(_ path: String, pattern: Bool = false) -> String {
                BrowseLine.resolve(path, folder: local, home: localHome, pattern: pattern)
            }
            do {
                switch command {
                case "exit", "quit", "bye":
                    return Run.Result(exitStatus: 0)
                case "help", "?":
                    await session.emit("view", ["rows": .array(Self.help.map { .object(["command": .string($0.0), "does": .string($0.1)]) }), "result": .bool(true)])
                case "pwd":
                    await session.emit("view", ["rows": .array([.object(["remote folder": .string("\(request.target):\(folder)")])]), "result": .bool(true)])
                case "lpwd":
                    await session.emit("view", ["rows": .array([.object(["local folder": .string(local)])]), "result": .bool(true)])
                case "cd":
                    try refuse(flags, allowed: "", command)
                    guard rest.count <= 1 else { throw Problem("cd takes one PATH") }
                    let target = Array(remote(rest.first ?? "~").utf8)
                    let attributes = try await sftp.stat(target, followLinks: true)
                    guard attributes.kind == .directory else { throw Problem("\(SFTPPaths.display(target)) is not a folder") }
                    folder = SFTPPaths.display(try await sftp.realpath(target))
                case "lcd":
                    try refuse(flags, allowed: "", command)
                    guard rest.count <= 1 else { throw Problem("lcd takes one PATH") }
                    let target = URL(fileURLWithPath: localPath(rest.first ?? "~")).standardizedFileURL.path
                    var isDirectory = false
                    guard FileManager.default.fileExists(atPath: target, isDirectory: &isDirectory), isDirectory else {
                        throw Problem("\(target) is not a local folder")
                    }
                    local = target
                case "lls":
                    try refuse(flags, allowed: "la", command)  // -l, -a as ls takes them: names are listed all the same
                    guard rest.count <= 1 else { throw Problem("lls takes one PATH") }
                    let target = localPath(rest.first ?? ".")
                    let names = try FileManager.default.contentsOfDirectory(atPath: target).sorted()
                    let rows: [JSONValue] = names.map { name in
                        var isDirectory = false
                        _ = FileManager.default.fileExists(atPath: target + "/" + name, isDirectory: &isDirectory)
                        return .object(["name": .string(TerminalText.escaped(name) + (isDirectory ? "/" : ""))])
                    }
                    await session.emit("view", ["title": .string(target), "rows": .array(rows), "result": .bool(true)])
                case "get":
                    try refuse(flags, allowed: "rp", command)
                    guard (1...2).contains(rest.count) else { throw Problem("get takes REMOTE [LOCAL]") }
                    try await move(sources: ["\(try host()):\(remote(rest[0], pattern: true))"], to: localPath(rest.count == 2 ? rest[1] : "."), verb: "get", flags: flags)
                case "put":
                    try refuse(flags, allowed: "rp", command)
                    guard (1...2).contains(rest.count) else { throw Problem("put takes LOCAL [REMOTE]") }
                    let sources = try LocalGlob.expand(localPath(rest[0], pattern: true))
                    try await move(sources: sources, to: "\(try host()):\(remote(rest.count == 2 ? rest[1] : "."))", verb: "put", flags: flags)
                default:
                    // The actions of `termind sftp HOST ACTION`.
                    guard let action = Run.Action(rawValue: command) else { throw Problem("'\(TerminalText.escaped(command))' is not a command (help lists them)") }
                    try await metadata(action, flags: flags, rest, remote: { remote($0, pattern: $1) })
                }
            } catch let problem as Problem {
                await say("\(problem.text); nothing was done.")
            } catch let error as SFTPError {
                await say(error.message)
            } catch {
                await say(TermindError.from(error).message)
            }
        }
    }

    /// A command line the prompt cannot run, said before the next prompt.
    private struct Problem: Error {
        let text: String
        init(_ text: String) { self.text = text }
    }

    private func say(_ text: String) async { await session.emit("notice", ["text": .string(text)]) }

    private func refuse(_ flags: Set<Character>, allowed: String, _ command: String) throws {
        if let flag = flags.first(where: { !allowed.contains($0) }) {
            throw Problem("\(command) has no option -\(flag)\(allowed.isEmpty ? "" : " (only -\(allowed.map(String.init).joined(separator: ", -")))")")
        }
    }

    /// The host as a transfer names it (`HOST:PATH`): only a target that reads back as
    /// exactly that host — a saved host's label or id, or USER@HOST — never one that a
    /// transfer would take for another host or a local path.
    private func host() throws -> String {
        let target = request.target
        guard case .remote(let host, nil, "x")? = try? TransferEndpoint.parse("\(target):x"), host == target else {
            throw Problem("get and put here need a saved host or USER@HOST; for '\(target)' use termind get and termind put")
        }
        return target
    }

    /// The metadata commands, as `termind sftp HOST ACTION` runs them, on this session.
    private func metadata(_ action: Run.Action, flags: Set<Character>, _ words: [String], remote: (String, Bool) -> String) async throws {
        let command = action.rawValue
        var sub = request
        sub.action = action
        switch action {
        // -l and -a as OpenSSH's sftp takes them: the listing is long and shows every name anyway.
        case .ls: try refuse(flags, allowed: "Lla", command); sub.follow = flags.contains("L")
        case .stat: try refuse(flags, allowed: "L", command); sub.follow = flags.contains("L")
        case .mkdir: try refuse(flags, allowed: "p", command); sub.parents = flags.contains("p")
        case .rm: try refuse(flags, allowed: "r", command); sub.recursive = flags.contains("r")
        case .mv: try refuse(flags, allowed: "f", command); sub.replace = flags.contains("f")
        case .ln: try refuse(flags, allowed: "s", command)  // -s as ln takes it: the link is symbolic anyway
        default: try refuse(flags, allowed: "", command)
        }
        // Which paths are matched on the server (ls, stat, rm, rmdir, chmod) and which name
        // one path as written (mkdir, mv, ln, df).
        let matched: Bool = switch action {
        case .ls, .stat, .rm, .rmdir, .chmod: true
        case .mkdir, .mv, .ln, .df, .read: false
        }
        // chmod's MODE and ln's TARGET (where the link points, as written) are not paths here.
        sub.paths = words.enumerated().map { index, word in
            (action == .chmod || action == .ln) && index == 0 ? word : remote(word, matched)
        }
        // ls and df of nothing: the folder the prompt is in (not the home folder).
        if sub.paths.isEmpty, action == .ls || action == .df { sub.paths = [remote(".", matched)] }
        let runner = Runner(request: sub, session: session)
        try runner.checkArguments()
        let result = try await runner.perform(sftp)
        for failure in result.failures { await say("\(failure.path): \(failure.error)") }
        if let content = result.content { await say(content.text ?? "(\(content.bytes) bytes that are not UTF-8 text)") }
    }

    private func move(sources: [String], to destination: String, verb: String, flags: Set<Character>) async throws {
        let request = SFTPStreams.Transfer.Request(sources: sources, destination: destination, recursive: flags.contains("r"), preserve: flags.contains("p"),
                                                   verb: verb, user: self.request.user, identity: self.request.identity,
                                                   workingDirectory: self.request.workingDirectory, acceptHostKey: self.request.acceptHostKey,
                                                   connectTimeout: self.request.connectTimeout)
        _ = try await transfer(request)  // each failed file was said as it failed
    }
}

/// `put`'s local side at the prompt, where no shell expanded `*`, `?` and `[…]`: the matches
/// (sorted), or the path itself when it has none of them.
enum LocalGlob {
    /// `path` as `BrowseLine.resolve(pattern: true)` gave it (the folder's own glob
    /// characters escaped).
    static func expand(_ path: String) throws -> [String] {
        guard SFTPPaths.isPattern(Array(path.utf8)) else { return [String(decoding: SFTPPaths.unescape(Array(path.utf8)), as: UTF8.self)] }
        var found = glob_t()
        defer { globfree(&found) }
        guard glob(path, 0, nil, &found) == 0 else { throw SFTPError(status: .noSuchFile, message: "\(path): nothing here matches") }
        return (0..<Int(found.gl_pathc)).compactMap { found.gl_pathv[$0].map { String(cString: $0) } }.sorted()
    }
}
