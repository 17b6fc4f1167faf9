import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// `termind edit HOST:PATH` end to end against a real sshd on loopback, whose files are this
/// machine's: every remote effect is checked on the local file system. The "editor" is a
/// script given as EDITOR; questions are answered from --answers files, as a script would.
final class EditFeatureTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        server = try SSHServerFixture.withNewKey(in: directory)
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

    private func json(_ arguments: [String], status: Int32 = 0) throws -> JSONValue {
        let result = try termind(["--json"] + arguments)
        XCTAssertEqual(result.status, status, "termind \(arguments.joined(separator: " ")): \(result.stderr)")
        return try JSONCoding.parse(Data(result.stdout.utf8), source: "termind's output")
    }

    /// The saved host `box` with the fixture's key, trusted.
    private func saveHosts() throws {
        XCTAssertEqual(try termind(["vault", "key", "import", directory.file("id"), "--label", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "identity", "add", NSUserName(), "--key", "ci"]).status, 0)
        XCTAssertEqual(try termind(["vault", "host", "add", "127.0.0.1", "--label", "box", "--port", "\(server.port)", "--identity", NSUserName()]).status, 0)
        XCTAssertEqual(try termind(["vault", "knownhost", "add", "127.0.0.1", try XCTUnwrap(server.hostKeys["ssh-ed25519"]), "--port", "\(server.port)"]).status, 0)
    }

    private func digest(_ path: String) throws -> String {
        Digest.sha256(try Data(contentsOf: URL(fileURLWithPath: path))).hexEncoded
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    // MARK: -

    func testEditUploadsConfirmedChangesAndNeverOverAChangedRemoteFileSilently() throws {
        try saveHosts()
        let remote = directory.file("srv/app.conf")
        try FileManager.default.createDirectory(atPath: directory.file("srv"), withIntermediateDirectories: true)
        try "port = 80\n".write(toFile: remote, atomically: false, encoding: .utf8)
        chmod(remote, 0o640)
        // The "editor" appends a line; with MESS set it also changes the remote file meanwhile.
        let editor = try directory.write("editor.sh", """
            #!/bin/sh
            echo "$LINE" >> "$1"
            [ -n "$MESS" ] && echo "changed by someone else" >> "$MESS"
            exit 0
            """)
        chmod(editor, 0o755)
        func edit(_ extra: [String], line: String, mess: String? = nil, answers: String? = nil) throws -> (ProcessResult, JSONValue?) {
            var env = environment
            env["VISUAL"] = nil
            env["EDITOR"] = editor
            env["LINE"] = line
            env["MESS"] = mess
            let pre = answers.map { ["--answers", try! directory.write("answers-\(line).json", $0)] } ?? []
            let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + ["--json"] + pre + ["edit", "box:" + remote] + extra, environment: env)
            return (result, try? JSONCoding.parse(Data(result.stdout.utf8), source: "edit"))
        }
        let (first, done) = try edit(["--upload", "true"], line: "workers = 4")
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(done?["state"], .string("uploaded"))
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "port = 80\nworkers = 4\n")
        XCTAssertEqual(mode(remote), 0o640, "permissions kept")
        let local = try XCTUnwrap(done?["localPath"]?.stringValue)
        XCTAssertEqual(mode(local), 0o600)
        XCTAssertEqual(mode((local as NSString).deletingLastPathComponent), 0o700)
        XCTAssertEqual(done?["acknowledged"]?.stringValue, try digest(remote))

        // The remote file changes while the editor is open: asked, answered no, nothing replaced.
        let (second, kept) = try edit([], line: "debug = true", mess: remote,
                                      answers: #"{"sftp.edit.upload": true, "sftp.edit.remoteChanged": false}"#)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(kept?["state"], .string("kept"))
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "port = 80\nworkers = 4\nchanged by someone else\n")
        let listed = try json(["edit", "list"])["copies"]?.arrayValue?.first
        XCTAssertEqual(listed?["state"], .string("dirty"))
        XCTAssertEqual(listed?["path"]?.stringValue, remote)

        // Next time the unsent edits are kept, and replacing the changed file is confirmed.
        let (third, replaced) = try edit([], line: "log = info", answers: #"{"sftp.edit.localChanges": "keep", "sftp.edit.upload": true, "sftp.edit.remoteChanged": true}"#)
        XCTAssertEqual(third.status, 0, third.stderr)
        XCTAssertEqual(replaced?["state"], .string("uploaded"))
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "port = 80\nworkers = 4\ndebug = true\nlog = info\n")
        XCTAssertEqual(try json(["edit", "list"])["copies"]?.arrayValue?.first?["state"], .string("clean"))

        // Not confirmed (nobody to ask): the change stays local.
        let (fourth, unsent) = try edit([], line: "x = 1")
        XCTAssertEqual(fourth.status, 0, fourth.stderr)
        XCTAssertEqual(unsent?["state"], .string("kept"))
        XCTAssertFalse(try String(contentsOfFile: remote, encoding: .utf8).contains("x = 1"))

        // Discard: tracking stops, the copy stays; the next edit downloads anew.
        XCTAssertEqual(try json(["edit", "discard", "box:" + remote])["state"], .string("dirty"))
        XCTAssertEqual(try json(["edit", "list"])["copies"]?.arrayValue?.count, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: local))
        let (fifth, fresh) = try edit(["--upload", "true"], line: "y = 2")
        XCTAssertEqual(fifth.status, 0, fifth.stderr)
        XCTAssertEqual(fresh?["state"], .string("uploaded"))
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "port = 80\nworkers = 4\ndebug = true\nlog = info\ny = 2\n")

        // Only regular files.
        let folder = try termind(["edit", "box:" + directory.file("srv")])
        XCTAssertEqual(folder.status, 1)
        XCTAssertTrue(folder.stderr.contains("not a regular file"), folder.stderr)
    }

    func testEditWatchUploadsEachSave() throws {
        try saveHosts()
        let remote = directory.file("watched.txt")
        try "one\n".write(toFile: remote, atomically: false, encoding: .utf8)
        let editor = try directory.write("saver.sh", """
            #!/bin/sh
            echo two >> "$1"; sleep 1.5
            echo three >> "$1"; sleep 1.5
            """)
        chmod(editor, 0o755)
        var env = environment
        env["EDITOR"] = editor
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + ["--json", "edit", "box:" + remote, "--watch", "true"], environment: env)
        XCTAssertEqual(result.status, 0, result.stderr)
        let done = try JSONCoding.parse(Data(result.stdout.utf8), source: "edit")
        XCTAssertEqual(done["state"], .string("uploaded"))
        XCTAssertEqual(done["uploads"], .integer(2), result.stderr)
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "one\ntwo\nthree\n")
    }
}
