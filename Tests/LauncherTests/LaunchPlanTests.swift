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
