import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LoopbackHTTP
import SFTPAPI
import Synchronization
import TermindCore
import TermindCrypto
import VaultAPI

/// MCP's byte channels (docs/mcp.md, "Files"): a tool of an MCP session makes a ten-minute,
/// 256-bit capability for one saved host, path and direction; the bytes then move over
/// loopback HTTP requests that carry it in a header only, through the SFTP scheduler
/// (`sftp.scheduler`), never through the model or a staging file. The capability is checked
/// and claimed when a request's head arrives, before any body is read or host contacted.
final class ByteChannels: Sendable {
    typealias Direction = ByteChannelRules.Direction

    /// A link with the saved host it reaches.
    struct Record: Sendable {
        let link: LinkBook.Link
        let host: HostSummary
        var id: String { link.id }
        var key: String { link.key }
        var owner: String { link.owner }
        var path: String { link.path }
        var direction: Direction { link.direction }
        var generation: Int { link.generation }
        var size: UInt64? { link.size }
        var sha256: String? { link.sha256 }
        var replace: Bool { link.replace }
        var bytes: UInt64 { link.bytes }
    }

    private struct State {
        var book = LinkBook()
        var hosts: [String: HostSummary] = [:]
        /// Uploads paused between a cut and its resume: the open file and the hash so far.
        var uploads: [String: (writer: any RemoteFileWriter, digest: DigestBox)] = [:]
    }
    private let state = Mutex(State())
    let scheduler: (any TransferScheduling)?
    let audit: AuditLog

    init(scheduler: (any TransferScheduling)?, audit: AuditLog) {
        self.scheduler = scheduler
        self.audit = audit
    }

    private static func now() -> Double { Date().timeIntervalSince1970 }
    private static func key(_ secret: String) -> String { Digest.sha256(Data(secret.utf8)).hexEncoded }

    /// The paused uploads of the links the book revoked since last asked (their temporary
    /// files are to go).
    private static func dropRevoked(_ state: inout State) -> [any RemoteFileWriter] {
        state.book.takeRevoked().compactMap { state.uploads.removeValue(forKey: $0)?.writer }
    }

    private static func abandon(_ writers: [any RemoteFileWriter]) {
        for writer in writers { Task { await writer.abandon() } }
    }

    /// A new capability: its id (for status), its secret (for the header) and when it expires.
    func create(_ direction: Direction, host: HostSummary, path: String, owner: String, size: UInt64? = nil, sha256: String? = nil,
                replace: Bool = false) throws -> (id: String, secret: String, expires: Double) {
        let secret = MCPHTTPRules.newToken()
        let key = Self.key(secret)
        let (made, writers) = state.withLock { state -> (Result<LinkBook.Link, LinkBook.Refusal>, [any RemoteFileWriter]) in
            do throws(LinkBook.Refusal) {
                let link = try state.book.create(direction, key: key, host: host.id, path: path, owner: owner, size: size, sha256: sha256, replace: replace, now: Self.now())
                state.hosts[key] = host
                state.hosts = state.hosts.filter { state.book.links[$0.key] != nil }
                return (.success(link), Self.dropRevoked(&state))
            } catch {
                return (.failure(error), Self.dropRevoked(&state))
            }
        }
        Self.abandon(writers)
        switch made {
        case .success(let link): return (link.id, secret, link.expires)
        case .failure(let refusal): throw TermindError(.assistantInvalid, refusal.message)
        }
    }

    /// A capability's link, for `sftp_link_status` (its own session's only).
    func status(_ id: String, owner: String) -> LinkBook.Link? {
        let (link, writers) = state.withLock { state in
            let link = state.book.status(id, owner: owner, now: Self.now())
            return (link, Self.dropRevoked(&state))
        }
        Self.abandon(writers)
        return link
    }

    /// The session ended (or termind stops, or its token rotates): its links are revoked,
    /// their unfinished uploads dropped.
    func revoke(owner: String?) {
        Self.abandon(state.withLock { state in
            _ = state.book.revoke(owner: owner, now: Self.now())
            return Self.dropRevoked(&state)
        })
    }

    // MARK: - HTTP

