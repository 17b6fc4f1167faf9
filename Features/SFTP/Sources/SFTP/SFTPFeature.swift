import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import SFTPWire
import SettingsAPI
import Synchronization
import TermindCore
import TermindSSH
import VaultAPI

/// SFTP (docs/sftp.md): file operations on saved hosts and quick-connect targets over the
/// process's pooled connections, spoken by SFTPWire on the `sftp` subsystem channel. So far
/// `termind sftp HOST ACTION PATH…` (what moves no file data); transfers and their scheduler
/// follow.
final class SFTPFeature: Feature {
    private struct Ports: Sendable {
        let opener: ConnectionOpener
        let resident: Bool
        let hosts: (any HostDirectory)?
    }
    private let follower = Mutex<Task<Void, Never>?>(nil)

    private let ports = Mutex<Ports?>(nil)
    /// `sftp.limits` and `sftp.topology` as they apply now: read once, then kept current by
    /// the settings' change stream (each admission and each file reads them, so a change
    /// applies to queued work; reading the store for each would cost a query per file).
    final class SettingsCache: Sendable {
        let values = Mutex<(any SettingsValues)?>(nil)
        private let cached = Mutex<(limits: SFTPSettings.Limits, topology: SFTPSettings.Topology)?>(nil)
        private let followers = Mutex<[Task<Void, Never>]?>(nil)

        func current() async -> (limits: SFTPSettings.Limits, topology: SFTPSettings.Topology) {
            if let known = cached.withLock({ $0 }) { return known }
            let store = values.withLock { $0 }
            if let store {
                // Subscribed before the first read, so no change falls between the two.
                followers.withLock { tasks in
                    guard tasks == nil else { return }
                    let limits = store.updates(SFTPSettings.Limits.self), topology = store.updates(SFTPSettings.Topology.self)
                    tasks = [
                        Task { [self] in for await value in limits { cached.withLock { $0?.limits = value } } },
                        Task { [self] in for await value in topology { cached.withLock { $0?.topology = value } } },
                    ]
                }
            }
            let limits = (try? await store?.read(SFTPSettings.Limits.self)) ?? SFTPSettings.Limits.defaults
            let topology = (try? await store?.read(SFTPSettings.Topology.self)) ?? SFTPSettings.Topology.defaults
            return cached.withLock { state in
                if state == nil { state = (limits, topology) }
                return state!
            }
        }

        func stop() {
            followers.withLock { tasks in
                for task in tasks ?? [] { task.cancel() }
                tasks = nil
            }
            cached.withLock { $0 = nil }
        }
    }
    private let settings: SettingsCache
    /// The one scheduler of the process.
    let scheduler: TransferScheduler

    init() {
        let cache = SettingsCache()
        settings = cache
        scheduler = TransferScheduler {
            let limits = await cache.current().limits
            return .init(active: limits.active, perHost: limits.perHost)
        }
    }

    /// The connection opener once started.
    var opener: ConnectionOpener {
        get throws { try current().opener }
    }

