import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import SFTPWire
import Synchronization
import TermindCore
import TermindCrypto
import TransferRules
import VaultAPI

/// One `termind get`/`put`/`cp` (docs/sftp.md, Transfers): the sources are expanded and
/// walked first (nothing changes until the plan is whole), directories are created, then
/// every regular file goes through the process scheduler, is written under a temporary
/// name beside its destination and renamed into place only once its byte count matches and
/// its source did not change meanwhile.
struct TransferRun {
    typealias Transfer = SFTPStreams.Transfer
    let request: Transfer.Request
    let session: StreamSession
    let opener: ConnectionOpener
    let scheduler: TransferScheduler
    /// Inside `termind serve`: a lost connection pauses a file for `termind transfers resume`.
    let resident: Bool
    /// `sftp.topology` as it applies now (read for each admitted file).
    let topology: @Sendable () async -> SFTPSettings.Topology.Strategy
    /// Saved hosts by name, so that deleting one cancels what reaches it.
    let hosts: (any HostDirectory)?

    /// Directories of one depth made at the same time, at most.
    static let directoriesAtOnce = 16
    /// Files up to this size share channels (`RemoteSide.leaseShared`): a few requests each.
    static let sharedSize: UInt64 = 256 << 10
    /// Smart topology: files up to this size (and of unknown size) ride channels.
    static let smartChannelLimit: UInt64 = 64_000_000
    /// Files this big spread their requests over up to `stripes` channels (one slot still).
    static let stripedSize: UInt64 = 16 << 20
    static let stripes = 4

    /// At most this many entries in one run's plan.
    static let maximumEntries = 100_000
    /// Directories followed into at most this deep (`--follow` may meet a loop).
    static let maximumDepth = 64

    private var verb: String { request.verb ?? "cp" }
    /// Directory listings of the walk, read ahead.
    private let ahead = ListingAhead(limit: TransferRun.maximumEntries)

    // MARK: - The plan

    struct Place: Sendable {
        let side: any FileSide
        let path: [UInt8]
        var shown: String { side.shown(path) }
    }

    struct PlannedFile: Sendable {
        let from: Place
        let to: Place
        let attributes: SFTPAttributes
        let replace: Bool
        /// The planned directory it goes into, when the run creates that directory.
        let directory: Int?
    }

    struct PlannedDirectory: Sendable {
        let to: Place
        let attributes: SFTPAttributes
        /// It exists already (merged into): not created.
        let exists: Bool
        let parent: Int?
    }

    struct Plan {
        var directories: [PlannedDirectory] = []
        var files: [PlannedFile] = []
        var outcomes: [Transfer.File] = []
        var entries = 0
    }

    /// The answer given "for all" to the conflict question.
    private final class Choices: Sendable {
        let all = Mutex<Transfer.Conflict?>(nil)
    }