    private static func json(_ status: Int, _ fields: [String: JSONValue], headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")] + headers,
                           body: (try? JSONCoding.encode(JSONValue.object(fields))) ?? Data("{}".utf8))
    }

    private static func refusal(_ status: Int, _ message: String, headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        json(status, ["error": .string(message)], headers: headers)
    }

    /// The head of a `/files/…` request: the capability checked and claimed, or the refusal.
    /// Nothing is read from the body and no host is contacted before this passes.
    func head(_ request: HTTPServerRequest) -> HTTPServerResponse? {
        let direction: Direction
        switch (request.method, request.path) {
        case ("GET", "/files/download"): direction = .download
        case ("PUT", "/files/upload"): direction = .upload
        case (_, "/files/download"): return Self.refusal(405, "A download is a GET.", headers: [("Allow", "GET")])
        case (_, "/files/upload"): return Self.refusal(405, "An upload is a PUT.", headers: [("Allow", "PUT")])
        default: return Self.refusal(404, "Not found.")
        }
        guard request.count(ByteChannelRules.header) == 1, let secret = request.header(ByteChannelRules.header), MCPHTTPRules.isToken(secret) else {
            return Self.refusal(401, "Send the link's capability in one Termind-Capability header.")
        }
        let (outcome, writers) = state.withLock { state in
            let outcome = state.book.claim(Self.key(secret), direction: direction, range: request.header("range"), offset: request.header("upload-offset"),
                                           length: request.header("content-length"), now: Self.now())
            return (outcome, Self.dropRevoked(&state))
        }
        Self.abandon(writers)
        switch outcome {
        case .success: return nil
        case .failure(let refusal): return Self.refusal(refusal.status, refusal.message, headers: refusal.headers.map { ($0.key, $0.value) })
        }
    }

    /// Ends a claim (`generation`) with `to`, unless a newer claim or a revocation came.
    private func release(_ key: String, generation: Int, to: LinkBook.State, _ change: (inout LinkBook.Link) -> Void = { _ in }) {
        state.withLock { _ = $0.book.release(key, generation: generation, to: to, now: Self.now(), change) }
    }

    private func claimed(_ request: HTTPServerRequest) -> Record? {
        guard let secret = request.header(ByteChannelRules.header) else { return nil }
        let key = Self.key(secret)
        return state.withLock { state in
            guard let link = state.book.links[key], link.state == .active, let host = state.hosts[key] else { return nil }
            return Record(link: link, host: host)
        }
    }

    /// A claimed download: the file opened at the Range's start through the scheduler, then
    /// streamed a piece (64 KiB) after each send.
    func download(_ request: HTTPServerRequest) async -> HTTPServerResponse {
        guard let record = claimed(request) else { return Self.refusal(409, "The link's claim was lost; send the request again.") }
        let generation = record.generation
        let before: LinkBook.State = record.link.finished == nil ? .ready : .completed
        guard let scheduler else {
            release(record.key, generation: generation, to: before)
            return Self.refusal(503, "File transfers are not available in this termind (the SFTP feature is not running).")
        }
        let start = (ByteChannelRules.rangeStart(request.header("range")) ?? nil) ?? 0
        let reader: any RemoteFileReader
        do {
            reader = try await scheduler.download(host: record.host.label, path: record.path, offset: start, source: "mcp \(record.owner) link \(record.id)")
        } catch {
            let message = TermindError.from(error).message
            // A start past the end: 416, and the link is not used up.
            let pastEnd = message.contains("past its end")
            release(record.key, generation: generation, to: pastEnd ? before : .failed) { if !pastEnd { $0.error = message } }
            return Self.refusal(pastEnd ? 416 : 502, message)
        }
        let size = reader.size
        let source = DownloadSource(reader: reader, remaining: size - start, release: { [self] complete, sent in
            // Called once: when the last piece (the file checked unchanged) is handed over, or
            // when the response ends short.
            release(record.key, generation: generation, to: complete ? .completed : .paused) { link in
                link.bytes = sent
                link.error = complete ? nil : "the download stopped after \(start + sent) of \(size) bytes (resume with Range: bytes=\(start + sent)-)"
            }
        }, done: { [self] complete, sent in
            try? await audit.execution(Self.assessment(record, tool: "sftp_download_link"), conversation: record.owner, call: record.id,
                                       outcome: complete ? "succeeded" : "failed", exitStatus: nil, exitSignal: nil, stdoutBytes: Int(sent), stderrBytes: nil)
        })
        var headers: [(name: String, value: String)] = [("Content-Type", "application/octet-stream"), ("Accept-Ranges", "bytes")]
        if request.header("range") != nil { headers.append(("Content-Range", "bytes \(start)-\(max(size, 1) - 1)/\(size)")) }
        return HTTPServerResponse(status: request.header("range") == nil ? 200 : 206, headers: headers, length: Int(size - start), source: source)
    }

    /// A claimed upload's body: written in order through the scheduler, hashed as it comes.
    func uploadSink(_ request: HTTPServerRequest) -> (any HTTPBodySink)? {
        guard request.path == "/files/upload", let record = claimed(request) else { return nil }
        let paused = state.withLock { $0.uploads[record.key] }
        return UploadSink(channels: self, record: record, writer: paused?.writer, digest: paused?.digest)
    }

    static func assessment(_ record: Record, tool: String) -> Assessment {
        Assessment(tool: tool, host: record.host, tier: nil, action: record.direction == .upload ? .change : .read, classifier: nil, verdict: .allow(.policy))
    }

    /// Keeps an upload's open file and hash for its resume (claim `generation` only).
    fileprivate func keep(_ key: String, generation: Int, writer: any RemoteFileWriter, digest: DigestBox) {
        state.withLock { state in
            guard state.book.links[key]?.generation == generation else { return }
            state.uploads[key] = (writer, digest)
        }
    }

    fileprivate func ended(_ key: String, generation: Int, to: LinkBook.State, _ change: (inout LinkBook.Link) -> Void = { _ in }) {
        state.withLock { state in
            guard state.book.release(key, generation: generation, to: to, now: Self.now(), change) else { return }
            if to != .paused { state.uploads.removeValue(forKey: key) }
        }
    }
}

