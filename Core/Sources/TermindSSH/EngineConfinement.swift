import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A value only its engine's thread may touch — a libssh2 channel or listener pointer, a
/// flag the engine's operations share (NIO's `NIOLoopBound` is the shape). Holding and
/// passing the box around is safe from anywhere; reading or writing `value` off the engine's
/// thread is a programming error that debug builds stop at.
///
/// `@unchecked Sendable`: every access to `stored` goes through `value`, which asserts the
/// engine's thread, so the value is only ever touched by that one thread.
final class EngineBound<Value>: @unchecked Sendable {
    private var stored: Value
    private let engine: SessionEngine

    /// Making the box may happen anywhere: nothing else holds it yet.
    init(_ value: Value, engine: SessionEngine) {
        stored = value
        self.engine = engine
    }

    var value: Value {
        get {
            engine.assertOnEngineThread()
            return stored
        }
        set {
            engine.assertOnEngineThread()
            stored = newValue
        }
    }
}

/// A value made on one thread and handed, once, to another: a libssh2 result to the task
/// that awaited it, an accepted channel to whoever bridges it. Whatever carries the box
/// across (a continuation, a set-once flag) orders the hand-over; `take()` checks that the
/// value is taken once, so nobody is left holding it.
///
/// `@unchecked Sendable`: `stored` is written by `init` and read once by `take()`, which
/// the atomic exchange makes exclusive; no other access exists.
final class HandOff<Value>: @unchecked Sendable {
    private var stored: Value?
    private let taken = Atomic<Bool>(false)

    init(_ value: Value) { stored = value }

    func take() -> Value {
        let already = taken.exchange(true, ordering: .acquiringAndReleasing)
        precondition(!already, "a handed-off value was taken twice")
        defer { stored = nil }
        return stored!
    }
}

/// A Sendable value shared between tasks and threads, under a lock of its own.
final class SharedSlot<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}

/// A set-once flag readable from any thread.
package final class ManagedAtomicFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    package init() {}
    package func set() { flag.store(true, ordering: .releasing) }
    package var isSet: Bool { flag.load(ordering: .acquiring) }
    /// Sets the flag; true only for the call that set it first.
    package func setFirst() -> Bool { !flag.exchange(true, ordering: .acquiringAndReleasing) }
}
