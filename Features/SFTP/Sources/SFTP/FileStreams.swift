import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import SFTPWire
import Synchronization
import TermindCore
import TransferRules
import VaultAPI

/// One remote file read or written as a stream for another feature (the Assistant's byte
/// channels), through the process scheduler: a row of its source in the same fair queue as
/// `termind cp`, admitted before any byte moves, its progress shown by `termind transfers`.
/// Connecting asks nothing: the saved host's own route, key and durable trust.
extension SFTPFeature {
    func download(host: String, path: String, offset: UInt64, source: String, opener: ConnectionOpener) async throws -> any RemoteFileReader {
        let side = Self.streamSide(host, opener: opener)
        let name = Array(path.utf8)
        do {
            guard let attributes = try await side.stat(name, follow: true) else { throw TermindError(.sftpFailed, "\(host):\(path): no such file.") }
            guard attributes.kind == .file, let size = attributes.size else { throw TermindError(.sftpFailed, "\(host):\(path) is not a regular file.") }
            guard offset <= size else { throw TermindError(.sftpFailed, "\(host):\(path) has \(size) bytes; \(offset) is past its end.") }
            let id = await scheduler.submit(source: source, hosts: [host], from: "\(host):\(path)", to: source, size: size)
            let reader = StreamReader(side: side, path: name, shown: "\(host):\(path)", size: size, modified: attributes.modifiedTime,
                                      offset: offset, row: id, scheduler: scheduler)
            do {
                try await scheduler.admission(id) { [reader] control in reader.stop(control) }
                try await reader.open()
            } catch {
                await scheduler.stopped(id, .failed, error: TermindError.from(error).message)
                throw error
            }
            return reader
        } catch {
            await side.closeAll()
            throw Self.failure(error, "\(host):\(path)")
        }
    }

    func upload(host: String, path: String, size: UInt64, replace: Bool, source: String, opener: ConnectionOpener) async throws -> any RemoteFileWriter {
        let side = Self.streamSide(host, opener: opener)
        let name = Array(path.utf8)
        do {
            if let existing = try await side.stat(name, follow: false) {
                guard existing.kind == .file else { throw TermindError(.sftpFailed, "\(host):\(path) exists and is not a regular file: nothing is written over it.") }
                guard replace else { throw TermindError(.sftpFailed, "\(host):\(path) exists (replace it with replace: true).") }
            }
            let (directory, base) = SFTPPaths.split(name)
            let temporary = SFTPPaths.join(directory, TransferNames.temporary(base, token: TransferNames.randomToken()))
            let id = await scheduler.submit(source: source, hosts: [host], from: source, to: "\(host):\(path)", size: size)
            let writer = StreamWriter(side: side, path: name, temporary: temporary, shown: "\(host):\(path)", size: size, replace: replace, row: id, scheduler: scheduler)
            do {
                try await scheduler.admission(id) { [writer] control in writer.stop(control) }
                try await writer.open()
            } catch {
                await scheduler.stopped(id, .failed, error: TermindError.from(error).message)
                throw error
            }
            return writer
        } catch {
            await side.closeAll()
            throw Self.failure(error, "\(host):\(path)")
        }
    }

    /// A saved host's side for one stream: its own route, key and durable trust, asking nothing.
    static func streamSide(_ host: String, opener: ConnectionOpener) -> RemoteSide {
        RemoteSide(host: host, target: ConnectionTarget(target: host, connectTimeout: 15), opener: opener, window: SFTPSession.window, ask: { _ in nil })
    }

    static func failure(_ error: any Error, _ shown: String) -> any Error {
        if let sftp = error as? SFTPError { return TermindError(.sftpFailed, "\(shown): \(sftp.message)") }
        return error
    }
}

