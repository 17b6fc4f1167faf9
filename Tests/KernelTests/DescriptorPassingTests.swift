import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// A client's standard streams handed to a stream over the control socket (SCM_RIGHTS with
/// the open line, docs/contracts.md, Streams): the operation reads and writes them itself;
/// descriptors nobody named, too many, or named but never sent end the connection, and
/// the server keeps none of them afterwards.
final class DescriptorPassingTests: ControlServerTestCase {
    /// `test.copy@1` writes its body's "text" to the handed-over stdout and reports how many
    /// bytes it read from the handed-over stdin, with the roles it was given.
    override func registerStreams(_ server: ControlServer) {
        server.register(stream: "test.copy@1") { body, session in
            let text = (try JSONCoding.parse(body, source: "body"))["text"]?.stringValue ?? ""
            let descriptors = session.descriptors
            if let out = descriptors?.stdout { _ = text.withCString { write(out, $0, strlen($0)) } }
            var read = 0
            if let input = descriptors?.stdin {
                var buffer = [UInt8](repeating: 0, count: 4096)
                while case let n = Foundation.read(input, &buffer, buffer.count), n > 0 { read += n }
            }
            let roles = (descriptors?.roles ?? []).map { "\"\($0)\"" }.joined(separator: ",")
            return Data(#"{"read": \#(read), "roles": [\#(roles)]}"#.utf8)
        }
    }

    private func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TermindError(code: "test.pipe", message: "pipe failed") }
        return (fds[0], fds[1])
    }

    /// Everything left to read on `fd` until every writer has closed it; nil if a writer
    /// still holds it after `seconds`.
    private func readToEnd(_ fd: Int32, seconds: Int32 = 10) -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, seconds * 1000) > 0 else { return nil }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { return data }
            data.append(contentsOf: buffer[0..<n])
        }
    }

    func testAStreamWritesAndReadsTheClientsOwnDescriptors() async throws {
        let output = try makePipe()
        defer { close(output.read) }
        let input = try directory.write("input.bin", String(repeating: "x", count: 100_000))
        let inputFD = open(input, O_RDONLY)
        defer { close(inputFD) }
        let reply: Data = try await runBlocking { [path] in
            let client = try ControlClient(path: path)
            return try client.stream("test.copy@1", body: Data(#"{"text": "straight through\n"}"#.utf8),
                                     descriptors: StreamDescriptors(stdin: inputFD, stdout: output.write)) { event in
                XCTFail("no event was expected, got \(event.fields)")
                return nil
            }
        }
        close(output.write)
        let result = try JSONCoding.parse(reply, source: "reply")
        XCTAssertEqual(result["read"], .integer(100_000), "the stream read the client's standard input itself")
        XCTAssertEqual(result["roles"], .array([.string("stdin"), .string("stdout")]))
        // The end comes only once the server closed its copy: it keeps none after the stream.
        XCTAssertEqual(readToEnd(output.read).map { String(decoding: $0, as: UTF8.self) }, "straight through\n")
    }

    func testDescriptorsThatNoOpenNamesEndTheConnectionAndAreClosed() throws {
        let pipe = try makePipe()
        defer { close(pipe.read) }
        let client = try ControlClient(path: path)
        // Seven pings, each carrying a descriptor no stream open claims.
        for n in 0..<7 {
            XCTAssertTrue(client.sendRaw(Data((#"{"id": \#(n), "contract": "kernel.ping@1", "body": {"payload": "p"}}"# + "\n").utf8), descriptors: [pipe.write]))
        }
        close(pipe.write)
        var refusal: TermindError?
        var later = 0
        // Pings already taken may answer; the refusal comes, then the end of the connection.
        while let reply = try? client.readEnvelope() {
            if case .failure(let error) = reply.result { refusal = error } else if refusal != nil { later += 1 }
            if later > 7 { XCTFail("the connection is still served after the refusal"); break }
        }
        XCTAssertEqual(refusal?.code, "stream.descriptors_refused", "\(String(describing: refusal))")
        XCTAssertEqual(readToEnd(pipe.read), Data(), "the server still holds a descriptor it was sent")
    }

    func testAnOpenNamingDescriptorsThatDidNotComeClosesTheConnection() throws {
        let client = try ControlClient(path: path)
        XCTAssertTrue(client.sendRaw(Data((#"{"id": 1, "stream": "test.copy@1", "descriptors": ["stdout"], "body": {"text": "x"}}"# + "\n").utf8)))
        let reply = try client.readEnvelope()
        XCTAssertThrowsError(try reply.result.get()) { XCTAssertEqual(($0 as? TermindError)?.code, "stream.descriptors_refused") }
        XCTAssertThrowsError(try client.readEnvelope(), "the connection is closed: its framing can no longer be trusted")
    }

    func testRolesOutOfOrderOrUnknownAreRefusedAndTheirDescriptorsClosed() throws {
        for roles in [#"["stdout", "stdin"]"#, #"["stdout", "stdout"]"#, #"["tty", "stdout"]"#] {
            let pipe = try makePipe()
            defer { close(pipe.read) }
            let client = try ControlClient(path: path)
            let line = Data((#"{"id": 1, "stream": "test.copy@1", "descriptors": \#(roles), "body": {"text": "never"}}"# + "\n").utf8)
            XCTAssertTrue(client.sendRaw(line, descriptors: [pipe.write, pipe.write]))
            close(pipe.write)
            let reply = try client.readEnvelope()
            XCTAssertThrowsError(try reply.result.get(), roles) { XCTAssertEqual(($0 as? TermindError)?.code, "stream.descriptors_refused", roles) }
            XCTAssertEqual(readToEnd(pipe.read), Data(), "\(roles): nothing was written and no copy is kept")
        }
    }
}
