#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A lock and a condition variable guarding one value: the toolchain's `Mutex<State>` shape
/// for code that must also wait for that value to change (a worker thread waiting for jobs, a
/// writer waiting for room). The state is reachable only inside `withLock` and the steps of
/// `wait`, so the compiler checks what a hand-kept "every `var` under `condition`" comment
/// used to promise, and a class holding one (with only `let`s beside it) is `Sendable`
/// without being unchecked.
///
/// A wait never holds an `inout` access across the moment the lock is released: `wait` calls
/// its step afresh after each wake, and the step says whether to return or wait again (with
/// or without a time limit). Time limits are on `CLOCK_MONOTONIC`, so a wall-clock jump
/// neither ends a wait early nor stretches it.
///
/// `@unchecked Sendable` (when `State` is Sendable): `state` is read and written only while
/// `mutex` is held — in `withLock` and in `wait`'s steps, which are the only ways to it — and
/// the pthread objects live at fixed addresses allocated once, never moved, freed in `deinit`.
public final class ConditionLock<State> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var state: State

    /// What a step of `wait` decides.
    public enum Step<Result> {
        /// Stop waiting: `wait` returns this, the lock released.
        case done(Result)
        /// Wait until signalled, then run the step again.
        case wait
        /// Wait until signalled or this many seconds passed, then run the step again (told
        /// whether the time ran out). Zero, negative or NaN: the time runs out at once.
        case waitAtMost(seconds: Double)
    }

    public init(_ initial: State) {
        state = initial
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(condition, &attributes) == 0, "pthread_cond_init failed")
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the lock held and the state to read or change.
    public func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body(&state)
    }

    /// Takes the lock and runs `step` on the state; for as long as it answers `.wait` or
    /// `.waitAtMost`, releases the lock until signalled (or the time runs out), takes it again
    /// and runs `step` anew, told whether the last wait ended by its time limit. Returns what
    /// the step is done with, the lock released.
    public func wait<R>(_ step: (inout State, _ timedOut: Bool) throws -> Step<R>) rethrows -> R {
        lock()
        defer { unlock() }
        var timedOut = false
        while true {
            switch try step(&state, timedOut) {
            case .done(let result):
                return result
            case .wait:
                pthread_cond_wait(condition, mutex)
                timedOut = false
            case .waitAtMost(let seconds):
                var deadline = timespec()
                clock_gettime(CLOCK_MONOTONIC, &deadline)
                // Not positive (or NaN): no wait at all; at most about 31 years.
                let whole = seconds > 0 ? min(seconds, 1e9) : 0
                let nanoseconds = Int(deadline.tv_nsec) + Int((whole - whole.rounded(.down)) * 1e9)
                deadline.tv_sec += Int(whole.rounded(.down)) + nanoseconds / 1_000_000_000
                deadline.tv_nsec = nanoseconds % 1_000_000_000
                timedOut = pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT
            }
        }
    }

    /// Waits until `ready` holds for the state, then runs `body` with the lock still held.
    public func withLock<R>(whenever ready: (State) -> Bool, _ body: (inout State) throws -> R) rethrows -> R {
        try wait { state, _ in ready(state) ? .done(try body(&state)) : .wait }
    }

    /// Wakes one thread waiting in `wait` (callable with or without the lock held).
    public func signal() { pthread_cond_signal(condition) }

    /// Wakes every thread waiting in `wait` (callable with or without the lock held).
    public func broadcast() { pthread_cond_broadcast(condition) }

    private func lock() { pthread_mutex_lock(mutex) }
    private func unlock() { pthread_mutex_unlock(mutex) }
}

extension ConditionLock: @unchecked Sendable where State: Sendable {}
