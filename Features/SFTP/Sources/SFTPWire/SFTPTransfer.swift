import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// Whole-file transfers with `SFTPSession.window` requests in flight, each of the size the
/// server's limits allow (up to 255 KiB, as OpenSSH's sftp): the round trip is paid once
/// per window, not once per request. Local bytes go through `pread`/`pwrite` at their
/// offsets, so replies may arrive in any order.
public enum SFTPTransfer {
    public struct Progress: Sendable {
        public var done: UInt64
        public var total: UInt64?
    }

    /// A pipe that stopped before the end (cancelled, or a side failed): how far every byte
    /// is known written (`contiguous`: all of [start, contiguous) arrived), and why.
    public struct Interrupted: Error {
        public let contiguous: UInt64
        public let reason: any Error

        public init(contiguous: UInt64, reason: any Error) {
            self.contiguous = contiguous
            self.reason = reason
        }
    }

    /// Bytes one file keeps in flight at most (32 requests of 255 KiB): 400 MiB/s at a 20 ms
    /// round trip, and what one channel's window holds many times over on loopback.
    public static let fileBytesInFlight = 8 << 20
    /// Bytes every transfer of this process keeps in flight at most, together.
    public static let processAllowance = ByteAllowance(capacity: 16 << 20)

    /// Moves bytes from `read` to `write`, from `start` up to `size` (nil or 0: up to where
    /// `read` returns nothing), with up to `window` chunks of `chunk` bytes in flight (fewer
    /// when they would pass `fileBytesInFlight`), each read then written at its own offset,
    /// and each holding its length of `allowance` (the process's) from before it is asked
    /// until it is written; one request is always let go when the file has none out
    /// (`ByteAllowance.overdraw`). A short read asks again for the rest of its range.
    /// `progress` hears the bytes moved so far (from `start`, in whatever order requests were
    /// answered: a request that lags does not hold the figure back).
    /// Returns the end offset. On failure or cancellation nothing more is asked, what is in
    /// flight drains, and `Interrupted` says how far the destination is whole.
    public static func pipe(from start: UInt64 = 0, size: UInt64?, chunk: Int, window: Int, allowance: ByteAllowance? = processAllowance,
                            read: @escaping @Sendable (UInt64, Int) async throws -> ArraySlice<UInt8>,
                            write: @escaping @Sendable (UInt64, consuming ArraySlice<UInt8>) async throws -> Void,
                            progress: (@Sendable (UInt64) -> Void)? = nil) async throws -> UInt64 {
        let limit = size.flatMap { $0 > 0 ? $0 : nil }
        if let limit, limit > start, limit - start <= UInt64(chunk) {
            return try await pipeOne(from: start, to: limit, allowance: allowance, read: read, write: write, progress: progress)
        }
        let window = max(1, min(window, fileBytesInFlight / max(chunk, 1)))
        return try await withThrowingTaskGroup(of: (UInt64, Int, Int, (any Error)?).self) { group -> UInt64 in
            var next = start
            var inFlight = 0
            var end: UInt64?
            var failure: (any Error)?
            // Ranges done beyond the contiguous prefix, by their start.
            var finished: [UInt64: UInt64] = [:]
            var contiguous = start
            // Every byte answered so far (what `progress` shows).
            var moved = start
            // The rest of short reads, asked again before anything new.
            var again: [(UInt64, Int)] = []
            func issue(_ offset: UInt64, _ length: Int) {
                inFlight += 1
                group.addTask {
                    do {
                        let data = try await read(offset, length)
                        let count = data.count
                        // Handed over (consumed): `write` lets the bytes go once they are sent,
                        // not when the answer comes.
                        if count > 0 { try await write(offset, consume data) }
                        return (offset, length, count, nil)
                    } catch {
                        return (offset, length, 0, error)
                    }
                }
            }
            /// The next range to ask for, or nil when nothing more is to be asked now.
            func nextRange() -> (UInt64, Int)? {
                guard failure == nil, !Task.isCancelled else { return nil }
                if let first = again.first { return first }
                guard end == nil, limit.map({ next < $0 }) ?? true else { return nil }
                return (next, limit.map { Int(min(UInt64(chunk), $0 - next)) } ?? chunk)
            }
            func refill() {
                while inFlight < window, let range = nextRange() {
                    if let allowance, !allowance.tryTake(range.1) {
                        // Other transfers hold the process's bytes: a request of ours comes back
                        // first, or, with none out, this one goes anyway.
                        guard inFlight == 0 else { return }
                        allowance.overdraw(range.1)
                    }
                    if again.isEmpty { next += UInt64(range.1) } else { again.removeFirst() }
                    issue(range.0, range.1)
                }
            }
            refill()
            while let (offset, asked, got, error) = try await group.next() {
                inFlight -= 1
                allowance?.give(asked)
                if let error {
                    failure = failure ?? error
                } else {
                    if got > 0 {
                        finished[offset] = offset + UInt64(got)
                        while let upTo = finished.removeValue(forKey: contiguous) { contiguous = upTo }
                        moved += UInt64(got)
                    }
                    if got == 0 {
                        end = min(end ?? offset, offset)
                    } else if got < asked, failure == nil, end.map({ offset + UInt64(got) < $0 }) ?? true {
                        again.append((offset + UInt64(got), asked - got))
                    }
                    progress?(moved)
                }
                refill()
            }
            if let failure { throw Interrupted(contiguous: contiguous, reason: failure) }
            if Task.isCancelled { throw Interrupted(contiguous: contiguous, reason: CancellationError()) }
            return end.map { min($0, contiguous) } ?? contiguous
        }
    }