    private func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("SFTP is not started.") }
        return ports
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.stream(SFTPStreams.Run.self) { [self] request, session in
            try await Runner(request: request, session: session).run(try current().opener) { try await self.transfer($0, session: session) }
        }
        let port = SchedulerPort(feature: self)
        registrar.stream(SFTPStreams.Transfer.self) { request, session in try await port.transfer(request, session: session) }
        registrar.provide(.sftpScheduler, port)
        registrar.stream(SFTPStreams.Edit.self) { [self] request, session in
            try await EditRun(request: request, session: session, opener: try current().opener).run()
        }
        registrar.handleBlocking(SFTPContracts.EditList.self) { _, _ in .init(copies: EditRun.list()) }
        registrar.handleBlocking(SFTPContracts.EditDiscard.self) { request, _ in try EditRun.discard(request.target) }
        // `termind transfers` goes through the same port as other features.
        registrar.handle(SFTPContracts.List.self) { _, _ in .init(transfers: await port.transfers()) }
        registrar.handle(SFTPContracts.Pause.self) { request, _ in .init(transfer: try await port.pause(request.id)) }
        registrar.handle(SFTPContracts.Resume.self) { request, _ in .init(transfer: try await port.resume(request.id)) }
        registrar.handle(SFTPContracts.Cancel.self) { request, _ in .init(transfer: try await port.cancel(request.id)) }
    }

    private func transfer(_ request: SFTPStreams.Transfer.Request, session: StreamSession) async throws -> SFTPStreams.Transfer.Result {
        let ports = try current()
        let cache = settings
        return try await TransferRun(request: request, session: session, opener: ports.opener, scheduler: scheduler, resident: ports.resident,
                                     topology: { await cache.current().topology.strategy }, hosts: ports.hosts).run()
    }

    /// `sftp.scheduler`: the same runs and rows as the CLI's.
    private struct SchedulerPort: TransferScheduling {
        let feature: SFTPFeature
        func transfer(_ request: SFTPStreams.Transfer.Request, session: StreamSession) async throws -> SFTPStreams.Transfer.Result {
            try await feature.transfer(request, session: session)
        }
        func transfers() async -> [SFTPContracts.TransferRow] { await feature.scheduler.list() }
        func pause(_ id: String) async throws -> SFTPContracts.TransferRow { try await control { try await feature.scheduler.pause(id) } }
        /// A resume that its own checks refused (or that stopped again) is a failure, said.
        func resume(_ id: String) async throws -> SFTPContracts.TransferRow {
            let row = try await control { try await feature.scheduler.resume(id) }
            let what = "\(row.id) (\(row.from) → \(row.to))"
            switch row.state {
            case .failed:
                throw TermindError(.sftpFailed, "\(what) was not resumed: \(row.error ?? "its checks failed"); its partial file is removed.")
            case .paused:
                throw TermindError(.sftpFailed, "\(what) is paused again: \(row.error ?? "paused") (termind transfers resume \(row.id) tries again).")
            case .cancelled:
                throw TermindError(.sftpFailed, "\(what) was cancelled meanwhile.")
            default:
                return row
            }
        }
        func cancel(_ id: String) async throws -> SFTPContracts.TransferRow { try await control { try await feature.scheduler.cancel(id) } }
        func download(host: String, path: String, offset: UInt64, source: String) async throws -> any RemoteFileReader {
            try await feature.download(host: host, path: path, offset: offset, source: source, opener: try feature.opener)
        }
        func upload(host: String, path: String, size: UInt64, replace: Bool, source: String) async throws -> any RemoteFileWriter {
            try await feature.upload(host: host, path: path, size: size, replace: replace, source: source, opener: try feature.opener)
        }
        func folder(host: String) async throws -> any RemoteFolder {
            RemoteFolderSide(side: SFTPFeature.streamSide(host, opener: try feature.opener), host: host)
        }

        private func control(_ body: () async throws -> SFTPContracts.TransferRow) async throws -> SFTPContracts.TransferRow {
            do { return try await body() } catch let failure as TransferFailure {
                throw TermindError(.sftpTransferState, failure.message)
            }
        }
    }

    func start(_ context: FeatureContext) async throws {
        if let values = context.ports.optional(.settingsValues) {
            try values.register(SFTPSettings.Limits.self, owner: context.featureID)
            try values.register(SFTPSettings.Topology.self, owner: context.featureID)
            settings.values.withLock { $0 = values }
        }
        let opener = ConnectionOpener(routes: try context.ports.require(.routes), trust: try context.ports.require(.hostKeyTrust),
                                      pool: try context.ports.require(.sshConnections), logger: context.logger)
        let hosts = context.ports.optional(.hostDirectory)
        ports.withLock { $0 = Ports(opener: opener, resident: context.resident, hosts: hosts) }
        // A deleted saved host (from any client of a server) cancels the files that reach it;
        // a plain process's own transfers cannot outlive a command that deletes one.
        if let hosts, context.resident {
            let scheduler = self.scheduler
            let changes = hosts.changes()
            let logger = context.logger
            follower.withLock { $0 = Task {
                for await change in changes where change.deleted {
                    let rows = await scheduler.cancel(savedHosts: Set(change.affected + [change.host]))
                    if !rows.isEmpty { logger.info("sftp.host_deleted", ["count": .int(rows.count)]) }
                }
            } }
        }
    }

    func stop() async {
        follower.withLock { $0?.cancel(); $0 = nil }
        settings.stop()
        ports.withLock { $0 = nil }
    }
}

