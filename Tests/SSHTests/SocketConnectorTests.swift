import Foundation
import TermindCore
import TermindHarness
@testable import TermindSSH
import XCTest

/// Happy Eyeballs (RFC 8305) and cancellation in the TCP connect, against real sockets on
/// loopback: a "black-holed" address is a listener whose accept queue is full (the kernel then
/// drops further SYNs without an answer, as a firewall that drops does), bound to 127.0.0.2
/// beside a live listener on 127.0.0.1 at the same port.
final class SocketConnectorTests: XCTestCase {
    private var fds: [Int32] = []

    override func tearDown() {
        fds.forEach { close($0) }
        fds = []
    }

    private func address(_ ip: String, _ port: Int) -> SocketConnector.Address {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, ip, &a.sin_addr)
        let bytes = withUnsafeBytes(of: a) { [UInt8]($0) }
        return SocketConnector.Address(family: AF_INET, socktype: Int32(SOCK_STREAM.rawValue), proto: 0, bytes: bytes)
    }

    private func listener(_ ip: String, port: Int, backlog: Int32) throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        fds.append(fd)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, ip, &a.sin_addr)
        let bound = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, backlog) == 0 else { throw TermindError(code: "test.listen", message: "cannot listen on \(ip):\(port)") }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: actual.sin_port))
    }

    /// A listener on 127.0.0.2 whose accept queue is full: connects to it get no answer.
    private func blackHole() throws -> Int {
        let port = try listener("127.0.0.2", port: 0, backlog: 0)
        for _ in 0..<3 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            fds.append(fd)
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET, "127.0.0.2", &a.sin_addr)
            _ = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        Thread.sleep(forTimeInterval: 0.2)
        return port
    }

    private func peer(_ fd: Int32) -> String {
        var a = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) } }
        var text = [CChar](repeating: 0, count: 32)
        inet_ntop(AF_INET, &a.sin_addr, &text, 32)
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func testTheFamiliesTakeTurnsTheFirstOneFirst() {
        let four = SocketConnector.Address(family: AF_INET, socktype: 1, proto: 0, bytes: [4])
        let four2 = SocketConnector.Address(family: AF_INET, socktype: 1, proto: 0, bytes: [44])
        let six = SocketConnector.Address(family: AF_INET6, socktype: 1, proto: 0, bytes: [6])
        let six2 = SocketConnector.Address(family: AF_INET6, socktype: 1, proto: 0, bytes: [66])
        XCTAssertEqual(SocketConnector.interleave([six, six2, four, four2]).map(\.bytes), [[6], [4], [66], [44]])
        XCTAssertEqual(SocketConnector.interleave([four, four2, six]).map(\.bytes), [[4], [6], [44]])
        XCTAssertEqual(SocketConnector.interleave([]).count, 0)
        // An address literal is never looked up (a silent name server cannot hold it).
        XCTAssertEqual(SocketConnector.literal("127.0.0.1", port: 22)?.family, AF_INET)
        XCTAssertEqual(SocketConnector.literal("[::1]", port: 22)?.family, AF_INET6)
        XCTAssertEqual(SocketConnector.literal("fe80::1", port: 22)?.family, AF_INET6)
        XCTAssertNil(SocketConnector.literal("build-box.example", port: 22))
        XCTAssertNil(SocketConnector.literal("fe80::1%eth0", port: 22), "a scoped address goes through getaddrinfo")
    }

    func testABlackHoledFirstAddressCostsOneAttemptDelayNotTheDeadline() async throws {
        let port = try blackHole()
        _ = try listener("127.0.0.1", port: port, backlog: 16)
        let started = Date()
        let fd = try await SocketConnector.connect([address("127.0.0.2", port), address("127.0.0.1", port)], host: "two-addresses", port: port, within: 10)
        let elapsed = Date().timeIntervalSince(started)
        defer { close(fd) }
        XCTAssertEqual(peer(fd), "127.0.0.1")
        XCTAssertGreaterThanOrEqual(elapsed, 0.2, "the first address was tried first")
        // One attempt delay (250 ms), not the 10 s deadline; the margin is for a loaded machine.
        XCTAssertLessThan(elapsed, 2, "the live one connected after one attempt delay (\(elapsed) s)")
    }

    func testARefusedAddressMovesOnAtOnceAndTheDeadlineAndCancellationAreHonoured() async throws {
        let live = try listener("127.0.0.1", port: 0, backlog: 16)
        // 127.0.0.3 listens on nothing at that port: refused at once, the next tried without waiting.
        let fd = try await SocketConnector.connect([address("127.0.0.3", live), address("127.0.0.1", live)], host: "refused-first", port: live, within: 10)
        XCTAssertEqual(peer(fd), "127.0.0.1")
        close(fd)
        // Only a black hole: the deadline.
        let hole = try blackHole()
        var started = Date()
        do {
            _ = try await SocketConnector.connect([address("127.0.0.2", hole)], host: "black-hole", port: hole, within: 0.5)
            XCTFail("connected to a black hole")
        } catch let error as TermindError {
            XCTAssertEqual(error.code, ErrorCode.sshTimeout.rawValue)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        // Cancelled: it returns at once, long before its deadline.
        let target = [address("127.0.0.2", hole)]
        let task = Task { try await SocketConnector.connect(target, host: "black-hole", port: hole, within: 30) }
        try await Task.sleep(for: .milliseconds(100))
        started = Date()
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("connected to a black hole")
        } catch is CancellationError {}
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "at once, not at the 30 s deadline")
    }
}
