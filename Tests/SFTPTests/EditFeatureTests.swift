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
        try TermindCLI(environment: environment, leading: location).saveHosts(["box"], server: server, key: directory.file("id"))
    }

    private func digest(_ path: String) throws -> String {
        Digest.sha256(try Data(contentsOf: URL(fileURLWithPath: path))).hexEncoded
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    /// An "editor" that appends `$LINE` to the file it is given, then runs `$MEANWHILE` (a
    /// shell line standing for someone else changing the server's files) when set.
    private func appender() throws -> String {
        let editor = try directory.write("appender.sh", """
            #!/bin/sh
            echo "$LINE" >> "$1"
            [ -n "$MEANWHILE" ] && sh -c "$MEANWHILE"
            exit 0
            """)
        chmod(editor, 0o755)
        return editor
    }

    /// `termind --json edit box:PATH` with the appender as EDITOR, answering from `answers`
    /// (a JSON object by topic) when given.
    private func edit(_ path: String, _ extra: [String] = [], line: String, meanwhile: String? = nil, answers: String? = nil) throws -> (ProcessResult, JSONValue?) {
        var env = environment
        env["VISUAL"] = nil
        env["EDITOR"] = try appender()
        env["LINE"] = line
        env["MEANWHILE"] = meanwhile
        let pre = try answers.map { ["--answers", try directory.write("answers-\(UUID().uuidString).json", $0)] } ?? []
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", location + ["--json"] + pre + ["edit", "box:" + path] + extra, environment: env)
        return (result, try? JSONCoding.parse(Data(result.stdout.utf8), source: "edit"))
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
        XCTAssertEqual(second.status, 1, "the upload said yes to did not happen: \(second.stderr)")
        XCTAssertEqual(kept?["state"], .string("kept"))
        XCTAssertEqual(kept?["exitStatus"], .integer(1))
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

    /// A symbolic link (sites-enabled/x, a stow-managed dotfile) is never replaced: edit
    /// opens and uploads the file it leads to, resolved on the server, and the link stays
    /// as it was. What is not a regular file fails closed, saying what it is; a file that
    /// became a link while the editor was open is not replaced, even when replacing a
    /// changed file is confirmed.
    func testEditThroughASymbolicLinkChangesTheFileItLeadsToAndNeverTheLink() throws {
        try saveHosts()
        let srv = directory.file("srv")
        for folder in ["available", "enabled"] { try FileManager.default.createDirectory(atPath: srv + "/" + folder, withIntermediateDirectories: true) }
        let real = srv + "/available/site.conf", link = srv + "/enabled/site.conf"
        try "listen 80\n".write(toFile: real, atomically: false, encoding: .utf8)
        chmod(real, 0o640)
        XCTAssertEqual(symlink("../available/site.conf", link), 0)

        let (result, done) = try edit(link, ["--upload", "true"], line: "listen 443")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(done?["state"], .string("uploaded"))
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link), "../available/site.conf", "the link is still the same link")
        XCTAssertEqual(try String(contentsOfFile: real, encoding: .utf8), "listen 80\nlisten 443\n", "the file it leads to has the change")
        XCTAssertEqual(mode(real), 0o640)
        XCTAssertEqual(done?["acknowledged"]?.stringValue, try digest(real))
        XCTAssertTrue(result.stderr.contains("a symbolic link to box:\(real)"), result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: srv + "/available"), ["site.conf"], "no temporary left beside it")

        // What is not a regular file — itself or behind a link — fails closed, saying what it is.
        XCTAssertEqual(mkfifo(srv + "/pipe", 0o644), 0)
        XCTAssertEqual(symlink("available", srv + "/folder-link"), 0)
        XCTAssertEqual(symlink("pipe", srv + "/pipe-link"), 0)
        XCTAssertEqual(symlink("gone.conf", srv + "/broken"), 0)
        for (name, said) in [("available", "is a directory, not a regular file"), ("folder-link", "(a symbolic link to box:\(srv)/available) is a directory"),
                             ("pipe", "is a special file"), ("pipe-link", "(a symbolic link to box:\(srv)/pipe) is a special file"),
                             ("broken", "is a symbolic link to box:\(srv)/gone.conf, which does not exist")] {
            let (refused, _) = try edit(srv + "/" + name, ["--upload", "true"], line: "never")
            XCTAssertEqual(refused.status, 1, "\(name): \(refused.stderr)")
            XCTAssertTrue(refused.stdout.contains(said), "\(name): \(refused.stdout)")
        }
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: srv + "/broken"), "gone.conf")
        XCTAssertFalse(FileManager.default.fileExists(atPath: srv + "/gone.conf"))

        // A file that becomes a link while the editor is open is not replaced, even when
        // replacing a changed file is confirmed: the link and what it leads to stay as they are.
        let plain = srv + "/enabled/plain.conf"
        try "a\n".write(toFile: plain, atomically: false, encoding: .utf8)
        let (swapped, kept) = try edit(plain, ["--upload", "true"], line: "b", meanwhile: "rm '\(plain)' && ln -s ../available/site.conf '\(plain)'",
                                       answers: #"{"sftp.edit.remoteChanged": true}"#)
        XCTAssertEqual(swapped.status, 1, swapped.stderr)
        XCTAssertEqual(kept?["error"]?["code"], .string("sftp.failed"))
        XCTAssertTrue(swapped.stdout.contains("is now a symbolic link"), swapped.stdout)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: plain), "../available/site.conf")
        XCTAssertEqual(try String(contentsOfFile: real, encoding: .utf8), "listen 80\nlisten 443\n")
        XCTAssertEqual(try json(["edit", "list"])["copies"]?.arrayValue?.first { $0["path"]?.stringValue == plain }?["state"], .string("dirty"))
    }

    private func owner(_ path: String) -> String {
        var info = stat()
        return lstat(path, &info) == 0 ? "\(info.st_uid):\(info.st_gid)" : "gone"
    }

    /// Root's edit keeps the file's owner and group (a service reading its 0640 config keeps
    /// its access); mode too. `--upload true` whose upload is declined exits 1.
    func testEditAsRootKeepsTheOwnerGroupAndModeAndAnUploadNotDoneExitsOne() throws {
        try XCTSkipUnless(getuid() == 0, "needs root to give a file to another user")
        try saveHosts()
        let remote = directory.file("etc/service.conf")
        try FileManager.default.createDirectory(atPath: directory.file("etc"), withIntermediateDirectories: true)
        try "port = 80\n".write(toFile: remote, atomically: false, encoding: .utf8)
        XCTAssertEqual(chown(remote, 4242, 4343), 0)
        chmod(remote, 0o640)

        let (done, uploaded) = try edit(remote, ["--upload", "true"], line: "workers = 4")
        XCTAssertEqual(done.status, 0, done.stderr)
        XCTAssertEqual(uploaded?["state"], .string("uploaded"))
        XCTAssertEqual(uploaded?["exitStatus"], .integer(0))
        XCTAssertEqual(try String(contentsOfFile: remote, encoding: .utf8), "port = 80\nworkers = 4\n")
        XCTAssertEqual(owner(remote), "4242:4343", "the owner and group are the file's, not the uploader's")
        XCTAssertEqual(mode(remote), 0o640)

        // --upload true, the file changed meanwhile and replacing it declined: nothing uploaded, status 1.
        let (declined, kept) = try edit(remote, ["--upload", "true"], line: "debug = true", meanwhile: "echo 'by someone else' >> '\(remote)'",
                                        answers: #"{"sftp.edit.remoteChanged": false}"#)
        XCTAssertEqual(declined.status, 1, declined.stderr)
        XCTAssertEqual(kept?["state"], .string("kept"))
        XCTAssertFalse(try String(contentsOfFile: remote, encoding: .utf8).contains("debug = true"))
    }

    /// The server's user may not give a file away (sftp-server runs as `nobody`, in its own
    /// group and in group 4343): a group it is in is kept; another owner cannot be, so it asks —
    /// nobody to ask (or no) and nothing is uploaded, status 1; yes, and the new owner is said.
    func testEditThatCannotKeepTheOwnerAsksAndByDefaultUploadsNothing() throws {
        try XCTSkipUnless(getuid() == 0, "needs root to start sftp-server as another user")
        let nobody = try XCTUnwrap(getpwnam("nobody")?.pointee, "sftp-server needs a user in the password database")
        let (uid, gid) = (nobody.pw_uid, nobody.pw_gid)
        server.stop()
        let key = try String(contentsOfFile: directory.file("id.pub"), encoding: .utf8)
        server = try SSHServerFixture(authorizedKeys: [key], extraConfig: [
            "Subsystem sftp /usr/bin/setpriv --reuid=\(uid) --regid=\(gid) --groups=4343 /usr/lib/openssh/sftp-server",
        ])
        try saveHosts()
        let etc = directory.file("etc")
        try FileManager.default.createDirectory(atPath: etc, withIntermediateDirectories: true)
        XCTAssertEqual(chown(etc, uid, gid), 0)

        // Its own file in another of its groups: that group is kept.
        let own = etc + "/own.conf"
        try "a = 1\n".write(toFile: own, atomically: false, encoding: .utf8)
        XCTAssertEqual(chown(own, uid, 4343), 0)
        chmod(own, 0o640)
        let (kept, keptResult) = try edit(own, ["--upload", "true"], line: "b = 2")
        XCTAssertEqual(kept.status, 0, kept.stdout + kept.stderr)
        XCTAssertEqual(keptResult?["state"], .string("uploaded"))
        XCTAssertEqual(owner(own), "\(uid):4343")
        XCTAssertEqual(mode(own), 0o640)

        // Someone else's file its group may write: the owner cannot be kept.
        let theirs = etc + "/theirs.conf"
        try "x = 1\n".write(toFile: theirs, atomically: false, encoding: .utf8)
        XCTAssertEqual(chown(theirs, 4444, gid), 0)
        chmod(theirs, 0o664)
        let (refused, refusedResult) = try edit(theirs, ["--upload", "true"], line: "y = 2")
        XCTAssertEqual(refused.status, 1, refused.stdout + refused.stderr)
        XCTAssertEqual(refusedResult?["state"], .string("kept"))
        XCTAssertEqual(refusedResult?["exitStatus"], .integer(1))
        XCTAssertTrue(refused.stderr.contains("belongs to 4444:\(gid)") && refused.stderr.contains("sftp.edit.owner"), refused.stderr)
        XCTAssertEqual(try String(contentsOfFile: theirs, encoding: .utf8), "x = 1\n")
        XCTAssertEqual(owner(theirs), "4444:\(gid)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: etc).sorted(), ["own.conf", "theirs.conf"], "no temporary left")

        // Answered yes: uploaded, and the change of owner is said.
        let (changed, changedResult) = try edit(theirs, ["--upload", "true"], line: "z = 3",
                                                answers: #"{"sftp.edit.localChanges": "keep", "sftp.edit.owner": true}"#)
        XCTAssertEqual(changed.status, 0, changed.stdout + changed.stderr)
        XCTAssertEqual(changedResult?["state"], .string("uploaded"))
        XCTAssertEqual(try String(contentsOfFile: theirs, encoding: .utf8), "x = 1\ny = 2\nz = 3\n")
        XCTAssertEqual(owner(theirs), "\(uid):\(gid)")
        XCTAssertEqual(mode(theirs), 0o664)
        XCTAssertTrue(changed.stderr.contains("now belongs to \(uid):\(gid)"), changed.stderr)
    }
}
