import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// Clients that send requests but never read the replies, against a real `termind serve`
/// process whose memory is read from /proc: the server stops reading a connection whose
/// reply queue is over its bound, so memory stays bounded and other clients are served.
final class ControlServerFloodTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        try directory.write("Registry.json", #"{"schema": 1, "features": []}"#)
    }

    override func tearDown() {
        directory?.remove()
    }

    func testNonReadingFloodersKeepTheServerWithinItsMemoryBoundWhileOthersAreServed() throws {
        let server = try ServeProcess(directory: directory, arguments: ["--registry", directory.file("Registry.json")])
        defer { server.stop() }
        let pinger = try ControlClient(path: server.socketPath)
        for i in 0..<50 { _ = try pinger.call("kernel.ping@1", body: Data(#"{"payload": "warm-up \#(i)"}"#.utf8)) }
        let baseline = server.residentBytes()
        XCTAssertGreaterThan(baseline, 0, "VmRSS of the server is readable")

        // Four clients pipeline 4 KiB pings as fast as the server takes them and never read.
        let stop = FloodSwitch()
        let sent = FloodCounter()
        var flooders: [SocketClientForTest] = []
        for _ in 0..<4 {
            let flooder = try SocketClientForTest(path: server.socketPath)
            flooders.append(flooder)
            Thread {
                let line = Envelope.encodeRequest(id: .integer(1), contract: "kernel.ping@1",
                                                  body: Data(#"{"payload":"\#(String(repeating: "x", count: 4096))"}"#.utf8))
                // Non-blocking sends, so the thread notices the end of the test while the server holds back.
                let flags = fcntl(flooder.fd, F_GETFL)
                _ = fcntl(flooder.fd, F_SETFL, flags | O_NONBLOCK)
                var offset = 0
                while !stop.isOn {
                    let n = line.withUnsafeBytes { send(flooder.fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                    if n > 0 {
                        offset += n
                        if offset == line.count { offset = 0; sent.add(1) }
                    } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                        usleep(1000)
                    } else {
                        return
                    }
                }
            }.start()
        }

        // Meanwhile another client is served, and the server's memory is sampled.
        var peak = baseline
        var slowest = 0.0
        let end = Date().addingTimeInterval(6)
        var i = 0
        while Date() < end {
            let started = Date()
            let reply = try pinger.call("kernel.ping@1", body: Data(#"{"payload": "during \#(i)"}"#.utf8))
            slowest = max(slowest, Date().timeIntervalSince(started))
            XCTAssertEqual(try JSONCoding.parse(reply, source: "ping")["payload"], .string("during \(i)"))
            peak = max(peak, server.residentBytes())
            i += 1
            Thread.sleep(forTimeInterval: 0.05)
        }
        stop.turnOn()
        let growth = peak - baseline
        // The bound: ControlServer.maximumQueuedReplyBytes (1 MiB) of replies plus 32 requests in
        // flight and a 4 MiB line buffer per connection; 32 MiB for four flooders is generous (about 9 MiB measured).
        XCTAssertLessThan(growth, 32 << 20, "RSS grew by \(growth >> 20) MiB under the flood (baseline \(baseline >> 20) MiB, \(sent.value) requests sent)")
        XCTAssertGreaterThan(sent.value, 200, "the flooders did send")
        XCTAssertLessThan(slowest, 2, "another client waited \(slowest) s for a ping during the flood")
        for flooder in flooders { flooder.close() }
        // The server is still fine afterwards.
        XCTAssertEqual(try JSONCoding.parse(try pinger.call("kernel.ping@1", body: Data(#"{"payload": "after"}"#.utf8)), source: "ping")["payload"], .string("after"))
    }
}

final class FloodSwitch: @unchecked Sendable {
    private let lock = NSLock()
    private var on = false
    func turnOn() { lock.withLock { on = true } }
    var isOn: Bool { lock.withLock { on } }
}

final class FloodCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add(_ n: Int) { lock.withLock { count += n } }
    var value: Int { lock.withLock { count } }
}
