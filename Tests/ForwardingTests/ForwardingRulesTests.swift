import ForwardingRules
import Foundation
import PortForwardingAPI
import TermindCore
import XCTest

/// The pure rules of port forwarding: ssh's -L/-R/-D spec grammar, the SOCKS server's
/// handshake, the supervisor's retry schedule.
final class ForwardSpecTests: XCTestCase {
    func testLocalSpecsAsSshWritesThem() throws {
        XCTAssertEqual(try ForwardSpec.parse("8080:db:5432", kind: .local),
                       ForwardSpec(kind: .local, bindAddress: "127.0.0.1", bindPort: 8080, targetHost: "db", targetPort: 5432))
        XCTAssertEqual(try ForwardSpec.parse("0.0.0.0:8080:db.internal:5432", kind: .local).bindAddress, "0.0.0.0")
        XCTAssertEqual(try ForwardSpec.parse("*:8080:db:5432", kind: .local).bindAddress, "0.0.0.0")
        XCTAssertEqual(try ForwardSpec.parse(":8080:db:5432", kind: .local).bindAddress, "0.0.0.0")
        XCTAssertEqual(try ForwardSpec.parse("localhost:8080:db:5432", kind: .local).bindAddress, "127.0.0.1")
        // IPv6 in brackets, on either side.
        let v6 = try ForwardSpec.parse("[::1]:8080:[fd00::5]:80", kind: .local)
        XCTAssertEqual(v6, ForwardSpec(kind: .local, bindAddress: "::1", bindPort: 8080, targetHost: "fd00::5", targetPort: 80))
        XCTAssertEqual(v6.description, "[::1]:8080:[fd00::5]:80")
        // ssh's older slash form.
        XCTAssertEqual(try ForwardSpec.parse("8080/db/5432", kind: .local).targetHost, "db")
    }

    func testRemoteAndDynamicSpecs() throws {
        let remote = try ForwardSpec.parse("0:localhost:3000", kind: .remote)
        XCTAssertEqual(remote.bindPort, 0, "the server picks")
        XCTAssertEqual(remote.targetHost, "localhost")
        XCTAssertEqual(try ForwardSpec.parse("1080", kind: .dynamic), ForwardSpec(kind: .dynamic, bindAddress: "127.0.0.1", bindPort: 1080))
        XCTAssertEqual(try ForwardSpec.parse("[::1]:1080", kind: .dynamic).bindAddress, "::1")
    }

    func testMalformedSpecsNameTheSpecAndTheProblem() {
        func message(_ text: String, _ kind: ForwardKind) -> String {
            do {
                _ = try ForwardSpec.parse(text, kind: kind)
                return "accepted"
            } catch let error as TermindError {
                XCTAssertEqual(error.code, ErrorCode.forwardingBadSpec.rawValue)
                return error.message
            } catch { return "\(error)" }
        }
        XCTAssertTrue(message("8080:db", .local).contains("-L '8080:db'"), message("8080:db", .local))
        XCTAssertTrue(message("70000:db:1", .local).contains("'70000' is not a port"))
        XCTAssertTrue(message("0:db:1", .local).contains("'0' is not a port"), "only a remote rule lets the server pick")
        XCTAssertTrue(message("8080:db:0", .local).contains("target port"))
        XCTAssertTrue(message("8080::5432", .local).contains("target host is empty"))
        XCTAssertTrue(message("8080", .remote).contains("not supported"))
        XCTAssertTrue(message("8080:/tmp/sock", .local).contains("Unix socket"))
        XCTAssertTrue(message("[::1:8080:db:1", .local).contains("not closed"))
        XCTAssertTrue(message("8080:d b:1", .local).contains("no spaces"))
        XCTAssertTrue(message("1080:x:1", .dynamic).contains("[BIND:]PORT"))
        XCTAssertTrue(message("", .dynamic).contains("1 to 1024 bytes"))
        XCTAssertTrue(message("a1080", .dynamic).contains("not a port"))
    }

    /// Issue 34: a second outage soon after a recovery started at 2 s (the first outage's
    /// successful attempt had used the 1 s step), so its attempts came 2, 5, 10, 30 s apart.
    func testEveryOutageRetriesAfter1_2_5_10_30AndOnlyADroppedConnectionGoesOn() {
        var schedule = RetrySchedule()
        XCTAssertEqual((0..<7).map { _ in schedule.next() }, [1, 2, 5, 10, 30, 30, 30])

        // Recovered at the first attempt; the new connection held 8 s, then was lost too.
        schedule = RetrySchedule()
        XCTAssertEqual(schedule.next(), 1)
        schedule.connectionEnded(after: 8)
        XCTAssertEqual((0..<6).map { _ in schedule.next() }, [1, 2, 5, 10, 30, 30], "a new outage, a new schedule")

        // A long outage, then a loss a minute later: from the start as well.
        schedule.connectionEnded(after: 61)
        XCTAssertEqual(schedule.next(), 1)

        // A connection the server dropped at once did not hold: the delays go on growing.
        schedule = RetrySchedule()
        XCTAssertEqual([schedule.next(), schedule.next()], [1, 2])
        schedule.connectionEnded(after: RetrySchedule.holdSeconds - 0.5)
        XCTAssertEqual(schedule.next(), 5)
        schedule.connectionEnded(after: RetrySchedule.holdSeconds)
        XCTAssertEqual(schedule.next(), 1)
    }
}

