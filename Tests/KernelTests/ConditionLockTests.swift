import Foundation
import TermindCore
import TermindHarness
import XCTest

/// The lock-and-condition type the blocking executor, the stream input, the reply writer and
/// the worker threads keep their state in.
final class ConditionLockTests: XCTestCase {
    func testChangesFromManyThreadsAreNeverLost() {
        let counter = ConditionLock(0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<10_000 { counter.withLock { $0 += 1 } }
        }
        XCTAssertEqual(counter.withLock { $0 }, 40_000)
    }

    /// The level, and how many times the waiter's step has looked at it: a step runs with
    /// the lock held and, answering `.wait`, waits without letting it go in between — so once
    /// the count moved, the waiter is waiting (or done) before this thread can change a thing.
    private struct Level { var value = 0; var looks = 0 }

    private func waitForLooks(_ lock: ConditionLock<Level>, _ count: Int) -> Bool {
        waitUntil(seconds: 10) { lock.withLock { $0.looks >= count } }
    }

    func testAWaiterGoesOnOnlyOnceItsConditionHoldsAndSeesTheStateThatMadeItHold() {
        let level = ConditionLock(Level())
        let done = DispatchSemaphore(value: 0)
        let seen = ConditionLock<Int?>(nil)
        Thread {
            let value: Int = level.wait { level, _ in
                level.looks += 1
                return level.value >= 3 ? .done(level.value) : .wait
            }
            seen.withLock { $0 = value }
            done.signal()
        }.start()
        XCTAssertTrue(waitForLooks(level, 1), "the waiter never looked")
        for value in 1...2 {
            level.withLock { $0.value = value }
            level.broadcast()
            // Woken, it looks again, and waits again: level \(value) is not enough.
            XCTAssertTrue(waitForLooks(level, value + 1), "a broadcast did not wake the waiter")
            XCTAssertNil(seen.withLock { $0 }, "the waiter went on at level \(value)")
        }
        level.withLock { $0.value = 3 }
        level.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(seen.withLock { $0 }, 3)
    }

    func testATimedWaitEndsAfterItsLimitAndItsStepIsToldSo() {
        let lock = ConditionLock(false)
        let start = ContinuousClock.now
        var steps: [Bool] = []
        let result: String = lock.wait { _, timedOut in
            steps.append(timedOut)
            return timedOut ? .done("timed out") : .waitAtMost(seconds: 0.05)
        }
        let elapsed = ContinuousClock.now - start
        XCTAssertEqual(result, "timed out")
        XCTAssertEqual(steps.first, false, "the first step runs before any wait")
        XCTAssertEqual(steps.last, true)
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(50))
    }

    func testALimitAboveAWholeSecondCarriesIntoTheSecondsAndOneNotPositiveEndsTheWaitAtOnce() {
        let lock = ConditionLock(false)
        for limit in [1.3, 0.0, -1.0, Double.nan, -Double.infinity] {
            let start = ContinuousClock.now
            var waits = 0
            lock.wait { _, timedOut -> ConditionLock<Bool>.Step<Void> in
                if timedOut { return .done(()) }
                waits += 1
                return .waitAtMost(seconds: limit)
            }
            let elapsed = ContinuousClock.now - start
            XCTAssertEqual(waits, 1, "limit \(limit)")
            if limit > 0 {
                XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(1300), "limit \(limit)")
                XCTAssertLessThan(elapsed, .seconds(30), "limit \(limit)")
            } else {
                XCTAssertLessThan(elapsed, .seconds(1), "limit \(limit): no wait at all")
            }
        }
    }

    func testASignalBeforeTheLimitEndsTheWaitWithoutTimingOut() {
        let ready = ConditionLock(false)
        Thread {
            Thread.sleep(forTimeInterval: 0.05)
            ready.withLock { $0 = true }
            ready.signal()
        }.start()
        let start = ContinuousClock.now
        let timedOutAtEnd: Bool = ready.wait { isReady, timedOut in
            isReady || timedOut ? .done(timedOut) : .waitAtMost(seconds: 60)
        }
        XCTAssertFalse(timedOutAtEnd)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(30))
    }

    func testABroadcastWakesEveryWaiter() {
        let gate = ConditionLock(Level())
        let through = DispatchSemaphore(value: 0)
        for _ in 0..<4 {
            Thread {
                gate.wait { gate, _ in
                    gate.looks += 1
                    return gate.value > 0 ? .done(()) : .wait
                }
                through.signal()
            }.start()
        }
        // All four are waiting at the closed gate before it opens.
        XCTAssertTrue(waitForLooks(gate, 4), "the waiters never reached the gate")
        XCTAssertEqual(through.wait(timeout: .now()), .timedOut, "a waiter went through a closed gate")
        gate.withLock { $0.value = 1 }
        gate.broadcast()
        for waiter in 0..<4 {
            XCTAssertEqual(through.wait(timeout: .now() + 10), .success, "waiter \(waiter) still waits")
        }
    }
}