    /// What fits in one request (most files of a tree): read then written in this task, with
    /// no task group, asking again after a short read, as `pipe` does.
    private static func pipeOne(from start: UInt64, to limit: UInt64, allowance: ByteAllowance?,
                                read: @escaping @Sendable (UInt64, Int) async throws -> ArraySlice<UInt8>,
                                write: @escaping @Sendable (UInt64, consuming ArraySlice<UInt8>) async throws -> Void,
                                progress: (@Sendable (UInt64) -> Void)?) async throws -> UInt64 {
        var contiguous = start
        while contiguous < limit {
            // The file's only request: it goes whether or not the process has bytes left.
            let length = Int(limit - contiguous)
            allowance?.overdraw(length)
            defer { allowance?.give(length) }
            if Task.isCancelled { throw Interrupted(contiguous: contiguous, reason: CancellationError()) }
            let count: Int
            do {
                let data = try await read(contiguous, length)
                count = data.count
                if count > 0 { try await write(contiguous, consume data) }
            } catch {
                throw Interrupted(contiguous: contiguous, reason: error)
            }
            if count == 0 { break }
            contiguous += UInt64(count)
            progress?(contiguous)
        }
        if Task.isCancelled { throw Interrupted(contiguous: contiguous, reason: CancellationError()) }
        return contiguous
    }

    /// `length` bytes of `fd` at `offset`, fewer only at its end.
    public static func readLocal(_ fd: Int32, offset: UInt64, length: Int) throws -> ArraySlice<UInt8> {
        BlockingCheck.blocking("pread of a local file")
        // Read straight into the array's storage: only the bytes read become its elements.
        var failure: Int32?
        let buffer = [UInt8](unsafeUninitializedCapacity: max(length, 1)) { storage, count in
            var got = 0
            while got < length {
                let n = pread(fd, storage.baseAddress! + got, length - got, off_t(offset) + off_t(got))
                if n < 0 && errno == EINTR { continue }
                if n < 0 { failure = errno; break }
                if n == 0 { break }
                got += n
            }
            count = got
        }
        if let failure { throw SFTPError(status: .failure, message: "Reading the local file failed: \(String(cString: strerror(failure))).") }
        return buffer[...]
    }

    public static func writeLocal(_ fd: Int32, offset: UInt64, _ data: ArraySlice<UInt8>) throws {
        BlockingCheck.blocking("pwrite of a local file")
        var done = 0
        while done < data.count {
            let n = data.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, data.count - done, off_t(offset) + off_t(done)) }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                throw SFTPError(status: code == EACCES || code == EPERM ? .permissionDenied : .failure,
                                message: "Writing the local file failed: \(String(cString: strerror(code))).")
            }
            done += n
        }
    }

    /// Copies the remote file at `path` into `fd` (from its offset 0; the caller truncates
    /// or not). Returns the bytes written. The end is where the server says EOF.
    @discardableResult
    public static func download(_ session: SFTPSession, _ path: [UInt8], to fd: Int32, window: Int = SFTPSession.window,
                                progress: (@Sendable (Progress) -> Void)? = nil) async throws -> UInt64 {
        let handle = try await session.open(path, .read)
        do {
            let size = try? await session.fstat(handle).size
            let chunk = await session.limits.readSize
            let report: (@Sendable (UInt64) -> Void)? = progress.map { progress in { @Sendable done in progress(Progress(done: done, total: size)) } }
            let copied = try await pipe(size: size, chunk: chunk, window: window,
                                        read: { offset, length in try await session.read(handle, offset: offset, length: length) },
                                        write: { offset, data in try writeLocal(fd, offset: offset, data) },
                                        progress: report)
            try? await session.close(handle)
            return copied
        } catch let stop as Interrupted {
            try? await session.close(handle)
            throw stop.reason
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
            let report: (@Sendable (UInt64) -> Void)? = progress.map { progress in { @Sendable done in progress(Progress(done: done, total: size)) } }
            var sent: UInt64 = 0
            if size > 0 {
                sent = try await pipe(size: size, chunk: chunk, window: window,
                                      read: { offset, length in try readLocal(fd, offset: offset, length: length) },
                                      write: { offset, data in try await session.write(handle, offset: offset, consume data) },
                                      progress: report)
            }
            guard sent == size else {
                throw SFTPError(status: .failure, message: "The local file is shorter than \(size) bytes (it shrank while being sent).")
            }
            try await session.close(handle)
            return size
        } catch let stop as Interrupted {
            try? await session.close(handle)
            throw stop.reason
        } catch {
            try? await session.close(handle)
            throw error
        }
    }
}
