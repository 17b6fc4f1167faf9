import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPWire
import Synchronization
import TermindCore
import TermindSSH
import TransferRules
import VaultAPI

/// Where a transfer's file lives: this machine or a host over SFTP. Paths are bytes (a
/// remote name need not be UTF-8); every failure is an `SFTPError` naming what failed, so a
/// file's outcome reads the same whichever side failed.
protocol FileSide: AnyObject, Sendable {
    /// The scheduler's host name ("" for this machine).
    var host: String { get }
    /// How much one request moves, and how many are kept in flight.
    var window: Int { get }
    func shown(_ path: [UInt8]) -> String
    /// nil when nothing is there.
    func stat(_ path: [UInt8], follow: Bool) async throws -> SFTPAttributes?
    /// A directory's entries (`.` and `..` left out), with their attributes, links unfollowed.
    func list(_ path: [UInt8], limit: Int) async throws -> [SFTPSession.Entry]
    func mkdir(_ path: [UInt8], mode: UInt32) async throws
    /// `extra`: the file may ride an extra connection (topology), else a sibling channel;
    /// `stripes`: up to this many channels may carry its requests (each has its own window);
    /// `shared`: a small file, whose channel may carry other small files at the same time.
    func openRead(_ path: [UInt8], extra: Bool, stripes: Int, shared: Bool) async throws -> any ReadHandle
    /// A new file (`resume`: the existing partial, not truncated), never through a link.
    func openWrite(_ path: [UInt8], mode: UInt32, resume: Bool, extra: Bool, stripes: Int, shared: Bool) async throws -> any WriteHandle
    func rename(_ from: [UInt8], to: [UInt8], overwrite: Bool) async throws
    func remove(_ path: [UInt8]) async throws
    func setAttributes(_ path: [UInt8], mode: UInt32?, accessed: UInt32?, modified: UInt32?) async throws
}

protocol ReadHandle: Sendable {
    var chunk: Int { get }
    func read(_ offset: UInt64, _ length: Int) async throws -> ArraySlice<UInt8>
    func close() async
}

protocol WriteHandle: Sendable {
    var chunk: Int { get }
    /// The bytes are the handle's to let go once sent.
    func write(_ offset: UInt64, _ data: consuming ArraySlice<UInt8>) async throws
    /// Everything written is saved (a local file synced, a remote handle closed).
    func finish() async throws
    /// Closed without more ado (the copy failed or stopped).
    func abandon() async
}

// MARK: - This machine

private func statPath(_ path: UnsafePointer<CChar>, _ info: inout stat, follow: Bool) -> Int32 {
    follow ? stat(path, &info) : lstat(path, &info)
}

final class LocalSide: FileSide {
    let host = ""
    let window = SFTPSession.window

    func shown(_ path: [UInt8]) -> String { SFTPPaths.display(path) }

    static func error(_ what: String, _ path: [UInt8], _ code: Int32 = errno) -> SFTPError {
        let status: SFTPStatus = switch code {
        case ENOENT: .noSuchFile
        case EACCES, EPERM: .permissionDenied
        default: .failure
        }
        return SFTPError(status: status, message: "\(what) \(SFTPPaths.display(path)): \(String(cString: strerror(code)))")
    }

