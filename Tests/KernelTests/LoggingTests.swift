import Foundation
import TermindCore
import TermindHarness
import XCTest

final class LoggingTests: XCTestCase {
    func testIdentifiersOutsideTheSafeAlphabetAreRedacted() {
        XCTAssertEqual(LogValue.identifier("vault.host.list@1").description, "vault.host.list@1")
        for unsafe in ["/home/alice/.ssh/id_ed25519", "hunter2 is my password", "a=b", String(repeating: "x", count: 65), "", "ключ"] {
            XCTAssertEqual(LogValue.identifier(unsafe).description, "<redacted>", unsafe)
        }
    }

    func testSecretNeverDescribesItsValue() {
        let secret = Secret("correct horse battery staple")
        XCTAssertEqual("\(secret)", "<redacted>")
        XCTAssertEqual(String(reflecting: secret), "<redacted>")
        struct Holder { var secret: Secret }
        XCTAssertFalse(String(describing: Holder(secret: secret)).contains("horse"))
        XCTAssertFalse(String(reflecting: [secret]).contains("horse"))
    }

    func testDisabledSinkWritesNothingAndLevelsFilter() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        XCTAssertFalse(LogSink.disabled().isEnabled(.error))
        let sink = try LogSink.file(at: dir.file("t.log"), level: .info)
        let logger = Logger(label: "test", sink: sink)
        logger.debug("test.hidden")
        logger.info("test.shown", ["n": .int(3), "ok": .bool(true)])
        let text = try String(contentsOfFile: dir.file("t.log"), encoding: .utf8)
        XCTAssertFalse(text.contains("test.hidden"))
        XCTAssertTrue(text.contains("info test test.shown n=3 ok=true\n"), text)
        var info = stat()
        XCTAssertEqual(stat(dir.file("t.log"), &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
    }

    func testConcurrentWritersNeverInterleaveLines() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let sink = try LogSink.file(at: dir.file("t.log"), level: .debug)
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    let logger = Logger(label: "writer\(writer)", sink: sink)
                    for i in 0..<500 { logger.debug("test.line", ["i": .int(i), "writer": .int(writer)]) }
                }
            }
        }
        let lines = try String(contentsOfFile: dir.file("t.log"), encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.count, 4000)
        let shape = try NSRegularExpression(pattern: #"^\d{4}-\d\d-\d\dT[0-9:.]+Z debug writer(\d) test\.line i=\d+ writer=(\d)$"#)
        for line in lines.map(String.init) {
            let match = shape.firstMatch(in: line, range: NSRange(line.startIndex..., in: line))
            XCTAssertNotNil(match, line)
            if let match {
                // The label and the metadata come from the same call: no torn lines.
                XCTAssertEqual(line[Range(match.range(at: 1), in: line)!], line[Range(match.range(at: 2), in: line)!], line)
            }
        }
    }
}