/// One `termind sftp` run.
struct Runner {
    typealias Run = SFTPStreams.Run
    let request: Run.Request
    let session: StreamSession

    /// At most this many paths one pattern may match.
    static let maximumMatches = 100_000
    /// `read`: at most this many bytes at once (64 KiB when not said).
    static let readLimit = 1 << 20

    /// `transfer` runs a browsing prompt's get and put.
    func run(_ opener: ConnectionOpener, transfer: @escaping Browser.Transfer) async throws -> Run.Result {
        try checkArguments()
        let target = ConnectionTarget(target: request.target, user: request.user, identity: request.identity, workingDirectory: request.workingDirectory,
                                      acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout)
        let connection = try await opener.connection(target) { await session.ask($0) }
        let sftp: SFTPSession
        do {
            sftp = try await SFTPSession.open(on: connection)
        } catch let error as SFTPError {
            throw TermindError(.sftpProtocol, "\(request.target) did not start SFTP: \(error.message)")
        }
        defer { Task { await sftp.close() } }
        guard request.action != nil else { return try await Browser(request: request, session: session, sftp: sftp, transfer: transfer).run() }
        var result = try await perform(sftp)
        result.exitStatus = result.failures.isEmpty ? 0 : 3
        if !result.failures.isEmpty, result.done?.isEmpty ?? true, result.listings?.isEmpty ?? true, result.entries?.isEmpty ?? true, result.space?.isEmpty ?? true {
            // Nothing at all was done: an error, with every reason (said once: not also as notices).
            throw TermindError(.sftpFailed, result.failures.map { "\($0.path): \($0.error)" }.joined(separator: "\n"))
        }
        for failure in result.failures {
            await session.emit("notice", ["text": .string("\(failure.path): \(failure.error)")])
        }
        return result
    }

    func checkArguments() throws {
        let count = request.paths.count
        guard let action = request.action else {
            if count > 0 { throw TermindError.badRequest("sftp \(request.target): '\(request.paths[0])' is not an action (ls, stat, mkdir, rm, rmdir, mv, ln, chmod, df).") }
            return
        }
        switch action {
        case .mv where count != 2: throw TermindError.badRequest("sftp mv takes SRC DST (2 paths), not \(count).")
        case .ln where count != 2: throw TermindError.badRequest("sftp ln takes TARGET LINK (2 paths), not \(count): the link LINK will point at TARGET.")
        case .chmod where count < 2: throw TermindError.badRequest("sftp chmod takes MODE PATH… (an octal mode such as 644, then at least one path).")
        case .mkdir, .rm, .rmdir, .stat: if count == 0 { throw TermindError.badRequest("sftp \(action.rawValue) needs at least one PATH.") }
        case .read where count != 1: throw TermindError.badRequest("sftp read takes one PATH (a file), not \(count).")
        default: break
        }
        if request.action == .chmod, Self.octal(request.paths[0]) == nil {
            throw TermindError.badRequest("sftp chmod: '\(request.paths[0])' is not an octal mode (e.g. 644 or 0755).")
        }
        if let length = request.length, !(1...Self.readLimit).contains(length) {
            throw TermindError.badRequest("--length must be from 1 to \(Self.readLimit) bytes, not \(length).")
        }
        if let mode = request.mode, Self.octal(mode) == nil { throw TermindError.badRequest("--mode: '\(mode)' is not an octal mode (e.g. 755).") }
    }

    static func octal(_ text: String) -> UInt32? {
        guard !text.isEmpty, text.count <= 5, let value = UInt32(text, radix: 8), value <= 0o7777 else { return nil }
        return value
    }

