import Foundation
import TermindCore
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

    func testAWaiterGoesOnOnlyOnceItsConditionHoldsAndSeesTheStateThatMadeItHold() {
        let level = ConditionLock(0)
        let done = DispatchSemaphore(value: 0)
        let seen = ConditionLock<Int?>(nil)
        Thread {
            let value = level.withLock(whenever: { $0 >= 3 }) { $0 }
            seen.withLock { $0 = value }
            done.signal()
        }.start()
        for value in 1...2 {
            level.withLock { $0 = value }
            level.broadcast()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 0.2), .timedOut, "the waiter went on at level 2")
        level.withLock { $0 = 3 }
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
        let open = ConditionLock(false)
        let through = DispatchSemaphore(value: 0)
        for _ in 0..<4 {
            Thread {
                open.withLock(whenever: { $0 }) { _ in }
                through.signal()
            }.start()
        }
        XCTAssertEqual(through.wait(timeout: .now() + 0.1), .timedOut, "a waiter went through a closed gate")
        open.withLock { $0 = true }
        open.broadcast()
        for waiter in 0..<4 {
            XCTAssertEqual(through.wait(timeout: .now() + 10), .success, "waiter \(waiter) still waits")
        }
    }
}
