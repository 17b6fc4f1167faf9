import AssistantRules
import XCTest

/// The byte channels' records as a pure state machine, the clock passed in: lifetimes,
/// claims, limits and revocation without a socket or a host.
final class LinkBookTests: XCTestCase {
    private func key(_ n: Int) -> String { String(repeating: "\(n % 10)", count: 8) + "-\(n)" }

    func testALinkExpiresTenMinutesAfterItWasMadeUnlessItIsMovingBytes() throws {
        var book = LinkBook()
        let link = try book.create(.download, key: key(1), host: "h", path: "/f", owner: "mcp-a-1", now: 1000)
        XCTAssertEqual(link.expires, 1600)
        guard case .success(let claimed) = book.claim(key(1), direction: .download, range: nil, offset: nil, length: nil, now: 1599) else { return XCTFail("claim") }
        // Still moving at expiry: it finishes; once done it expires as any other.
        XCTAssertEqual(book.prune(now: 1700), [])
        XCTAssertTrue(book.release(key(1), generation: claimed.generation, to: .completed, now: 1700) { $0.bytes = 10 })
        guard case .failure(let expired) = book.claim(key(1), direction: .download, range: "bytes=5-", offset: nil, length: nil, now: 1701) else { return XCTFail("expired") }
        XCTAssertEqual(expired.status, 410)
        // Unused and expired: revoked, and kept thirty minutes for its status, then gone.
        _ = try book.create(.upload, key: key(2), host: "h", path: "/u", owner: "mcp-a-1", size: 3, sha256: String(repeating: "a", count: 64), now: 1000)
        XCTAssertEqual(book.prune(now: 1601), [key(2)])
        XCTAssertEqual(book.status("u2", owner: "mcp-a-1", now: 1700)?.state, .revoked)
        XCTAssertNil(book.status("u2", owner: "mcp-a-1", now: 1601 + 1801))
        XCTAssertNil(book.status("d1", owner: "mcp-b-2", now: 1700), "another session's link is not shown")
    }

    func testAClaimIsOneAtATimeARangeItDoesNotTakeLeavesTheLinkAndOldReleasesChangeNothing() throws {
        var book = LinkBook()
        _ = try book.create(.download, key: key(1), host: "h", path: "/f", owner: "o", now: 0)
        XCTAssertEqual(try? book.claim(key(1), direction: .download, range: "bytes=0-9", offset: nil, length: nil, now: 1).get(), nil)
        XCTAssertEqual(book.links[key(1)]?.state, .ready, "416 does not use the link")
        guard case .success(let first) = book.claim(key(1), direction: .download, range: "bytes=100-", offset: nil, length: nil, now: 1) else { return XCTFail("claim") }
        guard case .failure(let busy) = book.claim(key(1), direction: .download, range: nil, offset: nil, length: nil, now: 2) else { return XCTFail("parallel") }
        XCTAssertEqual(busy.status, 409)
        guard case .failure(let other) = book.claim(key(1), direction: .upload, range: nil, offset: nil, length: "1", now: 2) else { return XCTFail("direction") }
        XCTAssertEqual(other.status, 404, "the other direction does not know it")
        XCTAssertTrue(book.release(key(1), generation: first.generation, to: .paused, now: 3))
        guard case .success(let second) = book.claim(key(1), direction: .download, range: "bytes=200-", offset: nil, length: nil, now: 4) else { return XCTFail("again") }
        XCTAssertFalse(book.release(key(1), generation: first.generation, to: .failed, now: 5), "a late release of the first claim")
        XCTAssertEqual(book.links[key(1)]?.state, .active)
        XCTAssertTrue(book.release(key(1), generation: second.generation, to: .completed, now: 6))
        XCTAssertEqual(book.activeCount, 0)
    }

    func testAnUploadResumesOnlyAtTheAcknowledgedOffsetAndIsNeverReplayed() throws {
        var book = LinkBook()
        _ = try book.create(.upload, key: key(1), host: "h", path: "/u", owner: "o", size: 100, sha256: String(repeating: "b", count: 64), now: 0)
        guard case .failure(let short) = book.claim(key(1), direction: .upload, range: nil, offset: nil, length: "60", now: 1) else { return XCTFail() }
        XCTAssertEqual(short.status, 409, "a fresh upload sends all 100 bytes")
        guard case .success(let first) = book.claim(key(1), direction: .upload, range: nil, offset: nil, length: "100", now: 1) else { return XCTFail() }
        book.release(key(1), generation: first.generation, to: .paused, now: 2) { $0.bytes = 40 }
        guard case .failure(let wrong) = book.claim(key(1), direction: .upload, range: nil, offset: "0", length: "100", now: 3) else { return XCTFail() }
        XCTAssertEqual(wrong.headers["Upload-Offset"], "40")
        guard case .success(let resumed) = book.claim(key(1), direction: .upload, range: nil, offset: "40", length: "60", now: 3) else { return XCTFail() }
        book.release(key(1), generation: resumed.generation, to: .completed, now: 4) { $0.bytes = 100 }
        guard case .failure(let replay) = book.claim(key(1), direction: .upload, range: nil, offset: "100", length: "0", now: 5) else { return XCTFail() }
        XCTAssertEqual(replay.status, 409)
    }

