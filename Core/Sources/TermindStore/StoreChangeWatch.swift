import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore

/// Tells, without a trip to the store's executor, whether a database file may have changed
/// since a moment: a stamp that moves whenever the file, its write-ahead log or its rollback
/// journal is written, created, removed or renamed — by this process or any other (a
/// `--local` command, the `sqlite3` tool). A reader that keeps what it read beside the stamp
/// it took before reading may use it again while the stamp has not moved.
///
/// How: one inotify watch per folder of a database (for the whole process), on the folder
/// rather than the files, so a log that is created or replaced is seen too. The kernel queues
/// the event inside the writer's own write(2), before that call returns: once another
/// process's commit has returned, the next `stamp()` here has moved. What the watch cannot
/// see, it says by answering nil (nothing may be kept then): no inotify, a watch the kernel
/// refused, its queue overflowing past its limit (counted as a change), the folder removed.
/// A file changed over a network file system from another machine raises no event; SQLite's
/// write-ahead log cannot be shared across machines either, so termind's store never is.
public final class StoreChangeWatch: Sendable {
    private struct State {
        var fd: Int32
        var stamp: UInt64 = 0
    }
    private let state: Mutex<State>
    /// The names in the folder whose changes count: the database and the files beside it.
    private let names: Set<String>

    private init?(path: String) {
        let directory = PathText.deletingLastComponent(path)
        let base = String(path.split(separator: "/").last ?? "")
        guard !base.isEmpty else { return nil }
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        let mask = UInt32(IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)
        guard inotify_add_watch(fd, directory.isEmpty ? "." : directory, mask | UInt32(IN_ONLYDIR)) >= 0 else {
            close(fd)
            return nil
        }
        names = [base, base + "-wal", base + "-journal"]
        state = Mutex(State(fd: fd))
    }

    deinit { state.withLock { if $0.fd >= 0 { close($0.fd) } } }

    private static let watches = Mutex<[String: StoreChangeWatch?]>([:])

    /// The watch of the database at `path` (made at the first ask; nil when it cannot be made).
    public static func of(_ path: String) -> StoreChangeWatch? {
        watches.withLock { watches in
            if let known = watches[path] { return known }
            let made = StoreChangeWatch(path: path)
            watches[path] = .some(made)
            return made
        }
    }

    /// The current stamp: equal to an earlier one when nothing the watch can see changed in
    /// between; nil when the watch no longer sees (then nothing may be kept).
    public func stamp() -> UInt64? {
        state.withLock { state -> UInt64? in
            guard state.fd >= 0 else { return nil }
            // Usually one read(2) that finds nothing queued.
            let seen: Scan? = withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer -> Scan? in
                var seen = Scan.unchanged
                while true {
                    let n = read(state.fd, buffer.baseAddress, buffer.count)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else {
                        // Nothing more queued; anything else ends the watch (it sees nothing from now on).
                        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? seen : nil
                    }
                    switch Self.scan(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), names: names) {
                    case .unchanged: break
                    case .changed: seen = .changed
                    case .blind: return nil
                    }
                }
            }
            switch seen {
            case .unchanged?: return state.stamp
            case .changed?:
                state.stamp &+= 1
                return state.stamp
            case .blind?, nil:
                close(state.fd)
                state.fd = -1
                return nil
            }
        }
    }

    enum Scan: Equatable { case unchanged, changed, blind }

    /// What a read of inotify events says about the files named `names`: changed (one of
    /// them, or an overflow: some events were lost), blind (the folder is gone or the watch
    /// was dropped), or unchanged (only other files of the folder).
    static func scan(_ events: UnsafeRawBufferPointer, names: Set<String>) -> Scan {
        var result = Scan.unchanged
        var offset = 0
        let header = 16  // int wd; uint32 mask, cookie, len
        while offset + header <= events.count {
            func word(_ at: Int) -> UInt32 {
                UInt32(events[at]) | UInt32(events[at + 1]) << 8 | UInt32(events[at + 2]) << 16 | UInt32(events[at + 3]) << 24
            }
            let mask = word(offset + 4)
            let length = Int(word(offset + 12))
            let nameStart = offset + header
            let nameEnd = min(nameStart + length, events.count)
            if mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT) != 0 { return .blind }
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                result = .changed
            } else {
                let name = String(decoding: events[nameStart..<nameEnd].prefix { $0 != 0 }, as: UTF8.self)
                if names.contains(name) { result = .changed }
            }
            offset = nameStart + length
        }
        return result
    }
}