/// An incremental SHA-256 kept between an upload's pause and its resume.
final class DigestBox: Sendable {
    private let digest = Mutex(IncrementalDigest(.sha256))
    func update(_ data: Data) { digest.withLock { $0.update(data) } }
    func finish() -> String { digest.withLock { $0.finish().hexEncoded } }
}

/// A download's body: the reader's next 64 KiB after each send. Before the last piece goes
/// out the file is checked unchanged (else the response is cut short of it), and the claim is
/// released then — a client that asks again right after the last byte finds the link free.
final class DownloadSource: HTTPBodySource {
    private let reader: any RemoteFileReader
    private let remaining: UInt64
    private let progress = Mutex<(sent: UInt64, released: Bool)>((0, false))
    private let release: @Sendable (Bool, UInt64) -> Void
    private let done: @Sendable (Bool, UInt64) async -> Void

    init(reader: any RemoteFileReader, remaining: UInt64, release: @escaping @Sendable (Bool, UInt64) -> Void, done: @escaping @Sendable (Bool, UInt64) async -> Void) {
        self.reader = reader
        self.remaining = remaining
        self.release = release
        self.done = done
    }

    private func releaseOnce(_ complete: Bool) {
        let (first, sent) = progress.withLock { state -> (Bool, UInt64) in
            defer { state.released = true }
            return (!state.released, state.sent)
        }
        if first { release(complete, sent) }
    }

    func next(limit: Int) async throws -> Data? {
        guard let piece = try await reader.next(limit: min(limit, ByteChannelRules.piece)) else { return nil }
        let sent = progress.withLock { state -> UInt64 in state.sent += UInt64(piece.count); return state.sent }
        if sent == remaining {
            // The end: the file must still be the one that was opened (a nil from the reader
            // is that check passing).
            guard try await reader.next(limit: 1) == nil else { throw TermindError(.assistantInvalid, "the file grew while it was read") }
            releaseOnce(true)
        }
        return piece
    }

    func finished(complete: Bool) async {
        let whole = complete && progress.withLock { $0.released }
        if remaining == 0 { releaseOnce(complete) } else { releaseOnce(false) }
        await reader.close(complete: whole || (remaining == 0 && complete))
        await done(whole || (remaining == 0 && complete), progress.withLock { $0.sent })
    }
}

/// An upload's body, a piece at a time: written to the host, hashed; committed at the end
/// only when the length and the SHA-256 are exactly the ones the link was made for.
final class UploadSink: HTTPBodySink {
    private let channels: ByteChannels
    private let record: ByteChannels.Record
    private let progress = Mutex<(writer: (any RemoteFileWriter)?, digest: DigestBox?, failure: String?, received: UInt64)>((nil, nil, nil, 0))

