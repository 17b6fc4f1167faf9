import Synchronization

/// The lock of the short critical sections on hot paths (the SSH engine's pass for each key
/// and each echo): the toolchain's `Mutex`, whose fast path is inlined, with NSLock's call
/// shape (`withLock { ... }`, no state inside) so that classes guarding several stored
/// properties keep them as they are. NSLock called into libFoundation on each side — code a
/// cold key had to bring back into the caches.
public final class PlainLock: Sendable {
    @usableFromInline let mutex = Mutex(())

    public init() {}

    @inlinable
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        try mutex.withLock { _ in try body() }
    }
}
