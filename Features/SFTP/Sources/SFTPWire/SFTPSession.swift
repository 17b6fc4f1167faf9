import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// The byte stream an SFTP session runs on (the `sftp` subsystem channel of an SSH
/// connection; a pipe in unit tests).
public protocol SFTPTransport: Sendable {
    func send(_ bytes: [UInt8]) async throws
    /// Queues `bytes` only if that needs no wait; false otherwise (then `send` is used).
    func offer(_ bytes: [UInt8]) -> Bool
    /// The next bytes from the server; nil once it closed.
    func receive() async throws -> Data?
    func close()
}

extension SFTPTransport {
    public func offer(_ bytes: [UInt8]) -> Bool { false }
}

/// An SFTP v3 client session with requests pipelined: any number of requests may be in
/// flight, each answered by id (OpenSSH's sftp keeps 64 reads in flight; libssh2's SFTP
/// layer one request state per session and at most 30,000 bytes per read). One reader task
/// dispatches the server's packets; a broken or oversized packet ends the session and fails
/// every request waiting.
public actor SFTPSession {
    public nonisolated let info: SFTPServerInfo
    public private(set) var limits = SFTPLimits.conservative
    private let transport: any SFTPTransport
    private var nextID: UInt32 = 0
    private var pending: [UInt32: CheckedContinuation<[UInt8], Error>] = [:]
    private var failure: SFTPError?
    private var reader: Task<Void, Never>?
    private var sender: Task<Void, Never>?
    /// Requests leave in the order they were made, whole: handed to the transport at once
    /// when it takes them without a wait and nothing is queued before them (no task hop
    /// per request), else queued here for one sender task.
    private let outbox: AsyncStream<[UInt8]>
    private let post: AsyncStream<[UInt8]>.Continuation
    /// Packets posted to the outbox and not yet handed to the transport.
    private var queued = 0

    /// Requests kept in flight per transfer.
    public static let window = 64

    private init(transport: any SFTPTransport, info: SFTPServerInfo) {
        self.transport = transport
        self.info = info
        (outbox, post) = AsyncStream<[UInt8]>.makeStream()
    }

    /// INIT → VERSION, then the server's limits when it offers `limits@openssh.com`.
    public static func start(_ transport: any SFTPTransport) async throws -> SFTPSession {
        var hello = SFTPWriter(.initialize)
        hello.uint32(3)
        try await transport.send(hello.finished())
        var framer = SFTPFramer()
        var leftover: [[UInt8]] = []
        var version: [UInt8]?
        while version == nil {
            guard let data = try await transport.receive() else {
                throw SFTPError(status: .connectionLost, message: "The server closed the SFTP channel before answering INIT (is the sftp subsystem enabled?).")
            }
            var packets = try framer.feed(data)
            if !packets.isEmpty { version = packets.removeFirst(); leftover = packets }
        }
        guard leftover.isEmpty else { throw SFTPError(status: .badMessage, message: "The server sent SFTP packets before its VERSION was answered.") }
        let info = try SFTPServerInfo.parse(version!)
        guard info.version >= 3 else { throw SFTPError(status: .opUnsupported, message: "The server speaks SFTP version \(info.version); termind needs 3.") }
        let session = SFTPSession(transport: transport, info: info)
        await session.run(framer)
        if info.supports("limits@openssh.com") {
            let asked = ContinuousClock.now
            var reply = try await session.extended("limits@openssh.com") { _ in }
            await session.setLimits(try SFTPLimits.parse(&reply), roundTrip: ContinuousClock.now - asked)
        }
        return session
    }

    private func setLimits(_ new: SFTPLimits, roundTrip: Duration) {
        limits = new
        self.roundTrip = Double(roundTrip.components.seconds) + Double(roundTrip.components.attoseconds) / 1e18
    }

    /// Seconds one small request took to be answered when the session started (the limits
    /// request, which the server answers at once): the round trip, or nil when not measured.
    public private(set) var roundTrip: Double?

    private func run(_ framer: SFTPFramer) {
        let transport = self.transport
        let outbox = self.outbox
        sender = Task {
            for await packet in outbox {
                do { try await transport.send(packet) } catch {
                    self.fail(SFTPError(status: .connectionLost, message: "Sending an SFTP request failed: \(TermindError.from(error).message)"))
                    return
                }
                self.queued -= 1
            }
        }
        reader = Task {
            var framer = framer
            do {
                while let data = try await transport.receive() {
                    for packet in try framer.feed(data) { self.dispatch(packet) }
                }
                self.fail(SFTPError(status: .connectionLost, message: "The server closed the SFTP session."))
            } catch let error as SFTPError {
                self.fail(error)
            } catch {
                self.fail(SFTPError(status: .connectionLost, message: "The SFTP session's connection failed: \(TermindError.from(error).message)"))
            }
        }
    }

    private func dispatch(_ packet: [UInt8]) {
        guard packet.count >= 5 else { return fail(SFTPError(status: .badMessage, message: "The server sent an SFTP reply without a request id.")) }
        let id = UInt32(packet[1]) << 24 | UInt32(packet[2]) << 16 | UInt32(packet[3]) << 8 | UInt32(packet[4])
        guard let waiter = pending.removeValue(forKey: id) else {
            return fail(SFTPError(status: .badMessage, message: "The server answered request \(id), which is not waiting."))
        }
        waiter.resume(returning: packet)
    }

    private func fail(_ error: SFTPError) {
        guard failure == nil else { return }
        failure = error
        ended.store(true, ordering: .releasing)
        for waiter in pending.values { waiter.resume(throwing: error) }
        pending = [:]
        post.finish()
        transport.close()
    }

    /// Whether the session ended (closed, or its channel failed): a new one is needed.
    /// Readable without a hop onto the session (callers ask it for every file they lease).
    public nonisolated var isClosed: Bool { ended.load(ordering: .acquiring) }
    private nonisolated let ended = Atomic<Bool>(false)

    /// Ends the session (requests still waiting fail).
    public func close() {
        fail(SFTPError(status: .noConnection, message: "The SFTP session was closed."))
        reader?.cancel()
    }

    // MARK: - Requests

    /// Sends a request built by `body` (after its id) and waits for the reply packet.
    private func request(_ type: SFTPType, capacity: Int = 64, _ body: (inout SFTPWriter) -> Void) async throws -> [UInt8] {
        if let failure { throw failure }
        nextID &+= 1
        let id = nextID
        return try await withCheckedThrowingContinuation { continuation in
            pending[id] = continuation
            // Built here, not in this function's async frame, so that the packet is let go once
            // it is handed over instead of being held until the answer comes.
            let bytes = Self.packet(type, id: id, capacity: capacity, body)
            if queued == 0, transport.offer(bytes) { return }
            queued += 1
            post.yield(bytes)
        }
    }

    /// A request's bytes (the writer's storage, patched in place): while a write waits for its
    /// answer its data is held by the caller (the pipe's slice) and, until sent, by the channel.
    private static func packet(_ type: SFTPType, id: UInt32, capacity: Int, _ body: (inout SFTPWriter) -> Void) -> [UInt8] {
        var writer = SFTPWriter(type, id: id, capacity: capacity)
        body(&writer)
        return writer.finished()
    }

    /// A reply's reader after its type and id, or the server's status as an error.
    private static func expect(_ packet: [UInt8], _ type: SFTPType, _ what: String) throws -> SFTPReader {
        var reader = SFTPReader(packet, from: 5)
        if packet[0] == type.rawValue { return reader }
        if packet[0] == SFTPType.status.rawValue {
            let code = try reader.uint32()
            let message = (try? reader.text()) ?? ""
            throw SFTPError(status: SFTPStatus(rawValue: code) ?? .failure, message: "\(what): \(message.isEmpty ? "status \(code)" : message)")
        }
        throw SFTPError(status: .badMessage, message: "\(what): the server answered with packet type \(packet[0]).")
    }

    /// A reply that must be STATUS ok.
    private static func expectOK(_ packet: [UInt8], _ what: String) throws {
        var reader = try expect(packet, .status, what)
        let code = try reader.uint32()
        guard code == SFTPStatus.ok.rawValue else {
            let message = (try? reader.text()) ?? ""
            throw SFTPError(status: SFTPStatus(rawValue: code) ?? .failure, message: "\(what): \(message.isEmpty ? "status \(code)" : message)")
        }
    }

    static func show(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }

    public func extended(_ name: String, _ body: (inout SFTPWriter) -> Void) async throws -> SFTPReader {
        let reply = try await request(.extended) { w in
            w.string(name)
            body(&w)
        }
        return try Self.expect(reply, .extendedReply, name)
    }

    public func realpath(_ path: [UInt8]) async throws -> [UInt8] {
        let reply = try await request(.realpath) { $0.string(path) }
        var reader = try Self.expect(reply, .name, "realpath \(Self.show(path))")
        guard try reader.uint32() >= 1 else { throw SFTPError(status: .badMessage, message: "realpath \(Self.show(path)): no name in the reply") }
        return Array(try reader.string())
    }

    public func stat(_ path: [UInt8], followLinks: Bool = true) async throws -> SFTPAttributes {
        let reply = try await request(followLinks ? .stat : .lstat) { $0.string(path) }
        var reader = try Self.expect(reply, .attrs, "stat \(Self.show(path))")
        return try reader.attributes()
    }

    public func setstat(_ path: [UInt8], _ attributes: SFTPAttributes) async throws {
        try Self.expectOK(try await request(.setstat) { $0.string(path); $0.attributes(attributes) }, "setstat \(Self.show(path))")
    }

    public func mkdir(_ path: [UInt8], permissions: UInt32 = 0o755) async throws {
        try Self.expectOK(try await request(.mkdir) { $0.string(path); $0.attributes(SFTPAttributes(permissions: permissions)) }, "mkdir \(Self.show(path))")
    }

    public func rmdir(_ path: [UInt8]) async throws {
        try Self.expectOK(try await request(.rmdir) { $0.string(path) }, "rmdir \(Self.show(path))")
    }

    public func remove(_ path: [UInt8]) async throws {
        try Self.expectOK(try await request(.remove) { $0.string(path) }, "rm \(Self.show(path))")
    }

    /// Renames; `overwrite` uses `posix-rename@openssh.com` (atomic replace) and fails when
    /// the server lacks it; without it SFTP v3's rename refuses an existing destination.
    public func rename(_ from: [UInt8], to: [UInt8], overwrite: Bool = false) async throws {
        let what = "mv \(Self.show(from)) \(Self.show(to))"
        if overwrite {
            guard info.supports("posix-rename@openssh.com") else {
                throw SFTPError(status: .opUnsupported, message: "\(what): the server cannot replace a file atomically (no posix-rename@openssh.com)")
            }
            let reply = try await request(.extended) { w in w.string("posix-rename@openssh.com"); w.string(from); w.string(to) }
            return try Self.expectOK(reply, what)
        }
        try Self.expectOK(try await request(.rename) { $0.string(from); $0.string(to) }, what)
    }

    /// SFTP v3 as OpenSSH implements it: the link's target first, then the link's path.
    public func symlink(target: [UInt8], at link: [UInt8]) async throws {
        try Self.expectOK(try await request(.symlink) { $0.string(target); $0.string(link) }, "ln -s \(Self.show(target)) \(Self.show(link))")
    }

    public func readlink(_ path: [UInt8]) async throws -> [UInt8] {
        let reply = try await request(.readlink) { $0.string(path) }
        var reader = try Self.expect(reply, .name, "readlink \(Self.show(path))")
        guard try reader.uint32() >= 1 else { throw SFTPError(status: .badMessage, message: "readlink \(Self.show(path)): no name in the reply") }
        return Array(try reader.string())
    }

    /// `statvfs@openssh.com`: block size, total, free and available blocks.
    public func statvfs(_ path: [UInt8]) async throws -> (blockSize: UInt64, blocks: UInt64, free: UInt64, available: UInt64) {
        guard info.supports("statvfs@openssh.com") else { throw SFTPError(status: .opUnsupported, message: "df: the server does not offer statvfs@openssh.com") }
        var reader = try await extended("statvfs@openssh.com") { $0.string(path) }
        let bsize = try reader.uint64()
        let frsize = try reader.uint64()
        let blocks = try reader.uint64(), free = try reader.uint64(), available = try reader.uint64()
        return (frsize == 0 ? bsize : frsize, blocks, free, available)
    }

    /// `copy-data` (OpenSSH's sftp-server since 9.0): the server copies `length` bytes (0: to
    /// the end) from one open handle to another, so no byte crosses the network.
    public func copyData(from source: Handle, offset: UInt64 = 0, length: UInt64 = 0, to destination: Handle, at writeOffset: UInt64 = 0) async throws {
        guard info.supports("copy-data") else { throw SFTPError(status: .opUnsupported, message: "the server does not offer copy-data") }
        let reply = try await request(.extended) { w in
            w.string("copy-data")
            w.string(source.bytes)
            w.uint64(offset)
            w.uint64(length)
            w.string(destination.bytes)
            w.uint64(writeOffset)
        }
        try Self.expectOK(reply, "copy-data")
    }

    // MARK: - Handles

    public struct Handle: Sendable, Equatable { public let bytes: [UInt8] }

    public func open(_ path: [UInt8], _ flags: SFTPOpenFlags, permissions: UInt32? = nil) async throws -> Handle {
        let reply = try await request(.open) { w in
            w.string(path)
            w.uint32(flags.rawValue)
            w.attributes(SFTPAttributes(permissions: permissions))
        }
        var reader = try Self.expect(reply, .handle, "open \(Self.show(path))")
        return Handle(bytes: Array(try reader.string()))
    }

    public func openDirectory(_ path: [UInt8]) async throws -> Handle {
        var reader = try Self.expect(try await request(.opendir) { $0.string(path) }, .handle, "ls \(Self.show(path))")
        return Handle(bytes: Array(try reader.string()))
    }

    public func close(_ handle: Handle) async throws {
        try Self.expectOK(try await request(.close) { $0.string(handle.bytes) }, "close")
    }

    public func fstat(_ handle: Handle) async throws -> SFTPAttributes {
        var reader = try Self.expect(try await request(.fstat) { $0.string(handle.bytes) }, .attrs, "fstat")
        return try reader.attributes()
    }

    /// One directory entry.
    public struct Entry: Sendable, Equatable {
        public var name: [UInt8]
        public var attributes: SFTPAttributes
        public init(name: [UInt8], attributes: SFTPAttributes) {
            self.name = name
            self.attributes = attributes
        }
    }

    /// The next batch of a directory's entries (`.` and `..` left out); nil at its end.
    public func readDirectory(_ handle: Handle) async throws -> [Entry]? {
        let reply = try await request(.readdir) { $0.string(handle.bytes) }
        if reply.first == SFTPType.status.rawValue {
            var reader = SFTPReader(reply, from: 5)
            if try reader.uint32() == SFTPStatus.eof.rawValue { return nil }
        }
        var reader = try Self.expect(reply, .name, "ls")
        let count = try reader.uint32()
        var entries: [Entry] = []
        entries.reserveCapacity(Int(min(count, 4096)))
        for _ in 0..<count {
            let name = Array(try reader.string())
            _ = try reader.string()  // the long name (ls -l text): not used
            let attributes = try reader.attributes()
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            entries.append(Entry(name: name, attributes: attributes))
        }
        return entries
    }

    /// Up to `length` bytes at `offset`; empty at the end of the file.
    public func read(_ handle: Handle, offset: UInt64, length: Int) async throws -> ArraySlice<UInt8> {
        let reply = try await request(.read) { w in
            w.string(handle.bytes)
            w.uint64(offset)
            w.uint32(UInt32(length))
        }
        if reply.first == SFTPType.status.rawValue {
            var reader = SFTPReader(reply, from: 5)
            if try reader.uint32() == SFTPStatus.eof.rawValue { return [] }
        }
        var reader = try Self.expect(reply, .data, "read")
        let data = try reader.string()
        guard data.count <= length else { throw SFTPError(status: .badMessage, message: "The server sent \(data.count) bytes for a read of \(length).") }
        return data
    }

    /// Writes `data` at `offset`. It owns the bytes: they are let go as soon as the packet
    /// holds them, not kept until the answer (a transfer's 8 MiB in flight held once, not twice).
    public func write<Bytes: Collection<UInt8>>(_ handle: Handle, offset: UInt64, _ data: consuming Bytes) async throws {
        var owned: Bytes? = consume data
        let capacity = (owned?.count ?? 0) + 64
        let reply = try await request(.write, capacity: capacity) { w in
            w.string(handle.bytes)
            w.uint64(offset)
            w.string(owned.take()!)  // the body runs once: the packet is built once
        }
        try Self.expectOK(reply, "write")
    }
}
