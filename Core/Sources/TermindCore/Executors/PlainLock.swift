import Foundation

/// A mutex for the short critical sections of hot paths (the SSH engine's pass for each key
/// and each echo): a pthread mutex locked and unlocked inline. NSLock does the same through
/// an overridable method of a Foundation class on each side, so every acquisition called
/// into libFoundation — code a cold key had to bring back into the caches.
public final class PlainLock: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    @inlinable
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
