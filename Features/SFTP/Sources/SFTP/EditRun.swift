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

/// `termind edit HOST:PATH` (docs/sftp.md, External edit). The managed copy of each remote
/// file lives in its own folder under `$XDG_STATE_HOME/termind/edit` (or
/// `~/.local/state/termind/edit`), folders 0700 and files 0600, beside a small record of the
/// remote file as last seen (kind, size, modification time, mode) and the SHA-256 of what it
/// holds as far as termind knows. Changes are found by streamed SHA-256, uploaded only when
/// confirmed, from an immutable snapshot whose digest alone is acknowledged (a save after
/// the snapshot stays dirty), through a temporary file renamed over the original. A symbolic
/// link is never replaced: the file it points at (resolved on the server) is what is edited.
struct EditRun {
    typealias Edit = SFTPStreams.Edit
    let request: Edit.Request
    let session: StreamSession
    let opener: ConnectionOpener

    struct Record: Codable, Equatable {
        var host: String
        var port: Int?
        var path: String
        var name: String
        var size: UInt64?
        var modified: UInt32?
        var permissions: UInt32?
        /// SHA-256 (hex) of what the remote file holds as far as termind knows.
        var acknowledged: String
        /// When `path` is a symbolic link: the file it led to when it was downloaded (resolved
        /// on the server), which uploads replace — only while the link still leads there.
        var target: Data?

        /// The remote file that is edited: the link's target, or `path` itself.
        var file: [UInt8] { target.map(Array.init) ?? Array(path.utf8) }
    }

    /// The record as this run knows it (the watcher and the run share it).
    final class Box: Sendable {
        private let lock: Mutex<Record>
        init(_ record: Record) { lock = Mutex(record) }
        func withLock<T: Sendable>(_ body: (inout Record) -> T) -> T { lock.withLock { body(&$0) } }
    }

    // MARK: - The managed folder

    static var root: String {
        let environment = ProcessInfo.processInfo.environment
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/termind/edit" }
        return (environment["HOME"] ?? LocalUser.home) + "/.local/state/termind/edit"
    }

    /// The folder of one remote file's copy, made 0700 (refused when it is not ours).
    static func folder(host: String, port: Int?, path: String, create: Bool) throws -> String {
        let key = Digest.sha256(Data("\(host)\u{0}\(port ?? 0)\u{0}\(path)".utf8)).hexEncoded.prefix(24)
        let folder = root + "/" + key
        guard create else { return folder }
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var info = stat()
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == getuid() else {
            throw TermindError(.sftpFailed, "\(folder) is not a folder of yours; termind keeps edit copies only in its own.")
        }
        chmod(root, 0o700)
        chmod(folder, 0o700)
        return folder
    }

    static func readRecord(_ folder: String) -> Record? {
        guard let data = FileManager.default.contents(atPath: folder + "/record.json") else { return nil }
        return try? JSONDecoder().decode(Record.self, from: data)
    }

