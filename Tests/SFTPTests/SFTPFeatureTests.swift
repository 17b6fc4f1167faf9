import Foundation
import TermindCore
import TermindHarness
import XCTest

/// `termind sftp HOST ACTION PATH…` end to end against a real sshd on loopback, whose files
/// are this machine's: every effect is checked on the local file system.
final class SFTPFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        server = try SSHServerFixture.withNewKey(in: directory)
        try TermindCLI(environment: environment, leading: location).saveHosts(["box"], server: server, key: directory.file("id"))
    }

    override func tearDown() {
        server?.stop()
        directory?.remove()
    }

    private var environment: [String: String] {
        ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
    }

    private var location: [String] { ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k")] }

    private func termind(_ arguments: [String]) throws -> ProcessResult {
        try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + arguments, environment: environment)
    }

    private func json(_ arguments: [String]) throws -> JSONValue {
        let result = try termind(["--json"] + arguments)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "termind's output")
    }

    private func names(_ listing: JSONValue?) -> [String] {
        guard case .array(let entries)? = listing?["entries"] else { return [] }
        return entries.compactMap { $0["name"]?.stringValue }
    }

    func testMetadataOperationsDoWhatTheySayOnTheServersFiles() throws {
        let root = directory.file("tree")
        let made = try json(["sftp", "box", "mkdir", root + "/a/b", "--parents", "true", "--mode", "750"])
        XCTAssertEqual(made["exitStatus"], .integer(0))
        var info = stat()
        XCTAssertEqual(stat(root + "/a/b", &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o750)
        for name in ["one.txt", "two.txt", "keep.log"] { try name.write(toFile: root + "/" + name, atomically: false, encoding: .utf8) }

        let listed = try json(["sftp", "box", "ls", root])
        XCTAssertEqual(names(listed["listings"]?.arrayValue?.first), ["a", "keep.log", "one.txt", "two.txt"])
        let human = try termind(["sftp", "box", "ls", root])
        XCTAssertEqual(human.status, 0, human.stderr)
        XCTAssertTrue(human.stdout.contains("drwxr-x---") && human.stdout.contains("a/") && human.stdout.contains("one.txt"), human.stdout)

        // A pattern in a middle component leads on through directories only.
        let deep = try json(["sftp", "box", "stat", root + "/[ao]*/b"])
        XCTAssertEqual(deep["entries"]?.arrayValue?.compactMap { $0["name"]?.stringValue }, [root + "/a/b"], "one.txt matches [ao]* but is no directory")
        XCTAssertEqual(deep["entries"]?.arrayValue?.first?["kind"], .string("directory"))

        // Links are shown as themselves unless followed.
        XCTAssertEqual(try json(["sftp", "box", "ln", "keep.log", root + "/link"])["exitStatus"], .integer(0))
        let link = try json(["sftp", "box", "stat", root + "/link"])["entries"]?.arrayValue?.first
        XCTAssertEqual(link?["kind"], .string("symlink"))
        XCTAssertEqual(link?["target"], .string("keep.log"))
        XCTAssertEqual(try json(["sftp", "box", "stat", root + "/link", "--follow", "true"])["entries"]?.arrayValue?.first?["kind"], .string("file"))

        // Globs are matched on the server; only what matches goes.
        let removed = try json(["sftp", "box", "rm", root + "/*.txt"])
        XCTAssertEqual(removed["done"]?.arrayValue?.count, 2)
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/one.txt"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/keep.log"))

        // Some paths fail, the others are done: exit 3, each failure said.
        let partial = try termind(["sftp", "box", "rm", root + "/link", root + "/missing", root + "/a"])
        XCTAssertEqual(partial.status, 3, partial.stderr)
        XCTAssertTrue(partial.stderr.contains("missing") && partial.stderr.contains("is a directory"), partial.stderr)
        XCTAssertNil(try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/link"))
        let none = try termind(["sftp", "box", "rm", root + "/nothing*"])
        XCTAssertEqual(none.status, 1, "nothing could be done: \(none.stderr)")
        XCTAssertEqual(none.stderr.components(separatedBy: "no match").count, 2, "said once: \(none.stderr)")

        // mv: into a directory; an existing file only with --replace.
        try "new".write(toFile: root + "/new.log", atomically: false, encoding: .utf8)
        let refused = try termind(["sftp", "box", "mv", root + "/new.log", root + "/keep.log"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertEqual(try String(contentsOfFile: root + "/keep.log", encoding: .utf8), "keep.log")
        XCTAssertEqual(try termind(["sftp", "box", "mv", root + "/new.log", root + "/keep.log", "--replace", "true"]).status, 0)
        XCTAssertEqual(try String(contentsOfFile: root + "/keep.log", encoding: .utf8), "new")
        XCTAssertEqual(try termind(["sftp", "box", "mv", root + "/keep.log", root + "/a"]).status, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/a/keep.log"))

        XCTAssertEqual(try termind(["sftp", "box", "chmod", "600", root + "/a/keep.log"]).status, 0)
        XCTAssertEqual(stat(root + "/a/keep.log", &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        let badMode = try termind(["sftp", "box", "chmod", "rw-r", root + "/a/keep.log"])
        XCTAssertEqual(badMode.status, 2, badMode.stderr)
        XCTAssertTrue(badMode.stderr.contains("not an octal mode"), badMode.stderr)

        // rm -r: a tree with everything inside; a link inside is removed, what it points at stays.
        let outside = directory.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try "keep".write(toFile: outside + "/precious", atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: root + "/gone/deeper", withIntermediateDirectories: true)
        try "x".write(toFile: root + "/gone/deeper/file", atomically: false, encoding: .utf8)
        XCTAssertEqual(symlink(outside, root + "/gone/link"), 0)
        let tree = try termind(["sftp", "box", "rm", root + "/gone"])
        XCTAssertEqual(tree.status, 1)
        XCTAssertTrue(tree.stderr.contains("rm -r removes it"), tree.stderr)
        XCTAssertEqual(try json(["sftp", "box", "rm", "-r", root + "/gone"])["done"]?.arrayValue?.count, 1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/gone"))
        XCTAssertEqual(try String(contentsOfFile: outside + "/precious", encoding: .utf8), "keep")

        XCTAssertEqual(try termind(["sftp", "box", "rmdir", root + "/a/b"]).status, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/a/b"))
        let space = try json(["sftp", "box", "df", root])["space"]?.arrayValue?.first
        XCTAssertGreaterThan(space?["totalBytes"]?.intValue ?? 0, 0)
    }

    func testNamesThatAreNotUTF8AreShownEscapedAndGivenExactly() throws {
        let root = directory.file("odd")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let name: [UInt8] = Array("bad".utf8) + [0xFF] + Array("\nname".utf8)
        let path = Array((root + "/").utf8) + name + [0]
        let fd = path.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o644) }
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let listed = try json(["sftp", "box", "ls", root])
        let entry = listed["listings"]?.arrayValue?.first?["entries"]?.arrayValue?.first
        XCTAssertEqual(entry?["nameBase64"], .string(Data(name).base64EncodedString()))
        let human = try termind(["sftp", "box", "ls", root])
        XCTAssertTrue(human.stdout.contains("bad\\xFF\\x0Aname"), human.stdout)
    }

    /// `termind sftp HOST` alone: the prompt, driven on a real pseudo-terminal. Every command
    /// acts on the server's (this machine's) files from the prompt's folder; a mistake is said
    /// and the prompt goes on; Ctrl-D leaves with status 0.
    func testThePromptWorksFromItsFolderAndCtrlDLeaves() throws {
        let root = directory.file("browse")
        let local = directory.file("here")
        for folder in [root, local] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        try "remote text\n".write(toFile: root + "/notes.txt", atomically: false, encoding: .utf8)
        // A folder whose name is a pattern that matches another folder's name.
        for folder in ["run[1]", "run1"] {
            try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
            try "old\n".write(toFile: root + "/" + folder + "/old.log", atomically: false, encoding: .utf8)
        }
        try "local text\n".write(toFile: local + "/up.txt", atomically: false, encoding: .utf8)
        let argv = [FeatureHarness.buildDirectory + "/termind", "--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "sftp", "box"]
        let prompt = "sftp box:\(root)> "
        let report = try PseudoTerminal.run(argv, steps: [
            .expect("sftp box:"), .send("cd \(root)\n"), .expect(prompt),
            .send("mkdir -p 'two words'/deeper\n"), .expect(prompt),
            .send("lcd \(local)\n"), .expect(prompt),
            .send("put up.txt 'two words'\n"), .expect("1 copied"), .expect(prompt),
            .send("get notes.txt\n"), .expect("1 copied"), .expect(prompt),
            .send("mv notes.txt renamed.txt\n"), .expect(prompt),
            .send("ls\n"), .expect("renamed.txt"), .expect(prompt),
            .send("cd missing\n"), .expect("No such file"), .expect(prompt),
            .send("frobnicate\n"), .expect("'frobnicate' is not a command"), .expect(prompt),
            .send("rm 'two words'\n"), .expect("is a directory"), .expect(prompt),
            .send("pwd\n"), .expect("box:\(root)"), .expect(prompt),
            // Several folders: every listing is shown.
            .send("ls run1 'two words'\n"), .expect("\(root)/run1"), .expect("\(root)/two words"), .expect(prompt),
            // In run[1], a path is run[1]'s, never run1's (whose name the folder's matches).
            .send("cd 'run[1]'\n"), .expect("sftp box:\(root)/run[1]> "),
            .send("rm old.log\n"), .expect("sftp box:\(root)/run[1]> "),
            .send("\u{04}"),
        ], environment: environment)
        XCTAssertEqual(report.met, Array(repeating: true, count: report.met.count), report.output)
        XCTAssertEqual(report.status, 0, report.output)
        XCTAssertTrue(report.restored, "the terminal's settings are as before")
        XCTAssertEqual(try String(contentsOfFile: root + "/two words/up.txt", encoding: .utf8), "local text\n", "put went into the folder named from the prompt's")
        XCTAssertEqual(try String(contentsOfFile: local + "/notes.txt", encoding: .utf8), "remote text\n", "get came into the local folder set by lcd")
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/renamed.txt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/notes.txt"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/two words/deeper"), "the folder that rm refused is still there")
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/run[1]/old.log"), "rm in run[1] removed run[1]'s file")
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/run1/old.log"), "and not run1's")

        // Without a terminal there is nobody to type: a clear error, not a silent success.
        let alone = try termind(["sftp", "box"])
        XCTAssertEqual(alone.status, 2, alone.stderr)
        XCTAssertTrue(alone.stderr.contains("no line was read"), alone.stderr)
    }
}
