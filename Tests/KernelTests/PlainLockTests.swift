import Dispatch
import TermindCore
import XCTest

/// `PlainLock`, the engine's hot-path mutex: it excludes, returns the body's value and lets
/// its error through, and is free again afterwards.
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
        // Still free: a second acquisition on this thread returns (it would deadlock otherwise).
        XCTAssertEqual(lock.withLock { "free" }, "free")
    }
}
