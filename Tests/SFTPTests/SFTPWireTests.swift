import Foundation
import SFTPWire
import TermindCore
import TermindCrypto
import TermindHarness
import TermindSSH
import TransferRules
import XCTest

/// SFTP v3 as termind speaks it: the packet rules alone, then a session on the `sftp`
/// subsystem of a real sshd (OpenSSH's internal-sftp), checked against the local file system
/// it serves.
final class SFTPPacketTests: XCTestCase {
    func testAFramerSplitsPacketsAcrossFeedsAndRefusesOversizedOnes() throws {
        var writer = SFTPWriter(.status, id: 7)
        writer.uint32(SFTPStatus.eof.rawValue)
        writer.string("end")
        let packet = writer.finished()
        var framer = SFTPFramer(maximum: 64)
        XCTAssertEqual(try framer.feed(packet.prefix(3)), [])
        XCTAssertEqual(try framer.feed(packet.dropFirst(3).prefix(5)), [])
        let whole = try framer.feed(packet.dropFirst(8) + packet)
        XCTAssertEqual(whole.count, 2)
        XCTAssertEqual(whole[0].first, SFTPType.status.rawValue)
        var reader = SFTPReader(whole[0], from: 1)
        XCTAssertEqual(try reader.uint32(), 7)
        XCTAssertEqual(try reader.uint32(), SFTPStatus.eof.rawValue)
        XCTAssertEqual(try reader.text(), "end")

        var small = SFTPFramer(maximum: 64)
        XCTAssertThrowsError(try small.feed([0, 0, 1, 0, 101])) { error in
            XCTAssertTrue((error as? SFTPError)?.message.contains("256 bytes") == true, "\(error)")
        }
        var empty = SFTPFramer()
        XCTAssertThrowsError(try empty.feed([0, 0, 0, 0]))
    }

    /// Packets of every size up to the bound, the stream cut at random places (a byte, a
    /// header's middle, several packets at once): each comes out whole and in order.
    func testAFramerGivesBackEveryPacketWhereverTheStreamIsCut() throws {
        var generator = SeededGenerator(seed: 40)
        var expected: [[UInt8]] = []
        var stream: [UInt8] = []
        for _ in 0..<300 {
            let length = [1, 2, 5, 4096, Int.random(in: 1...300_000, using: &generator)].randomElement(using: &generator)!
            let seed = Int.random(in: 0...255, using: &generator)
            let packet = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) }
            expected.append(packet)
            stream += [UInt8(length >> 24 & 0xff), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)] + packet
        }
        for shape in ["bytes", "random", "whole"] {
            var framer = SFTPFramer()
            var got: [[UInt8]] = []
            var offset = 0
            while offset < stream.count {
                let piece = switch shape {
                case "bytes": offset < 64 ? 1 : 70_001
                case "random": [1, 3, 4, 7, 32_768, Int.random(in: 1...600_000, using: &generator)].randomElement(using: &generator)!
                default: stream.count
                }
                let end = min(stream.count, offset + piece)
                got += try framer.feed(Data(stream[offset..<end]))
                offset = end
            }
            XCTAssertEqual(got.count, expected.count, shape)
            XCTAssertTrue(got == expected, shape)
        }
    }

    func testStringsAndAttributesStayInsideTheirPacket() throws {
        // A string that claims more bytes than the packet has.
        var reader = SFTPReader([0, 0, 0, 9, 65, 66])
        XCTAssertThrowsError(try reader.string()) { XCTAssertTrue(($0 as? SFTPError)?.message.contains("string") == true) }
        var writer = SFTPWriter(.attrs, id: 1)
        let attributes = SFTPAttributes(size: 1 << 40, uid: 1000, gid: 100, permissions: 0o100640, accessTime: 5, modifiedTime: 6)
        writer.attributes(attributes)
        let bytes = writer.finished()
        var back = SFTPReader(bytes, from: 9)
        XCTAssertEqual(try back.attributes(), attributes)
        XCTAssertEqual(attributes.kind, .file)
        // A count of extended attributes no packet could hold.
        var hostile = SFTPReader([0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF])
        XCTAssertThrowsError(try hostile.attributes())
    }

    func testABackslashMakesAPatternCharacterLiteral() {
        func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
        XCTAssertTrue(SFTPPaths.isPattern(bytes("run[1]")))
        XCTAssertFalse(SFTPPaths.isPattern(bytes("run\\[1]")), "an escaped [ starts no set")
        XCTAssertTrue(SFTPPaths.isPattern(bytes("a\\\\*")), "an escaped backslash escapes nothing after it")
        XCTAssertEqual(SFTPPaths.unescape(bytes("run\\[1\\]")), bytes("run[1]"))
        XCTAssertEqual(SFTPPaths.unescape(bytes("a\\\\b")), bytes("a\\b"))
        // The prompt escapes a folder's name with BrowseLine.escape; SFTPPaths reads it back.
        XCTAssertEqual(bytes(BrowseLine.escape("r*n?[1]\\")), bytes("r\\*n\\?\\[1]\\\\"))
        // An escaped name matches itself only; the same name unescaped matches others.
        XCTAssertTrue(SFTPPaths.matches(bytes("run[1]"), pattern: bytes(BrowseLine.escape("run[1]"))))
        XCTAssertFalse(SFTPPaths.matches(bytes("run1"), pattern: bytes(BrowseLine.escape("run[1]"))))
        XCTAssertTrue(SFTPPaths.matches(bytes("run1"), pattern: bytes("run[1]")))
    }

    func testVersionAndLimits() throws {
        var version = SFTPWriter(.version)
        version.uint32(3)
        version.string("posix-rename@openssh.com"); version.string("1")
        version.string("limits@openssh.com"); version.string("1")
        let info = try SFTPServerInfo.parse(Array(version.finished().dropFirst(4)))
        XCTAssertEqual(info.version, 3)
        XCTAssertTrue(info.supports("limits@openssh.com"))
        XCTAssertFalse(info.supports("copy-data"))
        let limits = SFTPLimits(maxPacket: 262_144, maxRead: 261_120, maxWrite: 261_120, maxOpenHandles: 1024)
        XCTAssertEqual(limits.readSize, 255 * 1024)
        XCTAssertEqual(limits.writeSize, 255 * 1024)
        XCTAssertEqual(SFTPLimits(maxPacket: 0, maxRead: 0, maxWrite: 0, maxOpenHandles: 0).readSize, 32_768, "no limit said: the v3 size")
        XCTAssertEqual(SFTPLimits(maxPacket: 0, maxRead: 10, maxWrite: 10, maxOpenHandles: 0).readSize, 1024)
    }
}