    func run() async throws -> Transfer.Result {
        let started = Date()
        let sources = try request.sources.map(endpoint)
        let destination = try endpoint(request.destination)
        guard !sources.isEmpty else { throw TermindError.badRequest("\(verb) needs at least one source.") }
        guard destination.isRemote || sources.contains(where: \.isRemote) else {
            throw TermindError.badRequest("\(verb): every path is local; one side must be HOST:PATH (cp(1) copies on this machine).")
        }
        if verb == "get", !sources.allSatisfy(\.isRemote) || destination.isRemote {
            throw TermindError.badRequest("get copies HOST:PATH... to a local DESTINATION (\(request.destination) is \(destination.isRemote ? "remote" : "local")); put uploads, cp copies any way.")
        }
        if verb == "put", sources.contains(where: \.isRemote) || !destination.isRemote {
            throw TermindError.badRequest("put copies LOCAL... to HOST:PATH\(destination.isRemote ? "" : " (\(request.destination) is local: write HOST:\(request.destination))"); get downloads, cp copies any way.")
        }
        var remotes: [String: RemoteSide] = [:]
        let local = LocalSide()
        let ask: ConnectionAsker = { await session.ask($0) }
        func side(_ endpoint: TransferEndpoint) -> any FileSide {
            guard case .remote(let host, let port, _) = endpoint else { return local }
            let key = port.map { "\(host):\($0)" } ?? host
            if let known = remotes[key] { return known }
            let (line, identity) = Self.quickConnect(host, port: port, jump: request.jump, identity: request.identity, workingDirectory: request.workingDirectory)
            let target = ConnectionTarget(target: line, user: request.user, identity: identity, workingDirectory: request.workingDirectory,
                                          acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout)
            // Between two hosts the bytes sit in termind's memory: fewer requests in flight bound it.
            let window = sources.contains(where: \.isRemote) && destination.isRemote ? 16 : SFTPSession.window
            let made = RemoteSide(host: key, target: target, opener: opener, window: window, ask: ask)
            remotes[key] = made
            return made
        }
        let destinationSide = side(destination)
        let sourceSides = sources.map(side)
        defer { let all = Array(remotes.values); Task { for remote in all { await remote.closeAll() } } }

        // Saved hosts by id: a deletion cancels the files that reach them.
        for remote in remotes.values where !remote.host.contains("@") {
            remote.savedHost = try? await hosts?.host(named: remote.host)?.id
        }

        // The destination: an existing directory takes the sources by their names.
        let destinationPath = localize(destination)
        let existing = try await Self.attempt(destinationSide.shown(destinationPath)) { try await destinationSide.stat(destinationPath, follow: true) }
        let intoDirectory = existing?.kind == .directory

        var plan = Plan()
        let choices = Choices()
        var expanded: [(Place, SFTPAttributes)] = []
        for (endpoint, sourceSide) in zip(sources, sourceSides) {
            let path = localize(endpoint)
            do {
                for match in try await expand(sourceSide, path) {
                    // A link named on the command line is followed (as cp -H); inside a tree, only with --follow.
                    guard let attributes = try await sourceSide.stat(match, follow: true) else {
                        throw SFTPError(status: .noSuchFile, message: "\(sourceSide.shown(match)): no such file or directory")
                    }
                    expanded.append((Place(side: sourceSide, path: match), attributes))
                }
            } catch {
                plan.outcomes.append(.init(from: sourceSide.shown(path), to: destinationSide.shown(destinationPath), outcome: .failed, error: Self.message(error)))
            }
        }
        if expanded.count > 1 || (request.sources.count > 1 && !expanded.isEmpty), !intoDirectory {
            throw TermindError.badRequest("\(verb): \(destinationSide.shown(destinationPath)) must be an existing directory to take \(expanded.count) sources.")
        }
        if existing == nil, let (_, attributes) = expanded.first {
            try await checkNewDestination(destinationSide, destinationPath, tree: attributes.kind == .directory)
        }
        for (source, attributes) in expanded {
            let name = SFTPPaths.split(source.path).name
            let target = intoDirectory ? SFTPPaths.join(destinationPath, name) : destinationPath
            try await add(source, attributes, to: Place(side: destinationSide, path: target), parent: nil, depth: 0, root: true, plan: &plan, choices: choices)
        }

        // Directories first, parents before children: one depth at a time, the directories of
        // a depth made at once (a round trip per depth, not per directory); a failed one fails
        // what goes inside.
        ahead.cancelRest()
        var failedDirectories = Set<Int>()
        var created = 0
        var depths: [Int] = []
        for directory in plan.directories { depths.append(directory.parent.map { depths[$0] + 1 } ?? 0) }
        for depth in Set(depths).sorted() {
            var make: [Int] = []
            for (index, directory) in plan.directories.enumerated() where depths[index] == depth {
                if let parent = directory.parent, failedDirectories.contains(parent) { failedDirectories.insert(index); continue }
                if !directory.exists { make.append(index) }
            }
            let directories = plan.directories
            let failures = await withTaskGroup(of: (Int, String?).self) { group -> [(Int, String)] in
                var next = make.makeIterator()
                func start() -> Bool {
                    guard let index = next.next() else { return false }
                    let directory = directories[index]
                    group.addTask {
                        do {
                            try await directory.to.side.mkdir(directory.to.path, mode: (directory.attributes.permissions ?? 0o755) & 0o777 | 0o700)
                            return (index, nil)
                        } catch {
                            return (index, Self.message(error))
                        }
                    }
                    return true
                }
                for _ in 0..<Self.directoriesAtOnce where start() {}
                var failed: [(Int, String)] = []
                for await (index, error) in group {
                    if let error { failed.append((index, error)) }
                    _ = start()
                }
                return failed
            }
            created += make.count - failures.count
            for (index, error) in failures.sorted(by: { $0.0 < $1.0 }) {
                failedDirectories.insert(index)
                plan.outcomes.append(.init(from: "", to: plan.directories[index].to.shown, outcome: .failed, error: error))
            }
        }
        var files: [PlannedFile] = []
        for file in plan.files {
            if let directory = file.directory, failedDirectories.contains(directory) {
                plan.outcomes.append(.init(from: file.from.shown, to: file.to.shown, outcome: .failed, error: "its directory could not be created"))
            } else {
                files.append(file)
            }
        }

        // The files, each through the scheduler.
        let board = ProgressBoard(files: files.count, total: files.reduce(0) { $0 + ($1.attributes.size ?? 0) })
        // A run is one source of the scheduler's fair queue; an agent's (the assistant's tool
        // call) is its own, named for it, so it takes turns with the person's transfers.
        let agent = CallOrigin.serving.chain.last { $0.kind == .agent }
        let sourceID = agent.map { "agent run \($0.id) \($0.detail ?? "")" } ?? "\(verb) \(TransferNames.randomToken(digits: 8))"
        let ticker = Task { [session, scheduler] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                let (event, rows) = board.snapshot()
                await scheduler.progress(rows)
                if let event { await session.emit("progress", event) }
            }
        }
        let outcomes = await withTaskGroup(of: Transfer.File.self) { group -> [Transfer.File] in
            for file in files {
                group.addTask { await move(file, source: sourceID, board: board) }
            }
            var done: [Transfer.File] = []
            for await outcome in group { done.append(outcome) }
            return done
        }
        ticker.cancel()
        if let event = board.snapshot(final: true).0 { await session.emit("progress", event) }

        // With -p, directories get their times last (writing inside them moved them).
        if request.preserve == true {
            for (index, directory) in plan.directories.enumerated().reversed() where !failedDirectories.contains(index) {
                try? await directory.to.side.setAttributes(directory.to.path, mode: directory.attributes.permissions,
                                                           accessed: directory.attributes.accessTime, modified: directory.attributes.modifiedTime)
            }
        }