    func testFourLinksMoveAtOnceAndEachDirectionKeeps64UnfinishedAnd256Finished() throws {
        var book = LinkBook()
        for n in 0..<64 { _ = try book.create(.download, key: key(n), host: "h", path: "/f\(n)", owner: "o", now: 0) }
        XCTAssertThrowsError(try book.create(.download, key: key(64), host: "h", path: "/x", owner: "o", now: 0))
        _ = try book.create(.upload, key: key(100), host: "h", path: "/u", owner: "o", size: 0, sha256: String(repeating: "c", count: 64), now: 0)
        var claims: [LinkBook.Link] = []
        for n in 0..<4 { if case .success(let link) = book.claim(key(n), direction: .download, range: nil, offset: nil, length: nil, now: 1) { claims.append(link) } }
        XCTAssertEqual(claims.count, 4)
        guard case .failure(let full) = book.claim(key(4), direction: .download, range: nil, offset: nil, length: nil, now: 1) else { return XCTFail() }
        XCTAssertEqual(full.status, 503)
        XCTAssertEqual(full.headers["Retry-After"], "2")
        for claim in claims { book.release(claim.key, generation: claim.generation, to: .failed, now: 2) }
        // Finished ones: at most 256, the oldest going first.
        var book2 = LinkBook()
        for n in 0..<257 {
            let link = try book2.create(.download, key: key(1000 + n), host: "h", path: "/f", owner: "o", now: Double(n))
            guard case .success(let claimed) = book2.claim(link.key, direction: .download, range: nil, offset: nil, length: nil, now: Double(n)) else { return XCTFail() }
            book2.release(link.key, generation: claimed.generation, to: .completed, now: Double(n))
        }
        XCTAssertNil(book2.links[key(1000)], "the oldest finished link made room")
        XCTAssertEqual(book2.links.values.filter { $0.state == .completed }.count, 256)
    }

    func testRevokingASessionEndsItsLinksAndOnlyThem() throws {
        var book = LinkBook()
        _ = try book.create(.download, key: key(1), host: "h", path: "/f", owner: "a", now: 0)
        _ = try book.create(.download, key: key(2), host: "h", path: "/f", owner: "b", now: 0)
        guard case .success(let claimed) = book.claim(key(1), direction: .download, range: nil, offset: nil, length: nil, now: 1) else { return XCTFail() }
        XCTAssertEqual(book.revoke(owner: "a", now: 2), [key(1)])
        XCTAssertEqual(book.takeRevoked(), [key(1)], "what a caller must drop is handed over once")
        XCTAssertEqual(book.takeRevoked(), [])
        XCTAssertEqual(book.activeCount, 0)
        XCTAssertFalse(book.release(key(1), generation: claimed.generation, to: .completed, now: 3), "the revoked claim's end changes nothing")
        guard case .failure(let gone) = book.claim(key(1), direction: .download, range: nil, offset: nil, length: nil, now: 4) else { return XCTFail() }
        XCTAssertEqual(gone.status, 410)
        XCTAssertEqual(book.links[key(2)]?.state, .ready)
        XCTAssertEqual(book.revoke(owner: nil, now: 5), [key(2)])
    }

    func testRangesAndOffsets() {
        XCTAssertEqual(ByteChannelRules.rangeStart(nil), .some(0))
        XCTAssertEqual(ByteChannelRules.rangeStart("bytes=5-"), .some(5))
        for bad in ["bytes=0-1", "bytes=-5", "bytes=1-,3-", "items=1-", "bytes=x-", "bytes="] { XCTAssertEqual(ByteChannelRules.rangeStart(bad), .some(nil), bad) }
        XCTAssertEqual(ByteChannelRules.rangeStart("bytes=11-", size: 10), .some(nil))
        XCTAssertNil(ByteChannelRules.uploadProblem(said: "4", length: "6", acknowledged: 4, size: 10))
        XCTAssertNotNil(ByteChannelRules.uploadProblem(said: nil, length: "6", acknowledged: 4, size: 10))
        XCTAssertEqual(ByteChannelRules.sha256(String(repeating: "A", count: 64)), String(repeating: "a", count: 64))
        XCTAssertNil(ByteChannelRules.sha256("abc"))
    }
}
