import Foundation
import LoopbackHTTP
import Synchronization
import TermindCore
import TermindCrypto
import TermindHarness
import XCTest

/// The loopback HTTP server (libmicrohttpd) with streamed bodies both ways, spoken to byte by
/// byte (RawHTTP): what the byte channels stand on.
final class LoopbackHTTPTests: XCTestCase {
    /// Pieces of a known pattern; throws after `failAfter` pieces when set.
    final class Pattern: HTTPBodySource {
        let pieces: Int
        let failAfter: Int?
        let state = Mutex((given: 0, finished: Bool?.none))
        init(pieces: Int, failAfter: Int? = nil) {
            self.pieces = pieces
            self.failAfter = failAfter
        }
        static func piece(_ index: Int) -> Data { Data(repeating: UInt8(truncatingIfNeeded: index * 7 + 1), count: 65536) }
        func next(limit: Int) async throws -> Data? {
            let index = state.withLock { state -> Int in defer { state.given += 1 }; return state.given }
            if let failAfter, index >= failAfter { throw CancellationError() }
            guard index < pieces else { return nil }
            XCTAssertLessThanOrEqual(65536, limit)
            return Self.piece(index)
        }
        func finished(complete: Bool) async { state.withLock { $0.finished = complete } }
    }

    /// Counts and hashes what it is given; stops taking pieces after `stopAfter` bytes.
    final class Hasher: HTTPBodySink {
        let stopAfter: Int?
        let state = Mutex((bytes: 0, pieces: 0, data: Data()))
        init(stopAfter: Int? = nil) { self.stopAfter = stopAfter }
        func receive(_ chunk: Data) async -> Bool {
            try? await Task.sleep(for: .milliseconds(1))
            return state.withLock { state in
                state.bytes += chunk.count
                state.pieces += 1
                state.data.append(chunk)
                return stopAfter.map { state.bytes < $0 } ?? true
            }
        }
        func finish() async -> HTTPServerResponse {
            let (bytes, data) = state.withLock { ($0.bytes, $0.data) }
            return HTTPServerResponse(status: 200, body: Data("\(bytes) \(Digest.sha256(data).hexEncoded)".utf8))
        }
    }

    func testAStreamedResponseIsSentWholeAndOneCutShortClosesTheConnection() async throws {
        let whole = Pattern(pieces: 40), cut = Pattern(pieces: 40, failAfter: 3)
        let server = try LoopbackHTTPServer(address: "127.0.0.1", port: 0, bodyLimit: 1024) { request in
            let source = request.path == "/cut" ? cut : whole
            return HTTPServerResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], length: 40 * 65536, source: source)
        }
        let port = server.port
        let response = try await Task.detached { try RawHTTP.send(port: port, method: "GET", path: "/whole", headers: [:]) }.value
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.header("content-length"), "\(40 * 65536)")
        XCTAssertEqual(response.body, (0..<40).reduce(into: Data()) { $0.append(Pattern.piece($1)) })
        let short = try await Task.detached { try RawHTTP.send(port: port, method: "GET", path: "/cut", headers: [:]) }.value
        XCTAssertEqual(short.status, 200)
        XCTAssertEqual(short.body.count, 3 * 65536, "what was produced, then the connection closed")
        XCTAssertTrue(waitUntil(seconds: 5) { whole.state.withLock { $0.finished } == true && cut.state.withLock { $0.finished } == false })
        await server.stop()
    }

    func testAStreamedRequestBodyGoesToItsSinkPastTheBufferedCapAndASinkMayStopIt() async throws {
        let sinks = Mutex<[String: Hasher]>([:])
        let server = try LoopbackHTTPServer(address: "127.0.0.1", port: 0, bodyLimit: 1024, streamer: { request in
            guard request.path.hasPrefix("/up") else { return nil }
            let sink = Hasher(stopAfter: request.path == "/up-stop" ? 100_000 : nil)
            sinks.withLock { $0[request.path] = sink }
            return sink
        }) { _ in HTTPServerResponse(status: 200, body: Data("buffered".utf8)) }
        let port = server.port
        let body = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let response = try await Task.detached { try RawHTTP.send(port: port, method: "PUT", path: "/up", headers: [:], body: body) }.value
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(String(decoding: response.body, as: UTF8.self), "\(body.count) \(Digest.sha256(body).hexEncoded)")
        XCTAssertGreaterThan(sinks.withLock { $0["/up"]?.state.withLock { $0.pieces } ?? 0 }, 1, "the body came in pieces")
        let stopped = try await Task.detached { try RawHTTP.send(port: port, method: "PUT", path: "/up-stop", headers: [:], body: body) }.value
        XCTAssertEqual(stopped.status, 200)
        let taken = Int(String(decoding: stopped.body, as: UTF8.self).split(separator: " ").first ?? "") ?? 0
        XCTAssertGreaterThanOrEqual(taken, 100_000)
        XCTAssertLessThan(taken, body.count, "the rest was read and dropped")
        // Not streamed: the cap holds.
        let capped = try await Task.detached { try RawHTTP.send(port: port, method: "POST", path: "/other", headers: [:], body: Data(count: 4096)) }.value
        XCTAssertEqual(capped.status, 413)
        await server.stop()
    }
}
