internal import CLibSSH2
import Dispatch
import Foundation
import TermindCore

/// A remote file's metadata.
public struct SFTPAttributes: Sendable, Equatable {
    public var size: UInt64?
    public var permissions: UInt32?
    public var modified: UInt64?
    public var isDirectory: Bool { permissions.map { $0 & 0o170000 == 0o040000 } ?? false }
    public var isRegularFile: Bool { permissions.map { $0 & 0o170000 == 0o100000 } ?? false }

    init(_ raw: LIBSSH2_SFTP_ATTRIBUTES) {
        size = raw.flags & UInt(LIBSSH2_SFTP_ATTR_SIZE) != 0 ? raw.filesize : nil
        permissions = raw.flags & UInt(LIBSSH2_SFTP_ATTR_PERMISSIONS) != 0 ? UInt32(truncatingIfNeeded: raw.permissions) : nil
        modified = raw.flags & UInt(LIBSSH2_SFTP_ATTR_ACMODTIME) != 0 ? UInt64(raw.mtime) : nil
    }
}

/// The SFTP subsystem on a channel of a shared connection. Its requests run one at a time
/// (libssh2 keeps one request state per SFTP session) on the connection's engine, between
/// the other channels' fair passes. Open more than one for parallel transfers.
///
/// Cleanup cannot be dropped by cancellation: closing a remote file, and the session itself
/// (`close()`, or when the object goes away), is queued on the engine whatever state the
/// calling task is in, so a cancelled transfer never leaks a handle or a channel.
public final class SSHSFTP: Sendable {
    public let connection: SSHConnection
    private let handle: UncheckedBox<OpaquePointer?>
    private var engine: SessionEngine { connection.engine }
    /// Bytes moved per engine step, so a transfer cannot starve the session's other channels.
    private static let stepBytes = 256 * 1024

    private let held = ManagedAtomicFlag()

    /// An open SFTP session holds its connection (a pool's idle sweep leaves it alone).
    private init(connection: SSHConnection, handle: OpaquePointer) {
        self.connection = connection
        self.handle = UncheckedBox(handle)
        connection.engine.hold()
    }

    deinit { Self.shutdown(handle, held: held, on: connection.engine) }

    /// Queues the subsystem's end on its own lane, after its earlier requests (not
    /// cancellable), and gives the connection's hold back.
    private static func shutdown(_ handle: UncheckedBox<OpaquePointer?>, held: ManagedAtomicFlag, on engine: SessionEngine) {
        if held.setFirst() { engine.release() }
        engine.enqueue("Closing SFTP", lane: handle) { _ in
            guard let sftp = handle.value else { return true }
            if libssh2_sftp_shutdown(sftp) == termind_ssh2_error_eagain() { return nil }
            handle.value = nil
            return true
        }
    }

    /// Starts the subsystem (its channel open takes its turn on the session lane).
    public static func open(on connection: SSHConnection, deadline seconds: Double = 30) async throws -> SSHSFTP {
        let engine = connection.engine
        let endpoint = engine.endpoint
        let box = try await engine.run("Starting SFTP", deadline: .now() + seconds, discard: { (late: UncheckedBox<OpaquePointer>) in
            engine.enqueue("Stopping a late SFTP session") { _ in
                libssh2_sftp_shutdown(late.value) == termind_ssh2_error_eagain() ? nil : true
            }
        }) { session -> UncheckedBox<OpaquePointer>? in
            if let sftp = libssh2_sftp_init(session) { return UncheckedBox(sftp) }
            if libssh2_session_last_errno(session) == termind_ssh2_error_eagain() { return nil }
            throw SSHError.make(.sshSFTPFailed, "\(endpoint) did not start SFTP: \(engine.lastError()).")
        }
        return SSHSFTP(connection: connection, handle: box.value)
    }