    init(channels: ByteChannels, record: ByteChannels.Record, writer: (any RemoteFileWriter)?, digest: DigestBox?) {
        self.channels = channels
        self.record = record
        progress.withLock { $0 = (writer, digest, nil, record.bytes) }
    }

    private func writer() async throws -> (any RemoteFileWriter, DigestBox) {
        if let writer = progress.withLock({ $0.writer }), let digest = progress.withLock({ $0.digest }) { return (writer, digest) }
        guard let scheduler = channels.scheduler else { throw TermindError(.assistantInvalid, "File transfers are not available in this termind (the SFTP feature is not running).") }
        let writer = try await scheduler.upload(host: record.host.label, path: record.path, size: record.size ?? 0, replace: record.replace,
                                                source: "mcp \(record.owner) link \(record.id)")
        let digest = DigestBox()
        progress.withLock { $0.writer = writer; $0.digest = digest }
        channels.keep(record.key, generation: record.generation, writer: writer, digest: digest)
        return (writer, digest)
    }

    func receive(_ chunk: Data) async -> Bool {
        guard progress.withLock({ $0.failure == nil }) else { return false }
        do {
            let (writer, digest) = try await self.writer()
            try await writer.write(chunk)
            digest.update(chunk)
            progress.withLock { $0.received += UInt64(chunk.count) }
            return true
        } catch {
            progress.withLock { $0.failure = TermindError.from(error).message }
            return false
        }
    }

    func finish() async -> HTTPServerResponse {
        let (failure, received) = progress.withLock { ($0.failure, $0.received) }
        let size = record.size ?? 0
        if let failure {
            // What the host acknowledged stays: the upload resumes from there.
            let acknowledged = await progress.withLock({ $0.writer })?.written ?? record.bytes
            channels.ended(record.key, generation: record.generation, to: .paused) { $0.bytes = acknowledged; $0.error = failure }
            return Self.json(502, ["error": .string(failure), "acknowledged": .integer(Int64(acknowledged))], offset: acknowledged)
        }
        do {
            let (writer, digest) = try await self.writer()  // a zero-byte file has had no piece
            guard received == size else {
                channels.ended(record.key, generation: record.generation, to: .paused) { $0.bytes = received }
                return Self.json(409, ["error": .string("\(received) of \(size) bytes arrived; send the rest with Upload-Offset: \(received).")], offset: received)
            }
            let hash = digest.finish()
            guard hash == record.sha256 else {
                await writer.abandon()
                channels.ended(record.key, generation: record.generation, to: .failed) { $0.error = "the bytes' SHA-256 is not the one the link was made for" }
                try? await channels.audit.execution(ByteChannels.assessment(record, tool: "sftp_upload_link"), conversation: record.owner, call: record.id,
                                                    outcome: "failed", exitStatus: nil, exitSignal: nil, stdoutBytes: Int(received), stderrBytes: nil)
                return Self.json(422, ["error": .string("The bytes' SHA-256 is \(hash), not the link's \(record.sha256 ?? ""): nothing was committed."), "committed": .bool(false)])
            }
            try await writer.commit()
            channels.ended(record.key, generation: record.generation, to: .completed) { $0.bytes = size }
            try? await channels.audit.execution(ByteChannels.assessment(record, tool: "sftp_upload_link"), conversation: record.owner, call: record.id,
                                                outcome: "succeeded", exitStatus: nil, exitSignal: nil, stdoutBytes: Int(size), stderrBytes: nil)
            return Self.json(200, ["committed": .bool(true), "size": .integer(Int64(size)), "sha256": .string(hash), "path": .string("\(record.host.label):\(record.path)")])
        } catch {
            let message = TermindError.from(error).message
            channels.ended(record.key, generation: record.generation, to: .failed) { $0.error = message }
            return Self.json(502, ["error": .string(message), "committed": .bool(false)])
        }
    }

    func aborted() async {
        // The client went away mid-body: the link pauses at what the host acknowledged.
        let acknowledged = await progress.withLock({ $0.writer })?.written ?? record.bytes
        channels.ended(record.key, generation: record.generation, to: .paused) { $0.bytes = acknowledged; $0.error = "the upload stopped at \(acknowledged) bytes" }
    }

    private static func json(_ status: Int, _ fields: [String: JSONValue], offset: UInt64? = nil) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")] + (offset.map { [("Upload-Offset", "\($0)")] } ?? []),
                           body: (try? JSONCoding.encode(JSONValue.object(fields))) ?? Data("{}".utf8))
    }
}