    static func withPath<T>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
        try (path + [0]).withUnsafeBufferPointer { try body(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
    }

    static func attributes(_ info: stat) -> SFTPAttributes {
        SFTPAttributes(size: UInt64(max(0, info.st_size)), uid: info.st_uid, gid: info.st_gid, permissions: UInt32(info.st_mode),
                       accessTime: UInt32(truncatingIfNeeded: info.st_atim.tv_sec), modifiedTime: UInt32(truncatingIfNeeded: info.st_mtim.tv_sec))
    }

    /// Reads and metadata of local files run here, never on the cooperative pool: a slow
    /// disk or a hung network file system holds these threads, not Swift's tasks.
    static let files = BlockingExecutor(name: "termind.sftp.files", threadLimit: 8, queueLimit: 4096)

    func stat(_ path: [UInt8], follow: Bool) async throws -> SFTPAttributes? {
        try await Self.files.run {
            var info = Glibc.stat()
            let result = Self.withPath(path) { statPath($0, &info, follow: follow) }
            if result != 0 {
                if errno == ENOENT || errno == ENOTDIR { return nil }
                throw Self.error("stat", path)
            }
            return Self.attributes(info)
        }
    }

    func list(_ path: [UInt8], limit: Int) async throws -> [SFTPSession.Entry] {
        try await Self.files.run { try Self.listNow(path, limit: limit) }
    }

    private static func listNow(_ path: [UInt8], limit: Int) throws -> [SFTPSession.Entry] {
        guard let directory = Self.withPath(path, { opendir($0) }) else { throw Self.error("list", path) }
        defer { closedir(directory) }
        var entries: [SFTPSession.Entry] = []
        while let item = readdir(directory) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            let full = SFTPPaths.join(path, name)
            var info = Glibc.stat()
            guard Self.withPath(full, { lstat($0, &info) }) == 0 else { continue }  // gone meanwhile
            entries.append(SFTPSession.Entry(name: name, attributes: Self.attributes(info)))
            guard entries.count <= limit else { throw SFTPError(status: .failure, message: "\(SFTPPaths.display(path)) holds more than \(limit) entries") }
        }
        return entries.sorted { $0.name.lexicographicallyPrecedes($1.name) }
    }

    /// Changes to local names (create, link, rename, unlink, mkdir) run one at a time, on a
    /// thread of their own. Ten files of a tree land in one directory at once, and each of
    /// these takes that directory's lock: run from several threads, they spun on it in the
    /// kernel (on ext4 an inode allocation can take 100 µs or more), burning the core the
    /// connection's work needed. Off the cooperative pool, they never hold up its tasks.
    private static let names = DispatchQueue(label: "termind.sftp.local-names")

    private static func changeName<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            names.async { continuation.resume(with: Result { try body() }) }
        }
    }

    func mkdir(_ path: [UInt8], mode: UInt32) async throws {
        try await Self.changeName {
            guard Self.withPath(path, { Glibc.mkdir($0, mode_t(mode)) }) == 0 else { throw Self.error("mkdir", path) }
        }
    }

    func openRead(_ path: [UInt8], extra: Bool, stripes: Int, shared: Bool) async throws -> any ReadHandle {
        let fd = try await Self.files.run {
            let fd = Self.withPath(path) { open($0, O_RDONLY | O_CLOEXEC) }
            guard fd >= 0 else { throw Self.error("open", path) }
            return fd
        }
        return LocalHandle(fd: fd)
    }

    func openWrite(_ path: [UInt8], mode: UInt32, resume: Bool, extra: Bool, stripes: Int, shared: Bool) async throws -> any WriteHandle {
        let flags = resume ? O_WRONLY | O_NOFOLLOW | O_CLOEXEC : O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC
        let fd = try await Self.changeName {
            let fd = Self.withPath(path) { open($0, flags, mode_t(mode & 0o7777)) }
            guard fd >= 0 else { throw Self.error("create", path) }
            return fd
        }
        return LocalHandle(fd: fd)
    }

    func rename(_ from: [UInt8], to: [UInt8], overwrite: Bool) async throws {
        try await Self.changeName {
            if overwrite {
                let ok = Self.withPath(from) { f in Self.withPath(to) { t in Glibc.rename(f, t) } } == 0
                guard ok else { throw Self.error("rename to", to) }
                return
            }
            // Never replaces: link(2) fails when the name exists; then the temporary name goes.
            let linked = Self.withPath(from) { f in Self.withPath(to) { t in link(f, t) } } == 0
            guard linked else { throw Self.error("create", to) }
            _ = Self.withPath(from) { unlink($0) }
        }
    }

    func remove(_ path: [UInt8]) async throws {
        try await Self.changeName {
            guard Self.withPath(path, { unlink($0) }) == 0 || errno == ENOENT else { throw Self.error("remove", path) }
        }
    }

    func setAttributes(_ path: [UInt8], mode: UInt32?, accessed: UInt32?, modified: UInt32?) async throws {
        try await Self.files.run {
            if let mode, Self.withPath(path, { chmod($0, mode_t(mode & 0o7777)) }) != 0 { throw Self.error("chmod", path) }
            if let modified {
                var times = [timespec(tv_sec: Int(accessed ?? modified), tv_nsec: 0), timespec(tv_sec: Int(modified), tv_nsec: 0)]
                if Self.withPath(path, { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }) != 0 { throw Self.error("set the times of", path) }
            }
        }
    }
}