/// `SFTPTransfer.pipe` alone, over a byte array standing in for the source (pure logic).
final class SFTPPipeTests: XCTestCase {
    /// A source of `bytes` that answers at most `most` bytes per read (a short read), and
    /// fails reads at `failAt` when set; writes land in `written`.
    final class Ends: @unchecked Sendable {
        let bytes: [UInt8]
        let most: Int
        let failAt: UInt64?
        private let lock = NSLock()
        private var target: [UInt8]
        private(set) var reads = 0
        init(_ count: Int, most: Int, failAt: UInt64? = nil) {
            bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            self.most = most
            self.failAt = failAt
            target = [UInt8](repeating: 0, count: count)
        }
        var written: [UInt8] { lock.withLock { target } }
        func read(_ offset: UInt64, _ length: Int) throws -> ArraySlice<UInt8> {
            lock.withLock { reads += 1 }
            if let failAt, offset >= failAt { throw SFTPError(status: .failure, message: "read failed at \(offset)") }
            let from = min(Int(offset), bytes.count)
            return bytes[from..<min(bytes.count, from + min(length, most))]
        }
        func write(_ offset: UInt64, _ data: ArraySlice<UInt8>) {
            lock.withLock { for (i, byte) in data.enumerated() { target[Int(offset) + i] = byte } }
        }
    }

    func pipe(_ ends: Ends, size: UInt64?, chunk: Int, from start: UInt64 = 0) async throws -> UInt64 {
        try await SFTPTransfer.pipe(from: start, size: size, chunk: chunk, window: 4,
                                    read: { try ends.read($0, $1) }, write: { ends.write($0, $1) })
    }

    func testAFileOfOneRequestIsReadAgainAfterShortReadsAndWrittenWhole() async throws {
        let ends = Ends(10_000, most: 3_000)
        let end = try await pipe(ends, size: 10_000, chunk: 16_384)
        XCTAssertEqual(end, 10_000)
        XCTAssertTrue(ends.written == ends.bytes)
        XCTAssertEqual(ends.reads, 4, "3,000 + 3,000 + 3,000 + 1,000")
    }

    func testAFileOfManyRequestsAndOneThatEndsBeforeItsSize() async throws {
        let ends = Ends(100_000, most: 7_000)
        let end = try await pipe(ends, size: 100_000, chunk: 8_192)
        XCTAssertEqual(end, 100_000)
        XCTAssertTrue(ends.written == ends.bytes)
        // Planned at 12,000 bytes, the source now holds 5,000: the end is where reads stop.
        let shrunk = Ends(5_000, most: 5_000)
        let shorter = try await pipe(shrunk, size: 12_000, chunk: 16_384)
        XCTAssertEqual(shorter, 5_000)
        XCTAssertTrue(shrunk.written == shrunk.bytes)
    }

