import CurlHTTP
import Foundation
import TermindCore
import TermindHarness
import XCTest

/// termind's HTTP client (libcurl on its own thread) against a real loopback HTTP server:
/// streaming, backpressure, cancellation, deadlines, limits, redirects, proxies and TLS.
final class HTTPClientTests: XCTestCase {
    private var server: ReplayServer!
    private let client = HTTPClient()

    override func setUpWithError() throws {
        server = try ReplayServer()
    }

    override func tearDown() {
        server?.stop()
    }

    private func request(_ path: String = "/v1/stream", body: String = #"{"stream": true}"#, headers: [HTTPHeader] = [], idle: Double = 30) -> HTTPRequest {
        HTTPRequest(url: server.url + path, headers: [HTTPHeader("Content-Type", "application/json")] + headers, body: Data(body.utf8), idleTimeout: idle)
    }

    private func failure(_ body: () async throws -> Void) async -> HTTPFailure? {
        do {
            try await body()
            return nil
        } catch let failure as HTTPFailure {
            return failure
        } catch {
            XCTFail("not an HTTPFailure: \(error)")
            return nil
        }
    }

    /// Retry-After as seconds or as an HTTP date in RFC 9110's IMF-fixdate (GMT), the same
    /// instant Foundation's DateFormatter reads; anything else (another zone too) is no advice.
    func testRetryAfterIsReadAsSecondsOrAnHTTPDate() {
        func head(_ value: String) -> HTTPHead { HTTPHead(status: 429, headers: [HTTPHeader("Retry-After", value)], url: "http://127.0.0.1/") }
        let date = "Wed, 21 Oct 2015 07:28:00 GMT"
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        let when = try! XCTUnwrap(formatter.date(from: date))
        XCTAssertEqual(head(date).retryAfter(now: when.addingTimeInterval(-30)), 30)
        XCTAssertEqual(head(date).retryAfter(now: when.addingTimeInterval(30)), 0, "a date gone by: at once")
        XCTAssertEqual(head(" 120 ").retryAfter(now: when), 120)
        for bad in ["soon", "Wed, 21 Oct 2015 07:28:00 PST", "Wed, 32 Oct 2015 07:28:00 GMT", "Wed, 21 Foo 2015 07:28:00 GMT", "Wed 21 Oct 2015 07:28:00 GMT", "-5", ""] {
            XCTAssertNil(head(bad).retryAfter(now: when), bad)
        }
    }