private struct LocalHandle: ReadHandle, WriteHandle {
    let fd: Int32
    var chunk: Int { 256 << 10 }
    func read(_ offset: UInt64, _ length: Int) async throws -> ArraySlice<UInt8> {
        try await LocalSide.files.run { [fd] in try SFTPTransfer.readLocal(fd, offset: offset, length: length) }
    }
    func write(_ offset: UInt64, _ data: consuming ArraySlice<UInt8>) async throws {
        let bytes = consume data
        try await LocalSide.files.run { [fd] in try SFTPTransfer.writeLocal(fd, offset: offset, bytes) }
    }
    func close() async { Glibc.close(fd) }
    func abandon() async { Glibc.close(fd) }
    /// Closed (a close that fails — a full disk on NFS — fails the file). Not fsynced, as
    /// scp, sftp and rsync do not by default: the rename makes the file appear whole to
    /// other programs; surviving a power cut is the file system's matter.
    func finish() async throws {
        if Glibc.close(fd) != 0, errno != EINTR {
            throw SFTPError(status: .failure, message: "Saving the local file failed: \(String(cString: strerror(errno)))")
        }
    }
}

// MARK: - A host

/// One host of a run: its connection (the process pool's, opened once, asking what it
/// needs), a control session for metadata (never a data slot), and idle data sessions —
/// sibling SFTP channels on that connection, or sessions on extra connections when the
/// topology prefers them (each moving file holds one, which is its slot either way).
final class RemoteSide: FileSide, Sendable {
    let host: String
    let window: Int
    private let target: ConnectionTarget
    private let opener: ConnectionOpener
    private let ask: ConnectionAsker
    private struct State {
        var connection: SSHConnection?
        var control: SFTPSession?
        var idle: [SFTPSession] = []
        var idleExtra: [SFTPSession] = []
        var extraCount = 0
        /// A silent probe for an extra connection failed: later files ride channels.
        var degraded = false
        /// The saved host's id when the side names one.
        var saved: String?
        /// Channels shared by small files, and how many use each.
        var shared: [(session: SFTPSession, users: Int)] = []
        /// Channels of ours open, and the server's limit once learned.
        var channels = 0
        var channelLimit: Int?
        /// Files waiting for a channel another releases.
        var waiters: [(UInt64, CheckedContinuation<SFTPSession?, Error>)] = []
        var nextTicket: UInt64 = 0
        /// Sessions on extra connections.
        var extraSessions = Set<ObjectIdentifier>()
    }
    private let state = Mutex(State())
    private let gate = AsyncGate()
    /// Opens the control session once when several callers (listings read ahead) want it.
    private let controlGate = AsyncGate()
    private let logger: Logger

    init(host: String, target: ConnectionTarget, opener: ConnectionOpener, window: Int, ask: @escaping ConnectionAsker) {
        self.host = host
        self.target = target
        self.opener = opener
        self.window = window
        self.ask = ask
        logger = opener.logger.child("sftp")
    }

    /// The saved host's id when the side names one (set by the run once resolved).
    var savedHost: String? {
        get { state.withLock { s in s.saved } }
        set { state.withLock { s in s.saved = newValue } }
    }

    func shown(_ path: [UInt8]) -> String { "\(host):\(SFTPPaths.display(path))" }

    /// The connection, opened (or opened again after a loss) one caller at a time.
    private func connected() async throws -> SSHConnection {
        try await gate.run {
            if let existing = self.state.withLock({ s in s.connection }), existing.isAlive { return existing }
            let fresh = try await self.opener.connection(self.target, ask: self.ask)
            self.state.withLock { s in
                s.connection = fresh
                s.control = nil
                s.idle = []
                s.channels = 0
                s.channelLimit = nil
            }
            return fresh
        }
    }

