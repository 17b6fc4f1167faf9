import Foundation
import Synchronization
import TermindCore
import TermindHarness
import TermindKernel
import XCTest

/// The executor behind C plugin calls: bounded threads, a bounded FIFO queue, refusal beyond it.
final class BlockingExecutorTests: XCTestCase {
    /// Threads carry their names where the system shows them (top, gdb, /proc), not their
    /// creator's: issue 40's thread budget is read by name.
    func testThreadsCarryTheirNamesWhereTheSystemShowsThem() async throws {
        @Sendable func comm() -> String { ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines) }
        let seen = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<String, Error>) in
            SystemThread.named("termind.test.name.long") { continuation.resume(returning: comm()) }.start()
        }
        XCTAssertEqual(seen, "termind.test.na", "the first 15 bytes")
        let executor = BlockingExecutor(name: "termind.probe", threadLimit: 1, queueLimit: 4)
        let onExecutor = try await executor.run(busy: CancellationError()) { comm() }
        XCTAssertEqual(onExecutor, "termind.probe")
    }

    /// A thread-local value is the setting thread's alone, a replaced value is released,
    /// and a thread's value is released when the thread ends.
    func testAThreadLocalValueIsEachThreadsOwnAndReleasedWithIt() throws {
        final class Tracked: @unchecked Sendable {
            static let alive = NSLock()
            nonisolated(unsafe) static var count = 0
            let name: String
            init(_ name: String) { self.name = name; Self.alive.withLock { Self.count += 1 } }
            deinit { Self.alive.withLock { Self.count -= 1 } }
        }
        let local = ThreadLocal<Tracked>()
        XCTAssertNil(local.value)
        local.value = Tracked("here")
        local.value = Tracked("replaced")
        XCTAssertEqual(Tracked.alive.withLock { Tracked.count }, 1, "the replaced value was released")
        // (A synchronous test: an async one may resume on another thread.)
        let done = DispatchSemaphore(value: 0)
        let seen = Mutex<[String?]>([])
        SystemThread.named("termind.test.local") {
            let before = local.value?.name
            local.value = Tracked("there")
            seen.withLock { $0 = [before, local.value?.name] }
            done.signal()
        }.start()
        done.wait()
        XCTAssertEqual(seen.withLock { $0 }, [nil, "there"], "another thread starts with none and keeps its own")
        XCTAssertEqual(local.value?.name, "replaced")
        // The other thread ended: its value goes with it.
        XCTAssertTrue(waitUntil(seconds: 5) { Tracked.alive.withLock { Tracked.count } == 1 }, "the ended thread's value was released")
        local.value = nil
        XCTAssertEqual(Tracked.alive.withLock { Tracked.count }, 0)
    }

    /// The blocking check can fire: a task on Swift's pool is an offending thread, an
    /// executor's thread and a dedicated thread (started from that pool, so carrying its
    /// name) are not. Without this, a toolchain naming its workers otherwise would turn every
    /// serve test's check into a no-op.
    func testTheBlockingCheckKnowsThePoolFromExecutorAndDedicatedThreads() async throws {
        let onPool = await Task.detached { BlockingCheck.offendingThread }.value
        XCTAssertNotNil(onPool, "a detached task runs on a worker of the cooperative pool")
        let onExecutor = try await BlockingExecutor.store.run { BlockingCheck.offendingThread }
        XCTAssertNil(onExecutor, "a BlockingExecutor's thread: \(onExecutor ?? "")")
        let dedicated = await Task.detached { () -> String? in
            await withCheckedContinuation { continuation in
                Thread {
                    BlockingCheck.dedicatedThread()
                    continuation.resume(returning: BlockingCheck.offendingThread)
                }.start()
            }
        }.value
        XCTAssertNil(dedicated, "a thread of its own: \(dedicated ?? "")")
    }

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
        // One job let go at a time: its thread takes the next waiting job before another
        // one ends, so the order they start in is the order they were taken in (with two
        // let go at once, two threads taking jobs 2 and 3 may log them either way round).
        for _ in 0..<3 {
            release.signal()
            XCTAssertEqual(started.wait(timeout: .now() + 5), .success)
        }
        for _ in 0..<2 { release.signal() }
        XCTAssertEqual(Set(order.values.prefix(2)), [0, 1])
        XCTAssertEqual(Array(order.values.dropFirst(2)), [2, 3, 4], "waiting jobs start in FIFO order")
        // Once drained, it accepts work again.
        let done = DispatchSemaphore(value: 0)
        XCTAssertTrue(executor.submit { done.signal() })
        XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
    }

    func testRunReturnsTheResultAndThrowsBusyWhenFull() async throws {
        let executor = BlockingExecutor(name: "test.executor", threadLimit: 1, queueLimit: 0)
        // Each caller resumes only once its place is free: back-to-back runs never see "busy".
        for i in 0..<200 {
            let value = try await executor.run(busy: TestBusy()) { i * 2 }
            XCTAssertEqual(value, i * 2)
        }
        let release = DispatchSemaphore(value: 0)
        XCTAssertTrue(executor.submit { release.wait() })
        let deadline = Date().addingTimeInterval(10)
        while executor.load.running == 0 && Date() < deadline { try await Task.sleep(nanoseconds: 1_000_000) }
        XCTAssertEqual(executor.load.running, 1)
        do {
            _ = try await executor.run(busy: TestBusy()) { 1 }
            XCTFail("a full executor refuses")
        } catch is TestBusy {}
        release.signal()
    }

    /// What a job captured is let go once the job has run, not kept in the queue's consumed
    /// slots (which held up to 64 jobs, each a transfer's 255 KiB reply on its way to disk).
    func testAJobsCapturesAreLetGoOnceItHasRun() async throws {
        final class Payload: Sendable {}
        let executor = BlockingExecutor(name: "termind.test-release", threadLimit: 1, queueLimit: 16)
        weak var seen: Payload?
        func runOne() async throws {
            let payload = Payload()
            seen = payload
            _ = try await executor.run { [payload] in ObjectIdentifier(payload).hashValue }
        }
        for _ in 0..<10 {
            try await runOne()
            // The thread lets go of the job when its iteration ends, a moment after resuming us.
            let deadline = ContinuousClock.now + .seconds(5)
            while seen != nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
            XCTAssertNil(seen, "a job that has run still holds what it captured")
        }
    }

    func testIdleThreadsEndAndNewWorkStartsThemAgain() async throws {
        let executor = BlockingExecutor(name: "test.executor", threadLimit: 3, queueLimit: 10, idleSeconds: 0.2)
        let release = DispatchSemaphore(value: 0)
        for _ in 0..<3 { XCTAssertTrue(executor.submit { release.wait() }) }
        let busy = Date().addingTimeInterval(10)
        while executor.load.running < 3 && Date() < busy { try await Task.sleep(nanoseconds: 1_000_000) }
        XCTAssertEqual(executor.threadCount, 3)
        for _ in 0..<3 { release.signal() }
        let idle = Date().addingTimeInterval(10)
        while executor.threadCount > 0 && Date() < idle { try await Task.sleep(nanoseconds: 20_000_000) }
        XCTAssertEqual(executor.threadCount, 0, "idle threads end")
        let value = try await executor.run(busy: TestBusy()) { "again" }
        XCTAssertEqual(value, "again")
    }
}

private struct TestBusy: Error {}

final class OrderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Int] = []
    func append(_ value: Int) { lock.withLock { items.append(value) } }
    var values: [Int] { lock.withLock { items } }
}