    func perform(_ sftp: SFTPSession) async throws -> Run.Result {
        var result = Run.Result(exitStatus: 0)
        func attempt(_ path: String, _ body: () async throws -> Void) async {
            do { try await body() } catch let error as SFTPError {
                result.failures.append(.init(path: path, error: error.message))
            } catch {
                result.failures.append(.init(path: path, error: TermindError.from(error).message))
            }
        }
        let follow = request.follow == true
        guard let action = request.action else { return result }
        switch action {
        case .ls:
            var listings: [Run.Listing] = []
            for pattern in request.paths.isEmpty ? ["."] : request.paths {
                await attempt(pattern) {
                    for path in try await expand(sftp, pattern) {
                        let attributes = try await sftp.stat(path, followLinks: follow)
                        if attributes.kind == .directory {
                            listings.append(.init(path: SFTPPaths.display(path), entries: try await list(sftp, path)))
                        } else {
                            listings.append(.init(path: SFTPPaths.display(SFTPPaths.split(path).parent), entries: [Self.entry(path, attributes)]))
                        }
                    }
                }
            }
            result.listings = listings
            for listing in listings {
                await session.emit("view", ["title": .string(listings.count > 1 ? listing.path : "\(request.target):\(listing.path)"),
                                            "rows": .array(listing.entries.map(Self.row)), "result": .bool(true)])
            }
        case .stat:
            var entries: [Run.Entry] = []
            for pattern in request.paths {
                await attempt(pattern) {
                    for path in try await expand(sftp, pattern) {
                        var entry = Self.entry(path, try await sftp.stat(path, followLinks: follow))
                        if entry.kind == "symlink" { entry.target = (try? await sftp.readlink(path)).map(SFTPPaths.display) }
                        entries.append(entry)
                    }
                }
            }
            result.entries = entries
            await session.emit("view", ["title": .string("\(request.target)"), "rows": .array(entries.map(Self.statRow)), "result": .bool(true)])
        case .mkdir:
            let mode = request.mode.flatMap(Self.octal) ?? 0o755
            var done: [String] = []
            for text in request.paths {
                await attempt(text) {
                    let path = Array(text.utf8)
                    if request.parents == true {
                        try await makeParents(sftp, path, mode: mode)
                    } else {
                        try await sftp.mkdir(path, permissions: mode)
                    }
                    done.append(text)
                }
            }
            result.done = done
        case .rm, .rmdir:
            var done: [String] = []
            for pattern in request.paths {
                await attempt(pattern) {
                    for path in try await expand(sftp, pattern) {
                        let shown = SFTPPaths.display(path)
                        if request.action == .rm {
                            if try await sftp.stat(path, followLinks: false).kind == .directory {
                                guard request.recursive == true else {
                                    throw SFTPError(status: .failure, message: "is a directory (rm -r removes it with everything inside; rmdir an empty one)")
                                }
                                var count = 0
                                try await removeTree(sftp, path, count: &count)
                            } else {
                                try await sftp.remove(path)
                            }
                        } else {
                            try await sftp.rmdir(path)
                        }
                        done.append(shown)
                    }
                }
            }
            result.done = done
        case .mv:
            let (from, to) = (request.paths[0], request.paths[1])
            await attempt(from) {
                var destination = Array(to.utf8)
                // Into an existing directory, as mv does.
                if let existing = try? await sftp.stat(destination), existing.kind == .directory {
                    destination = SFTPPaths.join(destination, SFTPPaths.split(Array(from.utf8)).name)
                }
                try await sftp.rename(Array(from.utf8), to: destination, overwrite: request.replace == true)
                result.done = ["\(from) → \(SFTPPaths.display(destination))"]
            }
        case .ln:
            let (target, link) = (request.paths[0], request.paths[1])
            await attempt(link) {
                try await sftp.symlink(target: Array(target.utf8), at: Array(link.utf8))
                result.done = ["\(link) → \(target)"]
            }
        case .chmod:
            let mode = Self.octal(request.paths[0])!
            var done: [String] = []
            for pattern in request.paths.dropFirst() {
                await attempt(pattern) {
                    for path in try await expand(sftp, pattern) {
                        // The file type bits stay as they are; only the permission bits change.
                        try await sftp.setstat(path, SFTPAttributes(permissions: mode))
                        done.append(SFTPPaths.display(path))
                    }
                }
            }
            result.done = done
        case .read:
            let text = request.paths[0]
            await attempt(text) {
                let path = Array(text.utf8)
                let attributes = try await sftp.stat(path, followLinks: true)
                guard attributes.kind == .file else { throw SFTPError(status: .failure, message: "is not a regular file") }
                let offset = request.offset ?? 0
                let wanted = request.length ?? 65536
                let handle = try await sftp.open(path, .read)
                var data: [UInt8] = []
                do {
                    while data.count < wanted {
                        let piece = try await sftp.read(handle, offset: offset + UInt64(data.count), length: min(wanted - data.count, 32768))
                        if piece.isEmpty { break }
                        data += piece
                    }
                } catch {
                    try? await sftp.close(handle)
                    throw error
                }
                try? await sftp.close(handle)
                let utf8 = String(validating: data, as: UTF8.self)
                result.content = .init(path: text, size: attributes.size ?? UInt64(data.count), offset: offset, bytes: data.count, text: utf8,
                                       base64: utf8 == nil ? Data(data).base64EncodedString() : nil)
            }
        case .df:
            var space: [Run.Space] = []
            for text in request.paths.isEmpty ? ["."] : request.paths {
                await attempt(text) {
                    let df = try await sftp.statvfs(Array(text.utf8))
                    space.append(.init(path: text, totalBytes: df.blocks * df.blockSize, freeBytes: df.free * df.blockSize, availableBytes: df.available * df.blockSize))
                }
            }
            result.space = space
            await session.emit("view", ["title": .string(request.target), "result": .bool(true), "rows": .array(space.map { s in
                .object(["path": .string(s.path), "size": .string(TerminalText.bytes(s.totalBytes)), "used": .string(TerminalText.bytes(s.totalBytes - min(s.totalBytes, s.freeBytes))),
                         "available": .string(TerminalText.bytes(s.availableBytes)),
                         "use": .string(s.totalBytes == 0 ? "-" : "\(Int((Double(s.totalBytes - min(s.totalBytes, s.freeBytes)) / Double(s.totalBytes) * 100).rounded()))%")])
            })])
        }
        if let done = result.done, !done.isEmpty {
            await session.emit("view", ["title": .string("\(action.rawValue) on \(request.target)"), "result": .bool(true),
                                        "rows": .array(done.map { .object(["done": .string($0)]) })])
        }
        return result
    }

