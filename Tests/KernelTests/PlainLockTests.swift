import Dispatch
import TermindCore
import XCTest

/// `PlainLock`, the hot-path lock (the toolchain's Mutex with NSLock's call shape): it
/// excludes, returns the body's value and lets its error through, and is free again afterwards.
final class PlainLockTests: XCTestCase {
    func testConcurrentIncrementsUnderTheLockAreNeverLost() {
        final class Counter: @unchecked Sendable {
            let lock = PlainLock()
            var value = 0
        }
        let counter = Counter()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<100_000 {
                counter.lock.withLock { counter.value += 1 }
            }
        }
        XCTAssertEqual(counter.lock.withLock { counter.value }, 400_000)
    }

    func testTheBodysValueAndErrorPassThroughAndTheLockIsFreeAfterAThrow() {
        struct Failure: Error {}
        let lock = PlainLock()
        XCTAssertEqual(lock.withLock { 42 }, 42)
        XCTAssertThrowsError(try lock.withLock { throw Failure() })
        // Still free: a second acquisition on this thread returns (a lock still held would stop
        // it: Mutex traps on, or waits for, its own holder).
        XCTAssertEqual(lock.withLock { "free" }, "free")
    }
}