    private func newSession() async throws -> SFTPSession {
        let connection = try await connected()
        do {
            return try await SFTPSession.open(on: connection)
        } catch let error as SFTPError {
            throw error
        } catch {
            let failure = TermindError.from(error)
            // The server said no to one more channel (MaxSessions): not a lost connection.
            if failure.isAny(of: [.sshChannelRefused, .sshChannelFailed]), connection.isAlive {
                throw SFTPError(status: .opUnsupported, message: "\(host) refused another SFTP channel: \(failure.message)")
            }
            throw SFTPError(status: .connectionLost, message: "\(host) did not open an SFTP channel: \(failure.message)")
        }
    }

    /// The session for metadata.
    func controlSession() async throws -> SFTPSession {
        if let control = state.withLock({ s in s.control }), !control.isClosed { return control }
        return try await controlGate.run {
            if let control = self.state.withLock({ s in s.control }), !control.isClosed { return control }
            let session = try await self.newSession()
            self.state.withLock { s in s.control = session }
            return session
        }
    }

    /// A data session for one file: with `extra`, one on an extra connection (an idle one, or
    /// a silent probe: a new connection on the full route that may ask nothing — a host key
    /// trusted only once, prompts or a passphrase make it fail — after which later files ride
    /// channels; a cancelled probe caches nothing); else, or then, a sibling channel.
    func lease(extra: Bool = false) async throws -> SFTPSession {
        if extra, state.withLock({ s in !s.degraded }) {
            while let session = state.withLock({ s in s.idleExtra.popLast() }) {
                if !session.isClosed { return session }
            }
            let number = state.withLock { (s: inout State) -> Int in
                s.extraCount += 1
                return s.extraCount
            }
            var silent = target
            silent.purpose = "sftp-data-\(number)"
            silent.acceptHostKey = nil  // only durable trust: a once-only answer never opens another connection
            do {
                let connection = try await opener.connection(silent, ask: { _ in nil })
                let session = try await SFTPSession.open(on: connection)
                _ = state.withLock { s in s.extraSessions.insert(ObjectIdentifier(session)) }
                return session
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                if Task.isCancelled { throw CancellationError() }
                state.withLock { s in s.degraded = true }
                logger.info("sftp.topology.degraded", ["host": .identifier(host)])
            }
        }
        while true {
            if let session = try await channel(wait: true) { return session }
        }
    }

    /// Small files share channels: each of these carries up to `sharedPerChannel` of them at
    /// once (their requests are few and short, so none waits long behind another). Fewer
    /// channels mean fewer sftp-server processes for sshd to feed, and each wakes for several
    /// requests at a time: for a tree of 2,000 small files the server's CPU fell by about a
    /// sixth. A file still takes one slot of the scheduler's. (A shared channel stays listed
    /// here until its last file releases it, even past `closeAll`.)
    static let sharedPerChannel = 4

    /// A channel session for a small file: a shared one with room, else a channel of its own
    /// that later small files may share (opened, idle, or released by another file).
    func leaseShared() async throws -> SFTPSession {
        if let room = sharedRoom() { return room }
        // One small file at a time finds a channel for sharing: the files arriving meanwhile
        // take room on it once it is there, instead of each opening its own.
        return try await sharingGate.run {
            if let room = self.sharedRoom() { return room }
            let session = try await self.lease()
            self.state.withLock { s in s.shared.append((session, 1)) }
            return session
        }
    }

    /// A place on the least used shared channel that has one.
    private func sharedRoom() -> SFTPSession? {
        state.withLock { (s: inout State) -> SFTPSession? in
            guard let index = s.shared.indices.filter({ s.shared[$0].users < Self.sharedPerChannel && !s.shared[$0].session.isClosed })
                .min(by: { s.shared[$0].users < s.shared[$1].users }) else { return nil }
            s.shared[index].users += 1
            return s.shared[index].session
        }
    }
    private let sharingGate = AsyncGate()

    /// A session on a sibling channel that is there at once (idle, or opened while the
    /// server allows more), or nil: a big file's extra stripes never wait for one.
    func tryLease() async -> SFTPSession? {
        try? await channel(wait: false)
    }