/// A download's reads: requests of the server's size kept in flight up to `inFlight` bytes
/// past what was taken (a bounded window, as a transfer's), handed out in order in pieces of
/// what the caller asks for.
final class StreamReader: RemoteFileReader, Sendable {
    let size: UInt64
    let modified: UInt32?
    private let side: RemoteSide
    private let path: [UInt8]
    private let shown: String
    private let row: UInt64
    private let scheduler: TransferScheduler
    private struct State {
        var handle: (any ReadHandle)?
        /// Bytes handed out, and the next offset to request.
        var position: UInt64
        var requested: UInt64
        var ahead: [(offset: UInt64, length: Int, task: Task<ArraySlice<UInt8>, any Error>)] = []
        /// The rest of the last request's answer not yet handed out.
        var current = ArraySlice<UInt8>()
        var stopped: String?
    }
    private let state: Mutex<State>
    /// At most this many bytes requested past what was handed out.
    static let inFlight = 2 << 20

    init(side: RemoteSide, path: [UInt8], shown: String, size: UInt64, modified: UInt32?, offset: UInt64, row: UInt64, scheduler: TransferScheduler) {
        self.side = side
        self.path = path
        self.shown = shown
        self.size = size
        self.modified = modified
        state = Mutex(State(position: offset, requested: offset))
        self.row = row
        self.scheduler = scheduler
    }

    func open() async throws {
        let opened = try await side.openRead(path, extra: false, stripes: 1, shared: false)
        state.withLock { s in s.handle = opened }
    }

    func stop(_ control: TransferScheduler.Control) {
        let pending = state.withLock { (s: inout State) -> [Task<ArraySlice<UInt8>, any Error>] in
            s.stopped = control == .pause ? "paused" : "cancelled"
            return s.ahead.map(\.task)
        }
        pending.forEach { $0.cancel() }
    }

    /// Keeps requests in flight up to `inFlight` bytes past the position.
    private func refill(_ handle: any ReadHandle) {
        state.withLock { s in
            let chunk = UInt64(max(1, handle.chunk))
            while s.requested < size, s.requested - s.position < UInt64(Self.inFlight) {
                let offset = s.requested, length = Int(min(chunk, size - s.requested))
                s.ahead.append((offset, length, Task { try await handle.read(offset, length) }))
                s.requested += UInt64(length)
            }
        }
    }

    func next(limit: Int) async throws -> Data? {
        guard let handle = state.withLock({ s in s.handle }) else { throw TermindError(.sftpFailed, "\(shown) is closed.") }
        if let stopped = state.withLock({ s in s.stopped }) { throw TermindError(.sftpFailed, "\(shown): the transfer was \(stopped) (termind transfers).") }
        if state.withLock({ s in s.position >= size }) {
            // The end: the file must still be what was opened.
            let now = try await side.stat(path, follow: true)
            guard now?.size == size, now?.modifiedTime == modified else {
                throw TermindError(.sftpFailed, "\(shown) changed while it was read (its size or modification time differs): the bytes sent are not one version of it.")
            }
            return nil
        }
        if state.withLock({ s in s.current.isEmpty }) {
            refill(handle)
            guard let first = state.withLock({ s in s.ahead.isEmpty ? nil : s.ahead.removeFirst() }) else { return nil }
            let bytes = try await first.task.value
            guard !bytes.isEmpty else { throw TermindError(.sftpFailed, "\(shown) ended before its \(size) bytes: it changed while it was read.") }
            let dropped = state.withLock { (s: inout State) -> [Task<ArraySlice<UInt8>, any Error>] in
                s.current = bytes
                guard bytes.count < first.length else { return [] }
                // A short answer: what was asked past it is asked again from where it ended.
                defer { s.ahead = [] }
                s.requested = first.offset + UInt64(bytes.count)
                return s.ahead.map(\.task)
            }
            dropped.forEach { $0.cancel() }
        }
        let (data, done) = state.withLock { (s: inout State) -> (Data, UInt64) in
            let take = s.current.prefix(limit)
            s.current = s.current.dropFirst(take.count)
            s.position += UInt64(take.count)
            return (Data(take), s.position)
        }
        refill(handle)
        await scheduler.progress([row: done])
        return data
    }

