@testable import TermindSSH
import XCTest

/// The connection pool's decisions, driven directly: no sockets, no tasks, no clock.
final class SSHPoolStateTests: XCTestCase {
    final class Conn {}
    typealias State = SSHPoolState<String, Conn>

    private func alive(_: Conn) -> Bool { true }

    func testTheFirstRequestOpensAndLaterOnesWaitForTheSameOpening() {
        var state = State(idleTimeout: 180)
        XCTAssertEqual(state.request("r", waiter: 1, now: 0, isAlive: alive), .open(ticket: 1))
        XCTAssertEqual(state.request("r", waiter: 2, now: 0, isAlive: alive), .wait)
        XCTAssertEqual(state.request("r", waiter: 3, now: 0, isAlive: alive), .wait)
        let conn = Conn()
        XCTAssertEqual(state.opened("r", ticket: 1, handle: conn, generation: 7, now: 1), [1, 2, 3])
        XCTAssertEqual(state.request("r", waiter: 4, now: 2, isAlive: alive), .use(conn))
        XCTAssertEqual(state.request("other", waiter: 5, now: 2, isAlive: alive), .open(ticket: 2), "routes are independent")
    }

    func testASharedFailureReachesEveryWaiterAndTheOpenersOwnOnlyTheOpener() {
        var state = State(idleTimeout: 180)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.request("r", waiter: 2, now: 0, isAlive: alive)
        let shared = state.openFailed("r", ticket: 1, kind: .shared, now: 0)
        XCTAssertEqual(shared.fail, [1, 2])
        XCTAssertEqual(shared.retry, [])
        // A non-interactive opener that could not accept a host key: the others ask themselves.
        _ = state.request("r", waiter: 3, now: 1, isAlive: alive)
        _ = state.request("r", waiter: 4, now: 1, isAlive: alive)
        let own = state.openFailed("r", ticket: 2, kind: .openersOwn, now: 1)
        XCTAssertEqual(own.fail, [3])
        XCTAssertEqual(own.retry, [4])
        XCTAssertEqual(state.request("r", waiter: 4, now: 1, isAlive: alive), .open(ticket: 3), "the retrying waiter opens with its own policy, at once")
    }

    func testAStaleOpeningNeitherReplacesAConnectionNorResumesAnyone() {
        var state = State(idleTimeout: 180)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        XCTAssertEqual(state.cancel("r", waiter: 1), 1, "nobody waits any more: cancel the opening")
        XCTAssertNil(state.opened("r", ticket: 1, handle: Conn(), generation: 1, now: 1), "a late result is orphaned")
        XCTAssertEqual(state.openFailed("r", ticket: 1, kind: .shared, now: 1).fail, [])
    }

    func testACancelledWaiterLeavesAndTheOpeningGoesOnForTheOthers() {
        var state = State(idleTimeout: 180)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.request("r", waiter: 2, now: 0, isAlive: alive)
        _ = state.request("r", waiter: 3, now: 0, isAlive: alive)
        XCTAssertNil(state.cancel("r", waiter: 2))
        XCTAssertNil(state.cancel("r", waiter: 1), "the opener left, but 3 still waits")
        // The departed opener's own failure is not 3's: it tries again.
        let failed = state.openFailed("r", ticket: 1, kind: .openersOwn, now: 0)
        XCTAssertEqual(failed.fail, [])
        XCTAssertEqual(failed.retry, [3])
        _ = state.request("r", waiter: 3, now: 0, isAlive: alive)
        XCTAssertEqual(state.opened("r", ticket: 2, handle: Conn(), generation: 1, now: 1), [3])
    }

    func testADeadConnectionIsReplacedAndALateNoticeNeverRemovesTheReplacement() {
        var state = State(idleTimeout: 180)
        let first = Conn(), second = Conn()
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.opened("r", ticket: 1, handle: first, generation: 1, now: 0)
        XCTAssertEqual(state.request("r", waiter: 2, now: 1, isAlive: { $0 !== first }), .open(ticket: 2))
        _ = state.opened("r", ticket: 2, handle: second, generation: 2, now: 1)
        state.retired("r", generation: 1)
        XCTAssertEqual(state.request("r", waiter: 3, now: 2, isAlive: alive), .use(second))
        state.retired("r", generation: 2)
        XCTAssertEqual(state.request("r", waiter: 4, now: 3, isAlive: alive), .open(ticket: 3))
    }

