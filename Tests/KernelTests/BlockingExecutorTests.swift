import Foundation
import TermindKernel
import XCTest

/// The executor behind C plugin calls: bounded threads, a bounded FIFO queue, refusal beyond it.
final class BlockingExecutorTests: XCTestCase {
    func testAtMostThreadLimitJobsRunQueueLimitWaitAndTheNextIsRefused() throws {
        let executor = BlockingExecutor(name: "test.executor", threadLimit: 2, queueLimit: 3)
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let order = OrderLog()
        for index in 0..<5 {
            XCTAssertTrue(executor.submit {
                order.append(index)
                started.signal()
                release.wait()
            }, "job \(index) fits")
        }
        // Two start, three wait.
        XCTAssertEqual(started.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(started.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(started.wait(timeout: .now() + 0.3), .timedOut, "a third job must not run while two block")
        XCTAssertEqual(executor.load.running, 2)
        XCTAssertEqual(executor.load.queued, 3)
        XCTAssertFalse(executor.submit {}, "the sixth job is refused at once")
        for _ in 0..<5 { release.signal() }
        for _ in 0..<3 { XCTAssertEqual(started.wait(timeout: .now() + 5), .success) }
        XCTAssertEqual(Set(order.values.prefix(2)), [0, 1])
        XCTAssertEqual(Array(order.values.dropFirst(2)), [2, 3, 4], "waiting jobs start in FIFO order")
        // Once drained, it accepts work again.
        let done = DispatchSemaphore(value: 0)
        XCTAssertTrue(executor.submit { done.signal() })
        XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
    }

    func testRunReturnsTheResultAndThrowsBusyWhenFull() async throws {
        let executor = BlockingExecutor(name: "test.executor", threadLimit: 1, queueLimit: 0)
        let value = try await executor.run(busy: CancellationError()) { 6 * 7 }
        XCTAssertEqual(value, 42)
        let release = DispatchSemaphore(value: 0)
        XCTAssertTrue(executor.submit { release.wait() })
        while executor.load.running == 0 { try await Task.sleep(nanoseconds: 1_000_000) }
        do {
            _ = try await executor.run(busy: TestBusy()) { 1 }
            XCTFail("a full executor refuses")
        } catch is TestBusy {}
        release.signal()
    }
}

private struct TestBusy: Error {}

final class OrderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Int] = []
    func append(_ value: Int) { lock.withLock { items.append(value) } }
    var values: [Int] { lock.withLock { items } }
}
