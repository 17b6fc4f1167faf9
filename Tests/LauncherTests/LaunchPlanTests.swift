import Foundation
import TermindHelpText
import TermindLauncher
import XCTest

/// Which commands the launcher offers a running server, where it looks for it, and what of
/// the environment it sends along.
final class LaunchPlanTests: XCTestCase {
    func testTheSocketIsFoundAsTheFullClientFindsIt() {
        XCTAssertEqual(LaunchPlan.decide(["features"], environment: [:], uid: 1000), .server(socket: "/tmp/termind-1000/control.sock"))
        XCTAssertEqual(LaunchPlan.decide(["features"], environment: ["XDG_RUNTIME_DIR": "/run/user/7"], uid: 7),
                       .server(socket: "/run/user/7/termind/control.sock"))
        XCTAssertEqual(LaunchPlan.decide(["features"], environment: ["XDG_RUNTIME_DIR": "relative"], uid: 7), .server(socket: "/tmp/termind-7/control.sock"))
        XCTAssertEqual(LaunchPlan.decide(["x"], environment: ["TERMIND_SOCKET": "/s/a", "XDG_RUNTIME_DIR": "/run"], uid: 7), .server(socket: "/s/a"))
        XCTAssertEqual(LaunchPlan.decide(["--socket", "/s/b", "x"], environment: ["TERMIND_SOCKET": "/s/a"], uid: 7), .server(socket: "/s/b"))
        XCTAssertEqual(LaunchPlan.decide(["x", "--socket=/s/c"], environment: [:], uid: 7), .server(socket: "/s/c"))
    }

    func testCommandsThatShapeTheirOwnBootRunInProcess() {
        for words in [["--local", "features"], ["--plugins", "/p", "digest", "f"], ["--registry=/r.json", "features"], ["x", "--features", "vault"]] {
            XCTAssertEqual(LaunchPlan.decide(words, environment: [:], uid: 1), .inProcess, "\(words)")
        }
        XCTAssertEqual(LaunchPlan.decide(["features"], environment: ["TERMIND_PLUGINS": "/p"], uid: 1), .inProcess)
        XCTAssertNotEqual(LaunchPlan.decide(["features"], environment: ["TERMIND_PLUGINS": ""], uid: 1), .inProcess)
        // After `--` the words are the remote command's.
        XCTAssertEqual(LaunchPlan.decide(["exec", "box", "--", "ls", "--local"], environment: [:], uid: 1), .server(socket: "/tmp/termind-1/control.sock"))
    }

    func testVariablesThatMayHoldASecretStayBehind() {
        let sent = LaunchPlan.forwardedEnvironment(["TERM": "xterm", "LANG": "C.UTF-8", "TMUX": "/t,1,0", "AWS_SECRET_ACCESS_KEY": "s",
                                                    "GITHUB_TOKEN": "t", "PGPASSWORD": "p", "SSH_AUTH_SOCK": "/a", "MY_CREDENTIALS": "c",
                                                    "api_key": "k"])
        XCTAssertEqual(Set(sent.keys), ["TERM", "LANG", "TMUX"])
    }
}

/// The general help the launcher writes itself when no server takes it.
final class LauncherHelpTests: XCTestCase {
    func testOnlyTheGeneralHelpOfAnUnshapedBootIsTheLaunchers() {
        for words in [[], ["help"], ["--help"], ["-h"], ["--json", "help"], ["--store", "/s.db", "--debug", "-h"], ["--socket=/s", "help", "--local"]] {
            XCTAssertTrue(LauncherHelp.request(words, environment: [:]), "\(words)")
        }
        for words in [["help", "vault"], ["vault", "--help"], ["features", "--help"], ["--registry", "/r.json", "help"], ["--plugins=/p", "help"],
                      ["--features", "vault", "-h"], ["version"], ["--store"], ["--store=", "help"], ["--plugin-isolation", "bogus", "help"],
                      ["--verbose", "help"]] {
            XCTAssertFalse(LauncherHelp.request(words, environment: [:]), "\(words)")
        }
        XCTAssertFalse(LauncherHelp.request(["help"], environment: ["TERMIND_PLUGINS": "/p"]))
        XCTAssertTrue(LauncherHelp.request(["help"], environment: ["TERMIND_PLUGINS": ""]))
    }

    func testAFeatureIsListedWhenItsLibraryIsThereAndARegistryThatIsNotOneIsLeftToTheClient() throws {
        let folder = "/tmp/termind-launcher-help-\(getpid())"
        mkdir(folder, 0o700)
        defer { unlink(folder + "/libthere.so"); rmdir(folder) }
        XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/libthere.so", contents: Data()))
        let registry = #"""
        {"schema": 1, "features": [
          {"id": "there", "library": "libthere.so", "help": {"title": "Here", "rank": 2},
           "commands": [{"name": "there go", "arguments": ["host", "command..."], "summary": "Go there: HOST"}],
           "serveOptions": [{"name": "there-port", "value": "PORT", "summary": "Where"}]},
          {"id": "gone", "library": "libgone.so", "commands": [{"name": "gone x", "arguments": []}]},
          {"id": "there", "library": "libthere.so", "commands": [{"name": "there twice", "arguments": []}]}
        ]}
        """#
        let features = try XCTUnwrap(LauncherHelp.features(registry: Array(registry.utf8), folder: folder))
        XCTAssertEqual(features.map(\.id), ["there"], "a missing library is left out, a repeated id counts once")
        XCTAssertEqual(features.first?.title, "Here")
        XCTAssertEqual(features.first?.rank, 2)
        XCTAssertEqual(features.first?.commands, [HelpText.Command(name: "there go", arguments: ["host", "command..."], summary: "Go there: HOST")])
        XCTAssertEqual(features.first?.serveOptions.map(\.name), ["there-port"])
        let text = HelpText.general(features)
        // Usage padded to 30 columns, then the summary's gist.
        XCTAssertTrue(text.contains("Here (there):\n  there go HOST [-- COMMAND...]   Go there\n  serve --there-port PORT         Where\n"), text)
        XCTAssertNil(LauncherHelp.features(registry: Array("[1, 2]".utf8), folder: folder))
        XCTAssertNil(LauncherHelp.features(registry: Array("{\"features\": ".utf8), folder: folder))
    }
}
