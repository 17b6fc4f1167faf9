import Foundation
@testable import TermindLauncher
import XCTest

/// The launcher's side of a conversation with a server, against a scripted server on a real
/// Unix socket: lines that arrive together are each handled, questions are answered with
/// their askID, and the reply's exit code (or `local`) is what it returns.
final class LauncherConversationTests: XCTestCase {
    private var folder = ""
    private var listener: Int32 = -1

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "launcher-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array((folder + "/s").utf8)) }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(listen(listener, 4), 0)
    }

    override func tearDown() {
        close(listener)
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Connects a launcher socket, lets `script` play the server on the accepted end, and
    /// returns what the launcher's loop ended with — nil if it did not end within 10 s. The
    /// server's end is then shut down (a script waiting in `recv` returns) and closed.
    private func converse(_ script: @escaping @Sendable (Int32) -> Void) throws -> Launcher.Outcome? {
        let socket = try XCTUnwrap(LauncherSocket(path: folder + "/s"))
        let server = accept(listener, nil, nil)
        XCTAssertGreaterThanOrEqual(server, 0)
        let scripted = DispatchSemaphore(value: 0), served = DispatchSemaphore(value: 0)
        Thread { script(server); scripted.signal() }.start()
        let outcome = Box()
        let held = Held(socket)
        Thread { outcome.value = Launcher.serve(held.socket, terminal: LauncherTerminal()); served.signal() }.start()
        let ended = served.wait(timeout: .now() + 10) == .success
        shutdown(server, Int32(SHUT_RDWR))
        scripted.wait()
        if ended { close(server) }  // else the launcher's thread may still read it
        return ended ? outcome.value : nil
    }

    private final class Box: @unchecked Sendable { var value: Launcher.Outcome? }
    private final class Held: @unchecked Sendable {
        let socket: LauncherSocket
        init(_ socket: LauncherSocket) { self.socket = socket }
    }

    private static func send(_ fd: Int32, _ text: String) { _ = text.withCString { Glibc.send(fd, $0, strlen($0), 0) } }

    private static func readLine(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1, byte != 10 { bytes.append(byte) }
        return String(decoding: bytes, as: UTF8.self)
    }

    func testLinesThatArriveInOneReadAreAllHandled() throws {
        // The grant and the reply in one write, and the server keeps the connection open.
        let outcome = try converse { server in
            Self.send(server, "{\"id\":1,\"grant\":1048576}\n{\"id\":1,\"ok\":true,\"body\":{\"exitCode\":7}}\n")
            var byte: UInt8 = 0
            _ = recv(server, &byte, 1, 0)  // open until the launcher has ended (or 10 s)
        }
        guard case .exit(let code)? = outcome else { return XCTFail("the launcher did not end on the reply: \(String(describing: outcome))") }
        XCTAssertEqual(code, 7)
    }

    func testQuestionsAreAnsweredByAskIDAndUnknownOnesAreUnavailable() throws {
        let answers = LockedStrings()
        let outcome = try converse { server in
            Self.send(server, "{\"id\":1,\"event\":\"ask\",\"askID\":5,\"ask\":{\"op\":\"restore\"}}\n{\"id\":1,\"event\":\"ask\",\"askID\":6,\"ask\":{\"op\":\"teleport\"}}\n")
            answers.append(Self.readLine(server))
            answers.append(Self.readLine(server))
            Self.send(server, "{\"id\":1,\"ok\":true,\"body\":{\"local\":true}}\n")
        }
        guard case .inProcess? = outcome else { return XCTFail("\(String(describing: outcome))") }
        XCTAssertEqual(answers.values, [#"{"answer":{"askID":5,"done":true},"id":1}"#, #"{"answer":{"askID":6,"unavailable":true},"id":1}"#])
    }

    func testAServerThatClosesBeforeReplyingLeavesTheOutcomeUnknownAndOneThatFailsIsReported() throws {
        let lost = try converse { server in
            Self.send(server, "{\"id\":1,\"grant\":1}\n")
            shutdown(server, Int32(SHUT_WR))
        }
        guard case .failed(let message)? = lost else { return XCTFail("\(String(describing: lost))") }
        XCTAssertTrue(message.contains("outcome is unknown"), message)
        // Closed before any line: nothing ran, so the command runs in the launcher's process.
        guard case .inProcess? = try converse({ shutdown($0, Int32(SHUT_WR)) }) else { return XCTFail("a server that closed at once") }
        let old = try converse { server in
            Self.send(server, "{\"id\":1,\"ok\":false,\"error\":{\"code\":\"stream.unknown\",\"message\":\"no\"}}\n")
        }
        guard case .inProcess? = old else { return XCTFail("\(String(describing: old))") }
        let refused = try converse { server in
            Self.send(server, "{\"id\":1,\"ok\":false,\"error\":{\"code\":\"request.invalid\",\"message\":\"bad words\"}}\n")
        }
        guard case .failed("bad words")? = refused else { return XCTFail("\(String(describing: refused))") }
    }

    private final class LockedStrings: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [String] = []
        func append(_ item: String) { lock.withLock { items.append(item) } }
        var values: [String] { lock.withLock { items } }
    }
}