final class SOCKSHandshakeTests: XCTestCase {
    func testSOCKS5ConnectByNameIPv4AndIPv6() {
        var h = SOCKSHandshake()
        XCTAssertEqual(h.feed([5, 2, 2, 0]), .more(reply: [5, 0]), "no-auth chosen among the offered methods")
        let name = Array("db.internal".utf8)
        XCTAssertEqual(h.feed([5, 1, 0, 3, UInt8(name.count)] + name + [0x15, 0x38]), .connect(host: "db.internal", port: 5432, version: .five))
        XCTAssertEqual(h.success, [5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
        XCTAssertEqual(h.failure(refused: true)[1], 5)
        XCTAssertEqual(h.failure(refused: false)[1], 1)

        var v4 = SOCKSHandshake()
        _ = v4.feed([5, 1, 0])
        XCTAssertEqual(v4.feed([5, 1, 0, 1, 10, 0, 0, 7, 0, 80]), .connect(host: "10.0.0.7", port: 80, version: .five))

        var v6 = SOCKSHandshake()
        _ = v6.feed([5, 1, 0])
        XCTAssertEqual(v6.feed([5, 1, 0, 4] + [0xfd, 0] + [UInt8](repeating: 0, count: 13) + [5] + [0, 22]), .connect(host: "fd00::5", port: 22, version: .five))
    }

    func testBytesArrivingOneAtATimeAndPipelinedRequests() {
        var h = SOCKSHandshake()
        let bytes: [UInt8] = [5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0x1F, 0x90, 0xAA, 0xBB]
        var steps: [SOCKSHandshake.Step] = []
        for byte in bytes.prefix(13) { steps.append(h.feed([byte])) }
        XCTAssertEqual(steps[2], .more(reply: [5, 0]))
        XCTAssertEqual(steps.last, .connect(host: "127.0.0.1", port: 8080, version: .five))

        // The greeting and the request in one segment, with data behind: the method reply
        // comes before the connect's, and the data belongs to the flow.
        var pipelined = SOCKSHandshake()
        XCTAssertEqual(pipelined.feed(bytes), .connect(host: "127.0.0.1", port: 8080, version: .five))
        XCTAssertEqual(pipelined.success, [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
        XCTAssertEqual(pipelined.leftover, [0xAA, 0xBB])
    }

    func testSOCKS4And4a() {
        var four = SOCKSHandshake()
        XCTAssertEqual(four.feed([4, 1, 0, 80, 192, 168, 1, 9] + Array("bob".utf8) + [0]), .connect(host: "192.168.1.9", port: 80, version: .four))
        XCTAssertEqual(four.success, [0, 0x5A, 0, 0, 0, 0, 0, 0])
        XCTAssertEqual(four.failure(refused: true), [0, 0x5B, 0, 0, 0, 0, 0, 0])

        var fourA = SOCKSHandshake()
        XCTAssertEqual(fourA.feed([4, 1, 0x01, 0xBB, 0, 0, 0, 1, 0]), .more(reply: []), "the name is still to come")
        XCTAssertEqual(fourA.feed(Array("example.org".utf8) + [0]), .connect(host: "example.org", port: 443, version: .four))
    }

    func testRefusals() {
        func refusal(_ bytes: [UInt8]) -> (reply: [UInt8], reason: String)? {
            var h = SOCKSHandshake()
            guard case .refuse(let reply, let reason) = h.feed(bytes) else { return nil }
            return (reply, reason)
        }
        XCTAssertEqual(refusal([5, 1, 2])?.reply, [5, 0xFF], "username/password only: no acceptable method")
        XCTAssertEqual(refusal([5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80])?.reply.suffix(10).first, 5, "BIND is refused with SOCKS5's reply")
        XCTAssertEqual(refusal([5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80])?.reply[3], 7, "command not supported")
        XCTAssertEqual(refusal([5, 1, 0, 5, 1, 0, 9])?.reply, [5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0], "the method choice, then 'address type not supported'")
        XCTAssertTrue(refusal([5, 1, 0, 5, 1, 0, 9])?.reason.contains("address type 9") == true)
        XCTAssertEqual(refusal([4, 2, 0, 80, 1, 2, 3, 4, 0])?.reply, [0, 0x5B, 0, 0, 0, 0, 0, 0])
        XCTAssertTrue(refusal([0x47, 0x45, 0x54])?.reason.contains("not a SOCKS request") == true, "an HTTP client on the SOCKS port")
        XCTAssertTrue(refusal([5, 1, 0, 5, 1, 0, 3, 0, 0, 80])?.reason.contains("empty") == true)
        XCTAssertTrue(refusal([5, 1, 0, 5, 1, 0, 1, 1, 2, 3, 4, 0, 0])?.reason.contains("port 0") == true)
    }

    func testAHandshakeIsBounded() {
        // A SOCKS4 user id that never ends.
        var h = SOCKSHandshake()
        var step = h.feed([4, 1, 0, 80, 1, 2, 3, 4])
        var fed = 8
        while case .more = step, fed <= SOCKSHandshake.maximumBytes + 10 {
            step = h.feed([UInt8](repeating: 0x41, count: 100))
            fed += 100
        }
        guard case .refuse(_, let reason) = step else { return XCTFail("unbounded: \(step)") }
        XCTAssertTrue(reason.contains("longer than"), reason)
        XCTAssertLessThanOrEqual(fed, SOCKSHandshake.maximumBytes + 100)
    }
}
