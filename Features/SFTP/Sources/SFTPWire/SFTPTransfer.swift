import Foundation

/// Whole-file transfers with `SFTPSession.window` requests in flight, each of the size the
/// server's limits allow (up to 255 KiB, as OpenSSH's sftp): the round trip is paid once
/// per window, not once per request. Local bytes go through `pread`/`pwrite` at their
/// offsets, so replies may arrive in any order.
public enum SFTPTransfer {
    public struct Progress: Sendable {
        public var done: UInt64
        public var total: UInt64?
    }

    /// Copies the remote file at `path` into `fd` (from its offset 0; the caller truncates
    /// or not). Returns the bytes written. A short read is asked again for its rest; the
    /// end is where the server says EOF.
    @discardableResult
    public static func download(_ session: SFTPSession, _ path: [UInt8], to fd: Int32, window: Int = SFTPSession.window,
                                progress: (@Sendable (Progress) -> Void)? = nil) async throws -> UInt64 {
        let handle = try await session.open(path, .read)
        do {
            let size = try? await session.fstat(handle).size
            let chunk = await session.limits.readSize
            // A size of 0 may be a file that does not know its size (/proc): read to EOF.
            let limit = size.flatMap { $0 > 0 ? $0 : nil }
            let copied = try await withThrowingTaskGroup(of: (UInt64, Int, Int).self) { group -> UInt64 in
                var next: UInt64 = 0
                var inFlight = 0
                var end: UInt64?
                var written: UInt64 = 0
                func issue(_ offset: UInt64, _ length: Int) {
                    inFlight += 1
                    group.addTask {
                        let data = try await session.read(handle, offset: offset, length: length)
                        var done = 0
                        while done < data.count {
                            let n = data.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, data.count - done, off_t(offset) + off_t(done)) }
                            if n < 0 {
                                if errno == EINTR { continue }
                                throw SFTPError(status: .failure, message: "Writing the local file failed: \(String(cString: strerror(errno))).")
                            }
                            done += n
                        }
                        return (offset, length, data.count)
                    }
                }
                func refill() {
                    // Cancelled: nothing more is asked; what is in flight drains.
                    while inFlight < window, end == nil, !Task.isCancelled, limit.map({ next < $0 }) ?? true {
                        let length = limit.map { Int(min(UInt64(chunk), $0 - next)) } ?? chunk
                        issue(next, length)
                        next += UInt64(length)
                    }
                }
                refill()
                while let (offset, asked, got) = try await group.next() {
                    inFlight -= 1
                    written += UInt64(got)
                    if got == 0 {
                        end = min(end ?? offset, offset)
                    } else if got < asked, end.map({ offset + UInt64(got) < $0 }) ?? true {
                        // A short read: the rest of that range is asked again.
                        issue(offset + UInt64(got), asked - got)
                    }
                    progress?(Progress(done: written, total: size))
                    refill()
                }
                try Task.checkCancellation()
                return written
            }
            try? await session.close(handle)
            return copied
        } catch {
            try? await session.close(handle)
            throw error
        }
    }

    /// Copies `size` bytes of `fd` (from offset 0) into the remote file at `path`, created
    /// or truncated with `permissions`. Returns the bytes written.
    @discardableResult
    public static func upload(_ session: SFTPSession, from fd: Int32, size: UInt64, to path: [UInt8], permissions: UInt32 = 0o644,
                              window: Int = SFTPSession.window, progress: (@Sendable (Progress) -> Void)? = nil) async throws -> UInt64 {
        let handle = try await session.open(path, [.write, .create, .truncate], permissions: permissions)
        do {
            let chunk = await session.limits.writeSize
            try await withThrowingTaskGroup(of: Int.self) { group in
                var next: UInt64 = 0
                var inFlight = 0
                var done: UInt64 = 0
                func issue() throws {
                    let offset = next
                    let length = Int(min(UInt64(chunk), size - offset))
                    var buffer = [UInt8](repeating: 0, count: length)
                    var got = 0
                    while got < length {
                        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, length - got, off_t(offset) + off_t(got)) }
                        if n < 0 && errno == EINTR { continue }
                        guard n > 0 else {
                            throw SFTPError(status: .failure, message: n == 0 ? "The local file is shorter than \(size) bytes (it shrank while being sent)."
                                : "Reading the local file failed: \(String(cString: strerror(errno))).")
                        }
                        got += n
                    }
                    next += UInt64(length)
                    inFlight += 1
                    let bytes = buffer
                    group.addTask {
                        try await session.write(handle, offset: offset, bytes)
                        return bytes.count
                    }
                }
                while inFlight < window, next < size, !Task.isCancelled { try issue() }
                while let count = try await group.next() {
                    inFlight -= 1
                    done += UInt64(count)
                    progress?(Progress(done: done, total: size))
                    while inFlight < window, next < size, !Task.isCancelled { try issue() }
                }
                try Task.checkCancellation()
            }
            try await session.close(handle)
            return size
        } catch {
            try? await session.close(handle)
            throw error
        }
    }
}