    // MARK: - Paths

    /// The paths `pattern` names: itself when it has no glob characters, else the matches
    /// on the server, component by component (sorted; none is an error).
    private func expand(_ sftp: SFTPSession, _ pattern: String) async throws -> [[UInt8]] {
        try await SFTPPaths.expand(Array(pattern.utf8), limit: Self.maximumMatches, list: { try await entries(sftp, $0) },
                                   isDirectory: { (try? await sftp.stat($0).kind) == .directory })
    }

    /// A directory's entries as the server sent them, sorted by name.
    private func entries(_ sftp: SFTPSession, _ path: [UInt8]) async throws -> [SFTPSession.Entry] {
        let handle = try await sftp.openDirectory(path)
        var entries: [SFTPSession.Entry] = []
        do {
            while let batch = try await sftp.readDirectory(handle) {
                entries += batch
                guard entries.count <= Self.maximumMatches else { throw SFTPError(status: .failure, message: "holds more than \(Self.maximumMatches) entries") }
            }
        } catch {
            try? await sftp.close(handle)
            throw error
        }
        try? await sftp.close(handle)
        return entries.sorted { $0.name.lexicographicallyPrecedes($1.name) }
    }

    /// A directory's entries, sorted by name, as shown.
    private func list(_ sftp: SFTPSession, _ path: [UInt8]) async throws -> [Run.Entry] {
        try await entries(sftp, path).map { Self.entry($0.name, $0.attributes) }
    }