    /// The absolute form of `path` on the server.
    public func realpath(_ path: String) async throws -> String {
        try await request("Resolving \(path)") { sftp in
            var buffer = [CChar](repeating: 0, count: 4096)
            let rc = path.withCString { termind_ssh2_sftp_realpath(sftp, $0, UInt32(path.utf8.count), &buffer, UInt32(buffer.count)) }
            if rc == termind_ssh2_error_eagain() { return nil }
            guard rc >= 0 else { throw self.failure("resolve", path) }
            return String(decoding: buffer.prefix(Int(rc)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    public func stat(_ path: String) async throws -> SFTPAttributes {
        try await request("Reading the attributes of \(path)") { sftp in
            var attributes = LIBSSH2_SFTP_ATTRIBUTES()
            let rc = path.withCString { termind_ssh2_sftp_stat(sftp, $0, UInt32(path.utf8.count), &attributes) }
            if rc == termind_ssh2_error_eagain() { return nil }
            guard rc == 0 else { throw self.failure("read the attributes of", path) }
            return SFTPAttributes(attributes)
        }
    }

    /// The names in a directory (without "." and ".."), with their attributes.
    public func list(_ path: String) async throws -> [(name: String, attributes: SFTPAttributes)] {
        let entries = try await withHandle(path, flags: 0, mode: 0, directory: true) { file -> [(String, SFTPAttributes)] in
            var entries: [(String, SFTPAttributes)] = []
            while true {
                let next: (String, SFTPAttributes)?? = try await request("Listing \(path)") { _ in
                    var buffer = [CChar](repeating: 0, count: 1024)
                    var attributes = LIBSSH2_SFTP_ATTRIBUTES()
                    let rc = termind_ssh2_sftp_readdir(file.value, &buffer, buffer.count, &attributes)
                    if rc == termind_ssh2_error_eagain() { return nil }
                    if rc == 0 { return .some(nil) }
                    guard rc > 0 else { throw self.failure("list", path) }
                    let name = String(decoding: buffer.prefix(Int(rc)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    return .some((name, SFTPAttributes(attributes)))
                }
                guard let entry = next ?? nil else { break }
                if entry.0 != "." && entry.0 != ".." { entries.append(entry) }
            }
            return entries
        }
        return entries.sorted { $0.0 < $1.0 }.map { (name: $0.0, attributes: $0.1) }
    }

    /// Reads a whole file, at most `limit` bytes (a longer file is an error naming it).
    public func read(_ path: String, limit: Int = 64 << 20) async throws -> Data {
        let collected = UncheckedBox(Data())
        try await withHandle(path, flags: UInt(LIBSSH2_FXF_READ), mode: 0, directory: false) { file in
            _ = try await self.request("Reading \(path)") { _ -> Bool? in
                var buffer = [CChar](repeating: 0, count: Self.stepBytes)
                var moved = 0
                while moved < Self.stepBytes {
                    let n = termind_ssh2_sftp_read_shim(file.value, &buffer, buffer.count)
                    if n == Int(termind_ssh2_error_eagain()) { break }
                    guard n >= 0 else { throw self.failure("read", path) }
                    if n == 0 { return true }
                    collected.value.append(contentsOf: buffer.prefix(n).map { UInt8(bitPattern: $0) })
                    guard collected.value.count <= limit else {
                        throw SSHError.make(.sshSFTPTooLarge, "\(path) is larger than the \(limit)-byte limit for reading it whole.")
                    }
                    moved += n
                }
                if moved > 0 { self.engine.noteProgress() }
                return nil
            }
        }
        return collected.value
    }

    /// Writes `data` to `path`, creating or truncating it with `mode`.
    public func write(_ path: String, _ data: Data, mode: Int = 0o644) async throws {
        let flags = UInt(LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC)
        let offset = UncheckedBox(0)
        try await withHandle(path, flags: flags, mode: mode, directory: false) { file in
            _ = try await self.request("Writing \(path)") { _ -> Bool? in
                var moved = 0
                while offset.value < data.count && moved < Self.stepBytes && self.engine.canSend {
                    // The same bytes are offered again after EAGAIN.
                    let n = data.withUnsafeBytes { raw in
                        termind_ssh2_sftp_write_shim(file.value, raw.baseAddress!.assumingMemoryBound(to: CChar.self) + offset.value,
                                                     min(raw.count - offset.value, Self.stepBytes))
                    }
                    if n == Int(termind_ssh2_error_eagain()) { break }
                    guard n >= 0 else { throw self.failure("write", path) }
                    offset.value += n
                    moved += n
                }
                if offset.value >= data.count { return true }
                if moved > 0 { self.engine.noteProgress() }
                return nil
            }
        }
    }

    public func remove(_ path: String) async throws {
        _ = try await request("Removing \(path)") { sftp -> Int32? in
            let rc = path.withCString { termind_ssh2_sftp_unlink(sftp, $0, UInt32(path.utf8.count)) }
            if rc == termind_ssh2_error_eagain() { return nil }
            guard rc == 0 else { throw self.failure("remove", path) }
            return rc
        }
    }

    /// Ends the subsystem (the connection and its other channels stay). Queued on the engine
    /// even when the calling task is cancelled; requests made afterwards fail with `ssh.closed`.
    public func close() async {
        Self.shutdown(handle, held: held, on: engine)
    }

    // MARK: - Internals

    private func request<T>(_ what: String, _ attempt: @escaping (OpaquePointer) throws -> T?) async throws -> T {
        let handle = self.handle
        let endpoint = engine.endpoint
        return try await engine.run(what, lane: handle) { _ in
            guard let sftp = handle.value else { throw SSHError.make(.sshClosed, "SFTP on \(endpoint) is closed.") }
            return try attempt(sftp)
        }
    }

    private func openHandle(_ path: String, flags: UInt, mode: Int, directory: Bool) async throws -> UncheckedBox<OpaquePointer> {
        try await request("Opening \(path)") { sftp -> UncheckedBox<OpaquePointer>? in
            let opened = path.withCString {
                termind_ssh2_sftp_open(sftp, $0, UInt32(path.utf8.count), flags, mode, directory ? LIBSSH2_SFTP_OPENDIR : LIBSSH2_SFTP_OPENFILE)
            }
            if let opened { return UncheckedBox(opened) }
            if libssh2_session_last_errno(self.engine.session!) == termind_ssh2_error_eagain() { return nil }
            throw self.failure("open", path)
        }
    }

    /// Opens `path`, runs `body` with the handle, and closes it whether `body` succeeded.
    private func withHandle<T>(_ path: String, flags: UInt, mode: Int, directory: Bool,
                               _ body: (UncheckedBox<OpaquePointer>) async throws -> T) async throws -> T {
        let file = try await openHandle(path, flags: flags, mode: mode, directory: directory)
        do {
            let result = try await body(file)
            closeHandle(file)
            return result
        } catch {
            closeHandle(file)
            throw error
        }
    }

    /// Queued on the session's lane after the requests using the file, and never dropped by
    /// a cancelled caller (that would leak the handle on the server).
    private func closeHandle(_ file: UncheckedBox<OpaquePointer>) {
        let handle = self.handle
        engine.enqueue("Closing a remote file", lane: handle) { _ in
            guard handle.value != nil else { return true }  // the session is gone, and the file with it
            return libssh2_sftp_close_handle(file.value) == termind_ssh2_error_eagain() ? nil : true
        }
    }

    /// An error naming the path and the server's SFTP status.
    private func failure(_ verb: String, _ path: String) -> TermindError {
        let status = handle.value.map { libssh2_sftp_last_error($0) } ?? 0
        let reason: String
        switch status {
        case 2: reason = "no such file"
        case 3: reason = "permission denied"
        case 4: reason = "the server reported a failure"
        default: reason = engine.lastError()
        }
        return SSHError.make(status == 2 ? .sshSFTPNotFound : .sshSFTPFailed, "Could not \(verb) \(path) on \(engine.endpoint): \(reason).")
    }
}