    /// An idle channel session, a new one while the server takes more channels (sshd's
    /// MaxSessions, 10 by default, is learned from its first refusal), else — with `wait` —
    /// the next one another file releases. nil: try again (or, without `wait`, none now).
    private func channel(wait: Bool) async throws -> SFTPSession? {
        while let session = state.withLock({ s in s.idle.popLast() }) {
            if !session.isClosed { return session }
            state.withLock { s in s.channels -= 1 }
        }
        let mayOpen = state.withLock { (s: inout State) -> Bool in
            guard s.channelLimit.map({ s.channels < $0 }) ?? true else { return false }
            s.channels += 1
            return true
        }
        if mayOpen {
            do {
                return try await newSession()
            } catch let error as SFTPError where error.status == .opUnsupported {
                guard learnedLimit() else { throw error }  // else wait for one of ours
            } catch {
                state.withLock { s in s.channels -= 1 }
                throw error
            }
        }
        guard wait else { return nil }
        return try await nextRelease()
    }

    /// After the server refused a channel of ours: one fewer open. Refused while others of
    /// ours are open, that is the server's limit (learned: true); refused with none open, it is not.
    private func learnedLimit() -> Bool {
        let others = state.withLock { (s: inout State) -> Int in
            s.channels -= 1
            return s.channels
        }
        guard others > 0 else { return false }
        state.withLock { s in s.channelLimit = others }
        logger.info("sftp.channels.limit", ["host": .identifier(host), "count": .int(others)])
        return true
    }

    /// Waits for the next channel another file releases: its session, or nil when it closed
    /// (a slot is free: try again).
    private func nextRelease() async throws -> SFTPSession? {
        let ticket = state.withLock { (s: inout State) -> UInt64 in
            s.nextTicket += 1
            return s.nextTicket
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<SFTPSession?, Error>) in
                let now = state.withLock { (s: inout State) -> Bool in
                    if Task.isCancelled { return true }
                    s.waiters.append((ticket, continuation))
                    return false
                }
                if now { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter = state.withLock { (s: inout State) -> CheckedContinuation<SFTPSession?, Error>? in
                guard let index = s.waiters.firstIndex(where: { $0.0 == ticket }) else { return nil }
                return s.waiters.remove(at: index).1
            }
            waiter?.resume(throwing: CancellationError())
        }
    }


    func release(_ session: SFTPSession) async {
        // A shared channel is released by its last small file.
        let stillShared = state.withLock { (s: inout State) -> Bool in
            guard let index = s.shared.firstIndex(where: { $0.session === session }) else { return false }
            s.shared[index].users -= 1
            if s.shared[index].users > 0 { return true }
            s.shared.remove(at: index)
            return false
        }
        if stillShared { return }
        let closed = session.isClosed
        enum Next { case done, close, give(CheckedContinuation<SFTPSession?, Error>, SFTPSession?) }
        let next = state.withLock { (s: inout State) -> Next in
            let isExtra = s.extraSessions.contains(ObjectIdentifier(session))
            if closed {
                if isExtra { s.extraSessions.remove(ObjectIdentifier(session)); return .done }
                s.channels -= 1
                // Its channel is free: a waiting file may open one.
                if !s.waiters.isEmpty { return .give(s.waiters.removeFirst().1, nil) }
                return .done
            }
            if isExtra {
                guard s.idleExtra.count < 16 else { s.extraSessions.remove(ObjectIdentifier(session)); return .close }
                s.idleExtra.append(session)
                return .done
            }
            if !s.waiters.isEmpty { return .give(s.waiters.removeFirst().1, session) }
            guard s.idle.count < 16 else { s.channels -= 1; return .close }
            s.idle.append(session)
            return .done
        }
        switch next {
        case .done: break
        case .close: await session.close()
        case .give(let waiter, let session): waiter.resume(returning: session)
        }
    }

    func closeAll() async {
        let sessions = state.withLock { (s: inout State) -> [SFTPSession] in
            defer { s.idle = []; s.idleExtra = []; s.extraSessions = []; s.control = nil; s.channels = 0 }
            return s.idle + s.idleExtra + [s.control].compactMap { $0 }
        }
        for session in sessions { await session.close() }
    }