    func testABodyArrivesPieceByPieceAsSentAndTheRequestIsSentAsGiven() async throws {
        server.enqueue(.stream(Data("data: one\n\ndata: two\n\n".utf8), piece: 5, gap: 0.05))
        let response = try await client.send(request(headers: [HTTPHeader("Authorization", "Bearer sk-test")]))
        XCTAssertEqual(response.head.status, 200)
        XCTAssertEqual(response.head.value("content-type"), "text/event-stream")
        var pieces: [Data] = []
        while let piece = try await response.next() { pieces.append(piece) }
        XCTAssertEqual(String(decoding: pieces.reduce(Data(), +), as: UTF8.self), "data: one\n\ndata: two\n\n")
        XCTAssertGreaterThan(pieces.count, 2, "paused pieces come as they arrive, not all at the end")
        let sent = try XCTUnwrap(server.requests.first)
        XCTAssertEqual(sent.method, "POST")
        XCTAssertEqual(sent.target, "/v1/stream")
        XCTAssertEqual(sent.header("authorization"), "Bearer sk-test")
        XCTAssertNil(sent.header("expect"), "no 100-continue round trip")
        XCTAssertEqual(String(decoding: sent.body, as: UTF8.self), #"{"stream": true}"#)
    }

    func testAPinnedRequestConnectsToItsAddressOnlyWhateverTheNameSays() async throws {
        // A name pinned to the server's address reaches it (no lookup of curl's own).
        server.enqueue(.body("pinned"), .body("never"))
        var named = HTTPRequest(method: "GET", url: "http://pinned.invalid:\(server.port)/x")
        named.pinned = "127.0.0.1"
        let response = try await client.send(named)
        XCTAssertEqual(response.head.status, 200)
        XCTAssertEqual(server.requests.first?.header("host"), "pinned.invalid:\(server.port)")
        // An address curl would reach that is not the pinned one gets no socket.
        var other = HTTPRequest(method: "GET", url: "http://127.0.0.1:\(server.port)/y")
        other.pinned = "127.0.0.2"
        let refused = await failure { _ = try await client.send(other) }
        XCTAssertNotNil(refused)
        XCTAssertEqual(server.requests.count, 1, "nothing was sent to the address that was not pinned")
    }

    func testAReaderThatFallsBehindHoldsTheServerBack() async throws {
        let total = 15 << 20
        server.enqueue(ReplayServer.Reply(steps: stride(from: 0, to: total, by: 1 << 16).map { _ in .bytes(Data(repeating: 0x61, count: 1 << 16)) }))
        let response = try await client.send(request())
        var read = try await response.next()?.count ?? 0
        // The reader stops: curl stops reading the socket once 256 KiB wait, and the server's
        // writes block when the socket buffers are full.
        try await Task.sleep(for: .seconds(1.5))
        let whileStalled = server.written
        XCTAssertLessThan(whileStalled, total, "the server wrote everything while nobody read")
        try await Task.sleep(for: .seconds(0.5))
        XCTAssertEqual(server.written, whileStalled, "the server kept writing while the reader was stalled")
        while let piece = try await response.next() { read += piece.count }
        XCTAssertEqual(read, total, "nothing is lost when the reader comes back")
    }

    func testCancellingTheReaderClosesTheConnection() async throws {
        server.enqueue(ReplayServer.Reply(steps: [.bytes(Data("data: a\n\n".utf8)), .hang]))
        let response = try await client.send(request())
        let reader = Task { () -> HTTPFailure? in
            do {
                while try await response.next() != nil {}
                return nil
            } catch let failure as HTTPFailure { return failure } catch { return nil }
        }
        try await Task.sleep(for: .seconds(0.3))
        reader.cancel()
        let failure = await reader.value
        XCTAssertEqual(failure?.code, HTTPErrorCode.cancelled)
        XCTAssertTrue(waitUntil(seconds: 5) { server.hangUps == 1 }, "the server never saw the client hang up")
    }

    func testASilentResponseIsGivenUpAfterItsIdleDeadlineAndAnUnreachableServerSaysSo() async throws {
        server.enqueue(ReplayServer.Reply(steps: [.bytes(Data("data: a\n\n".utf8)), .hang]))
        let response = try await client.send(request(idle: 1))
        let started = Date()
        let silent = await failure { while try await response.next() != nil {} }
        XCTAssertEqual(silent?.code, HTTPErrorCode.timeout)
        XCTAssertEqual(silent?.beforeResponse, false, "bytes had arrived")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertTrue(silent?.message.contains("sent nothing for 1 s") == true, silent?.message ?? "")

        let closed = try SSHServerFixture.freePort()
        let unreachable = await failure { _ = try await self.client.send(HTTPRequest(url: "http://127.0.0.1:\(closed)/v1/x")) }
        XCTAssertEqual(unreachable?.code, HTTPErrorCode.connect)
        XCTAssertEqual(unreachable?.beforeResponse, true)
        XCTAssertTrue(unreachable?.message.contains("http://127.0.0.1:\(closed)") == true, unreachable?.message ?? "")
        let bad = await failure { _ = try await self.client.send(HTTPRequest(url: "ftp://example.com/file")) }
        XCTAssertEqual(bad?.code, HTTPErrorCode.badURL)
    }

    func testAResponseLargerThanTheLimitIsRefused() async throws {
        server.enqueue(ReplayServer.Reply(steps: (0..<(20 << 4)).map { _ in .bytes(Data(repeating: 0x62, count: 1 << 16)) }))
        let response = try await client.send(request())
        var read = 0
        let refused = await failure { while let piece = try await response.next() { read += piece.count } }
        XCTAssertEqual(refused?.code, HTTPErrorCode.tooLarge)
        XCTAssertLessThanOrEqual(read, HTTPLimits.response)
        // Its connection is not reused half-read: the next request opens another.
        server.enqueue(.body("{}"))
        _ = try await client.send(request()).body()
        XCTAssertEqual(server.connections, 2)
    }

    func testRedirectsAreFollowedByTermindAndCredentialsStayWithTheirOrigin() async throws {
        let other = try ReplayServer()
        defer { other.stop() }
        // 307 on the same origin: followed with the body and the key.
        server.enqueue(.body("", status: 307, headers: [("Location", "/v2/stream")]), .body(#"{"ok": 1}"#))
        let same = try await client.send(request(headers: [HTTPHeader("x-api-key", "sk-same")]))
        let sameBody = try await same.body()
        XCTAssertEqual(String(decoding: sameBody, as: UTF8.self), #"{"ok": 1}"#)
        XCTAssertEqual(server.requests.map(\.target), ["/v1/stream", "/v2/stream"])
        XCTAssertEqual(server.requests.last?.header("x-api-key"), "sk-same")
        XCTAssertEqual(server.requests.last?.body, Data(#"{"stream": true}"#.utf8))
        // 308 to another origin: followed, without the key.
        server.enqueue(.body("", status: 308, headers: [("Location", other.url + "/moved")]))
        other.enqueue(.body(#"{"ok": 2}"#))
        let moved = try await client.send(request(headers: [HTTPHeader("Authorization", "Bearer sk-moved"), HTTPHeader("Cookie", "a=b")]))
        let movedBody = try await moved.body()
        XCTAssertEqual(String(decoding: movedBody, as: UTF8.self), #"{"ok": 2}"#)
        XCTAssertNil(other.requests.first?.header("authorization"), "the key went to another origin")
        XCTAssertNil(other.requests.first?.header("cookie"))
        XCTAssertEqual(other.requests.first?.header("content-type"), "application/json")
        // A rule may refuse a hop; a POST is not turned into a GET by a 302.
        server.enqueue(.body("", status: 308, headers: [("Location", other.url + "/x")]))
        let refused = await failure {
            _ = try await self.client.send(self.request()) { _, to in
                throw HTTPFailure(HTTPErrorCode.redirect, "not to \(to.origin)", beforeResponse: true)
            }
        }
        XCTAssertEqual(refused?.message, "not to \(other.url)")
        server.enqueue(.body("", status: 302, headers: [("Location", "/elsewhere")]))
        let dropped = await failure { _ = try await self.client.send(self.request()) }
        XCTAssertEqual(dropped?.code, HTTPErrorCode.redirect)
        XCTAssertTrue(dropped?.message.contains("302") == true, dropped?.message ?? "")
        // Never from https to http; never more than five hops.
        let downgrade = HTTPRequest(url: "https://api.example.com/v1/x")
        XCTAssertThrowsError(try client.redirect(downgrade, status: 307, location: "http://api.example.com/v1/x", rule: nil)) {
            XCTAssertEqual(($0 as? HTTPFailure)?.code, HTTPErrorCode.redirect)
        }
        server.answer { _ in .body("", status: 307, headers: [("Location", "/again")]) }
        let loop = await failure { _ = try await self.client.send(self.request()) }
        XCTAssertEqual(loop?.code, HTTPErrorCode.redirect)
        XCTAssertTrue(loop?.message.contains("more than 5 times") == true, loop?.message ?? "")
    }

    func testTheProxyFromTheEnvironmentIsUsedUnlessNoProxyNamesTheHost() async throws {
        let proxy = try ReplayServer()
        defer { proxy.stop() }
        proxy.enqueue(.body(#"{"via": "proxy"}"#))
        setenv("http_proxy", proxy.url, 1)
        defer { unsetenv("http_proxy"); unsetenv("no_proxy") }
        let proxied = try await client.send(HTTPRequest(method: "GET", url: "http://models.invalid/v1/models"))
        let proxiedBody = try await proxied.body()
        XCTAssertEqual(String(decoding: proxiedBody, as: UTF8.self), #"{"via": "proxy"}"#)
        XCTAssertEqual(proxy.requests.first?.target, "http://models.invalid/v1/models", "the proxy got the absolute URL")
        setenv("no_proxy", "127.0.0.1", 1)
        server.enqueue(.body(#"{"via": "direct"}"#))
        let direct = try await client.send(HTTPRequest(method: "GET", url: server.url + "/v1/models"))
        let directBody = try await direct.body()
        XCTAssertEqual(String(decoding: directBody, as: UTF8.self), #"{"via": "direct"}"#)
        XCTAssertEqual(proxy.requests.count, 1)
    }

    func testHTTPSGoesThroughTheProxyHTTPSProxyNamesAsATunnel() async throws {
        let (tls, port, directory) = try selfSignedServer()
        defer { tls.signal(SIGKILL); _ = tls.wait(); directory.remove() }
        let proxy = try ReplayServer()
        defer { proxy.stop() }
        setenv("HTTPS_PROXY", proxy.url, 1)
        defer { unsetenv("HTTPS_PROXY") }
        // The tunnel is made through the proxy; the TLS inside it still checks the server.
        let refused = await failure { _ = try await self.client.send(HTTPRequest(method: "GET", url: "https://127.0.0.1:\(port)/")) }
        XCTAssertEqual(proxy.requests.first?.method, "CONNECT")
        XCTAssertEqual(proxy.requests.first?.target, "127.0.0.1:\(port)")
        XCTAssertEqual(refused?.code, HTTPErrorCode.tls, refused?.message ?? "")
    }

    /// `openssl s_server` on a free loopback port with a certificate nobody trusts.
    private func selfSignedServer() throws -> (SpawnedProcess, Int, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let key = directory.file("key.pem"), certificate = directory.file("cert.pem")
        let made = try ProcessRunner.run("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                                                             "-out", certificate, "-days", "1", "-subj", "/CN=127.0.0.1"])
        XCTAssertEqual(made.status, 0, made.stderr)
        let port = try SSHServerFixture.freePort()
        let tls = try SpawnedProcess("/usr/bin/openssl", ["s_server", "-accept", "127.0.0.1:\(port)", "-key", key, "-cert", certificate, "-www", "-quiet"],
                                     captureOutput: true)
        XCTAssertTrue(waitUntil { (try? EchoServer.connect(host: "127.0.0.1", port: port)).map { close($0); return true } ?? false })
        return (tls, port, directory)
    }

    func testAServerWhoseCertificateIsNotTrustedIsRefused() async throws {
        let (tls, port, directory) = try selfSignedServer()
        defer { tls.signal(SIGKILL); _ = tls.wait(); directory.remove() }
        let refused = await failure { _ = try await self.client.send(HTTPRequest(method: "GET", url: "https://127.0.0.1:\(port)/")) }
        XCTAssertEqual(refused?.code, HTTPErrorCode.tls, refused?.message ?? "")
        XCTAssertEqual(refused?.beforeResponse, true)
    }
}
