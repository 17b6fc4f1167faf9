import AssistantAPI
import AssistantRules
import Foundation
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

    enum State: String, Sendable { case ready, active, paused, completed, failed, revoked }

    struct Record: Sendable {
        let id: String
        let key: String
        let direction: Direction
        let host: HostSummary
        let path: String
        /// The MCP session (its conversation) that made it.
        let owner: String
        let created: Double
        let expires: Double
        /// Upload: the exact length and SHA-256 the bytes must have.
        let size: UInt64?
        let sha256: String?
        let replace: Bool
        var state: State = .ready
        /// Upload: bytes the host acknowledged; download: bytes delivered in the last read.
        var bytes: UInt64 = 0
        var error: String?
        var finished: Double?
        /// Each claim's number: a late callback of an older claim changes nothing.
        var generation = 0
        /// Upload, in memory between a pause and its resume.
        var writer: (any RemoteFileWriter)?
        var digest: DigestBox?

        var unfinished: Bool { state == .ready || state == .active || state == .paused }
    }

    private let state = Mutex<(records: [String: Record], next: Int, active: Int)>(([:], 0, 0))
    let scheduler: (any TransferScheduling)?
    let audit: AuditLog

    init(scheduler: (any TransferScheduling)?, audit: AuditLog) {
        self.scheduler = scheduler
        self.audit = audit
    }

    private static func now() -> Double { Date().timeIntervalSince1970 }
    private static func key(_ secret: String) -> String { Digest.sha256(Data(secret.utf8)).hexEncoded }

    /// A new capability: its id (for status), its secret (for the header) and when it expires.
    func create(_ direction: Direction, host: HostSummary, path: String, owner: String, size: UInt64? = nil, sha256: String? = nil,
                replace: Bool = false) throws -> (id: String, secret: String, expires: Double) {
        let secret = MCPHTTPRules.newToken()
        let now = Self.now()
        return try state.withLock { state in
            Self.prune(&state.records, now: now)
            let same = state.records.values.filter { $0.direction == direction }
            guard same.filter(\.unfinished).count < ByteChannelRules.unfinishedLimit else {
                throw TermindError(.assistantInvalid, "\(ByteChannelRules.unfinishedLimit) \(direction) links are unfinished already: finish or wait for some to expire (ten minutes).")
            }
            let finished = same.filter { !$0.unfinished }.sorted { ($0.finished ?? 0) < ($1.finished ?? 0) }
            if finished.count >= ByteChannelRules.finishedLimit, let oldest = finished.first { state.records.removeValue(forKey: oldest.key) }
            state.next += 1
            let id = "\(direction == .upload ? "u" : "d")\(state.next)"
            let key = Self.key(secret)
            state.records[key] = Record(id: id, key: key, direction: direction, host: host, path: path, owner: owner, created: now,
                                        expires: now + ByteChannelRules.lifetime, size: size, sha256: sha256, replace: replace)
            return (id, secret, now + ByteChannelRules.lifetime)
        }
    }

    /// Expired unfinished records are revoked (a paused upload's partial is removed); finished
    /// ones go after thirty minutes.
    private static func prune(_ records: inout [String: Record], now: Double) {
        for (key, record) in records {
            if record.unfinished, record.state != .active, now > record.expires {
                records[key]?.state = .revoked
                records[key]?.error = "expired"
                records[key]?.finished = now
                if let writer = record.writer { Task { await writer.abandon() } }
                records[key]?.writer = nil
            } else if let finished = record.finished, now - finished > ByteChannelRules.keptFor {
                records.removeValue(forKey: key)
            }
        }
    }

    /// A capability's record, for `sftp_link_status` (its own session's only).
    func status(_ id: String, owner: String) -> Record? {
        state.withLock { state in
            Self.prune(&state.records, now: Self.now())
            return state.records.values.first { $0.id == id && $0.owner == owner }
        }
    }

    /// The session ended (or termind stops, or its token rotates): its capabilities are
    /// revoked, their unfinished uploads dropped.
    func revoke(owner: String?) {
        let writers = state.withLock { state -> [any RemoteFileWriter] in
            var writers: [any RemoteFileWriter] = []
            // A finished download still takes a Range until it expires: revoked too.
            for (key, record) in state.records where (owner == nil || record.owner == owner)
                && (record.unfinished || (record.direction == .download && record.state == .completed)) {
                state.records[key]?.state = .revoked
                state.records[key]?.error = "revoked"
                state.records[key]?.finished = Self.now()
                state.records[key]?.generation += 1
                if let writer = record.writer { writers.append(writer) }
                state.records[key]?.writer = nil
            }
            return writers
        }
        for writer in writers { Task { await writer.abandon() } }
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
        let now = Self.now()
        return state.withLock { state -> HTTPServerResponse? in
            Self.prune(&state.records, now: now)
            guard var record = state.records[Self.key(secret)], record.direction == direction else {
                return Self.refusal(404, "No such \(direction) link (it expired, was revoked, or never was).")
            }
            switch record.state {
            case .revoked: return Self.refusal(410, "This link was revoked (\(record.error ?? "its session ended")).")
            case .failed where direction == .upload: return Self.refusal(410, "This upload failed: \(record.error ?? "failed"); nothing was committed.")
            case .active: return Self.refusal(409, "This link is in use by another request: one at a time.")
            case .completed where direction == .upload: return Self.refusal(409, "This upload was committed already; its bytes are never sent twice.")
            default: break
            }
            guard now <= record.expires else { return Self.refusal(410, "This link expired.") }
            if direction == .download {
                guard case .some(.some) = ByteChannelRules.rangeStart(request.header("range")) else {
                    return Self.refusal(416, "A download takes at most one Range: bytes=N- (the link is not used up).")
                }
            } else {
                if let problem = ByteChannelRules.uploadProblem(said: request.header("upload-offset"), length: request.header("content-length"),
                                                               acknowledged: record.bytes, size: record.size ?? 0) {
                    return Self.refusal(409, problem + ".", headers: [("Upload-Offset", "\(record.bytes)")])
                }
            }
            guard state.active < ByteChannelRules.activeSlots else {
                return Self.refusal(503, "\(ByteChannelRules.activeSlots) links are moving bytes already: try again shortly.", headers: [("Retry-After", "2")])
            }
            record.state = .active
            record.generation += 1
            state.active += 1
            state.records[record.key] = record
            return nil
        }
    }

    /// Ends a claim (`generation`): the record's new state, unless a newer claim or a
    /// revocation came meanwhile.
    private func release(_ key: String, generation: Int, _ change: (inout Record) -> Void) {
        state.withLock { state in
            guard var record = state.records[key], record.generation == generation else { return }
            if record.state == .active { state.active -= 1 }
            change(&record)
            if !record.unfinished || record.state == .completed { record.finished = Self.now() }
            state.records[key] = record
        }
    }

    private func claimed(_ request: HTTPServerRequest) -> Record? {
        guard let secret = request.header(ByteChannelRules.header) else { return nil }
        return state.withLock { $0.records[Self.key(secret)] }.flatMap { $0.state == .active ? $0 : nil }
    }

    /// A claimed download: the file opened at the Range's start through the scheduler, then
    /// streamed a piece (64 KiB) after each send.
    func download(_ request: HTTPServerRequest) async -> HTTPServerResponse {
        guard let record = claimed(request) else { return Self.refusal(409, "The link's claim was lost; send the request again.") }
        let generation = record.generation
        guard let scheduler else {
            release(record.key, generation: generation) { $0.state = .ready }
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
            release(record.key, generation: generation) { current in
                current.state = pastEnd || current.bytes > 0 ? (current.finished == nil ? .ready : .completed) : .failed
                if !pastEnd { current.error = message }
            }
            return Self.refusal(pastEnd ? 416 : 502, message)
        }
        let size = reader.size
        let source = DownloadSource(reader: reader, remaining: size - start, release: { [self] complete, sent in
            // Called once: when the last piece (the file checked unchanged) is handed over, or
            // when the response ends short.
            release(record.key, generation: generation) { current in
                current.bytes = sent
                current.state = complete ? .completed : .paused
                current.error = complete ? nil : "the download stopped after \(start + sent) of \(size) bytes (resume with Range: bytes=\(start + sent)-)"
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
        return UploadSink(channels: self, record: record)
    }

    static func assessment(_ record: Record, tool: String) -> Assessment {
        Assessment(tool: tool, host: record.host, tier: nil, action: record.direction == .upload ? .change : .read, classifier: nil, verdict: .allow(.policy))
    }

    fileprivate func keep(_ key: String, generation: Int, writer: (any RemoteFileWriter)?, digest: DigestBox?) {
        state.withLock { state in
            guard state.records[key]?.generation == generation else { return }
            state.records[key]?.writer = writer
            state.records[key]?.digest = digest
        }
    }

    fileprivate func current(_ key: String) -> Record? { state.withLock { $0.records[key] } }

    fileprivate func ended(_ key: String, generation: Int, _ change: (inout Record) -> Void) { release(key, generation: generation, change) }
}

/// An incremental SHA-256 kept between an upload's pause and its resume.
final class DigestBox: @unchecked Sendable {
    private let lock = NSLock()
    private let digest = IncrementalDigest(.sha256)
    func update(_ data: Data) { lock.withLock { digest.update(data) } }
    func finish() -> String { lock.withLock { digest.finish().hexEncoded } }
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

    init(channels: ByteChannels, record: ByteChannels.Record) {
        self.channels = channels
        self.record = record
        progress.withLock { $0 = (record.writer, record.digest, nil, record.bytes) }
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
            channels.ended(record.key, generation: record.generation) { $0.state = .paused; $0.bytes = acknowledged; $0.error = failure }
            return Self.json(502, ["error": .string(failure), "acknowledged": .integer(Int64(acknowledged))], offset: acknowledged)
        }
        do {
            let (writer, digest) = try await self.writer()  // a zero-byte file has had no piece
            guard received == size else {
                channels.ended(record.key, generation: record.generation) { $0.state = .paused; $0.bytes = received }
                return Self.json(409, ["error": .string("\(received) of \(size) bytes arrived; send the rest with Upload-Offset: \(received).")], offset: received)
            }
            let hash = digest.finish()
            guard hash == record.sha256 else {
                await writer.abandon()
                channels.ended(record.key, generation: record.generation) { $0.state = .failed; $0.error = "the bytes' SHA-256 is not the one the link was made for"; $0.writer = nil }
                try? await channels.audit.execution(ByteChannels.assessment(record, tool: "sftp_upload_link"), conversation: record.owner, call: record.id,
                                                    outcome: "failed", exitStatus: nil, exitSignal: nil, stdoutBytes: Int(received), stderrBytes: nil)
                return Self.json(422, ["error": .string("The bytes' SHA-256 is \(hash), not the link's \(record.sha256 ?? ""): nothing was committed."), "committed": .bool(false)])
            }
            try await writer.commit()
            channels.ended(record.key, generation: record.generation) { $0.state = .completed; $0.bytes = size; $0.writer = nil; $0.digest = nil }
            try? await channels.audit.execution(ByteChannels.assessment(record, tool: "sftp_upload_link"), conversation: record.owner, call: record.id,
                                                outcome: "succeeded", exitStatus: nil, exitSignal: nil, stdoutBytes: Int(size), stderrBytes: nil)
            return Self.json(200, ["committed": .bool(true), "size": .integer(Int64(size)), "sha256": .string(hash), "path": .string("\(record.host.label):\(record.path)")])
        } catch {
            let message = TermindError.from(error).message
            channels.ended(record.key, generation: record.generation) { $0.state = .failed; $0.error = message; $0.writer = nil }
            return Self.json(502, ["error": .string(message), "committed": .bool(false)])
        }
    }

    func aborted() async {
        // The client went away mid-body: the link pauses at what the host acknowledged.
        let acknowledged = await progress.withLock({ $0.writer })?.written ?? record.bytes
        channels.ended(record.key, generation: record.generation) { $0.state = .paused; $0.bytes = acknowledged; $0.error = "the upload stopped at \(acknowledged) bytes" }
    }

    private static func json(_ status: Int, _ fields: [String: JSONValue], offset: UInt64? = nil) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")] + (offset.map { [("Upload-Offset", "\($0)")] } ?? []),
                           body: (try? JSONCoding.encode(JSONValue.object(fields))) ?? Data("{}".utf8))
    }
}