    func stat(_ path: [UInt8], follow: Bool) async throws -> SFTPAttributes? {
        do {
            return try await controlSession().stat(path, followLinks: follow)
        } catch let error as SFTPError where error.status == .noSuchFile {
            return nil
        }
    }

    func list(_ path: [UInt8], limit: Int) async throws -> [SFTPSession.Entry] {
        let sftp = try await controlSession()
        let handle = try await sftp.openDirectory(path)
        var entries: [SFTPSession.Entry] = []
        do {
            while let batch = try await sftp.readDirectory(handle) {
                entries += batch
                guard entries.count <= limit else { throw SFTPError(status: .failure, message: "\(shown(path)) holds more than \(limit) entries") }
            }
        } catch {
            try? await sftp.close(handle)
            throw error
        }
        try? await sftp.close(handle)
        return entries.sorted { $0.name.lexicographicallyPrecedes($1.name) }
    }

    func mkdir(_ path: [UInt8], mode: UInt32) async throws { try await controlSession().mkdir(path, permissions: mode) }

    /// The path with every symbolic link resolved, by the server.
    func realpath(_ path: [UInt8]) async throws -> [UInt8] { try await controlSession().realpath(path) }

    func openRead(_ path: [UInt8], extra: Bool, stripes: Int, shared: Bool) async throws -> any ReadHandle {
        try await openHandles(stripes: stripes, window: Int(SSHConnection.channelWindow), extra: extra, shared: shared, size: { $0.readSize }) { session, first in
            try await session.open(path, .read)
        }
    }

    func openWrite(_ path: [UInt8], mode: UInt32, resume: Bool, extra: Bool, stripes: Int, shared: Bool) async throws -> any WriteHandle {
        try await openHandles(stripes: stripes, window: Striping.serverWindow, extra: extra, shared: shared, size: { $0.writeSize }) { session, first in
            // Only the first opening creates the file; the other stripes open what it made.
            let flags: SFTPOpenFlags = resume || !first ? [.write] : [.write, .create, .exclusive]
            return try await session.open(path, flags, permissions: mode & 0o7777)
        }
    }

    /// The file opened on one session, and on up to `stripes - 1` more that are there at once
    /// where the session's round trip makes its channel's `window` the limit (`Striping`).
    private func openHandles(stripes: Int, window: Int, extra: Bool, shared: Bool, size: @Sendable (SFTPLimits) -> Int,
                             _ open: (SFTPSession, Bool) async throws -> SFTPSession.Handle) async throws -> RemoteHandle {
        let session = try await (shared && !extra ? leaseShared() : lease(extra: extra))
        var parts: [(SFTPSession, SFTPSession.Handle)] = []
        do {
            parts.append((session, try await open(session, true)))
        } catch {
            await release(session)
            throw error
        }
        var chunk = size(await session.limits)
        let stripes = Striping.channels(upTo: stripes, roundTrip: await session.roundTrip, window: window)
        while parts.count < stripes, let more = await tryLease() {
            guard let handle = try? await open(more, false) else {
                await release(more)
                break
            }
            parts.append((more, handle))
            chunk = min(chunk, size(await more.limits))
        }
        // The topology a big file got, in the log (issue 40 asks how many connections and
        // sessions a file gets); a file on one shared channel is the common case, not logged.
        let onExtra = state.withLock { $0.extraSessions.contains(ObjectIdentifier(session)) }
        if parts.count > 1 || onExtra {
            logger.info("sftp.file.channels", ["host": .identifier(host), "channels": .int(parts.count), "extraConnection": .bool(onExtra)])
        }
        return RemoteHandle(side: self, parts: parts, chunk: chunk)
    }

    func rename(_ from: [UInt8], to: [UInt8], overwrite: Bool) async throws {
        try await controlSession().rename(from, to: to, overwrite: overwrite)
    }

    func remove(_ path: [UInt8]) async throws {
        do { try await controlSession().remove(path) } catch let error as SFTPError where error.status == .noSuchFile {}
    }

    func setAttributes(_ path: [UInt8], mode: UInt32?, accessed: UInt32?, modified: UInt32?) async throws {
        try await controlSession().setstat(path, SFTPAttributes(permissions: mode.map { $0 & 0o7777 }, accessTime: modified.map { accessed ?? $0 }, modifiedTime: modified))
    }