    func testAFailedReadSaysHowFarTheDestinationIsWhole() async throws {
        // One request asked again after short reads: 0-4,000 and 4,000-8,000 arrive, then the
        // read at 8,000 fails. Many requests at once (a window of 4 chunks of 8,192): the
        // first two arrive and the reads from 16,384 fail.
        for (size, chunk, most, failAt) in [(10_000, 16_384, 4_000, 8_000), (100_000, 8_192, Int.max, 16_384)] {
            let ends = Ends(size, most: most, failAt: UInt64(failAt))
            do {
                _ = try await pipe(ends, size: UInt64(size), chunk: chunk)
                XCTFail("a failing read must fail the pipe")
            } catch let stop as SFTPTransfer.Interrupted {
                XCTAssertEqual(stop.contiguous, UInt64(failAt), "size \(size)")
                XCTAssertTrue("\(stop.reason)".contains("read failed at"), "\(stop.reason)")
                XCTAssertTrue(ends.written.prefix(failAt).elementsEqual(ends.bytes.prefix(failAt)), "the first \(failAt) bytes were written")
            }
            if size == 10_000 { XCTAssertEqual(ends.reads, 3, "nothing is asked after the failure") }
        }
    }

    func testAResumedPipeStartsAtItsOffset() async throws {
        let ends = Ends(10_000, most: 10_000)
        let end = try await pipe(ends, size: 10_000, chunk: 16_384, from: 6_000)
        XCTAssertEqual(end, 10_000)
        XCTAssertTrue(ends.written[6_000...].elementsEqual(ends.bytes[6_000...]))
        XCTAssertTrue(ends.written[..<6_000].allSatisfy { $0 == 0 }, "nothing before the offset is asked for")
    }
}