    static func writeRecord(_ record: Record, _ folder: String) throws {
        let data = try JSONEncoder().encode(record)
        let temporary = folder + "/.record.json.part"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600]),
              rename(temporary, folder + "/record.json") == 0 else {
            throw TermindError(.sftpFailed, "Could not save the edit record in \(folder): \(String(cString: strerror(errno)))")
        }
    }

    /// SHA-256 of a local file, read in pieces (nil when it is gone).
    static func digest(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let hash = IncrementalDigest(.sha256)
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            hash.update(buffer[0..<n])
        }
        return hash.finish().hexEncoded
    }

    static func list() -> [SFTPContracts.EditCopy] {
        let folders = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return folders.sorted().compactMap { name -> SFTPContracts.EditCopy? in
            let folder = root + "/" + name
            guard let record = readRecord(folder) else { return nil }
            let local = folder + "/" + record.name
            return .init(host: record.port.map { "\(record.host):\($0)" } ?? record.host, path: record.path, localPath: local, state: state(of: local, record))
        }
    }

    /// A copy is clean when it holds what the remote file holds as far as termind knows.
    private static func state(of local: String, _ record: Record) -> SFTPContracts.EditCopy.State {
        switch digest(local) {
        case nil: .missing
        case record.acknowledged?: .clean
        default: .dirty
        }
    }

    static func discard(_ target: String) throws -> SFTPContracts.EditCopy {
        guard case .remote(let host, let port, let path)? = try? TransferEndpoint.parse(target) else {
            throw TermindError.badRequest("edit discard takes HOST:PATH as given to termind edit, not '\(target)'.")
        }
        let folder = try Self.folder(host: host, port: port, path: path, create: false)
        guard let record = readRecord(folder) else { throw TermindError(.sftpFailed, "\(target) has no managed copy (termind edit list shows them).") }
        guard unlink(folder + "/record.json") == 0 else { throw TermindError(.sftpFailed, "Could not stop tracking \(target): \(String(cString: strerror(errno)))") }
        let local = folder + "/" + record.name
        return .init(host: host, path: path, localPath: local, state: state(of: local, record))
    }

    // MARK: - One edit

    func run() async throws -> Edit.Result {
        guard case .remote(let host, let port, let path) = try endpoint() else {
            throw TermindError.badRequest("edit takes HOST:PATH (a remote file); '\(request.target)' is local — open it in your editor directly.")
        }
        let (line, identity) = TransferRun.quickConnect(host, port: port, jump: request.jump, identity: request.identity, workingDirectory: request.workingDirectory)
        let remote = RemoteSide(host: port.map { "\(host):\($0)" } ?? host,
                                target: ConnectionTarget(target: line, user: request.user, identity: identity, workingDirectory: request.workingDirectory,
                                                         acceptHostKey: request.acceptHostKey, connectTimeout: request.connectTimeout),
                                opener: opener, window: SFTPSession.window, ask: { [session] in await session.ask($0) })
        defer { Task { await remote.closeAll() } }
        let remotePath = Array(path.utf8)
        let shown = remote.shown(remotePath)
        // A link is never replaced by the upload: the file it leads to is what is edited.
        let (file, found) = try await Self.locate(remote, remotePath)
        let through = file == remotePath ? "" : " (a symbolic link to \(remote.shown(file)))"
        guard let attributes = found else {
            throw TermindError(.sftpFailed, file == remotePath ? "\(shown): no such file (termind edit opens an existing file)."
                               : "\(shown) is a symbolic link to \(remote.shown(file)), which does not exist; termind edit edits the file a link leads to, never the link.")
        }
        guard attributes.kind == .file else {
            throw TermindError(.sftpFailed, "\(shown)\(through) is \(Self.kind(attributes)), not a regular file; termind edit opens only those.")
        }

        let folder = try Self.folder(host: host, port: port, path: path, create: true)
        let name = SFTPPaths.split(remotePath).name
        let safeName = TransferNames.problem(child: name) == nil ? String(decoding: name, as: UTF8.self) : "file"
        let local = folder + "/" + safeName
        var record = Self.readRecord(folder)
        var fresh = true
        if let kept = record, let current = Self.digest(folder + "/" + kept.name), current != kept.acknowledged {
            // Local edits that were never uploaded: kept unless the person says otherwise.
            let answer = await session.ask(.object([
                "topic": .string(Edit.dirtyTopic), "kind": .string("choice"),
                "text": .string("Your copy of \(shown) has changes that were not uploaded. [k]eep them and edit on, or [d]ownload anew (they are lost)? "),
                "choices": .object(["k": .string("keep"), "d": .string("download")]), "default": .string("keep"),
            ]))
            fresh = answer?["answer"]?.stringValue == "download"
        }
        if fresh {
            let digest = try await download(remote, file, to: local, in: folder)
            record = Record(host: host, port: port, path: path, name: safeName, size: attributes.size, modified: attributes.modifiedTime,
                            permissions: attributes.permissions, acknowledged: digest, target: file == remotePath ? nil : Data(file))
            try Self.writeRecord(record!, folder)
        }
        let state = Box(record!)
        // Kept changes go where they were downloaded from (an upload checks the link still leads there).
        let target = record!.file
        let uploads = Counter()
        await session.emit("notice", ["text": .string("Editing \(shown)\(target == remotePath ? "" : " (a symbolic link to \(remote.shown(target)): that file is edited, the link stays)") as \(local)")])

        // With --watch, each save is uploaded while the editor is open.
        let watcher: Task<Void, Never>? = request.watch == true ? Task {
            var seen = Self.fingerprint(local)
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(300))
                let now = Self.fingerprint(local)
                guard now != seen else { continue }
                seen = now
                if (try? await upload(remote, remotePath, target, local: local, folder: folder, record: state)) == true { uploads.add() }
            }
        } : nil
        let edited = await session.ask(.object(["topic": .string(Edit.editTopic), "kind": .string("edit"), "path": .string(local),
                                                "text": .string("Editing \(shown)")]))
        watcher?.cancel()
        _ = await watcher?.value
        if edited?["unanswered"] == JSONValue.bool(true) || edited == nil {
            throw TermindError(.sftpFailed, "Nobody could open an editor for \(local) (set VISUAL or EDITOR); the copy stays there, termind edit list shows it.")
        }
        if edited?["answer"] == JSONValue.bool(false) {
            await session.emit("notice", ["text": .string("The editor exited with an error; checking the copy anyway.")])
        }
        guard Self.digest(local) != state.withLock({ $0.acknowledged }) else {
            let count = uploads.value
            if count == 0 { await session.emit("notice", ["text": .string("No changes.")]) }
            return .init(state: count > 0 ? .uploaded : .unchanged, localPath: local, acknowledged: state.withLock { $0.acknowledged }, uploads: count)
        }
        // --watch: saves are uploaded without asking, the last one too.
        var confirmed = request.upload == true || request.watch == true
        if !confirmed {
            let answer = await session.ask(.object(["topic": .string(Edit.uploadTopic), "kind": .string("confirm"),
                                                    "text": .string("Upload your changes to \(shown)?"), "default": .bool(true)]))
            confirmed = answer?["answer"] == .bool(true)
        }
        // An upload that was asked for (--upload, --watch, or yes) and did not happen is a
        // failure of the command (status 1), whatever stopped it; the copy keeps the changes.
        guard confirmed, try await upload(remote, remotePath, target, local: local, folder: folder, record: state) else {
            await session.emit("notice", ["text": .string("Not uploaded: your changes stay in \(local) (termind edit \(request.target) again to upload them).")])
            return .init(state: .kept, localPath: local, acknowledged: state.withLock { $0.acknowledged }, uploads: uploads.value, exitStatus: confirmed ? 1 : 0)
        }
        let count = uploads.add()
        // A save made after the snapshot that was uploaded stays dirty.
        let clean = Self.digest(local) == state.withLock { $0.acknowledged }
        return .init(state: clean ? .uploaded : .kept, localPath: local, acknowledged: state.withLock { $0.acknowledged }, uploads: count, exitStatus: clean ? 0 : 1)
    }

    private func endpoint() throws -> TransferEndpoint {
        do { return try TransferEndpoint.parse(request.target) } catch { throw TermindError.badRequest("edit: \(error.description).") }
    }

    /// The remote file an edit of `path` reads and replaces, with its own attributes (nil when
    /// nothing is there): `path` itself, or — when it is a symbolic link — the file it leads
    /// to, resolved by the server (realpath), so that an upload replaces that file and the
    /// link stays a link.
    static func locate(_ remote: RemoteSide, _ path: [UInt8]) async throws -> (file: [UInt8], attributes: SFTPAttributes?) {
        let shown = remote.shown(path)
        let own = try await TransferRun.attempt(shown) { try await remote.stat(path, follow: false) }
        guard let own, own.kind == .symlink else { return (path, own) }
        let target: [UInt8]
        do { target = try await remote.realpath(path) } catch let error as SFTPError {
            throw TermindError(.sftpFailed, "\(shown) is a symbolic link the server could not resolve (\(error.message)); termind edit edits the file a link leads to, never the link.")
        }
        return (target, try await TransferRun.attempt(remote.shown(target)) { try await remote.stat(target, follow: false) })
    }

    /// What a file that is not a regular one is, said.
    static func kind(_ attributes: SFTPAttributes) -> String {
        switch attributes.kind {
        case .directory?: "a directory"
        case .symlink?: "a symbolic link the server did not resolve"
        default: "a special file (a FIFO, socket or device)"
        }
    }


    /// Size and modification time (nanoseconds) of the copy: what a save changes.
    private static func fingerprint(_ path: String) -> [Int] {
        var info = stat()
        guard lstat(path, &info) == 0 else { return [] }
        return [Int(info.st_size), info.st_mtim.tv_sec, info.st_mtim.tv_nsec, Int(info.st_ino)]
    }

    /// Downloads the remote file to `local` (0600) through a temporary name; returns its SHA-256.
    private func download(_ remote: RemoteSide, _ path: [UInt8], to local: String, in folder: String) async throws -> String {
        let temporary = folder + "/.download.part"
        unlink(temporary)
        let localSide = LocalSide()
        let reader = try await TransferRun.attempt(remote.shown(path)) { try await remote.openRead(path, extra: false, stripes: 1, shared: false) }
        let writer: any WriteHandle
        do { writer = try await localSide.openWrite(Array(temporary.utf8), mode: 0o600, resume: false, extra: false, stripes: 1, shared: false) } catch {
            await reader.close()
            throw TermindError(.sftpFailed, TransferRun.message(error))
        }
        do {
            _ = try await SFTPTransfer.pipe(size: nil, chunk: reader.chunk, window: 16, read: { try await reader.read($0, $1) }, write: { offset, data in try await writer.write(offset, consume data) })
            await reader.close()
            try await writer.finish()
        } catch {
            await reader.close()
            await writer.abandon()
            unlink(temporary)
            throw TermindError(.sftpFailed, "Downloading \(remote.shown(path)) failed: \(TransferRun.message(error))")
        }
        chmod(temporary, 0o600)
        guard rename(temporary, local) == 0, let digest = Self.digest(local) else {
            throw TermindError(.sftpFailed, "Could not keep the copy at \(local): \(String(cString: strerror(errno)))")
        }
        return digest
    }

    /// Uploads an immutable snapshot of the copy to `target` (`path`, or the file the link
    /// `path` led to when it was downloaded): first `path` must still lead to `target`, a
    /// regular file as last seen (a change of what it leads to fails closed; a changed file
    /// is asked about, never overwritten silently), then the snapshot goes through a temporary
    /// name beside `target` renamed over it, with its owner, group and permissions — a link
    /// is never replaced. Only the snapshot's digest is acknowledged. Returns whether it was
    /// uploaded.
    private func upload(_ remote: RemoteSide, _ path: [UInt8], _ target: [UInt8], local: String, folder: String, record: Box) async throws -> Bool {
        let shown = remote.shown(target)
        let snapshot = folder + "/.snapshot.part"
        unlink(snapshot)
        guard copyFile(local, snapshot), let digest = Self.digest(snapshot) else {
            await session.emit("notice", ["text": .string("Could not read \(local); nothing uploaded.")])
            return false
        }
        defer { unlink(snapshot) }
        let known = record.withLock { $0 }
        if digest == known.acknowledged { return false }
        let (leadsTo, now) = try await Self.locate(remote, path)
        guard leadsTo == target else {
            let change = target == path ? "is now a symbolic link (to \(remote.shown(leadsTo))), which termind edit never replaces"
                : leadsTo == path ? "is no longer a symbolic link to \(shown)" : "now leads to \(remote.shown(leadsTo)), not to \(shown)"
            throw TermindError(.sftpFailed, "\(remote.shown(path)) \(change); nothing uploaded (your changes stay in \(local)).")
        }
        if let now, now.kind != .file {
            throw TermindError(.sftpFailed, "\(shown) is no longer a regular file (it is \(Self.kind(now))); nothing uploaded (your changes stay in \(local)).")
        }
        if now?.size != known.size || now?.modifiedTime != known.modified || now?.permissions != known.permissions {
            let what = now == nil ? "was removed" : "changed (size \(now?.size.map(String.init) ?? "?"), was \(known.size.map(String.init) ?? "?"))"
            let answer = await session.ask(.object(["topic": .string(Edit.changedTopic), "kind": .string("confirm"),
                                                    "text": .string("\(shown) \(what) on the server since termind last saw it. Replace it with your version?"),
                                                    "default": .bool(false)]))
            guard answer?["answer"] == .bool(true) else {
                await session.emit("notice", ["text": .string("\(shown) changed on the server; not replaced.")])
                return false
            }
        }
        let permissions = (now?.permissions ?? known.permissions ?? 0o644) & 0o7777
        let (directory, name) = SFTPPaths.split(target)
        let temporary = SFTPPaths.join(directory, TransferNames.temporary(name, token: "edit-\(TransferNames.randomToken())"))
        let fd = open(snapshot, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        do {
            let writer = try await remote.openWrite(temporary, mode: permissions, resume: false, extra: false, stripes: 1, shared: false)
            do {
                // The owner first, before any byte goes: a refusal may end the upload here.
                guard try await keepOwner(remote, temporary, of: now, shown: shown, local: local) else {
                    await writer.abandon()
                    try? await remote.remove(temporary)
                    return false
                }
                _ = try await SFTPTransfer.pipe(size: UInt64(info.st_size), chunk: writer.chunk, window: 16,
                                                read: { try SFTPTransfer.readLocal(fd, offset: $0, length: $1) }, write: { offset, data in try await writer.write(offset, consume data) })
                try await writer.finish()
            } catch {
                await writer.abandon()
                throw error
            }
            // After the owner: a chown clears the set-user-ID and set-group-ID bits.
            try await remote.setAttributes(temporary, mode: permissions, accessed: nil, modified: nil)
            try await remote.rename(temporary, to: target, overwrite: now != nil)
        } catch {
            try? await remote.remove(temporary)
            throw TermindError(.sftpFailed, "Uploading to \(shown) failed (the original is untouched): \(TransferRun.message(error))")
        }
        let after = try? await remote.stat(target, follow: false)
        record.withLock {
            $0.acknowledged = digest
            $0.size = after?.size
            $0.modified = after?.modifiedTime
            $0.permissions = after?.permissions
        }
        try Self.writeRecord(record.withLock { $0 }, folder)
        await session.emit("notice", ["text": .string("Uploaded to \(shown) (\(TerminalText.bytes(UInt64(info.st_size)))).")])
        return true
    }

    /// Gives the new temporary file the owner and group of the file it replaces (`original`;
    /// nothing to keep when there is none, or the server does not say), so that the rename
    /// does not hand the file to whoever uploads it: root editing a service's 0640 config
    /// must not take it from the service. The server refuses when the uploader may not give
    /// a file away (only root may; a group only one the uploader is in): then the person is
    /// asked (`sftp.edit.owner`, default no) — nobody to ask, or no, and nothing is uploaded.
    /// Returns whether the upload goes on.
    private func keepOwner(_ remote: RemoteSide, _ temporary: [UInt8], of original: SFTPAttributes?, shown: String, local: String) async throws -> Bool {
        guard let uid = original?.uid, let gid = original?.gid else { return true }
        let made = try await remote.stat(temporary, follow: false)
        if made?.uid == uid, made?.gid == gid { return true }
        let refusal: String
        do {
            try await remote.setOwner(temporary, uid: uid, gid: gid)
            return true
        } catch let error as SFTPError where !TransferRun.isLost(error) {
            refusal = error.message
        }
        let new = "\(made?.uid.map(String.init) ?? "?"):\(made?.gid.map(String.init) ?? "?")"
        let answer = await session.ask(.object([
            "topic": .string(Edit.ownerTopic), "kind": .string("confirm"),
            "text": .string("\(shown) belongs to \(uid):\(gid) (owner:group), which the server would not give the new version (\(refusal)): "
                            + "it would belong to \(new). Upload it anyway?"),
            "default": .bool(false),
        ]))
        if answer?["answer"] == .bool(true) {
            await session.emit("notice", ["text": .string("\(shown) now belongs to \(new), no longer to \(uid):\(gid), as you chose.")])
            return true
        }
        await session.emit("notice", ["text": .string("\(shown) belongs to \(uid):\(gid), and the server would not let termind keep that owner and group "
                                                      + "(\(refusal)); not replaced. Edit it as a user who may, or answer sftp.edit.owner yes to let it change owner.")])
        return false
    }

    /// A private copy of `from` (0600), so that what is uploaded cannot change under it.
    private func copyFile(_ from: String, _ to: String) -> Bool {
        let input = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard input >= 0 else { return false }
        defer { close(input) }
        let output = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard output >= 0 else { return false }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = read(input, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return false }
            if n == 0 { return fsync(output) == 0 || errno == EINVAL }
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { return false }
                done += w
            }
        }
    }
}

/// A count shared by the watcher and the run.
final class Counter: Sendable {
    private let lock = Mutex(0)
    var value: Int { lock.withLock { $0 } }
    @discardableResult
    func add() -> Int { lock.withLock { $0 += 1; return $0 } }
}
