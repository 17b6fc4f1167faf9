import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// `termind get`, `put`, `cp` and `transfers` end to end against a real sshd on loopback.
/// The server serves this machine's files, so every remote effect is checked on the local
/// file system, byte for byte by SHA-256.
final class TransferFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!
    private var serve: ServeProcess?
    private var relay: DelayingRelay?
    private var spawned: [SpawnedProcess] = []

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        server = try SSHServerFixture.withNewKey(in: directory)
    }

    override func tearDown() {
        for process in spawned where process.isRunning {
            process.signal(SIGKILL)
            process.wait()
        }
        _ = serve?.stop()
        relay?.stop()
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
    }

    private var location: [String] {
        serve.map { ["--socket", $0.socketPath] } ?? ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")]
    }

    private func termind(_ arguments: [String]) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment)
    }

    private func json(_ arguments: [String], status: Int32 = 0) throws -> JSONValue {
        let result = try termind(["--json"] + arguments)
        XCTAssertEqual(result.status, status, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "termind's output")
    }

    /// Saved hosts `box` (and `other`, the same server under another name; `slow`, through a
    /// relay when one is given) with the fixture's key, trusted.
    private func saveHosts(slowPort: Int? = nil) throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        let key = try XCTUnwrap(server.hostKeys["ssh-ed25519"])
        for (label, port) in [("box", server.port), ("other", server.port)] + (slowPort.map { [("slow", $0)] } ?? []) {
            XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", label, "--port", "\(port)", "--identity", NSUserName()]).status, 0)
        }
        for port in Set([server.port] + (slowPort.map { [$0] } ?? [])) {
            XCTAssertEqual(try termind(["vault", "knownhost", "add", "127.0.0.1", key, "--port", "\(port)"]).status, 0)
        }
    }

    private func write(_ path: String, bytes count: Int, seed: UInt8 = 1) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let bytes = PseudoRandomBytes.make(count, seed: UInt64(seed) &* 0x9E3779B97F4A7C15)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
    }

    private func digest(_ path: String) throws -> String {
        Digest.sha256(try Data(contentsOf: URL(fileURLWithPath: path))).hexEncoded
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    private func mtime(_ path: String) -> Int {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mtim.tv_sec : 0
    }

    /// The newest row of `termind transfers`.
    private func row() throws -> JSONValue? { try json(["transfers"])["transfers"]?.arrayValue?.last }

    private func wait(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if try condition() { return }
            usleep(50_000)
        }
        XCTFail("timed out waiting for \(what)")
    }

    private func leftovers(_ root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter { $0.contains(".termind-") }
    }

    // MARK: -

    func testPutAndGetTreesKeepEveryByteModesAndTimes() throws {
        try saveHosts()
        let tree = directory.file("tree")
        try write(tree + "/big.bin", bytes: 3 << 20 | 12_345, seed: 3)
        try write(tree + "/small.bin", bytes: 1, seed: 4)
        try write(tree + "/empty", bytes: 0)
        try write(tree + "/sub/with space.txt", bytes: 300_000, seed: 5)
        try write(tree + "/sub/deeper/edge.bin", bytes: 255 << 10, seed: 6)
        chmod(tree + "/small.bin", 0o600)
        chmod(tree + "/sub", 0o750)
        var old = [timespec(tv_sec: 1_500_000_000, tv_nsec: 0), timespec(tv_sec: 1_500_000_000, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, tree + "/big.bin", &old, 0), 0)
        XCTAssertEqual(symlink("big.bin", tree + "/link"), 0)
        let remote = directory.file("remote")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)

        // Up: -r -p, written in one flag group.
        let up = try json(["put", "-rp", tree, "box:" + remote])
        XCTAssertEqual(up["exitStatus"], .integer(0))
        XCTAssertEqual(up["copied"], .integer(5))
        XCTAssertEqual(up["skipped"], .integer(1), "the link inside the tree is skipped without -L")
        XCTAssertNil(up["stdout"], "a stream that emits no output gets none merged into its result")
        XCTAssertEqual(up["bytes"]?.intValue, (3 << 20 | 12_345) + 1 + 300_000 + (255 << 10))
        let landed = (FileManager.default.enumerator(atPath: remote)?.allObjects as? [String] ?? []).sorted()
        for name in ["big.bin", "small.bin", "empty", "sub/with space.txt", "sub/deeper/edge.bin"] {
            XCTAssertEqual(try? digest(remote + "/tree/" + name), try digest(tree + "/" + name), "\(name); the put said \(up); there is \(landed)")
        }
        XCTAssertEqual(mode(remote + "/tree/small.bin"), 0o600)
        XCTAssertEqual(mode(remote + "/tree/sub"), 0o750)
        XCTAssertEqual(mtime(remote + "/tree/big.bin"), 1_500_000_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: remote + "/tree/link"))
        XCTAssertEqual(leftovers(remote), [], "no temporary file stays behind")

        // Down again, into a new name (the destination does not exist: the tree takes it).
        let back = directory.file("back")
        let down = try termind(["get", "-r", "box:" + remote + "/tree", back])
        XCTAssertEqual(down.status, 0, down.stderr)
        XCTAssertTrue(down.stdout.hasPrefix("5 copied, 3 directories created · 3.5 MiB in"), down.stdout)
        for name in ["big.bin", "small.bin", "empty", "sub/with space.txt", "sub/deeper/edge.bin"] {
            XCTAssertEqual(try digest(back + "/" + name), try digest(tree + "/" + name), name)
        }

        // Globs are matched on the server; only matching files come.
        let picked = directory.file("picked")
        try FileManager.default.createDirectory(atPath: picked, withIntermediateDirectories: true)
        let globbed = try json(["get", "box:" + remote + "/tree/*.bin", picked])
        XCTAssertEqual(globbed["copied"], .integer(2))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: picked).sorted(), ["big.bin", "small.bin"])

        // A directory without -r is skipped and said; wrong directions are refused up front.
        let plain = try termind(["get", "box:" + remote + "/tree", directory.file("nothing")])
        XCTAssertNotEqual(plain.status, 0)
        XCTAssertEqual(plain.stderr.components(separatedBy: "-r copies it").count, 2, "said once: \(plain.stderr)")
        let wrong = try termind(["get", tree, "box:" + remote])
        XCTAssertEqual(wrong.status, 2)
        XCTAssertTrue(wrong.stderr.contains("get copies HOST:PATH"), wrong.stderr)
        let several = try termind(["put", tree + "/big.bin", tree + "/small.bin", "box:" + remote + "/none/x"])
        XCTAssertEqual(several.status, 2)
        XCTAssertTrue(several.stderr.contains("must be an existing directory"), several.stderr)

        let short = try termind(["put", tree])
        XCTAssertEqual(short.status, 2)
        XCTAssertTrue(short.stderr.contains("put takes SOURCES... DESTINATION (at least 2 words), got 1"), short.stderr)
        let help = try termind(["help", "get"])
        XCTAssertTrue(help.stdout.contains("Usage: termind get [-L] [-p] [-r] SOURCES... DESTINATION") && help.stdout.contains("-r  --recursive true"), help.stdout)

        // A destination whose folder is missing: that file fails, and no partial is spoken of.
        let nowhere = try termind(["put", tree + "/small.bin", "box:" + remote + "/no/such/folder/x.bin"])
        XCTAssertEqual(nowhere.status, 1)
        XCTAssertTrue(nowhere.stderr.contains("x.bin"), nowhere.stderr)
        XCTAssertFalse(nowhere.stderr.contains("could not be removed"), nowhere.stderr)

        // Some sources fail, the others arrive: exit 3, each failure said.
        let partial = try termind(["put", tree + "/small.bin", directory.file("missing.bin"), "box:" + remote])
        XCTAssertEqual(partial.status, 3, partial.stderr)
        XCTAssertEqual(partial.stderr.components(separatedBy: "missing.bin").count, 2, "said once, its path once: \(partial.stderr)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: remote + "/small.bin"))
    }

    /// A destination whose folder does not exist is found while the transfer is planned,
    /// before any byte moves (a relay in front of the server counts them), and the folder is
    /// named — never a hidden temporary name after the whole file moved. Both directions.
    func testADestinationFolderThatDoesNotExistIsNamedBeforeAnyByteMoves() throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0)
        self.relay = relay
        try saveHosts(slowPort: relay.port)
        let source = directory.file("big.bin"), here = directory.file("here"), there = directory.file("there")
        try write(source, bytes: 4 << 20, seed: 21)
        try write(there + "/plain.txt", bytes: 10, seed: 22)
        try FileManager.default.createDirectory(atPath: here, withIntermediateDirectories: true)
        func refused(_ arguments: [String], naming folder: String, _ what: String = "does not exist", prefix: String = "the folder ") throws {
            let before = relay.bytesRelayed
            let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment, currentDirectory: here)
            let said = arguments.joined(separator: " ")
            XCTAssertEqual(result.status, 1, "\(said): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("\(prefix)\(folder) \(what)"), "\(said): \(result.stderr)")
            XCTAssertFalse(result.stderr.contains(".termind-") || result.stderr.contains("meanwhile"), "\(said): \(result.stderr)")
            XCTAssertLessThan(relay.bytesRelayed - before, 1 << 20, "\(said): the file moved before the destination was found wanting")
        }
        try refused(["get", "slow:" + source, "./nodir/"], naming: "\(here)/nodir")
        try refused(["get", "slow:" + source, "nodir/big.bin"], naming: "\(here)/nodir")
        try refused(["put", source, "slow:" + there + "/newdir/"], naming: "slow:\(there)/newdir")
        try refused(["put", source, "slow:" + there + "/new/deeper/big.bin"], naming: "slow:\(there)/new/deeper")
        try refused(["put", source, "slow:" + there + "/plain.txt/big.bin"], naming: "slow:\(there)/plain.txt", "is not a folder", prefix: "")
        try refused(["cp", "box:" + source, "slow:" + there + "/newdir/"], naming: "slow:\(there)/newdir")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: here), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: there), ["plain.txt"])

        // A tree may take a new name written with a trailing slash (as cp -r does).
        let tree = directory.file("tree")
        try write(tree + "/one.bin", bytes: 1000, seed: 23)
        XCTAssertEqual(try json(["put", "-r", tree, "slow:" + there + "/newtree/"])["copied"], .integer(1))
        XCTAssertEqual(try digest(there + "/newtree/one.bin"), try digest(tree + "/one.bin"))
    }

    func testAnExistingDestinationIsAskedAboutReplacedSkippedOrKeptBoth() throws {
        try saveHosts()
        let source = directory.file("src/report.txt"), target = directory.file("dst/report.txt")
        try write(source, bytes: 10_000, seed: 7)
        try write(target, bytes: 5, seed: 8)
        let original = try digest(target)

        // Nobody to ask: the file fails, naming --conflict and the file that exists (once), and the old one is untouched.
        let unanswered = try termind(["put", source, "box:" + directory.file("dst")])
        XCTAssertEqual(unanswered.status, 1, unanswered.stderr)
        XCTAssertTrue(unanswered.stderr.contains("box:\(target) exists; nobody answered") && unanswered.stderr.contains("--conflict"), unanswered.stderr)
        XCTAssertEqual(unanswered.stderr.components(separatedBy: "nobody answered").count, 2, "said once: \(unanswered.stderr)")
        XCTAssertEqual(try digest(target), original)

        // Skipped: said of the source that was not copied and of the file that exists.
        let skipping = try termind(["put", source, "box:" + directory.file("dst"), "--conflict", "skip"])
        XCTAssertEqual(skipping.status, 0, skipping.stderr)
        XCTAssertTrue(skipping.stderr.contains("skipped \(source): box:\(target) exists (--conflict replace replaces it)"), skipping.stderr)
        let skipped = try json(["put", source, "box:" + directory.file("dst"), "--conflict", "skip"])
        XCTAssertEqual(skipped["skipped"], .integer(1))
        XCTAssertEqual(try digest(target), original)

        let both = try json(["put", source, "box:" + directory.file("dst"), "--conflict", "keep-both"])
        XCTAssertEqual(both["copied"], .integer(1))
        XCTAssertEqual(try digest(directory.file("dst/report (1).txt")), try digest(source))
        XCTAssertEqual(try digest(target), original)
        _ = try json(["put", source, "box:" + directory.file("dst"), "--conflict", "keep-both"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.file("dst/report (2).txt")))

        // Answered from an answers file "for all": both files of a tree are replaced.
        try write(directory.file("src/second.txt"), bytes: 777, seed: 9)
        try write(directory.file("dst/second.txt"), bytes: 3, seed: 10)
        let answers = try directory.write("answers.json", #"{"sftp.conflict": "replace-all"}"#)
        let replaced = try json(["--answers", answers, "put", source, directory.file("src/second.txt"), "box:" + directory.file("dst")])
        XCTAssertEqual(replaced["copied"], .integer(2))
        XCTAssertEqual(try digest(target), try digest(source))
        XCTAssertEqual(try digest(directory.file("dst/second.txt")), try digest(directory.file("src/second.txt")))

        // Replacing never goes through what is not a regular file.
        try FileManager.default.createDirectory(atPath: directory.file("dst2/report.txt"), withIntermediateDirectories: true)
        let blocked = try termind(["get", "box:" + source, directory.file("dst2"), "--conflict", "replace"])
        XCTAssertEqual(blocked.status, 1)
        XCTAssertTrue(blocked.stderr.contains("a directory is in the way"), blocked.stderr)
        XCTAssertEqual(leftovers(directory.path), [])
    }

    func testCopiesBetweenHostsAndOnOneHostWithTheSubtreeRules() throws {
        try saveHosts()
        let tree = directory.file("a")
        try write(tree + "/one.bin", bytes: 2 << 20 | 77, seed: 11)
        try write(tree + "/two/three.bin", bytes: 65_536, seed: 12)
        let copies = directory.file("copies")
        try FileManager.default.createDirectory(atPath: copies, withIntermediateDirectories: true)

        // Two hosts: streamed through termind.
        let across = try json(["cp", "-r", "box:" + tree, "other:" + copies])
        XCTAssertEqual(across["copied"], .integer(2), "\(across)")
        XCTAssertEqual(try digest(copies + "/a/one.bin"), try digest(tree + "/one.bin"))
        XCTAssertEqual(try digest(copies + "/a/two/three.bin"), try digest(tree + "/two/three.bin"))

        // One host: the server copies (copy-data, which this sshd's internal-sftp offers), so the
        // file's bytes never cross the network — counted by a relay in front of the server.
        // Streamed, 2 MiB would have crossed twice (read, then written back).
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0)
        self.relay = relay
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "counted", "--port", "\(relay.port)", "--identity", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "127.0.0.1", try XCTUnwrap(server.hostKeys["ssh-ed25519"]), "--port", "\(relay.port)"]).status, 0)
        let same = try json(["cp", "counted:" + tree + "/one.bin", "counted:" + copies + "/same.bin"])
        XCTAssertEqual(same["copied"], .integer(1))
        XCTAssertEqual(try digest(copies + "/same.bin"), try digest(tree + "/one.bin"))
        XCTAssertLessThan(relay.bytesRelayed, 256 << 10, "a same-host copy moved the file's bytes over the network (\(relay.bytesRelayed) bytes)")
        // The count is real: a copy between two hosts through it carries the file.
        let counted = relay.bytesRelayed
        XCTAssertEqual(try json(["cp", "counted:" + tree + "/one.bin", "box:" + copies + "/across.bin"])["copied"], .integer(1))
        XCTAssertGreaterThan(relay.bytesRelayed - counted, 2 << 20)

        // Never into itself; the same path only as a copy beside it.
        let inside = try termind(["cp", "-r", "box:" + tree, "box:" + tree + "/two"])
        XCTAssertEqual(inside.status, 1)
        XCTAssertTrue(inside.stderr.contains("inside the source"), inside.stderr)
        let itself = try termind(["cp", "box:" + tree + "/one.bin", "box:" + tree + "/one.bin", "--conflict", "replace"])
        XCTAssertEqual(itself.status, 1)
        XCTAssertTrue(itself.stderr.contains("the source itself"), itself.stderr)
        XCTAssertEqual(try digest(tree + "/one.bin"), try digest(copies + "/same.bin"), "the source was not touched")
        let beside = try json(["cp", "box:" + tree + "/one.bin", "box:" + tree + "/one.bin", "--conflict", "keep-both"])
        XCTAssertEqual(beside["copied"], .integer(1))
        XCTAssertEqual(try digest(tree + "/one (1).bin"), try digest(tree + "/one.bin"))

        // A name in the way that is a link is never written through.
        let outside = directory.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let merge = directory.file("merge")
        try FileManager.default.createDirectory(atPath: merge + "/a", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(outside, merge + "/a/two"), 0)
        let linked = try termind(["cp", "-r", "box:" + tree, "other:" + merge, "--conflict", "replace"])
        XCTAssertEqual(linked.status, 3, linked.stderr)
        XCTAssertTrue(linked.stderr.contains("symbolic link is in the way"), linked.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outside), [])
        XCTAssertEqual(try digest(merge + "/a/one.bin"), try digest(tree + "/one.bin"))
    }

    func testMoreFilesThanTheServerTakesChannelsWaitForOneAndABigFileRidesSeveral() throws {
        try saveHosts()
        // sshd's default MaxSessions is 10: ten files at once plus the control channel is one too many.
        let tree = directory.file("many")
        for i in 0..<14 { try write(tree + "/f\(i).bin", bytes: 300_000, seed: UInt8(40 + i)) }
        try write(tree + "/big.bin", bytes: 20 << 20 | 4321, seed: 60)
        let result = try json(["put", "-r", tree, "box:" + directory.file("landed")])
        XCTAssertEqual(result["copied"], .integer(15), "\(result)")
        XCTAssertEqual(result["failed"], .integer(0))
        for i in 0..<14 { XCTAssertEqual(try digest(directory.file("landed/f\(i).bin")), try digest(tree + "/f\(i).bin")) }
        XCTAssertEqual(try digest(directory.file("landed/big.bin")), try digest(tree + "/big.bin"), "striped over channels, every byte in place")
        let log = (try? String(contentsOfFile: server.directory.file("sshd.log"), encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("no more sessions"), "the server did refuse a channel: the files waited for one")
        let back = try json(["get", "box:" + directory.file("landed/big.bin"), directory.file("big-back.bin")])
        XCTAssertEqual(back["copied"], .integer(1))
        XCTAssertEqual(try digest(directory.file("big-back.bin")), try digest(tree + "/big.bin"))
    }

    func testSmallFilesShareChannelsAndEachStillArrivesWhole() throws {
        try saveHosts()
        // 40 files of at most 256 KiB, 10 at a time: they share channels, 4 on each, so the
        // server starts the control channel and about 3 more — not one per file at once (10,
        // the most sshd takes).
        let tree = directory.file("small")
        for i in 0..<40 { try write(tree + "/f\(i).bin", bytes: i == 0 ? 0 : 1_000 + i * 6_000, seed: UInt8(100 + i)) }
        let sessions = { ((try? String(contentsOfFile: self.server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "subsystem 'sftp'").count - 1 }
        let before = sessions()
        let result = try json(["put", "-r", tree, "box:" + directory.file("landed")])
        XCTAssertEqual(result["copied"], .integer(40), "\(result)")
        let up = sessions() - before
        XCTAssertGreaterThan(up, 1, "the files rode data channels beside the control one")
        XCTAssertLessThanOrEqual(up, 5, "small files share channels (sshd started \(up) SFTP sessions)")
        let back = try json(["get", "-r", "box:" + directory.file("landed"), directory.file("back")])
        XCTAssertEqual(back["copied"], .integer(40), "\(back)")
        XCTAssertLessThanOrEqual(sessions() - before - up, 5)
        for i in 0..<40 {
            XCTAssertEqual(try digest(directory.file("landed/f\(i).bin")), try digest(tree + "/f\(i).bin"))
            XCTAssertEqual(try digest(directory.file("back/f\(i).bin")), try digest(tree + "/f\(i).bin"))
        }
        XCTAssertEqual(leftovers(directory.file("landed")) + leftovers(directory.file("back")), [])
    }

    func testNamesWithNewlinesAndBytesThatAreNotUTF8ArriveExactly() throws {
        try saveHosts()
        let root = directory.file("odd")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let name: [UInt8] = Array("bad".utf8) + [0xFF] + Array("\nname with space".utf8)
        func create(_ path: [UInt8], _ text: String) {
            let fd = (path + [0]).withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o644) }
            XCTAssertGreaterThanOrEqual(fd, 0)
            _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
            close(fd)
        }
        create(Array((root + "/").utf8) + name, "exact")
        let result = try json(["get", "-r", "box:" + root, directory.file("copy")])
        XCTAssertEqual(result["copied"], .integer(1), "\(result)")
        let landed = Array((directory.file("copy") + "/").utf8) + name + [0]
        let fd = landed.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_RDONLY) }
        XCTAssertGreaterThanOrEqual(fd, 0, "the same bytes name the copy")
        var buffer = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(read(fd, &buffer, 16), 5)
        close(fd)
    }

    func testAFileThatGrowsWhileItIsReadIsNotCommitted() throws {
        try saveHosts()
        let source = directory.file("growing.log")
        try write(source, bytes: 8 << 20, seed: 70)
        let stop = ManagedAtomicFlag()
        let appender = Thread {
            let fd = open(source, O_WRONLY | O_APPEND)
            while !stop.isSet {
                _ = Glibc.write(fd, "x", 1)
                usleep(2_000)
            }
            close(fd)
        }
        appender.start()
        defer { stop.set() }
        usleep(50_000)
        let result = try termind(["put", source, "box:" + directory.file("landing.log")])
        stop.set()
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("changed while being read"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("landing.log")))
        XCTAssertEqual(leftovers(directory.path), [])
    }

    func testAFullDiskFailsThatFileAloneAndCommitsNothingOfIt() throws {
        let small = directory.file("small-disk")
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        let mounted = try ProcessRunner.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", small])
        guard mounted.status == 0 else { throw XCTSkip("no tmpfs for a full disk here: \(mounted.stderr)") }
        defer { _ = try? ProcessRunner.run("/bin/umount", ["-l", small]) }
        try saveHosts()
        // One file at a time, in order: the big one fills the disk between the two small ones.
        XCTAssertEqual(try termind(["settings", "set", "sftp.limits", #"{"active": 1, "perHost": 1}"#]).status, 0)
        try write(directory.file("up/a-small.bin"), bytes: 10_000, seed: 30)
        try write(directory.file("up/b-big.bin"), bytes: 4 << 20, seed: 31)
        try write(directory.file("up/c-small.bin"), bytes: 10_000, seed: 32)
        let result = try termind(["--json", "put", directory.file("up/a-small.bin"), directory.file("up/b-big.bin"), directory.file("up/c-small.bin"), "box:" + small])
        XCTAssertEqual(result.status, 3, result.stderr)
        let outcome = try JSONCoding.parse(Data(result.stdout.utf8), source: "put")
        XCTAssertEqual(outcome["copied"], .integer(2))
        XCTAssertEqual(outcome["failed"], .integer(1))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: small).sorted(), ["a-small.bin", "c-small.bin"], "nothing of the big file, no temporary")
        XCTAssertEqual(try digest(small + "/c-small.bin"), try digest(directory.file("up/c-small.bin")))
    }

    func testOnATerminalTheConflictIsAskedAndProgressShowsFilesRateAndETA() throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0.02, bufferLimit: 96 << 10)
        self.relay = relay
        try saveHosts(slowPort: relay.port)
        let up = directory.file("tty-up")
        try write(up + "/big.bin", bytes: 6 << 20, seed: 90)
        try write(up + "/note.txt", bytes: 100, seed: 91)
        let landing = directory.file("tty-landing")
        try write(landing + "/note.txt", bytes: 3, seed: 92)
        let argv = [FeatureHarness.buildDirectory + "/termind"] + location + ["put", up + "/big.bin", up + "/note.txt", "slow:" + landing]
        // An answer that is not a choice is not taken as one (skip, silently): asked again.
        let report = try PseudoTerminal.run(argv, steps: [
            .expect("note.txt exists. [r]eplace, [s]kip, [k]eep both"), .send("x\n"),
            .expect("Please answer one of: k, ka, keep, r, ra, replace, s, sa, skip."), .send("k\n"),
            .expect("files · big.bin"), .expect("ETA"), .expect("2 copied", seconds: 60),
        ], environment: environment)
        XCTAssertEqual(report.met, [true, true, true, true, true], report.output.replacingOccurrences(of: "\r", with: "\\r"))
        XCTAssertEqual(report.status, 0, report.output)
        XCTAssertTrue(report.output.contains("/s"), "a rate: \(report.output)")
        XCTAssertEqual(try digest(landing + "/note (1).txt"), try digest(up + "/note.txt"), "kept both, as typed")
        XCTAssertEqual(try digest(landing + "/big.bin"), try digest(up + "/big.bin"))
    }

    func testTopologyPutsFilesOnExtraConnectionsAndAProbeThatWouldAskFallsBackToChannels() throws {
        try saveHosts()
        let log = server.directory.file("sshd.log")
        func logins() -> Int {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count - 1
        }
        let tree = directory.file("four")
        for i in 0..<4 { try write(tree + "/f\(i).bin", bytes: 256 << 10, seed: UInt8(20 + i)) }
        func put(_ strategy: String, to landed: String, via prefix: String = "box:", _ extra: [String] = []) throws -> Int {
            let destination = prefix + landed
            XCTAssertEqual(try termind(["settings", "set", "sftp.topology", #"{"strategy": "\#(strategy)"}"#]).status, 0)
            let before = logins()
            let result = try termind(["put", "-r", tree, destination] + extra)
            XCTAssertEqual(result.status, 0, "\(strategy): \(result.stderr)")
            for i in 0..<4 {
                XCTAssertEqual(try? digest(landed + "/f\(i).bin"), try digest(tree + "/f\(i).bin"), "\(strategy) f\(i)")
            }
            // sshd writes its log line a moment after the login: wait for the first (every
            // strategy logs in at least once), then a moment for any other.
            _ = waitUntil(seconds: 10) { logins() - before >= 1 }
            usleep(200_000)
            return logins() - before
        }
        XCTAssertEqual(try put("channels-only", to: directory.file("one")), 1, "every file on a channel of the one connection")
        XCTAssertGreaterThan(try put("connections-preferred", to: directory.file("more")), 1, "files on extra connections")
        XCTAssertEqual(try put("smart", to: directory.file("smart")), 1, "small files ride channels")
        // A key trusted only once for this run: the silent probe may not ask, fails, and the files ride channels.
        let once = try put("connections-preferred", to: directory.file("once"), via: "scp://\(NSUserName())@localhost:\(server.port)/",
                           ["--identity", directory.file("id"), "--accept-host-key", "once"])
        XCTAssertEqual(once, 1, "no extra connection without durable trust")
    }

    /// `--verify sha256`: each side's SHA-256 is computed where the file is (the host's by
    /// its sha256sum), and a file whose digests differ, or a host without sha256sum, commits
    /// nothing. The lying and the missing sha256sum are a script first on sshd's PATH.
    func testVerifyBySHA256ComparesDigestsComputedOnEachSideAndCommitsNothingOnAMismatch() throws {
        let fake = directory.file("fakebin")
        try FileManager.default.createDirectory(atPath: fake, withIntermediateDirectories: true)
        let mode = directory.file("fake-mode")
        try """
            #!/bin/sh
            case "$(cat \(mode) 2>/dev/null)" in
              lie) printf '%064d  %s\n' 0 "$2"; exit 0 ;;
              *) exec /usr/bin/sha256sum "$@" ;;
            esac
            """.write(toFile: fake + "/sha256sum", atomically: true, encoding: .utf8)
        chmod(fake + "/sha256sum", 0o755)
        server.stop()
        for key in ["id", "id.pub"] { try FileManager.default.removeItem(atPath: directory.file(key)) }
        server = try SSHServerFixture.withNewKey(in: directory, extraConfig: ["SetEnv PATH=\(fake):/usr/bin:/bin"])
        try saveHosts()
        let tree = directory.file("sums")
        try write(tree + "/one.bin", bytes: 3 << 20 | 5, seed: 51)
        try write(tree + "/empty.bin", bytes: 0, seed: 52)
        try write(tree + "/odd \n name.bin", bytes: 4097, seed: 53)
        // More files at once than sshd takes channels (MaxSessions 10): each sha256sum needs
        // an exec channel beside the SFTP ones.
        for i in 0..<12 { try write(tree + "/many/f\(i).bin", bytes: 70_000 + i, seed: UInt8(60 + i)) }
        let up = directory.file("up")
        try FileManager.default.createDirectory(atPath: up, withIntermediateDirectories: true)
        let put = try json(["put", "-r", tree, "box:" + up, "--verify", "sha256"])
        XCTAssertEqual(put["copied"], .integer(15), "\(put)")
        for name in ["one.bin", "empty.bin", "odd \n name.bin"] + (0..<12).map({ "many/f\($0).bin" }) {
            XCTAssertEqual(try digest(up + "/sums/" + name), try digest(tree + "/" + name), name)
        }
        let down = directory.file("down")
        try FileManager.default.createDirectory(atPath: down, withIntermediateDirectories: true)
        XCTAssertEqual(try json(["get", "box:" + up + "/sums/one.bin", down, "--verify", "sha256"])["copied"], .integer(1))
        XCTAssertEqual(try digest(down + "/one.bin"), try digest(tree + "/one.bin"))

        // The host's sha256sum says something else: refused, nothing committed, no partial left.
        try "lie".write(toFile: mode, atomically: true, encoding: .utf8)
        let lied = try termind(["put", tree + "/one.bin", "box:" + up + "/again.bin", "--verify", "sha256"])
        XCTAssertEqual(lied.status, 1, lied.stderr)
        XCTAssertTrue(lied.stderr.contains("SHA-256 of what was written"), lied.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: up + "/again.bin"))
        XCTAssertEqual(leftovers(up), [])
        // Without --verify the byte count decides, and the file is there.
        XCTAssertEqual(try json(["put", tree + "/one.bin", "box:" + up + "/again.bin"])["copied"], .integer(1))

        // A host without sha256sum (on its PATH only xargs): said, nothing committed.
        let bare = directory.file("barebin")
        try FileManager.default.createDirectory(atPath: bare, withIntermediateDirectories: true)
        XCTAssertEqual(symlink("/usr/bin/xargs", bare + "/xargs"), 0)
        let without = try SSHServerFixture(authorizedKeys: [try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)],
                                           extraConfig: ["SetEnv PATH=\(bare)"])
        defer { without.stop() }
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "bare", "--port", "\(without.port)", "--identity", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "127.0.0.1", try XCTUnwrap(without.hostKeys["ssh-ed25519"]), "--port", "\(without.port)"]).status, 0)
        let missing = try termind(["get", "bare:" + up + "/sums/one.bin", down + "/other.bin", "--verify", "sha256"])
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("has no sha256sum"), missing.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: down + "/other.bin"))
        XCTAssertEqual(leftovers(down), [])
        let bad = try termind(["put", tree + "/one.bin", "box:" + up, "--verify", "md5"])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("verify: 'md5' is not one of size, sha256"), bad.stderr)
    }

    /// Connections Preferred: a file cancelled while its silent probe is still opening caches
    /// no failure — the next file of the same run probes again, and gets its own connection.
    func testACancelledProbeLeavesTheNextFileItsExtraConnection() throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0)
        self.relay = relay
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_SOCKET": directory.file("serve/control.sock")])
        try saveHosts(slowPort: relay.port)
        XCTAssertEqual(try termind(["settings", "set", "sftp.topology", #"{"strategy": "connections-preferred"}"#]).status, 0)
        XCTAssertEqual(try termind(["settings", "set", "sftp.limits", #"{"active": 1, "perHost": 1}"#]).status, 0)
        let tree = directory.file("pair")
        try write(tree + "/a.bin", bytes: 100_000, seed: 31)
        try write(tree + "/b.bin", bytes: 100_000, seed: 32)
        let landing = directory.file("paired")
        try FileManager.default.createDirectory(atPath: landing, withIntermediateDirectories: true)
        // The server's pooled connection to the host is open first; only new ones are held.
        XCTAssertEqual(try termind(["sftp", "slow", "stat", landing]).status, 0)
        relay.holdNewConnections()
        let put = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["--json", "put", "-r", tree, "slow:" + landing],
                                     environment: environment, captureOutput: true)
        spawned.append(put)
        try wait("the first file's probe") { relay.heldCount == 1 }
        let rows = try XCTUnwrap(try json(["transfers"])["transfers"]?.arrayValue)
        XCTAssertEqual(Set(rows.suffix(2).compactMap { $0["state"]?.stringValue }), ["active", "queued"], "one host slot: the other file waits")
        let first = try XCTUnwrap(rows.suffix(2).first { $0["state"]?.stringValue == "active" })
        _ = try json(["transfers", "cancel", try XCTUnwrap(first["id"]?.stringValue)])
        // The second file is admitted and probes too (a cached failure would put it on a channel at once).
        let deadline = Date().addingTimeInterval(30)
        while relay.heldCount < 2 && put.isRunning && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(relay.heldCount, 2, "the next file did not probe for a connection of its own")
        let logins = { ((try? String(contentsOfFile: self.server.directory.file("sshd.log"), encoding: .utf8)) ?? "").components(separatedBy: "Accepted publickey").count }
        let before = logins()
        relay.releaseHeld()
        XCTAssertEqual(put.wait(), 3, "one file cancelled, one copied")
        let ended = try XCTUnwrap(try json(["transfers"])["transfers"]?.arrayValue)
        XCTAssertEqual(ended.first { $0["id"] == first["id"] }?["state"]?.stringValue, "cancelled")
        XCTAssertEqual(ended.suffix(2).filter { $0["id"] != first["id"] }.map { $0["state"]?.stringValue }, ["done"])
        // (The run submits its files concurrently: either may have been the first.)
        let landed = ["a.bin", "b.bin"].filter { FileManager.default.fileExists(atPath: landing + "/pair/" + $0) }
        XCTAssertEqual(landed.count, 1, "\(landed)")
        for name in landed { XCTAssertEqual(try digest(landing + "/pair/" + name), try digest(tree + "/" + name)) }
        // sshd writes its log line a moment after the login: wait for the first, then a
        // moment for a second that must not come.
        _ = waitUntil(seconds: 10) { logins() - before >= 1 }
        usleep(200_000)
        XCTAssertEqual(logins() - before, 1, "the second file's connection, and not the cancelled probe's")
    }

    func testInsideServeATransferPausesResumesAfterCheckingAndCancels() throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0.02, bufferLimit: 96 << 10)
        self.relay = relay
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_SOCKET": directory.file("serve/control.sock")])
        try saveHosts(slowPort: relay.port)
        let source = directory.file("big.bin")
        try write(source, bytes: 24 << 20, seed: 13)
        let landing = directory.file("landing")
        try FileManager.default.createDirectory(atPath: landing, withIntermediateDirectories: true)

        /// Starts `termind put` of the source to `target` and waits until its file (a new row) is
        /// moving; then the relay holds every byte (the file cannot end however slowly this test
        /// looked) until the caller has said what to do and thaws it.
        func startPut(_ target: String, after previous: String?) throws -> (SpawnedProcess, String) {
            let process = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["--json", "put", source, target],
                                             environment: environment, captureOutput: true)
            spawned.append(process)
            try wait("\(target) to move") { try row()?["id"]?.stringValue != previous && (try row()?["done"]?.intValue ?? 0) > 1 << 20 }
            relay.freeze()
            return (process, try XCTUnwrap(try row()?["id"]?.stringValue))
        }

        let (put, id) = try startPut("slow:" + landing, after: nil)
        XCTAssertEqual(try json(["transfers", "pause", id])["transfer"]?["id"]?.stringValue, id)
        relay.thaw()
        try wait("the pause") { try row()?["state"]?.stringValue == "paused" }
        let partials = leftovers(landing)
        XCTAssertEqual(partials.count, 1, "the partial is kept while paused")
        XCTAssertTrue(put.isRunning, "the put waits for its paused file")

        XCTAssertEqual(try json(["transfers", "resume", id])["transfer"]?["state"]?.stringValue, "active", "the checks passed: it moves")
        XCTAssertEqual(put.wait(), 0)
        XCTAssertEqual(try digest(landing + "/big.bin"), try digest(source))
        XCTAssertEqual(try row()?["state"]?.stringValue, "done")
        XCTAssertEqual(leftovers(landing), [])

        // A source that changed while paused is refused on resume, and its partial goes; the
        // resume says so and exits 1 (it said "active" and 0 before its own check refused the file).
        let (second, next) = try startPut("slow:" + landing + "/again.bin", after: id)
        _ = try json(["transfers", "pause", next])
        relay.thaw()
        try wait("the second pause") { try row()?["state"]?.stringValue == "paused" }
        var later = [timespec(tv_sec: 1_600_000_000, tv_nsec: 0), timespec(tv_sec: 1_600_000_000, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, source, &later, 0), 0)
        let refused = try termind(["transfers", "resume", next])
        XCTAssertEqual(refused.status, 1, refused.stdout + refused.stderr)
        XCTAssertTrue(refused.stderr.contains("\(next) (\(source) → slow:\(landing)/again.bin) was not resumed: the source changed since it was paused"), refused.stderr)
        XCTAssertEqual(second.wait(), 1)
        // Nothing was done: the reason is said once, in the error (on standard output with --json).
        let said = second.readAll()
        XCTAssertTrue(String(decoding: said.0, as: UTF8.self).contains("the source changed since it was paused"), String(decoding: said.0 + said.1, as: UTF8.self))
        XCTAssertFalse(FileManager.default.fileExists(atPath: landing + "/again.bin"))
        XCTAssertEqual(leftovers(landing), [], "the refused partial is removed")

        // A partial whose first bytes changed while paused: the SHA-256 of the prefix differs, refused too.
        let (tampered, changed) = try startPut("slow:" + landing + "/tampered.bin", after: next)
        _ = try json(["transfers", "pause", changed])
        relay.thaw()
        try wait("the third pause") { try row()?["state"]?.stringValue == "paused" }
        let partial = try XCTUnwrap(FileHandle(forWritingAtPath: landing + "/" + XCTUnwrap(leftovers(landing).first)))
        try partial.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try partial.close()
        let mismatch = try termind(["--json", "transfers", "resume", changed])
        XCTAssertEqual(mismatch.status, 1, mismatch.stdout + mismatch.stderr)
        XCTAssertTrue(mismatch.stdout.contains("differ from the source's"), mismatch.stdout)
        XCTAssertEqual(tampered.wait(), 1)
        XCTAssertEqual(try row()?["state"]?.stringValue, "failed")
        XCTAssertEqual(leftovers(landing), [])

        // Cancel: the partial goes, the run ends with the file cancelled.
        let (third, last) = try startPut("slow:" + landing + "/third.bin", after: changed)
        _ = try json(["transfers", "cancel", last])
        relay.thaw()
        XCTAssertEqual(third.wait(), 1)
        XCTAssertEqual(try row()?["state"]?.stringValue, "cancelled")
        XCTAssertEqual(leftovers(landing), [])

        // Deleting the saved host cancels what reaches it, partial and all.
        let (fourth, _) = try startPut("slow:" + landing + "/fourth.bin", after: last)
        let deleted = try termind(["vault", "host", "delete", "slow"])
        relay.thaw()
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        XCTAssertEqual(fourth.wait(), 1)
        XCTAssertEqual(try row()?["state"]?.stringValue, "cancelled")
        XCTAssertEqual(leftovers(landing), [])

        let unknown = try termind(["transfers", "resume", "t999"])
        XCTAssertEqual(unknown.status, 1)
        XCTAssertTrue(unknown.stderr.contains("No transfer t999"), unknown.stderr)
    }

    /// Restarts sshd with sftp-server behind a proxy (python, on this machine) that ends an
    /// SFTP channel once, at the point the file `proxy-mode` in the test's folder names when
    /// the channel starts:
    /// - `close`: at the channel's first CLOSE after 2 MiB of writes (not passed on);
    /// - `rename-before`: at the first RENAME (not passed on: nothing is renamed);
    /// - `rename-after`: at the answer to the first RENAME (passed on, answer dropped).
    /// A marker file `proxy-done-MODE` says it did; from then on the channel is plain.
    /// Then starts `termind serve` and saves the hosts.
    private func startServeWithSFTPBehindAProxy() throws {
        let proxy = directory.file("sftp-proxy.py")
        try """
        import os, struct, subprocess, sys, threading
        folder = sys.argv[1]
        mode = open(os.path.join(folder, 'proxy-mode')).read().strip()
        marker = os.path.join(folder, 'proxy-done-' + mode)
        server = '/usr/lib/openssh/sftp-server'
        if os.path.exists(marker):
            os.execv(server, [server])
        child = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        dropped = []  # ids of requests whose answer ends the channel
        def end():
            open(marker, 'w').close()
            child.kill()
            os._exit(0)
        def exactly(stream, n):
            data = stream.read(n)
            if data is None or len(data) < n:
                child.kill()
                os._exit(0)
            return data
        def answers():
            out = sys.stdout.buffer
            while True:
                head = exactly(child.stdout, 4)
                body = exactly(child.stdout, struct.unpack('>I', head)[0])
                if struct.unpack('>I', body[1:5])[0] in dropped:
                    end()
                out.write(head + body)
                out.flush()
        threading.Thread(target=answers, daemon=True).start()
        written = 0
        while True:
            head = exactly(sys.stdin.buffer, 4)
            body = exactly(sys.stdin.buffer, struct.unpack('>I', head)[0])
            if body[0] == 6:  # WRITE: id, handle, offset, data
                handle = struct.unpack('>I', body[5:9])[0]
                written += struct.unpack('>I', body[17 + handle:21 + handle])[0]
            elif body[0] == 4 and mode == 'close' and written >= \(2 << 20):
                end()
            elif body[0] == 18 and mode == 'rename-before':
                end()
            elif body[0] == 18 and mode == 'rename-after':
                dropped.append(struct.unpack('>I', body[1:5])[0])
            child.stdin.write(head + body)
            child.stdin.flush()
        """.write(toFile: proxy, atomically: true, encoding: .utf8)
        server.stop()
        let key = try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)
        server = try SSHServerFixture(authorizedKeys: [key], extraConfig: ["Subsystem sftp /usr/bin/python3 \(proxy) \(directory.path)"])
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_SOCKET": directory.file("serve/control.sock")])
        try saveHosts()
    }

    /// Inside serve, puts a 2 MiB file to box with the proxy in `mode`: the file pauses with
    /// every byte kept, and a resume brings it to the destination whole. Returns what the
    /// put printed on standard error.
    private func putThroughProxy(_ mode: String, name: String, seed: UInt8) throws -> String {
        try mode.write(toFile: directory.file("proxy-mode"), atomically: true, encoding: .utf8)
        let source = directory.file(name), landing = directory.file("landing")
        try write(source, bytes: 2 << 20, seed: seed)
        try FileManager.default.createDirectory(atPath: landing, withIntermediateDirectories: true)
        let previous = try row()?["id"]?.stringValue
        let put = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["--json", "put", source, "box:" + landing],
                                     environment: environment, captureOutput: true)
        spawned.append(put)
        try wait("the pause (\(mode))") {
            let now = try row()
            return now?["id"]?.stringValue != previous && ["paused", "failed"].contains(now?["state"]?.stringValue ?? "")
        }
        let stopped = try row()
        XCTAssertEqual(stopped?["state"]?.stringValue, "paused", "\(mode): \(stopped?["error"]?.stringValue ?? "no error")")
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.file("proxy-done-" + mode)), "\(mode): the proxy ended the channel")
        XCTAssertEqual(stopped?["done"]?.intValue, 2 << 20, "\(mode): every byte counts as written")
        if mode.hasPrefix("rename") {
            XCTAssertTrue(stopped?["error"]?.stringValue?.contains("renamed into place, so whether it is there is not known") ?? false, "\(stopped?["error"]?.stringValue ?? "")")
        }
        let id = try XCTUnwrap(stopped?["id"]?.stringValue)
        _ = try json(["transfers", "resume", id])
        let status = put.wait()
        let errors = String(decoding: put.readAll().1, as: UTF8.self)
        XCTAssertEqual(status, 0, "\(mode): \(errors)")
        XCTAssertEqual(try digest(landing + "/" + name), try digest(source), mode)
        XCTAssertEqual(leftovers(landing), [], mode)
        return errors
    }

    /// The window after the last write was answered, while the file closes: a channel lost
    /// there keeps every byte (paused at the whole length inside serve), and the resume
    /// checks them and commits without sending them again.
    func testAChannelLostWhileTheFileClosesPausesWithEveryByteKept() throws {
        try startServeWithSFTPBehindAProxy()
        let said = try putThroughProxy("close", name: "closed.bin", seed: 15)
        XCTAssertTrue(said.contains("paused"), said)
    }

    /// A channel lost at the rename that commits the file: whether the rename went through
    /// is not known, so the file pauses; the resume commits it (the temporary still there),
    /// or finds it committed (the temporary gone, the destination the source's bytes).
    func testAChannelLostAtTheRenameResumesWhetherOrNotTheRenameHappened() throws {
        try startServeWithSFTPBehindAProxy()
        let before = try putThroughProxy("rename-before", name: "before.bin", seed: 16)
        XCTAssertFalse(before.contains("already in place"), before)
        let after = try putThroughProxy("rename-after", name: "after.bin", seed: 17)
        XCTAssertTrue(after.contains("already in place"), after)
    }

    func testALostConnectionInsideServePausesAndResumesToTheSameBytes() throws {
        let relay = try DelayingRelay(to: server.port, oneWayDelay: 0.02, bufferLimit: 96 << 10)
        self.relay = relay
        serve = try ServeProcess(directory: directory, arguments: [], environment: ["TERMIND_SOCKET": directory.file("serve/control.sock")])
        try saveHosts(slowPort: relay.port)
        let remoteSource = directory.file("remote.bin")
        try write(remoteSource, bytes: 16 << 20, seed: 14)
        let landing = directory.file("down")
        try FileManager.default.createDirectory(atPath: landing, withIntermediateDirectories: true)
        let get = try SpawnedProcess(FeatureHarness.buildDirectory + "/termind", location + ["--json", "get", "slow:" + remoteSource, landing],
                                     environment: environment, captureOutput: true)
        spawned.append(get)
        try wait("the get to move") { (try row()?["done"]?.intValue ?? 0) >= 1 << 20 }
        // sshd goes away mid-transfer (its sessions with it), then comes back on the same port.
        // The relay holds every byte meanwhile, so the end is not reached however slowly this
        // test looked; then what sshd had sent arrives, then the end of the connection.
        relay.freeze()
        server.kill()
        relay.thaw()
        // (A failure ends the wait too, so its error is shown at once.)
        try wait("the pause") { ["paused", "failed"].contains(try row()?["state"]?.stringValue ?? "") }
        let stopped = try row()
        XCTAssertEqual(stopped?["state"]?.stringValue, "paused", stopped?["error"]?.stringValue ?? "no error")
        XCTAssertLessThan(stopped?["done"]?.intValue ?? .max, 16 << 20)
        XCTAssertTrue(stopped?["error"]?.stringValue?.hasPrefix("paused:") ?? false)
        XCTAssertEqual(leftovers(landing).count, 1, "the partial is kept")
        try server.restart()
        let id = try XCTUnwrap(try row()?["id"]?.stringValue)
        _ = try json(["transfers", "resume", id])
        XCTAssertEqual(get.wait(), 0)
        XCTAssertEqual(try digest(landing + "/remote.bin"), try digest(remoteSource))
    }
}

/// A flag one thread sets and another reads.
private final class ManagedAtomicFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