    func close(complete: Bool) async {
        let (handle, pending) = state.withLock { (s: inout State) -> ((any ReadHandle)?, [Task<ArraySlice<UInt8>, any Error>]) in
            defer { s.handle = nil; s.ahead = []; s.current = [] }
            return (s.handle, s.ahead.map(\.task))
        }
        pending.forEach { $0.cancel() }
        await handle?.close()
        await side.closeAll()
        await scheduler.stopped(row, complete ? .done : .failed, error: complete ? nil : "the stream ended before the file was delivered")
    }
}

/// An upload's writes, in order, into the temporary name; `commit` renames it into place.
final class StreamWriter: RemoteFileWriter, Sendable {
    private let side: RemoteSide
    private let path: [UInt8]
    private let temporary: [UInt8]
    private let shown: String
    private let size: UInt64
    private let replace: Bool
    private let row: UInt64
    private let scheduler: TransferScheduler
    private struct State {
        var handle: (any WriteHandle)?
        var position: UInt64 = 0
        var stopped: String?
    }
    private let state = Mutex(State())

    init(side: RemoteSide, path: [UInt8], temporary: [UInt8], shown: String, size: UInt64, replace: Bool, row: UInt64, scheduler: TransferScheduler) {
        self.side = side
        self.path = path
        self.temporary = temporary
        self.shown = shown
        self.size = size
        self.replace = replace
        self.row = row
        self.scheduler = scheduler
    }

    func open() async throws {
        let opened = try await side.openWrite(temporary, mode: 0o600, resume: false, extra: false, stripes: 1, shared: false)
        state.withLock { s in s.handle = opened }
    }

    func stop(_ control: TransferScheduler.Control) { state.withLock { s in s.stopped = control == .pause ? "paused" : "cancelled" } }

    var written: UInt64 { state.withLock { s in s.position } }

    func write(_ data: Data) async throws {
        guard let handle = state.withLock({ s in s.handle }) else { throw TermindError(.sftpFailed, "\(shown) is closed.") }
        if let stopped = state.withLock({ s in s.stopped }) { throw TermindError(.sftpFailed, "\(shown): the transfer was \(stopped) (termind transfers).") }
        let offset = state.withLock { s in s.position }
        guard offset + UInt64(data.count) <= size else { throw TermindError(.sftpFailed, "\(shown): more bytes than the \(size) announced.") }
        // In pieces the server takes (its chunk), one after another.
        var start = 0
        let bytes = [UInt8](data)
        while start < bytes.count {
            let end = min(bytes.count, start + handle.chunk)
            do { try await handle.write(offset + UInt64(start), bytes[start..<end]) } catch { throw SFTPFeature.failure(error, shown) }
            start = end
        }
        let done = state.withLock { (s: inout State) -> UInt64 in s.position += UInt64(data.count); return s.position }
        await scheduler.progress([row: done])
    }

    func commit() async throws {
        guard let handle = state.withLock({ (s: inout State) -> (any WriteHandle)? in defer { s.handle = nil }; return s.handle }) else {
            throw TermindError(.sftpFailed, "\(shown) is closed.")
        }
        do {
            guard state.withLock({ s in s.position }) == size else { throw TermindError(.sftpFailed, "\(shown): \(written) of \(size) bytes; nothing is committed.") }
            try await handle.finish()
            guard let attributes = try await side.stat(temporary, follow: false), attributes.size == size else {
                throw TermindError(.sftpFailed, "\(shown): the written file does not have its \(size) bytes; nothing is committed.")
            }
            if !replace, try await side.stat(path, follow: false) != nil {
                throw TermindError(.sftpFailed, "\(shown) appeared meanwhile; it is kept and nothing is committed.")
            }
            try await side.rename(temporary, to: path, overwrite: replace)
            await side.closeAll()
            await scheduler.stopped(row, .done)
        } catch {
            await handle.abandon()
            try? await side.remove(temporary)
            await side.closeAll()
            await scheduler.stopped(row, .failed, error: TermindError.from(error).message)
            throw SFTPFeature.failure(error, shown)
        }
    }