        let all = (plan.outcomes + outcomes).sorted { $0.from < $1.from }
        let copied = all.filter { $0.outcome == .copied }, failed = all.filter { $0.outcome == .failed || $0.outcome == .cancelled }
        let skipped = all.filter { $0.outcome == .skipped }
        if !failed.isEmpty, copied.isEmpty, skipped.isEmpty, created == 0 {
            // Nothing was done: the error says every failure, and nothing else does.
            throw TermindError(.sftpFailed, failed.map { Self.said($0, outcome: false) }.joined(separator: "\n"))
        }
        for file in all where file.outcome != .copied {
            await session.emit("notice", ["text": .string(Self.said(file, outcome: true))])
        }
        let seconds = Date().timeIntervalSince(started)
        let bytes = copied.reduce(0) { $0 + $1.bytes }
        let result = Transfer.Result(exitStatus: failed.isEmpty ? 0 : 3, copied: copied.count, skipped: skipped.count, failed: failed.count, directories: created,
                                     bytes: bytes, seconds: (seconds * 1000).rounded() / 1000, files: all)
        let rate = seconds > 0 && bytes > 0 ? " (\(TerminalText.bytes(UInt64(Double(bytes) / seconds)))/s)" : ""
        var summary = "\(copied.count) copied"
        if !skipped.isEmpty { summary += ", \(skipped.count) skipped" }
        if !failed.isEmpty { summary += ", \(failed.count) failed" }
        if created > 0 { summary += ", \(created) director\(created == 1 ? "y" : "ies") created" }
        summary += " · \(TerminalText.bytes(bytes)) in \(String(printf: "%.1f", seconds)) s" + rate
        await session.emit("view", ["result": .bool(true), "title": .string(summary), "rows": .array([])])
        return result
    }

    /// One file that was not copied, said once: "failed SOURCE: why" (with `outcome`, its
    /// word first), the path not said again when the reason starts with it, and left out when
    /// the reason names it anyway.
    static func said(_ file: Transfer.File, outcome: Bool) -> String {
        let subject = file.from.isEmpty ? file.to : file.from
        var why = file.error ?? file.outcome.rawValue
        if why.hasPrefix(subject + ": ") { why.removeFirst(subject.count + 2) }
        let word = outcome ? file.outcome.rawValue : ""
        if why.contains(subject) { return outcome ? "\(word): \(why)" : why }
        return outcome ? "\(word) \(subject): \(why)" : "\(subject): \(why)"
    }

    // MARK: - Endpoints and paths

    private func endpoint(_ text: String) throws -> TransferEndpoint {
        do { return try TransferEndpoint.parse(text) } catch { throw TermindError.badRequest("\(verb): \(error.description).") }
    }

    /// A quick-connect line for HOST (and a `--jump`, a port from scp://), with the identity
    /// to pass beside it: `--identity` names a saved identity, or a key file that goes into
    /// the line as `-i` when the line is built here.
    static func quickConnect(_ host: String, port: Int?, jump: String?, identity: String?, workingDirectory: String?) -> (String, String?) {
        guard port != nil || jump != nil else { return (host, identity) }
        var words = ["ssh"]
        if let jump { words += ["-J", jump] }
        if let port { words += ["-p", "\(port)"] }
        var passed = identity
        if let identity {
            let file = identity.hasPrefix("/") ? identity : (workingDirectory ?? FileManager.default.currentDirectoryPath) + "/" + identity
            if FileManager.default.fileExists(atPath: file) {
                words += ["-i", file]
                passed = nil
            }
        }
        return ((words + [host]).joined(separator: " "), passed)
    }

    /// An endpoint's path as bytes: a local one absolute from the client's working folder.
    private func localize(_ endpoint: TransferEndpoint) -> [UInt8] {
        switch endpoint {
        case .remote(_, _, let path): return Array(path.utf8)
        case .local(let path):
            if path.hasPrefix("/") { return Array(path.utf8) }
            let base = request.workingDirectory ?? FileManager.default.currentDirectoryPath
            var relative = Substring(path)
            while relative.hasPrefix("./") { relative = relative.dropFirst(2).drop { $0 == "/" } }
            return Array((relative.isEmpty ? base : base + "/" + relative).utf8)
        }
    }

    /// A destination that does not exist yet is made by the run, in a folder that must be there
    /// now: found wanting while planning, before any byte moves, naming that folder (else the
    /// file would move whole and fail at its temporary name or its rename). A name written as
    /// a folder (ending in `/`) must be an existing folder, unless a tree takes it (cp -r).
    private func checkNewDestination(_ side: any FileSide, _ path: [UInt8], tree: Bool) async throws {
        let slash = UInt8(ascii: "/")
        var folder = SFTPPaths.split(path).parent
        // What is wrong with the folder, and the end of the sentence saying it.
        var then = ", so \(side.shown(path)) cannot be created; nothing was copied (\(verb) makes files and trees, never the folders they go into)."
        if path.count > 1, path.last == slash, !tree {
            folder = path
            while folder.count > 1, folder.last == slash { folder.removeLast() }
            then = "; nothing was copied (a destination ending in / names an existing folder)."
        }
        let shown = side.shown(folder)
        let attributes = try await Self.attempt(shown) { try await side.stat(folder, follow: true) }
        guard let attributes else { throw TermindError(.sftpFailed, "\(verb): the folder \(shown) does not exist" + then) }
        guard attributes.kind == .directory else { throw TermindError(.sftpFailed, "\(verb): \(shown) is not a folder" + then) }
    }

    /// `body`, with an SFTP failure said as `sftp.failed` naming `what`.
    static func attempt<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as SFTPError {
            throw TermindError(.sftpFailed, "\(what): \(error.message)")
        }
    }

    static func message(_ error: any Error) -> String {
        if let error = error as? SFTPError { return error.message }
        if let stop = error as? SFTPTransfer.Interrupted { return message(stop.reason) }
        if error is CancellationError { return "cancelled" }
        return TermindError.from(error).message
    }

    /// The remote paths a pattern names (matched on the server, component by component), or
    /// the path itself.
    private func expand(_ side: any FileSide, _ path: [UInt8]) async throws -> [[UInt8]] {
        guard side is RemoteSide else { return [path] }  // a local pattern is the shell's
        return try await SFTPPaths.expand(path, limit: Self.maximumEntries, list: { try await side.list($0, limit: Self.maximumEntries) },
                                          isDirectory: { (try? await side.stat($0, follow: true))??.kind == .directory })
    }

    // MARK: - Walking

    /// Adds `source` (with its attributes) going to `target`: a file, or a directory with
    /// everything inside. Conflicts are decided here, before anything changes.
    private func add(_ source: Place, _ attributes: SFTPAttributes, to target: Place, parent: Int?, depth: Int, root: Bool,
                     plan: inout Plan, choices: Choices, existingHint: SFTPAttributes?? = nil) async throws {
        plan.entries += 1
        guard plan.entries <= Self.maximumEntries else {
            throw TermindError.badRequest("\(verb): more than \(Self.maximumEntries) entries; copy the tree in parts.")
        }
        func outcome(_ kind: Transfer.File.Outcome, _ why: String) {
            plan.outcomes.append(.init(from: source.shown, to: target.shown, outcome: kind, error: why))
        }
        // The subtree rules: never into itself; the same path only as a kept-both copy.
        if source.side === target.side {
            if attributes.kind == .directory, TransferNames.isStrictlyInside(target.path, source.path) {
                return outcome(.failed, "the destination \(target.shown) is inside the source")
            }
            if TransferNames.isSame(target.path, source.path), root, (request.conflict ?? .ask) != .keepBoth {
                return outcome(.failed, "the destination is the source itself (--conflict keep-both makes a copy beside it)")
            }
        }
        let present: SFTPAttributes?
        if let hint = existingHint { present = hint } else {
            do { present = try await target.side.stat(target.path, follow: false) } catch { return outcome(.failed, Self.message(error)) }
        }
        switch attributes.kind {
        case .directory?:
            guard request.recursive == true else { return outcome(.failed, "a directory (-r copies it with everything inside)") }
            var place = target
            var exists = false
            if let present {
                if present.kind == .directory {
                    if root, (request.conflict ?? .ask) == .keepBoth {
                        place = Place(side: target.side, path: try await freeName(target, isDirectory: true))
                    } else {
                        exists = true  // merged into: each file inside decides on its own
                    }
                } else if present.kind == .symlink, !root {
                    return outcome(.failed, "\(target.shown): a symbolic link is in the way (a tree is never written through one)")
                } else if present.kind == .symlink, try await target.side.stat(target.path, follow: true)?.kind == .directory {
                    exists = true  // the destination named on the command line may be a link to a directory
                } else {
                    return outcome(.failed, "\(target.shown) exists and is not a directory")
                }
            }
            let index = plan.directories.count
            plan.directories.append(PlannedDirectory(to: place, attributes: attributes, exists: exists, parent: parent))
            let children: [SFTPSession.Entry]
            do { children = try await ahead.list(source.side, source.path) } catch { return outcome(.failed, Self.message(error)) }
            for child in children where child.attributes.kind == .directory && TransferNames.problem(child: child.name) == nil {
                ahead.start(source.side, SFTPPaths.join(source.path, child.name))
            }
            // What the destination holds already, read once (nothing when it is new).
            var there: [[UInt8]: SFTPAttributes] = [:]
            if exists {
                do {
                    for entry in try await place.side.list(place.path, limit: Self.maximumEntries) { there[entry.name] = entry.attributes }
                } catch { return outcome(.failed, Self.message(error)) }
            }
            for child in children {
                let from = Place(side: source.side, path: SFTPPaths.join(source.path, child.name))
                let to = Place(side: place.side, path: SFTPPaths.join(place.path, child.name))
                if let problem = TransferNames.problem(child: child.name) {
                    plan.outcomes.append(.init(from: from.shown, to: place.shown, outcome: .failed, error: "refused: \(problem)"))
                    continue
                }
                var childAttributes = child.attributes
                if childAttributes.kind == .symlink {
                    guard request.follow == true else {
                        plan.outcomes.append(.init(from: from.shown, to: to.shown, outcome: .skipped, error: "a symbolic link (--follow true copies what it points at)"))
                        continue
                    }
                    guard depth < Self.maximumDepth, let followed = try? await source.side.stat(from.path, follow: true) else {
                        plan.outcomes.append(.init(from: from.shown, to: to.shown, outcome: .failed, error: depth < Self.maximumDepth ? "a broken symbolic link" : "deeper than \(Self.maximumDepth) directories (a loop of links?)"))
                        continue
                    }
                    childAttributes = followed
                }
                try await add(from, childAttributes, to: to, parent: index, depth: depth + 1, root: false, plan: &plan, choices: choices,
                              existingHint: .some(there[child.name]))
            }
        case .file?:
            var place = target
            var replace = false
            if let present {
                if present.kind == .directory { return outcome(.failed, "\(target.shown): a directory is in the way") }
                // Said of the file that exists (the destination), not of the source.
                switch try await decide(source, target, choices: choices) {
                case .skip?: return outcome(.skipped, "\(target.shown) exists (--conflict replace replaces it)")
                case .replace?:
                    guard present.kind == .file else { return outcome(.failed, "\(target.shown) exists and is not a regular file; it is not replaced") }
                    replace = true
                case .keepBoth?: place = Place(side: target.side, path: try await freeName(target, isDirectory: false))
                case .ask?: return outcome(.failed, "\(target.shown) exists; nobody answered whether to replace it (--conflict replace|skip|keep-both decides without asking)")
                case nil:
                    return outcome(.failed, "\(target.shown) exists; no answer to whether to replace it was one of r, s, k, ra, sa, ka, so it was left as it is "
                                   + "(--conflict replace|skip|keep-both decides without asking)")
                }
            }
            plan.files.append(PlannedFile(from: source, to: place, attributes: attributes, replace: replace, directory: parent))
        default:
            outcome(.skipped, attributes.kind == .symlink ? "a symbolic link (--follow true copies what it points at)" : "not a regular file or directory")
        }
    }

    /// What to do with an existing destination file: the request's policy, an earlier "for
    /// all" answer, or the question (`.ask` back when nobody answered). An answer that is not
    /// one of the choices is never taken as one: the question is asked again, saying so (the
    /// question has no default, so a client gives "" for whatever it did not recognise, and
    /// Enter alone decides nothing either); nil after `conflictAsks` such answers.
    private func decide(_ source: Place, _ target: Place, choices: Choices) async throws -> Transfer.Conflict? {
        let policy = request.conflict ?? .ask
        guard policy == .ask else { return policy }
        if let all = choices.all.withLock({ $0 }) { return all }
        let asked = "\(target.shown) exists. [r]eplace, [s]kip, [k]eep both — or ra, sa, ka for all that follow: "
        var text = asked
        for _ in 0..<Self.conflictAsks {
            let question: JSONValue = .object([
                "topic": .string(Transfer.conflictTopic), "kind": .string("choice"), "text": .string(text),
                "choices": .object(["r": "replace", "s": "skip", "k": "keep-both", "ra": "replace-all", "sa": "skip-all", "ka": "keep-both-all",
                                    "replace": "replace", "skip": "skip", "keep": "keep-both"].mapValues { JSONValue.string($0) }),
                "details": .object(["source": .string(source.shown), "destination": .string(target.shown)]),
            ])
            guard let answer = await session.ask(question)?["answer"]?.stringValue else { return .ask }
            let forAll = answer.hasSuffix("-all")
            if let choice = Transfer.Conflict(rawValue: forAll ? String(answer.dropLast(4)) : answer), choice != .ask {
                if forAll { choices.all.withLock { $0 = choice } }
                return choice
            }
            text = "That is not one of r, s, k, ra, sa, ka. " + asked
        }
        return nil
    }

    /// How many answers that are not a choice the conflict question takes before it gives up.
    static let conflictAsks = 5

    /// The first free `name (n).ext` beside `target`.
    private func freeName(_ target: Place, isDirectory: Bool) async throws -> [UInt8] {
        let (parent, name) = SFTPPaths.split(target.path)
        for attempt in 1...999 {
            let candidate = SFTPPaths.join(parent, TransferNames.keepBoth(name, attempt: attempt, isDirectory: isDirectory))
            if try await target.side.stat(candidate, follow: false) == nil { return candidate }
        }
        throw SFTPError(status: .failure, message: "no free name beside \(target.shown) (name (1) to name (999) all exist)")
    }

    // MARK: - Moving one file

    private enum Stop: Sendable { case pause, cancel }

    /// What pause and cancel tell a file that is moving.
    private final class Signal: Sendable {
        private let state = Mutex<(stop: Stop?, task: Task<UInt64, Error>?)>((nil, nil))
        func attach(_ task: Task<UInt64, Error>) { state.withLock { $0.task = task } }
        func reset() { state.withLock { $0 = (nil, nil) } }
        func send(_ stop: Stop) {
            let task = state.withLock { s -> Task<UInt64, Error>? in
                if s.stop != .cancel { s.stop = stop }
                return s.task
            }
            task?.cancel()
        }
        var stop: Stop? { state.withLock { $0.stop } }
    }

    private struct Refused: Error { let message: String }

    /// A resume found the file already committed: the temporary gone, the destination the
    /// source's bytes (a rename whose answer the lost connection took with it).
    private struct AlreadyCommitted: Error {}

    /// Whether `error` is the connection (or the file's channel) going away.
    static func isLost(_ error: any Error) -> Bool {
        (error as? SFTPError).map { $0.status == .connectionLost || $0.status == .noConnection } ?? false
    }

    private func move(_ file: PlannedFile, source: String, board: ProgressBoard) async -> Transfer.File {
        let hosts = [file.from.side.host, file.to.side.host].filter { !$0.isEmpty }
        let saved = Set([file.from.side, file.to.side].compactMap { ($0 as? RemoteSide)?.savedHost })
        let id = await scheduler.submit(source: source, hosts: hosts, savedHosts: saved, from: file.from.shown, to: file.to.shown, size: file.attributes.size)
        let row = "t\(id)"
        let (directory, name) = SFTPPaths.split(file.to.path)
        let temporary = SFTPPaths.join(directory, TransferNames.temporary(name, token: "\(row)-\(TransferNames.randomToken())"))
        let signal = Signal()
        /// Whether a temporary file may exist (only then is one removed).
        let created = Flag()
        var partial: UInt64?
        /// The attempt follows a pause: a `transfers resume` waits to hear how its checks went.
        var resumed = false
        func ended(_ outcome: Transfer.File.Outcome, _ error: String?, bytes: UInt64 = 0) async -> Transfer.File {
            if outcome != .copied, created.isSet {
                // The partial goes; a failed clean-up is said with its path.
                do { try await file.to.side.remove(temporary) } catch {
                    await session.emit("notice", ["text": .string("The partial file \(file.to.side.shown(temporary)) could not be removed: \(Self.message(error))")])
                }
            }
            let state: SFTPContracts.TransferRow.State = switch outcome {
            case .copied: .done
            case .skipped: .skipped
            case .failed: .failed
            case .cancelled: .cancelled
            }
            await scheduler.stopped(id, state, error: error)
            board.finished(id, bytes: file.attributes.size ?? bytes)
            return .init(from: file.from.shown, to: file.to.shown, outcome: outcome, bytes: bytes, transfer: row, error: error)
        }
        while true {
            do {
                try await scheduler.admission(id) { control in signal.send(control == .pause ? .pause : .cancel) }
            } catch {
                return await ended(.cancelled, "cancelled")
            }
            if signal.stop == .cancel { return await ended(.cancelled, "cancelled") }
            signal.reset()
            board.started(id, name: SFTPPaths.display(name), at: partial ?? 0)
            // Nothing was written before the pause: start over.
            if partial == 0 {
                try? await file.to.side.remove(temporary)
                partial = nil
            }
            let resumeAt = partial
            let checked: @Sendable () async -> Void
            if resumed { checked = { [scheduler] in await scheduler.checked(id) } } else { checked = {} }
            let attempt = Task { try await copy(file, into: temporary, resumeAt: resumeAt, created: created, checked: checked) { board.progress(id, $0) } }
            signal.attach(attempt)
            do {
                let bytes = try await withTaskCancellationHandler { try await attempt.value } onCancel: { attempt.cancel() }
                try await commit(file, temporary, bytes: bytes)
                return await ended(.copied, nil, bytes: bytes)
            } catch is AlreadyCommitted {
                // The rename before the pause had gone through; only its answer was lost.
                await keepAttributes(file)
                await session.emit("notice", ["text": .string("\(row) \(file.to.shown) was already in place (its rename went through before the connection was lost).")])
                return await ended(.copied, nil, bytes: partial ?? 0)
            } catch let refused as Refused {
                return await ended(.failed, refused.message)
            } catch {
                let contiguous = (error as? SFTPTransfer.Interrupted)?.contiguous ?? partial ?? 0
                let reason = (error as? SFTPTransfer.Interrupted)?.reason ?? error
                let lost = Self.isLost(reason)
                if Task.isCancelled || signal.stop == .cancel { return await ended(.cancelled, "cancelled") }
                if signal.stop == .pause || (lost && resident && contiguous > 0) {
                    // Kept for a verified resume (termind transfers resume).
                    partial = contiguous
                    let why = signal.stop == .pause ? "paused" : "paused: \(Self.message(reason))"
                    await scheduler.stopped(id, .paused, error: why, kept: contiguous)
                    board.paused(id)
                    await session.emit("notice", ["text": .string("\(row) \(file.from.shown) \(why) after \(TerminalText.bytes(contiguous)); termind transfers resume \(row) continues it, cancel \(row) drops it.")])
                    resumed = true
                    continue
                }
                return await ended(.failed, Self.message(reason))
            }
        }
    }

    /// Copies `file` into `temporary` (from `resumeAt` after checking that neither side
    /// changed; `checked` once the checks passed, before more bytes move); returns the bytes
    /// the file holds.
    private func copy(_ file: PlannedFile, into temporary: [UInt8], resumeAt: UInt64?, created: Flag, checked: @Sendable () async -> Void,
                      progress: @escaping @Sendable (UInt64) -> Void) async throws -> UInt64 {
        let size = file.attributes.size
        let mode = (file.attributes.permissions ?? 0o644) & 0o777
        if let resumeAt { try await verifyPrefix(file, temporary, resumeAt) }
        await checked()
        let start = resumeAt ?? 0
        let end: UInt64
        var sourceNow: SFTPAttributes??
        let sameHost = (file.from.side as? RemoteSide).flatMap { $0 === file.to.side ? $0 : nil }
        if sameHost != nil { created.set() }
        if let sameHost, try await sameHost.serverCopy(file.from.path, to: temporary, mode: mode, resumeAt: start) {
            // The same host: the server copies (copy-data), no byte crosses the network.
            end = try await file.to.side.stat(temporary, follow: false)?.size ?? 0
            progress(end)
        } else {
            let extra = switch await topology() {
            case .channelsOnly: false
            case .connectionsPreferred: true
            case .smart: (size ?? 0) > Self.smartChannelLimit
            }
            // A big file's requests may ride several channels: each has its own window, so a
            // long round trip does not cap it at one window per round trip.
            let stripes = (size ?? 0) >= Self.stripedSize ? Self.stripes : 1
            // A small file (known to be) may share its channel with other small files.
            let small = size.map { $0 <= Self.sharedSize } ?? false
            let reader = try await file.from.side.openRead(file.from.path, extra: extra, stripes: stripes, shared: small)
            let writer: any WriteHandle
            do { writer = try await file.to.side.openWrite(temporary, mode: mode, resume: resumeAt != nil, extra: extra, stripes: stripes, shared: small) } catch {
                await reader.close()
                throw error
            }
            created.set()
            do {
                let window = min(file.from.side.window, file.to.side.window)
                end = try await SFTPTransfer.pipe(from: start, size: size, chunk: min(reader.chunk, writer.chunk), window: window,
                                                  read: { try await reader.read($0, $1) }, write: { offset, data in try await writer.write(offset, consume data) }, progress: progress)
            } catch {
                await reader.close()
                await writer.abandon()
                throw error
            }
            // The source is looked at again while both ends close (one round trip, not two).
            // Each end is closed exactly once: `finish` closes the writer even when it fails.
            do {
                async let after = file.from.side.stat(file.from.path, follow: true)
                await reader.close()
                try await writer.finish()
                sourceNow = .some(try await after)
            } catch {
                // Every write up to `end` was answered: a connection lost now stops the file
                // there (paused in serve), not at nothing.
                throw SFTPTransfer.Interrupted(contiguous: end, reason: error)
            }
        }
        // The byte count must match, and the source must not have changed while it was read.
        if let size, size > 0, end != size {
            throw Refused(message: "\(end) of \(size) bytes arrived (the source shrank while being read); nothing was committed")
        }
        let now: SFTPAttributes?
        if let seen = sourceNow { now = seen } else { now = try await file.from.side.stat(file.from.path, follow: true) }
        if now?.size != file.attributes.size || now?.modifiedTime != file.attributes.modifiedTime {
            throw Refused(message: "the source changed while being read (now \(now?.size.map { "\($0)" } ?? "gone") bytes, was \(size ?? 0)); nothing was committed")
        }
        if request.verify == .sha256 { try await verifyWhole(file, temporary, end) }
        return end
    }

    /// `--verify sha256`: the source's and the written file's SHA-256 are the same, each
    /// computed where the file is (a host's by its sha256sum, read here by reading).
    private func verifyWhole(_ file: PlannedFile, _ temporary: [UInt8], _ length: UInt64) async throws {
        func sha256(_ side: any FileSide, _ path: [UInt8]) async throws -> String {
            if let remote = side as? RemoteSide { return try await remote.sha256(path) }
            return try await digest(side, path, length).hexEncoded
        }
        async let source = sha256(file.from.side, file.from.path)
        async let written = sha256(file.to.side, temporary)
        let (a, b) = try await (source, written)
        guard a == b else {
            throw Refused(message: "the SHA-256 of what was written (\(b.prefix(16))…) is not the source's (\(a.prefix(16))…); nothing was committed")
        }
    }

    /// Before a resume: the source is as it was planned (size, modification time), the
    /// partial is there, and their first `length` bytes are the same (SHA-256 of each side,
    /// read again).
    private func verifyPrefix(_ file: PlannedFile, _ temporary: [UInt8], _ length: UInt64) async throws {
        let now = try await file.from.side.stat(file.from.path, follow: true)
        guard now?.size == file.attributes.size, now?.modifiedTime == file.attributes.modifiedTime else {
            throw Refused(message: "the source changed since it was paused (size or modification time); not resumed")
        }
        let partial = try await file.to.side.stat(temporary, follow: false)
        if partial == nil, try await wasCommitted(file, length) { throw AlreadyCommitted() }
        guard let partial, partial.kind == .file, (partial.size ?? 0) >= length else {
            throw Refused(message: "the partial file \(file.to.side.shown(temporary)) is gone or shorter than the \(length) bytes written; not resumed")
        }
        guard length > 0 else { return }
        async let a = digest(file.from.side, file.from.path, length)
        async let b = digest(file.to.side, temporary, length)
        guard try await a == b else { throw Refused(message: "the partial file's first \(length) bytes differ from the source's; not resumed") }
    }

    private func digest(_ side: any FileSide, _ path: [UInt8], _ length: UInt64) async throws -> Data {
        let reader = try await side.openRead(path, extra: false, stripes: 1, shared: false)
        let hash = Mutex(IncrementalDigest(.sha256))
        do {
            // Pieces arrive out of order; they are hashed in order through a bounded reorder map.
            let pending = Mutex<(next: UInt64, waiting: [UInt64: ArraySlice<UInt8>])>((0, [:]))
            _ = try await SFTPTransfer.pipe(size: length, chunk: reader.chunk, window: 16, read: { try await reader.read($0, $1) }, write: { offset, data in
                pending.withLock { state in
                    state.waiting[offset] = data
                    while let piece = state.waiting.removeValue(forKey: state.next) {
                        hash.withLock { $0.update(piece) }
                        state.next += UInt64(piece.count)
                    }
                }
            })
            await reader.close()
        } catch {
            await reader.close()
            throw error
        }
        return hash.withLock { $0.finish() }
    }

    /// Renames the finished temporary file (`bytes` long) into place: over the old file only
    /// when it was chosen to be replaced (atomically), never over one that appeared meanwhile.
    /// A connection lost meanwhile interrupts the file at its whole length: whether the
    /// rename went through is not known, and a resume finds out (`wasCommitted`).
    private func commit(_ file: PlannedFile, _ temporary: [UInt8], bytes: UInt64) async throws {
        do {
            try await file.to.side.rename(temporary, to: file.to.path, overwrite: file.replace)
        } catch where Self.isLost(error) {
            let unknown = SFTPError(status: .connectionLost, message: "\(file.to.shown): the connection was lost while it was being renamed into place, "
                                    + "so whether it is there is not known (\(Self.message(error)))")
            throw SFTPTransfer.Interrupted(contiguous: bytes, reason: unknown)
        } catch {
            guard !file.replace else { throw Refused(message: Self.message(error)) }
            // Never put over a file that appeared meanwhile; else say what the server said.
            let there = (try? await file.to.side.stat(file.to.path, follow: false)) ?? nil
            throw Refused(message: there != nil ? "\(file.to.shown) appeared meanwhile; it was not replaced" : "\(file.to.shown) could not be created: \(Self.message(error))")
        }
        await keepAttributes(file)
    }

    /// `--preserve`: the source's permissions and times on the committed file (a failure is
    /// said, the file stays).
    private func keepAttributes(_ file: PlannedFile) async {
        guard request.preserve == true else { return }
        do {
            try await file.to.side.setAttributes(file.to.path, mode: file.attributes.permissions, accessed: file.attributes.accessTime, modified: file.attributes.modifiedTime)
        } catch {
            await session.emit("notice", ["text": .string("\(file.to.shown): copied, but its permissions and times were not kept: \(Self.message(error))")])
        }
    }

    /// On a resume whose temporary is gone: whether the destination already holds the whole
    /// source (same length, same SHA-256), as after a rename whose answer was lost.
    private func wasCommitted(_ file: PlannedFile, _ length: UInt64) async throws -> Bool {
        guard length > 0, file.attributes.size == length,
              let there = try await file.to.side.stat(file.to.path, follow: false), there.kind == .file, there.size == length else { return false }
        async let a = digest(file.from.side, file.from.path, length)
        async let b = digest(file.to.side, file.to.path, length)
        return try await a == b
    }
}

