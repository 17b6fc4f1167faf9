import Foundation
import TermindCore
import TermindKernel
import XCTest

final class EnvelopeTests: XCTestCase {
    private func reject(_ text: String) -> Envelope.RejectedRequest? {
        if case .failure(let rejected) = Envelope.parseRequest(Data(text.utf8)) { return rejected }
        return nil
    }

    func testParsesARequestAndKeepsItsID() throws {
        let request = try Envelope.parseRequest(Data(#"{"id": "a1", "contract": "kernel.ping@1", "body": {"payload": "x"}}"#.utf8)).get()
        XCTAssertEqual(request.id, .string("a1"))
        XCTAssertEqual(request.contract, "kernel.ping@1")
        XCTAssertEqual(try JSONCoding.parse(request.body, source: "t"), .object(["payload": .string("x")]))
    }

    func testMalformedEnvelopesAreRejectedWithAReasonAndTheIDWhenReadable() {
        XCTAssertEqual(reject("not json")?.error.code, "envelope.malformed")
        XCTAssertEqual(reject("[1]")?.error.message.contains("must be a JSON object"), true)
        XCTAssertEqual(reject(#"{"id": 7, "body": {}}"#)?.id, .integer(7))
        XCTAssertEqual(reject(#"{"id": 7, "body": {}}"#)?.error.message.contains("no \"contract\""), true)
        XCTAssertEqual(reject(#"{"id": 7, "contract": "a@1", "bdy": {}}"#)?.error.message.contains("unknown field \"bdy\""), true)
    }

    func testRepliesRoundTrip() throws {
        let ok = try Envelope.parseReply(Envelope.success(id: .integer(3), body: Data(#"{"a":1}"#.utf8)).dropLast())
        XCTAssertEqual(ok.id, .integer(3))
        XCTAssertEqual(try JSONCoding.parse(try ok.result.get(), source: "t"), .object(["a": .integer(1)]))
        let failed = try Envelope.parseReply(Envelope.failure(id: .string("x"), error: .unknownContract("a@1")).dropLast())
        XCTAssertThrowsError(try failed.result.get()) { XCTAssertEqual(($0 as? TermindError)?.code, "contract.unknown") }
    }
}
