import Foundation
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// MCP's byte channels against a real sshd: links made by tools of an MCP session over
/// `termind serve --mcp-listen`, the bytes moved by plain HTTP requests that carry the
/// capability in a header (RawHTTP, byte by byte), through the SFTP scheduler.
final class MCPFilesTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var sshd: SSHServerFixture!
    private var serve: ServeProcess!
    private var port = 0
    private var token = ""
    private var session = ""

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        sshd = try SSHServerFixture.withNewKey(in: directory)
        serve = try ServeProcess(directory: directory, arguments: [], serveArguments: ["--mcp-listen", "127.0.0.1:0"])
        try AssistantHosts.save(on: sshd, key: directory.file("id")) { try ok($0) }
        try ok(["assistant", "tier", "--tag", "prod", "read-only"])
        try ok(["assistant", "tier", "lab", "auto"])
        let url = try JSONCoding.parse(Data(try ok(["--json", "mcp", "status"]).stdout.utf8), source: "status")["url"]?.stringValue ?? ""
        port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") ?? 0
        token = try JSONCoding.parse(Data(try ok(["--json", "mcp", "token", "show"]).stdout.utf8), source: "token")["token"]?.stringValue ?? ""
        let hello = try mcp(#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"files","version":"1"}}}"#)
        session = try XCTUnwrap(hello.header("mcp-session-id"))
    }

    override func tearDown() {
        _ = serve?.stop()
        sshd?.stop()
        directory?.remove()
    }

    private var environment: [String: String] { ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock")) }

    @discardableResult
    private func ok(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
        let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind", ["--socket", serve.socketPath] + arguments, environment: environment)
        XCTAssertEqual(result.status, 0, "termind \(arguments.joined(separator: " ")): \(result.stdout)\(result.stderr)", file: file, line: line)
        return result
    }

    private func mcp(_ body: String) throws -> RawHTTP.Response {
        var headers = ["Authorization": "Bearer \(token)", "Content-Type": "application/json", "Accept": "application/json, text/event-stream"]
        if !session.isEmpty { headers["Mcp-Session-Id"] = session }
        return try RawHTTP.send(port: port, method: "POST", path: "/mcp", headers: headers, body: Data(body.utf8))
    }

    /// A tool call of the session: its result (isError, structuredContent, text).
    private func call(_ name: String, _ arguments: [String: JSONValue]) throws -> JSONValue {
        let body: JSONValue = .object(["jsonrpc": .string("2.0"), "id": .integer(7), "method": .string("tools/call"),
                                       "params": .object(["name": .string(name), "arguments": .object(arguments)])])
        let response = try mcp(String(decoding: try JSONCoding.encode(body), as: UTF8.self))
        // Said whole when there is no result (a JSON-RPC error, an HTTP status), so that a
        // failure names its cause (a clean clone once saw a link call answer without one).
        XCTAssertNotNil(response.json?["result"], "\(name): HTTP \(response.status): \(String(decoding: response.body.prefix(2000), as: UTF8.self))")
        return response.json?["result"] ?? .null
    }

    private func link(_ name: String, _ arguments: [String: JSONValue]) throws -> (id: String, capability: String) {
        let result = try call(name, arguments)
        XCTAssertEqual(result["isError"], .bool(false), "\(result)")
        let link = result["structuredContent"] ?? .null
        return (link["id"]?.stringValue ?? "", link["headers"]?["Termind-Capability"]?.stringValue ?? "")
    }

    private func status(_ id: String) throws -> JSONValue { try call("sftp_link_status", ["id": .string(id)])["structuredContent"] ?? .null }

    func testADownloadLinkServesTheFileResumesWithARangeAndRefusesWhatItShould() throws {
        let file = directory.file("big.bin")
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        try bytes.write(to: URL(fileURLWithPath: file))
        // Offered to the session, with the other tools.
        let listed = try mcp(#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).json?["result"]?["tools"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        XCTAssertTrue(listed.contains("sftp_download_link") && listed.contains("sftp_upload_link") && listed.contains("sftp_link_status"), "\(listed)")
        // A read-only host still reads.
        let (id, capability) = try link("sftp_download_link", ["host": .string("web-1"), "path": .string(file)])
        XCTAssertEqual(try status(id)["state"], .string("ready"), "making a link touches no host")
        let whole = try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": capability])
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.header("content-length"), "\(bytes.count)")
        XCTAssertEqual(whole.body, bytes)
        XCTAssertTrue(waitUntil(seconds: 10) { (try? self.status(id)["state"]) == .string("completed") }, "\((try? status(id)) ?? .null)")
        // Resume from a byte, after success as well.
        let tail = try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": capability, "Range": "bytes=1000000-"])
        XCTAssertEqual(tail.status, 206)
        XCTAssertEqual(tail.header("content-range"), "bytes 1000000-\(bytes.count - 1)/\(bytes.count)")
        XCTAssertEqual(tail.body, bytes.subdata(in: 1_000_000..<bytes.count))
        // Ranges it does not take: 416, and the link still works.
        for range in ["bytes=0-10", "bytes=-5", "bytes=1-,5-", "items=0-", "bytes=\(bytes.count + 5)-"] {
            XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": capability, "Range": range]).status, 416, range)
        }
        XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": capability, "Range": "bytes=3145000-"]).body,
                       bytes.subdata(in: 3_145_000..<bytes.count))
        // Without the header, with a wrong one, in a query, or with HEAD.
        XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: [:]).status, 401)
        XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": String(repeating: "B", count: 43)]).status, 404)
        XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download?capability=\(capability)", headers: [:]).status, 400)
        XCTAssertEqual(try RawHTTP.send(port: port, method: "HEAD", path: "/files/download", headers: ["Termind-Capability": capability]).status, 405)
        // Not a regular file: a JSON error before any header of a body.
        let (folderLink, folderCapability) = try link("sftp_download_link", ["host": .string("lab"), "path": .string(directory.path)])
        let folder = try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": folderCapability])
        XCTAssertEqual(folder.status, 502)
        XCTAssertTrue(folder.json?["error"]?.stringValue?.contains("not a regular file") == true, "\(String(decoding: folder.body, as: UTF8.self))")
        XCTAssertEqual(try status(folderLink)["state"], .string("failed"))
        // The session ends: its links are revoked.
        XCTAssertEqual(try RawHTTP.send(port: port, method: "DELETE", path: "/mcp", headers: ["Authorization": "Bearer \(token)", "Mcp-Session-Id": session]).status, 204)
        XCTAssertEqual(try RawHTTP.send(port: port, method: "GET", path: "/files/download", headers: ["Termind-Capability": capability]).status, 410)
        // The transfers went through the scheduler, as rows of the session.
        let rows = try ok(["transfers"]).stdout
        XCTAssertTrue(rows.contains("mcp-http-files-"), rows)
    }

    func testAnUploadCommitsOnlyTheExactBytesResumesAfterACutAndIsNeverReplayed() throws {
        let bytes = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
        let hash = Digest.sha256(bytes).hexEncoded
        let target = directory.file("uploaded.bin")
        // A read-only host refuses the link itself.
        let refused = try call("sftp_upload_link", ["host": .string("web-1"), "path": .string(target), "size": .integer(Int64(bytes.count)), "sha256": .string(hash)])
        XCTAssertEqual(refused["isError"], .bool(true))
        XCTAssertTrue(refused["content"]?.arrayValue?.first?["text"]?.stringValue?.contains("read-only") == true, "\(refused)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "the refused link wrote nothing")

        // A cut upload: the client sends part of the body and goes away.
        let (id, capability) = try link("sftp_upload_link", ["host": .string("lab"), "path": .string(target), "size": .integer(Int64(bytes.count)), "sha256": .string(hash)])
        let cut = try RawHTTP.open(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": capability, "Content-Length": "\(bytes.count)"],
                                   body: bytes.prefix(400_000))
        // A second claim while the first is going is refused.
        XCTAssertEqual(try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": capability], body: bytes).status, 409)
        cut.close()
        XCTAssertTrue(waitUntil(seconds: 10) { (try? self.status(id)["state"]) == .string("paused") }, "\((try? status(id)) ?? .null)")
        let acknowledged = Int(try status(id)["bytes"]?.intValue ?? -1)
        XCTAssertGreaterThan(acknowledged, 0)
        // Without a link nothing below can be checked (and the slice would trap the process).
        guard acknowledged > 0, acknowledged <= bytes.count else { return }
        XCTAssertLessThanOrEqual(acknowledged, 400_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "nothing committed yet")
        // A resume at another offset is told the right one.
        let wrong = try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": capability, "Upload-Offset": "0"], body: bytes)
        XCTAssertEqual(wrong.status, 409)
        XCTAssertEqual(wrong.header("upload-offset"), "\(acknowledged)")
        let resumed = try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": capability, "Upload-Offset": "\(acknowledged)"],
                                       body: bytes.subdata(in: acknowledged..<bytes.count))
        XCTAssertEqual(resumed.status, 200, String(decoding: resumed.body, as: UTF8.self))
        XCTAssertEqual(resumed.json?["committed"], .bool(true))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: target)), bytes)
        XCTAssertEqual(try status(id)["state"], .string("completed"))
        // Never replayed.
        XCTAssertEqual(try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": capability], body: bytes).status, 409)

        // Bytes whose hash is not the link's: nothing is committed, no partial is left.
        let other = directory.file("other.bin")
        let (badID, badCapability) = try link("sftp_upload_link", ["host": .string("lab"), "path": .string(other), "size": .integer(Int64(bytes.count)),
                                                                   "sha256": .string(String(repeating: "0", count: 64))])
        let mismatch = try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": badCapability], body: bytes)
        XCTAssertEqual(mismatch.status, 422)
        XCTAssertEqual(mismatch.json?["committed"], .bool(false))
        XCTAssertFalse(FileManager.default.fileExists(atPath: other))
        XCTAssertEqual(try status(badID)["state"], .string("failed"))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains("other.bin") }
        XCTAssertEqual(leftovers, [], "no temporary file is left")
        // An existing file is kept unless replace is true.
        let (_, keepCapability) = try link("sftp_upload_link", ["host": .string("lab"), "path": .string(target), "size": .integer(3), "sha256": .string(Digest.sha256(Data("abc".utf8)).hexEncoded)])
        XCTAssertNotEqual(try RawHTTP.send(port: port, method: "PUT", path: "/files/upload", headers: ["Termind-Capability": keepCapability], body: Data("abc".utf8)).status, 200)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: target)), bytes)
        // The audit has the executions, never the bytes or the capabilities.
        let audit = try ok(["--json", "assistant", "audit"]).stdout
        XCTAssertTrue(audit.contains("sftp_upload_link"))
        XCTAssertFalse(audit.contains(capability) || audit.contains(badCapability))
    }
}

extension RawHTTP {
    /// A request whose body is sent only in part, its connection left open (`close` ends it).
    final class Open {
        let fd: Int32
        init(fd: Int32) { self.fd = fd }
        func close() { Glibc.close(fd) }
    }

    static func open(port: Int, method: String, path: String, headers: [String: String], body: Data) throws -> Open {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { throw TermindError(code: "test.connect", message: "cannot connect") }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
        var request = Data((head + "\r\n").utf8)
        request.append(body)
        _ = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
        // The server has read what was sent before the test goes on.
        Thread.sleep(forTimeInterval: 0.5)
        return Open(fd: fd)
    }
}