    /// Removes a directory with everything inside, depth first; links are removed as links,
    /// never followed; at most `maximumMatches` entries.
    private func removeTree(_ sftp: SFTPSession, _ path: [UInt8], count: inout Int) async throws {
        for entry in try await list(sftp, path) {
            count += 1
            guard count <= Self.maximumMatches else { throw SFTPError(status: .failure, message: "holds more than \(Self.maximumMatches) entries; nothing more was removed") }
            let child = SFTPPaths.join(path, entry.nameBytes)
            if entry.kind == "directory" {
                try await removeTree(sftp, child, count: &count)
            } else {
                try await sftp.remove(child)
            }
        }
        try await sftp.rmdir(path)
    }

    private func makeParents(_ sftp: SFTPSession, _ path: [UInt8], mode: UInt32) async throws {
        let (absolute, parts) = SFTPPaths.components(path)
        var current: [UInt8] = absolute ? [UInt8(ascii: "/")] : []
        for part in parts {
            current = current.isEmpty ? part : SFTPPaths.join(current, part)
            if let existing = try? await sftp.stat(current) {
                guard existing.kind == .directory else { throw SFTPError(status: .failure, message: "\(SFTPPaths.display(current)) exists and is not a directory") }
                continue
            }
            try await sftp.mkdir(current, permissions: mode)
        }
    }

    // MARK: - Showing

    static func entry(_ name: [UInt8], _ a: SFTPAttributes) -> Run.Entry {
        Run.Entry(name: SFTPPaths.isText(name) ? String(decoding: name, as: UTF8.self) : SFTPPaths.display(name),
                  nameBase64: SFTPPaths.isText(name) ? nil : Data(name).base64EncodedString(),
                  kind: a.kind?.rawValue, size: a.size, permissions: a.permissions.map { String(printf: "%04o", $0 & 0o7777) },
                  uid: a.uid, gid: a.gid, modified: a.modifiedTime, accessed: a.accessTime)
    }

    static func row(_ entry: Run.Entry) -> JSONValue {
        let name = entry.nameBase64.flatMap { Data(base64Encoded: $0) }.map { SFTPPaths.display(Array($0)) } ?? SFTPPaths.display(Array(entry.name.utf8))
        let mode = entry.permissions.flatMap { UInt32($0, radix: 8) }.map { value -> String in
            let type: UInt32 = switch entry.kind { case "directory": 0o040000; case "symlink": 0o120000; case "file": 0o100000; default: 0 }
            return SFTPPaths.modeString(type | value)
        } ?? "?"
        return .object(["mode": .string(mode), "size": .string(entry.size.map(String.init) ?? "-"), "modified": .string(entry.modified.map(date) ?? "-"),
                        "name": .string(name + (entry.kind == "directory" ? "/" : ""))])
    }

    static func statRow(_ entry: Run.Entry) -> JSONValue {
        var row: [String: JSONValue] = ["path": .string(entry.nameBase64 == nil ? SFTPPaths.display(Array(entry.name.utf8)) : entry.name),
                                        "kind": .string(entry.kind ?? "?"), "size": .string(entry.size.map(String.init) ?? "-"),
                                        "permissions": .string(entry.permissions ?? "-"), "owner": .string("\(entry.uid.map(String.init) ?? "-"):\(entry.gid.map(String.init) ?? "-")"),
                                        "modified": .string(entry.modified.map(date) ?? "-")]
        if let target = entry.target { row["target"] = .string(target) }
        return .object(row)
    }

    static func date(_ seconds: UInt32) -> String {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(printf: "%04d-%02d-%02d %02d:%02d", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min)
    }
}

extension SFTPStreams.Run.Entry {
    /// The exact name bytes.
    var nameBytes: [UInt8] { nameBase64.flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? Array(name.utf8) }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "sftp", version: "0.1.0", signature: TermindLibrary.signature) { SFTPFeature() }
}
