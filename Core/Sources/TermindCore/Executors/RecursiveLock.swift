#if canImport(Glibc)
import Glibc
#endif

/// A lock its holder may take again (a pthread recursive mutex): Foundation's
/// `NSRecursiveLock`, without Foundation. The store's connections need it: a transaction's
/// body runs statements under the lock the transaction holds.
public final class RecursiveLock: @unchecked Sendable {
    // Unchecked: the mutex is the synchronisation; it lives at a fixed address for the
    // object's life and is only touched through pthread calls.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
        let result = pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        precondition(result == 0, "pthread_mutex_init failed: \(result)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// Takes the lock if it is free (or already this thread's); false if another holds it.
    public func `try`() -> Bool { pthread_mutex_trylock(mutex) == 0 }

    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