final class SFTPSessionTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var connection: SSHConnection!
    private var sftp: SFTPSession!

    override func setUp() async throws {
        directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        server = try SSHServerFixture.withNewKey(in: directory)
        let key = try String(contentsOfFile: directory.file("id"), encoding: .utf8)
        connection = try await SSHConnection.open(SSHTarget(host: "127.0.0.1", port: server.port, username: NSUserName()),
                                                  credentials: SSHCredentials(privateKey: Secret(key), agentSocket: ""),
                                                  trust: AcceptAll()) { _ in .acceptOnce }
        sftp = try await SFTPSession.open(on: connection)
    }

    override func tearDown() async throws {
        await sftp?.close()
        await connection?.close()
        server?.stop()
        directory?.remove()
    }

    private func bytes(_ path: String) -> [UInt8] { Array(path.utf8) }

    func testTheServerSaysWhatItCanAndMetadataOperationsDoWhatTheySay() async throws {
        let info = sftp.info
        XCTAssertEqual(info.version, 3)
        XCTAssertTrue(info.supports("posix-rename@openssh.com"), "\(info.extensions)")
        let limits = await sftp.limits
        XCTAssertGreaterThan(limits.readSize, 32_768, "OpenSSH 9's limits@openssh.com allows bigger reads: \(limits)")

        let root = directory.file("tree")
        try await sftp.mkdir(bytes(root), permissions: 0o750)
        let resolved = try await sftp.realpath(bytes(root + "/../tree/."))
        XCTAssertEqual(String(decoding: resolved, as: UTF8.self), root)
        var info2 = stat()
        XCTAssertEqual(stat(root, &info2), 0)
        XCTAssertEqual(info2.st_mode & 0o777, 0o750)
        try "hello".write(toFile: root + "/a.txt", atomically: false, encoding: .utf8)
        let attributes = try await sftp.stat(bytes(root + "/a.txt"))
        XCTAssertEqual(attributes.size, 5)
        XCTAssertEqual(attributes.kind, .file)

        // Symlinks are not followed unless asked.
        try await sftp.symlink(target: bytes("a.txt"), at: bytes(root + "/link"))
        let value1 = try await sftp.stat(bytes(root + "/link"), followLinks: false).kind
        XCTAssertEqual(value1, .symlink)
        let value2 = try await sftp.stat(bytes(root + "/link")).kind
        XCTAssertEqual(value2, .file)
        let value3 = try await sftp.readlink(bytes(root + "/link"))
        XCTAssertEqual(value3, bytes("a.txt"))

        // A plain rename never replaces; posix-rename does, atomically.
        try "other".write(toFile: root + "/b.txt", atomically: false, encoding: .utf8)
        do {
            try await sftp.rename(bytes(root + "/a.txt"), to: bytes(root + "/b.txt"))
            XCTFail("replaced an existing file without being asked")
        } catch let error as SFTPError {
            XCTAssertEqual(error.status, .failure, "\(error)")
        }
        XCTAssertEqual(try String(contentsOfFile: root + "/b.txt", encoding: .utf8), "other")
        try await sftp.rename(bytes(root + "/a.txt"), to: bytes(root + "/b.txt"), overwrite: true)
        XCTAssertEqual(try String(contentsOfFile: root + "/b.txt", encoding: .utf8), "hello")

        try await sftp.setstat(bytes(root + "/b.txt"), SFTPAttributes(permissions: 0o600, accessTime: 1_000_000, modifiedTime: 1_500_000_000))
        XCTAssertEqual(stat(root + "/b.txt", &info2), 0)
        XCTAssertEqual(info2.st_mode & 0o777, 0o600)
        XCTAssertEqual(info2.st_mtim.tv_sec, 1_500_000_000)

        // Errors carry the server's status.
        do {
            _ = try await sftp.stat(bytes(root + "/missing"))
            XCTFail("no such file")
        } catch let error as SFTPError {
            XCTAssertEqual(error.status, .noSuchFile)
            XCTAssertTrue(error.message.contains("missing"), error.message)
        }
        let df = try await sftp.statvfs(bytes(root))
        XCTAssertGreaterThan(df.blocks, 0)
        try await sftp.remove(bytes(root + "/link"))
        try await sftp.remove(bytes(root + "/b.txt"))
        try await sftp.rmdir(bytes(root))
        XCTAssertFalse(FileManager.default.fileExists(atPath: root))
    }

    func testNamesThatAreNotUTF8AndTenThousandEntriesListedInBatches() async throws {
        let root = directory.file("many")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for index in 0..<10_000 {
            let fd = open(root + "/f\(index)", O_CREAT | O_WRONLY, 0o644)
            close(fd)
        }
        // A name with a space, a newline and bytes that are not UTF-8.
        let odd: [UInt8] = Array("odd name\n".utf8) + [0xFF, 0xFE, 0x80]
        let path = bytes(root + "/") + odd
        let fd = path.withUnsafeBufferPointer { buffer -> Int32 in
            var terminated = Array(buffer) + [0]
            return terminated.withUnsafeMutableBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o644) }
        }
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let handle = try await sftp.openDirectory(bytes(root))
        var names = Set<[UInt8]>()
        var batches = 0
        while let batch = try await sftp.readDirectory(handle) {
            batches += 1
            for entry in batch { names.insert(entry.name) }
        }
        try await sftp.close(handle)
        XCTAssertEqual(names.count, 10_001)
        XCTAssertTrue(names.contains(odd), "the odd name came back byte for byte")
        XCTAssertGreaterThan(batches, 10, "listed in batches, never loaded twice")
        let value4 = try await sftp.stat(path).size
        XCTAssertEqual(value4, 0)
    }

    func testWholeFilesBothWaysWithManyRequestsInFlight() async throws {
        let source = directory.file("source.bin")
        let size = 48 << 20 + 12_345
        let data = PseudoRandomBytes.make(size, seed: 0x2545F4914F6CDD1D)
        _ = FileManager.default.createFile(atPath: source, contents: Data(data))
        let digest = Digest.sha256(data)

        let local = directory.file("down.bin")
        let out = open(local, O_CREAT | O_TRUNC | O_WRONLY, 0o600)
        let progress = Counter()
        let got = try await SFTPTransfer.download(sftp, bytes(source), to: out) { progress.set($0.done) }
        close(out)
        XCTAssertEqual(got, UInt64(size))
        XCTAssertEqual(progress.value, UInt64(size))
        XCTAssertEqual(Digest.sha256(try Data(contentsOf: URL(fileURLWithPath: local))), digest)

        let input = open(source, O_RDONLY)
        defer { close(input) }
        let remote = directory.file("up.bin")
        try await SFTPTransfer.upload(sftp, from: input, size: UInt64(size), to: bytes(remote), permissions: 0o640)
        XCTAssertEqual(Digest.sha256(try Data(contentsOf: URL(fileURLWithPath: remote))), digest)

        // Empty files, and a file whose size says 0 but which has content (/proc): read to EOF.
        _ = FileManager.default.createFile(atPath: directory.file("empty"), contents: Data())
        let emptyOut = open(directory.file("empty.down"), O_CREAT | O_TRUNC | O_WRONLY, 0o600)
        let value5 = try await SFTPTransfer.download(sftp, bytes(directory.file("empty")), to: emptyOut)
        XCTAssertEqual(value5, 0)
        close(emptyOut)
        let procOut = open(directory.file("stat.down"), O_CREAT | O_TRUNC | O_WRONLY, 0o600)
        let procBytes = try await SFTPTransfer.download(sftp, bytes("/proc/self/stat"), to: procOut)
        close(procOut)
        XCTAssertGreaterThan(procBytes, 10)
    }

    func testSFTPRunsBesideCommandsOnTheSameConnection() async throws {
        let source = directory.file("blob.src")
        let payload = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        _ = FileManager.default.createFile(atPath: source, contents: payload)
        let input = open(source, O_RDONLY)
        defer { close(input) }
        let connection = self.connection!
        let session = self.sftp!
        let target = bytes(directory.file("blob.bin"))
        async let sent = SFTPTransfer.upload(session, from: input, size: UInt64(payload.count), to: target, permissions: 0o600)
        async let command = connection.exec("echo side by side")
        let (written, said) = try await (sent, command)
        XCTAssertEqual(written, UInt64(payload.count))
        XCTAssertEqual(said.stdout, Data("side by side\n".utf8))
        XCTAssertTrue(try Data(contentsOf: URL(fileURLWithPath: directory.file("blob.bin"))) == payload)
        let still = try await connection.exec("echo still").stdout
        XCTAssertEqual(still, Data("still\n".utf8))
    }

    /// Transfers cancelled mid-flight stop asking; their session (and its channel) stays
    /// usable, and closing sessions gives their channels back to sshd's MaxSessions.
    func testCancelledTransfersStopAndLeakNoChannel() async throws {
        let file = directory.file("big.bin")
        let made = try await connection.exec("head -c 16000000 /dev/urandom > \(file)")
        XCTAssertEqual(made.exitStatus, 0)
        let sink = open("/dev/null", O_WRONLY)
        defer { close(sink) }
        let session = self.sftp!
        for batch in 0..<5 {
            let tasks = (0..<4).map { _ in Task { try await SFTPTransfer.download(session, Array(file.utf8), to: sink) } }
            try await Task.sleep(nanoseconds: UInt64(10_000_000 + batch * 5_000_000))
            for task in tasks { task.cancel() }
            for task in tasks {
                if case .success(let got) = await task.result { XCTAssertLessThanOrEqual(got, 16_000_000) }
            }
        }
        let home = try await sftp.realpath(bytes("."))
        XCTAssertFalse(home.isEmpty, "the session answers after the cancellations")
        for _ in 0..<12 {
            let extra = try await SFTPSession.open(on: connection)
            await extra.close()
        }
        await connection.waitUntilIdle(timeout: 5)
        // sshd allows 10 sessions per connection (MaxSessions): nine more beside the test's own.
        let channels = try await withThrowingTaskGroup(of: SSHChannel.self) { group in
            for _ in 0..<9 { group.addTask { [connection] in try await connection!.openChannel(.exec("sleep 2")) } }
            var opened: [SSHChannel] = []
            for try await channel in group { opened.append(channel) }
            return opened
        }
        XCTAssertEqual(channels.count, 9)
        for channel in channels { channel.close() }
    }

    func testAFailedRequestLeavesTheSessionUsableAndAClosedChannelFailsEveryWaiter() async throws {
        do {
            _ = try await sftp.open(bytes(directory.file("nope/file")), .read)
            XCTFail("opened a file that does not exist")
        } catch let error as SFTPError {
            XCTAssertEqual(error.status, .noSuchFile)
        }
        let value6 = try await sftp.realpath(bytes(".")).isEmpty
        XCTAssertFalse(value6, "the session goes on")
        await sftp.close()
        do {
            _ = try await sftp.realpath(bytes("."))
            XCTFail("a closed session answered")
        } catch let error as SFTPError {
            XCTAssertEqual(error.status, .noConnection)
        }
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: UInt64 = 0
    func set(_ new: UInt64) { lock.withLock { stored = max(stored, new) } }
    var value: UInt64 { lock.withLock { stored } }
}

/// Knows no host key: the test's own sshd is accepted once per connection.
struct AcceptAll: HostKeyTrust {
    func verdict(host: String, port: Int, key: PublicHostKey) async throws -> TrustVerdict { .unknown }
    func knownKeyTypes(host: String, port: Int) async throws -> [String] { [] }
    func trust(host: String, port: Int, key: PublicHostKey) async throws {}
    func fingerprint(_ key: PublicHostKey) -> String { "" }
    func refusal(host: String, port: Int, key: PublicHostKey) async throws -> String? { nil }
}
