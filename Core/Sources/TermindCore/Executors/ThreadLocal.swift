#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An object per thread, through a pthread key: what `Thread.current.threadDictionary`
/// gave, without an NSMutableDictionary and two bridged keys on every use (the blocking
/// executors set and clear one per job, and that was 8% of an MCP call's CPU). A thread's
/// value is released when the thread ends.
public final class ThreadLocal<Value: AnyObject>: @unchecked Sendable {
    // Written once, in init; pthread keys are safe to use from any thread.
    private var key = pthread_key_t()

    public init() {
        let created = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<AnyObject>.fromOpaque(pointer).release()
        }
        precondition(created == 0, "no pthread key is left for a thread-local value")
    }

    /// This thread's value (nil until set).
    public var value: Value? {
        get { pthread_getspecific(key).map { Unmanaged<Value>.fromOpaque($0).takeUnretainedValue() } }
        set {
            let old = pthread_getspecific(key)
            let new = newValue.map { Unmanaged.passRetained($0) }
            // Only once the slot holds the new value may the old one go (the slot keeps the
            // old one if the set fails, and the thread's end would release it again).
            guard pthread_setspecific(key, new?.toOpaque()) == 0 else {
                new?.release()
                preconditionFailure("a thread-local value could not be set (no memory for this thread's slots)")
            }
            if let old { Unmanaged<Value>.fromOpaque(old).release() }
        }
    }
}

/// A value type held where a `ThreadLocal` needs an object.
public final class ThreadLocalBox<Value: Sendable>: Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}