/// A run's progress: bytes of all its files, the one that moved last, and each row's count
/// for `termind transfers`.
final class ProgressBoard: Sendable {
    private struct State {
        var files: Int
        var total: UInt64
        var finishedBytes: UInt64 = 0
        var finishedFiles = 0
        var active: [UInt64: (name: String, done: UInt64)] = [:]
        var current = ""
        var changed = true
    }
    private let state: Mutex<State>

    init(files: Int, total: UInt64) { state = Mutex(State(files: files, total: total)) }

    func started(_ id: UInt64, name: String, at offset: UInt64) {
        state.withLock { $0.active[id] = (name, offset); $0.current = name; $0.changed = true }
    }

    func progress(_ id: UInt64, _ done: UInt64) {
        state.withLock { s in
            guard let entry = s.active[id] else { return }
            s.active[id] = (entry.name, done)
            s.current = entry.name
            s.changed = true
        }
    }

    func paused(_ id: UInt64) { state.withLock { $0.active[id] = nil; $0.changed = true } }

    func finished(_ id: UInt64, bytes: UInt64) {
        state.withLock { s in
            s.active[id] = nil
            s.finishedBytes += bytes
            s.finishedFiles += 1
            s.changed = true
        }
    }

    /// The progress event (nil when nothing moved since the last) and each active row's bytes.
    func snapshot(final: Bool = false) -> ([String: JSONValue]?, [UInt64: UInt64]) {
        state.withLock { s in
            let rows = s.active.mapValues(\.done)
            guard s.changed || final, s.files > 0 else { return (nil, rows) }
            s.changed = false
            let done = s.finishedBytes + s.active.values.reduce(0) { $0 + $1.done }
            var item = "\(s.finishedFiles)/\(s.files) files"
            if !final, !s.current.isEmpty, s.files > 1 || !s.active.isEmpty { item += " · " + s.current }
            return (["item": .string(item), "done": JSONValue(exactly: done), "total": JSONValue(exactly: max(s.total, done)),
                     "unit": .string("bytes"), "key": .string("transfer")], rows)
        }
    }
}

/// Set once, read from anywhere.
final class Flag: Sendable {
    private let lock = Mutex(false)
    var isSet: Bool { lock.withLock { $0 } }
    func set() { lock.withLock { $0 = true } }
}
