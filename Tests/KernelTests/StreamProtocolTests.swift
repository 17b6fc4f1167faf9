import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The stream protocol on the control socket (docs/contracts.md, Streams): credit for
/// events, grants for input, raw attached bytes for binary clients and base64 for plain
/// JSON ones, and many streams at once.
final class StreamProtocolTests: ControlServerTestCase {

    /// `test.count@1` emits `count` data events of `size` bytes (byte i of event n is
    /// (n + i) mod 251) with a `seq` field; `test.sink@1` waits `delay` seconds, then reads
    /// its input to the end and reports how many bytes and their checksum.
    override func registerStreams(_ server: ControlServer) {
        server.register(stream: "test.count@1") { body, session in
            let request = try JSONCoding.parse(body, source: "body")
            let count = number(request["count"]), size = number(request["size"])
            for n in 0..<count {
                await session.emit("stdout", ["seq": .integer(Int64(n))], data: Self.payload(n, size))
            }
            return Data(#"{"emitted": \#(count)}"#.utf8)
        }
        server.register(stream: "test.sink@1") { body, session in
            let delay: Double = if case .double(let seconds)? = (try JSONCoding.parse(body, source: "body"))["delay"] { seconds } else { 0 }
            try await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
            var bytes = 0, sum = 0
            for try await chunk in session.input {
                bytes += chunk.count
                sum = checksum(chunk, sum)
            }
            return Data(#"{"bytes": \#(bytes), "sum": \#(sum)}"#.utf8)
        }
    }

    static func payload(_ n: Int, _ size: Int) -> Data {
        Data((0..<size).map { UInt8(truncatingIfNeeded: (n + $0) % 251) })
    }

    func testEventsBeyondTheWindowWaitForCreditAndNoneIsLost() async throws {
        let client = try SocketClientForTest(path: path)
        defer { client.close() }
        // A plain JSON client (no "binary"): base64 data, the smallest window.
        let window = StreamSession.windowRange.lowerBound
        client.send(#"{"id": 1, "stream": "test.count@1", "window": \#(window), "body": {"count": 64, "size": 8192}}"# + "\n")
        var received: [(seq: Int64, data: Data)] = []
        var bytes = 0
        // Without credit the server stops after one window (it may overdraw by one line).
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        while let line = client.readLine() {
            let event = try JSONCoding.parse(Data(line.utf8), source: "event")
            if event["grant"] != nil { continue }  // input allowance, outside the window
            XCTAssertNil(event["ok"], "the stream ended without credit: \(line)")
            received.append((Int64(number(event["seq"], or: -1)), Data(base64Encoded: event["data"]?.stringValue ?? "") ?? Data()))
            bytes += line.utf8.count + 1
        }
        XCTAssertGreaterThan(received.count, 0)
        XCTAssertLessThan(received.count, 64)
        XCTAssertLessThan(bytes, window + 12_000, "\(bytes) bytes arrived on a \(window)-byte window without credit")

        // Credit as we read: the rest arrives, in order, unchanged.
        timeout.tv_sec = 10
        setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        client.send(#"{"id": 1, "credit": \#(bytes)}"# + "\n")
        var result: JSONValue?
        while result == nil, let line = client.readLine() {
            let event = try JSONCoding.parse(Data(line.utf8), source: "event")
            if event["ok"] != nil { result = event; break }
            received.append((Int64(number(event["seq"], or: -1)), Data(base64Encoded: event["data"]?.stringValue ?? "") ?? Data()))
            client.send(#"{"id": 1, "credit": \#(line.utf8.count + 1)}"# + "\n")
        }
        XCTAssertEqual(result?["body"]?["emitted"], .integer(64), "\(String(describing: result))")
        XCTAssertEqual(received.map(\.seq), (0..<64).map(Int64.init))
        for (n, event) in received.enumerated() { XCTAssertEqual(event.data, Self.payload(n, 8192), "event \(n)") }
    }

    func testABinaryClientGetsTheSameBytesRawAfterTheirLines() async throws {
        let collected = Box<[Data]>([])
        let reply: Data = try await runBlocking { [path] in
            let client = try ControlClient(path: path)
            return try client.stream("test.count@1", body: Data(#"{"count": 40, "size": 70000}"#.utf8), window: 64 << 10) { event in
                XCTAssertNil(event["data"], "a binary client gets no base64")
                collected.value.append(event.data ?? Data())
                return nil
            }
        }
        XCTAssertEqual(try JSONCoding.parse(reply, source: "reply")["emitted"], .integer(40))
        XCTAssertEqual(collected.value, (0..<40).map { Self.payload($0, 70000) })
    }

    func testInputIsGrantedAsItIsReadAndSendingBeyondTheGrantFailsTheStream() async throws {
        // A binary client: input in pieces the server granted, read after a pause.
        let input = Data((0..<(5 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let reply: Data = try await runBlocking { [path] in
            let client = try ControlClient(path: path)
            return try client.stream("test.sink@1", body: Data(#"{"delay": 0.3}"#.utf8), onOpen: { id in
                Thread {
                    _ = client.streamInput(id: id, input)
                    client.streamMessage(id: id, ["inputEnd": .bool(true)])
                }.start()
            }) { _ in nil }
        }
        let result = try JSONCoding.parse(reply, source: "reply")
        XCTAssertEqual(result["bytes"], .integer(Int64(input.count)))
        XCTAssertEqual(result["sum"], .integer(Int64(checksum(input, 0))), "the bytes read differ from those sent")

        // A client that ignores its grant is stopped, with a reason, not silently cut short.
        let raw = try SocketClientForTest(path: path)
        defer { raw.close() }
        raw.send(#"{"id": "x", "stream": "test.sink@1", "body": {"delay": 0.5}}"# + "\n")
        let grant = try JSONCoding.parse(Data((raw.readLine() ?? "").utf8), source: "grant")
        XCTAssertEqual(grant["grant"], .integer(Int64(StreamSession.defaultWindow)))
        let piece = Data(count: 256 << 10).base64EncodedString()
        for _ in 0..<5 { raw.send(#"{"id": "x", "input": "\#(piece)"}"# + "\n") }
        let failure = try JSONCoding.parse(Data((raw.readLine() ?? "").utf8), source: "reply")
        XCTAssertEqual(failure["ok"], .bool(false))
        XCTAssertEqual(failure["error"]?["code"], .string("stream.input_overrun"), "\(failure)")
    }

    func testSixtyFourStreamsAtOnceEachGetAllTheirEvents() async throws {
        let results = Box<[Int: Int]>([:])
        let lock = NSLock()
        await withTaskGroup(of: Void.self) { group in
            for n in 0..<64 {
                group.addTask { [path] in
                    await blocking {
                        guard let client = try? ControlClient(path: path) else { return }
                        var bytes = 0
                        let reply = try? client.stream("test.count@1", body: Data(#"{"count": 50, "size": \#(1000 + n)}"#.utf8)) { event in
                            bytes += event.data?.count ?? 0
                            return nil
                        }
                        if reply.flatMap({ try? JSONCoding.parse($0, source: "reply")["emitted"] }) == .integer(50) {
                            lock.withLock { results.value[n] = bytes }
                        }
                    }
                }
            }
        }
        XCTAssertEqual(results.value.count, 64)
        for (n, bytes) in results.value { XCTAssertEqual(bytes, 50 * (1000 + n), "stream \(n)") }
    }

    private final class Box<T>: @unchecked Sendable {
        var value: T
        init(_ value: T) { self.value = value }
    }
}

/// An order-sensitive checksum of bytes (mod 2^32), continuing from `sum`.
private func checksum(_ data: Data, _ sum: Int) -> Int {
    var sum = UInt32(truncatingIfNeeded: sum)
    data.withUnsafeBytes { for byte in $0 { sum = sum &* 31 &+ UInt32(byte) } }
    return Int(sum)
}

private func number(_ value: JSONValue?, or fallback: Int = 0) -> Int {
    if case .integer(let n)? = value { return Int(n) }
    return fallback
}
