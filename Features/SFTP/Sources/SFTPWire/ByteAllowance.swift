import Synchronization

/// Bytes a process lets be in flight at once, shared by every transfer in it (issue 40:
/// "bounded per file and per process, not per channel times channels"). A data request
/// takes its length before it is sent and gives it back once its bytes are where they go.
///
/// A file with nothing in flight always sends one request (`overdraw`), even when others
/// hold the whole allowance: a host that stalls with its files' requests out can slow the
/// rest of the process but never stop it, and no file waits on another to be let go. So the
/// process holds at most its capacity plus one request per moving file (the scheduler's
/// `active` bounds those).
public final class ByteAllowance: Sendable {
    public let capacity: Int
    private let taken = Atomic<Int>(0)

    public init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Bytes not taken now (negative while requests overdraw it).
    public var available: Int { capacity - taken.load(ordering: .relaxed) }

    /// Takes `bytes` when they are there.
    public func tryTake(_ bytes: Int) -> Bool {
        var now = taken.load(ordering: .relaxed)
        while now + bytes <= capacity {
            let (exchanged, original) = taken.compareExchange(expected: now, desired: now + bytes, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            now = original
        }
        return false
    }

    /// Takes `bytes` whether or not they are there: a file's only request (counted, so that
    /// others see the process's bytes in use).
    public func overdraw(_ bytes: Int) { taken.add(bytes, ordering: .acquiringAndReleasing) }

    /// Gives back what `tryTake` or `overdraw` took.
    public func give(_ bytes: Int) {
        let before = taken.subtract(bytes, ordering: .acquiringAndReleasing).oldValue
        assert(before >= bytes, "given back more than was taken")
    }
}