    /// chown, by the server (which refuses what its user may not do: only root gives a file away).
    func setOwner(_ path: [UInt8], uid: UInt32, gid: UInt32) async throws {
        try await controlSession().setstat(path, SFTPAttributes(uid: uid, gid: gid))
    }

    /// The SHA-256 of a file on this host, computed there by `sha256sum` on an exec channel
    /// of the connection (the name goes on standard input, NUL-terminated, so any bytes pass
    /// unquoted). Fails, saying so, when the host has no sha256sum.
    func sha256(_ path: [UInt8]) async throws -> String {
        let connection = try await connected()
        let result: ExecResult
        do {
            result = try await withExecChannel {
                try await connection.exec("command -v sha256sum >/dev/null 2>&1 || exit 127; exec xargs -0 sha256sum --", stdin: Data(path + [0]), outputLimit: 64 << 10)
            }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            let failure = TermindError.from(error)
            throw SFTPError(status: connection.isAlive ? .failure : .connectionLost, message: "\(shown(path)): its SHA-256 could not be asked for: \(failure.message)")
        }
        guard result.exitStatus != 127 else {
            throw SFTPError(status: .opUnsupported, message: "\(host) has no sha256sum, which --verify sha256 needs (--verify size checks the byte count only)")
        }
        // sha256sum marks a line whose name it escaped with a leading backslash.
        let line = Array(result.stdout.prefix { $0 != 0x0A }.drop { $0 == 0x5C })
        let digest = line.prefix(64)
        guard result.exitStatus == 0, digest.count == 64, digest.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            let said = String(decoding: result.stderr.prefix(300), as: UTF8.self).trimmedWhitespaceAndNewlines
            throw SFTPError(status: .failure, message: "\(shown(path)): sha256sum failed (status \(result.exitStatus.map(String.init) ?? "none"))\(said.isEmpty ? "" : ": \(said)")")
        }
        return String(decoding: digest, as: UTF8.self)
    }

    /// Runs `body`, which opens one exec channel, in a channel slot of this host's: sshd
    /// takes MaxSessions (10 by default) channels at once, SFTP and exec alike, so the exec
    /// counts as one of ours while it runs. At the limit an idle SFTP channel is closed to
    /// make room, or the next one a file releases; a refusal teaches the limit, as for SFTP
    /// channels. The slot goes to a waiting file afterwards.
    private func withExecChannel<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        while true {
            let reserved = state.withLock { (s: inout State) -> Bool in
                guard s.channelLimit.map({ s.channels < $0 }) ?? true else { return false }
                s.channels += 1
                return true
            }
            if !reserved {
                // Room is made: an idle SFTP channel of ours closes, or the next one released does.
                var spare = state.withLock { s in s.idle.popLast() }
                if spare == nil { spare = try await nextRelease() }
                if let spare {
                    state.withLock { s in s.channels -= 1 }
                    await spare.close()
                }
                continue
            }
            do {
                let value = try await body()
                freeChannelSlot()
                return value
            } catch let error as TermindError where error.isAny(of: [.sshChannelRefused, .sshChannelFailed]) {
                guard learnedLimit() else { throw error }
            } catch {
                freeChannelSlot()
                throw error
            }
        }
    }

    /// A channel of ours closed: one fewer open, and a file waiting for a channel may open one.
    private func freeChannelSlot() {
        let waiter = state.withLock { (s: inout State) -> CheckedContinuation<SFTPSession?, Error>? in
            s.channels -= 1
            return s.waiters.isEmpty ? nil : s.waiters.removeFirst().1
        }
        waiter?.resume(returning: nil)
    }

    /// `copy-data` from `from` to a new (or resumed) `to` on this host, when the server offers
    /// it: no byte crosses the network. nil when it does not.
    func serverCopy(_ from: [UInt8], to: [UInt8], mode: UInt32, resumeAt: UInt64) async throws -> Bool {
        let session = try await lease(extra: false)
        guard session.info.supports("copy-data") else {
            await release(session)
            return false
        }
        do {
            let source = try await session.open(from, .read)
            let flags: SFTPOpenFlags = resumeAt > 0 ? [.write] : [.write, .create, .exclusive]
            let destination: SFTPSession.Handle
            do { destination = try await session.open(to, flags, permissions: mode & 0o7777) } catch {
                try? await session.close(source)
                throw error
            }
            do {
                try await session.copyData(from: source, offset: resumeAt, to: destination, at: resumeAt)
                try? await session.close(source)
                try await session.close(destination)
            } catch {
                try? await session.close(source)
                try? await session.close(destination)
                throw error
            }
            await release(session)
            return true
        } catch {
            await release(session)
            throw error
        }
    }
}