    func abandon() async {
        let handle = state.withLock { (s: inout State) -> (any WriteHandle)? in defer { s.handle = nil }; return s.handle }
        await handle?.abandon()
        var kept: String?
        do { try await side.remove(temporary) } catch { kept = SFTPPaths.display(temporary) }
        await side.closeAll()
        await scheduler.stopped(row, .cancelled, error: kept.map { "the partial file \($0) could not be removed" })
    }
}

/// `TransferScheduling.folder`: small files on the side's control session, one request at a
/// time, never a transfer slot.
final class RemoteFolderSide: RemoteFolder {
    private let side: RemoteSide
    private let host: String

    init(side: RemoteSide, host: String) {
        self.side = side
        self.host = host
    }

    func list(_ path: String, limit: Int) async throws -> [String]? {
        do {
            guard let attributes = try await side.stat(Array(path.utf8), follow: true) else { return nil }
            guard attributes.kind == .directory else { throw TermindError(.sftpFailed, "\(host):\(path) is not a directory.") }
            return try await side.list(Array(path.utf8), limit: limit).map { String(decoding: $0.name, as: UTF8.self) }
        } catch { throw SFTPFeature.failure(error, "\(host):\(path)") }
    }

    func makeDirectory(_ path: String, mode: UInt32) async throws -> Bool {
        do {
            if try await side.stat(Array(path.utf8), follow: false) != nil { return false }
            try await side.mkdir(Array(path.utf8), mode: mode)
            return true
        } catch { throw SFTPFeature.failure(error, "\(host):\(path)") }
    }

    func read(_ path: String, limit: Int) async throws -> Data? {
        do {
            let sftp = try await side.controlSession()
            let handle: SFTPSession.Handle
            do { handle = try await sftp.open(Array(path.utf8), .read) } catch let error as SFTPError where error.status == .noSuchFile { return nil }
            var data = Data()
            do {
                let chunk = await sftp.limits.readSize
                while true {
                    let piece = try await sftp.read(handle, offset: UInt64(data.count), length: chunk)
                    if piece.isEmpty { break }
                    data.append(contentsOf: piece)
                    guard data.count <= limit else { throw TermindError(.sftpFailed, "\(host):\(path) is larger than \(limit) bytes.") }
                }
            } catch {
                try? await sftp.close(handle)
                throw error
            }
            try await sftp.close(handle)
            return data
        } catch { throw SFTPFeature.failure(error, "\(host):\(path)") }
    }

    func create(_ path: String, data: Data) async throws -> Bool {
        let name = Array(path.utf8)
        let (directory, base) = SFTPPaths.split(name)
        let temporary = SFTPPaths.join(directory, TransferNames.temporary(base, token: TransferNames.randomToken()))
        do {
            let sftp = try await side.controlSession()
            let handle = try await sftp.open(temporary, [.write, .create, .exclusive], permissions: 0o600)
            do {
                let chunk = await sftp.limits.writeSize
                var offset = 0
                while offset < data.count {
                    let end = min(data.count, offset + chunk)
                    try await sftp.write(handle, offset: UInt64(offset), data[data.startIndex + offset ..< data.startIndex + end])
                    offset = end
                }
                try await sftp.close(handle)
            } catch {
                try? await sftp.close(handle)
                try? await side.remove(temporary)
                throw error
            }
            do {
                try await side.rename(temporary, to: name, overwrite: false)
                return true
            } catch let error as SFTPError {
                try? await side.remove(temporary)
                // The name is taken (OpenSSH's rename is link + unlink: it fails on an existing target).
                if try await side.stat(name, follow: false) != nil { return false }
                throw error
            }
        } catch { throw SFTPFeature.failure(error, "\(host):\(path)") }
    }

    func mode(_ path: String) async throws -> UInt32? {
        do { return try await side.stat(Array(path.utf8), follow: false)?.permissions.map { $0 & 0o7777 } } catch {
            throw SFTPFeature.failure(error, "\(host):\(path)")
        }
    }

    func close() async { await side.closeAll() }
}