    func testTheSweepClosesOnlyUnleasedConnectionsIdleOnTheWireAndNotHandedOutLately() {
        var state = State(idleTimeout: 180)
        let busy = Conn(), leased = Conn(), idle = Conn(), recent = Conn()
        for (index, conn) in [busy, leased, idle, recent].enumerated() {
            _ = state.request("r\(index)", waiter: UInt64(index), now: 0, isAlive: alive)
            _ = state.opened("r\(index)", ticket: UInt64(index + 1), handle: conn, generation: 1, now: 0)
        }
        XCTAssertTrue(state.lease("r1", handle: leased))
        _ = state.request("r3", waiter: 9, now: 150, isAlive: alive)  // handed out at 150
        let wire: (Conn) -> Double? = { $0 === busy ? nil : 200 }       // a channel is open on `busy`
        XCTAssertEqual(state.sweep(now: 200, idleSeconds: wire).map(ObjectIdentifier.init), [ObjectIdentifier(idle)])
        XCTAssertEqual(state.request("r2", waiter: 10, now: 201, isAlive: alive), .open(ticket: 5), "the swept connection left the pool in the same step")
        XCTAssertEqual(state.request("r3", waiter: 11, now: 201, isAlive: alive), .use(recent), "handed out 51 s ago: kept")
        // The lease holds until released; then the clock restarts from the release.
        XCTAssertEqual(state.sweep(now: 400, idleSeconds: { $0 === leased ? 400 : nil }).count, 0)
        state.release("r1", handle: leased, now: 400)
        XCTAssertEqual(state.leases("r1"), 0)
        XCTAssertEqual(state.sweep(now: 500, idleSeconds: { $0 === leased ? 500 : nil }).count, 0, "100 s after the release")
        XCTAssertEqual(state.sweep(now: 581, idleSeconds: { $0 === leased ? 581 : nil }).map(ObjectIdentifier.init), [ObjectIdentifier(leased)])
    }

    func testWithoutAnIdleTimeoutNothingIsSwept() {
        var state = State(idleTimeout: nil)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.opened("r", ticket: 1, handle: Conn(), generation: 1, now: 0)
        XCTAssertEqual(state.sweep(now: 1e9, idleSeconds: { _ in 1e9 }).count, 0)
    }

    func testClosingThePoolTellsTheWaitersOfOpeningsInProgress() {
        var state = State(idleTimeout: 180)
        let conn = Conn()
        _ = state.request("open", waiter: 1, now: 0, isAlive: alive)
        _ = state.opened("open", ticket: 1, handle: conn, generation: 1, now: 0)
        _ = state.request("opening", waiter: 2, now: 0, isAlive: alive)
        _ = state.request("opening", waiter: 3, now: 0, isAlive: alive)
        let removed = state.removeAll()
        XCTAssertEqual(removed.open.map(ObjectIdentifier.init), [ObjectIdentifier(conn)])
        XCTAssertEqual(removed.waiters.sorted(), [2, 3])
        XCTAssertNil(state.opened("opening", ticket: 2, handle: Conn(), generation: 2, now: 1), "a late result is orphaned")
    }

    func testARouteThatKeepsFailingRestsLongerEachTimeUpTo8SecondsAndASuccessForgetsIt() {
        var state = State(idleTimeout: 180)
        var now = 0.0
        var expected: [Double] = []
        var rests: [Double] = []
        for failure in 1...8 {
            guard case .open(let ticket) = state.request("r", waiter: UInt64(failure), now: now, isAlive: alive) else { return XCTFail("attempt \(failure) did not open") }
            _ = state.openFailed("r", ticket: ticket, kind: .shared, now: now)
            guard case .backoff(let until) = state.request("r", waiter: 100, now: now, isAlive: alive) else { return XCTFail("no rest after failure \(failure)") }
            XCTAssertEqual(state.request("r", waiter: 101, now: until - 0.001, isAlive: alive), .backoff(until: until), "not before it rested")
            rests.append(until - now)
            expected.append(min(8, 0.25 * Double(1 << (failure - 1))))
            now = until
        }
        XCTAssertEqual(rests, expected, "0.25 s, doubling, at most 8 s")
        XCTAssertEqual(state.request("other", waiter: 200, now: 0, isAlive: alive), .open(ticket: 9), "another route does not rest for this one")
        // A success forgets the failures: the next failure rests 0.25 s again.
        guard case .open(let ticket) = state.request("r", waiter: 300, now: now, isAlive: alive) else { return XCTFail() }
        let conn = Conn()
        XCTAssertEqual(state.opened("r", ticket: ticket, handle: conn, generation: 1, now: now), [300])
        state.retired("r", generation: 1)
        guard case .open(let again) = state.request("r", waiter: 301, now: now, isAlive: alive) else { return XCTFail("a route that worked opens at once") }
        _ = state.openFailed("r", ticket: again, kind: .shared, now: now)
        XCTAssertEqual(state.request("r", waiter: 302, now: now, isAlive: alive), .backoff(until: now + 0.25))
    }

    func testAnOpenersOwnFailureDoesNotMakeTheRouteRest() {
        var state = State(idleTimeout: 180)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.openFailed("r", ticket: 1, kind: .openersOwn, now: 0)
        XCTAssertEqual(state.request("r", waiter: 2, now: 0, isAlive: alive), .open(ticket: 2), "a host key one caller refused says nothing about the host")
    }

    func testAClosedPoolOpensNothingMoreAndForgetsItsRests() {
        var state = State(idleTimeout: 180)
        _ = state.request("r", waiter: 1, now: 0, isAlive: alive)
        _ = state.openFailed("r", ticket: 1, kind: .shared, now: 0)
        _ = state.request("s", waiter: 2, now: 0, isAlive: alive)
        let removed = state.removeAll()
        XCTAssertEqual(removed.waiters, [2])
        XCTAssertTrue(state.isClosed)
        XCTAssertEqual(state.request("r", waiter: 3, now: 100, isAlive: alive), .closed)
        XCTAssertEqual(state.request("new", waiter: 4, now: 100, isAlive: alive), .closed, "work that outlived its feature opens nothing")
        XCTAssertNil(state.opened("s", ticket: 2, handle: Conn(), generation: 1, now: 100), "an opening that ends after the close is an orphan to close")
    }
}