/// A remote file open on one or more sessions: request n goes to part n mod count.
private struct RemoteHandle: ReadHandle, WriteHandle {
    let side: RemoteSide
    let parts: [(SFTPSession, SFTPSession.Handle)]
    let chunk: Int

    private func part(_ offset: UInt64) -> (SFTPSession, SFTPSession.Handle) {
        parts.count == 1 ? parts[0] : parts[Int((offset / UInt64(max(1, chunk))) % UInt64(parts.count))]
    }

    func read(_ offset: UInt64, _ length: Int) async throws -> ArraySlice<UInt8> {
        let (session, handle) = part(offset)
        return try await session.read(handle, offset: offset, length: length)
    }

    func write(_ offset: UInt64, _ data: consuming ArraySlice<UInt8>) async throws {
        let (session, handle) = part(offset)
        try await session.write(handle, offset: offset, consume data)
    }

    func close() async {
        for (session, handle) in parts {
            try? await session.close(handle)
            await side.release(session)
        }
    }

    func abandon() async { await close() }

    /// Every handle closed (the server has taken every write); the first failure fails it.
    func finish() async throws {
        var failure: (any Error)?
        for (session, handle) in parts {
            do { try await session.close(handle) } catch { failure = failure ?? error }
            await side.release(session)
        }
        if let failure { throw failure }
    }
}

/// Runs at most `width` bodies at once (one: opening a connection once when several files
/// want it; more: directory listings read ahead).
final class AsyncGate: Sendable {
    private let width: Int
    private let lock = Mutex<(busy: Int, waiting: [CheckedContinuation<Void, Never>])>((0, []))

    init(width: Int = 1) { self.width = max(1, width) }

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.withLock { state -> Bool in
                if state.busy >= width { state.waiting.append(continuation); return false }
                state.busy += 1
                return true
            }
            if now { continuation.resume() }
        }
        defer {
            let next = lock.withLock { state -> CheckedContinuation<Void, Never>? in
                if state.waiting.isEmpty { state.busy -= 1; return nil }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}

/// Directory listings read ahead while a tree is walked: the walk asks for a directory it
/// reaches; the listings of the directories found in it start at once (at most 8 at a time),
/// so a tree costs about its depth in round trips, not its number of directories.
final class ListingAhead: Sendable {
    private let gate = AsyncGate(width: 8)
    private let started = Mutex<[String: Task<[SFTPSession.Entry], Error>]>([:])
    private let limit: Int

    init(limit: Int) { self.limit = limit }

    private static func key(_ side: any FileSide, _ path: [UInt8]) -> String {
        "\(ObjectIdentifier(side).hashValue)\u{0}" + String(decoding: path, as: UTF8.self) + "\u{0}\(path.count)"
    }

    /// Starts reading `path` unless it is under way.
    func start(_ side: any FileSide, _ path: [UInt8]) {
        let key = Self.key(side, path)
        let limit = self.limit, gate = self.gate
        started.withLock { tasks in
            guard tasks[key] == nil else { return }
            tasks[key] = Task { try await gate.run { try await side.list(path, limit: limit) } }
        }
    }

    /// The listing of `path` (the one read ahead, or read now); it is handed out once.
    func list(_ side: any FileSide, _ path: [UInt8]) async throws -> [SFTPSession.Entry] {
        start(side, path)
        let task = started.withLock { $0.removeValue(forKey: Self.key(side, path)) }
        return try await task!.value
    }

    /// Stops what was read ahead and not asked for (a walk that ended early).
    func cancelRest() {
        started.withLock { tasks in
            for task in tasks.values { task.cancel() }
            tasks = [:]
        }
    }
}
