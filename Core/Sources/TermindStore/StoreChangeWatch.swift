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
/// How: one inotify instance for the process (an instance per database would count against
/// the user's limit of 128 in a long-lived process that opens many), with a watch on each
/// database's folder rather than on its files, so a log that is created or replaced is seen
/// too. The kernel queues the event inside the writer's own write(2), before that call
/// returns. A commit becomes visible later, when SQLite writes the WAL index header (after
/// the commit's fsync), a store to shared memory that raises no event; so termind's writers
/// also touch the database file once a commit is visible (`committed`, from SQLite's WAL
/// hook), and that event moves the stamp again. Once another termind process's commit has
/// returned, the next stamp here has moved past it. A writer that is not termind (the sqlite3
/// tool) does not touch the file: a read in the moment between its log write and its index
/// header may keep the old data until the next change.
///
/// What the watch cannot see, it says by answering nil (nothing may be kept then): no
/// inotify, a watch the kernel refused, a folder that is gone. A queue that overflowed counts
/// as a change of every database. A folder removed or renamed ends its watch; asked again,
/// the path is watched anew (if there is a folder there) with a stamp never given before, so
/// nothing kept under the old watch matches. A file changed over a network file system from
/// another machine raises no event; SQLite's write-ahead log cannot be shared across machines
/// either, so termind's store never is.
public enum StoreChangeWatch {
    private struct Watched {
        let path: String
        /// The database's own name in the folder.
        let base: String
        /// The database and the files beside it, by name in the folder.
        let names: Set<String>
    }

    private struct State {
        /// The inotify instance: nil until first asked, -1 when there is none.
        var fd: Int32?
        /// Each watched folder's databases, by watch descriptor.
        var folders: [Int32: [Watched]] = [:]
        /// Each watched database's stamp: the value `counter` had at its last change.
        var stamps: [String: UInt64] = [:]
        var counter: UInt64 = 0

        mutating func changed(_ path: String) {
            counter &+= 1
            stamps[path] = counter
        }

        mutating func unwatch(_ wd: Int32) {
            for watched in folders.removeValue(forKey: wd) ?? [] { stamps[watched.path] = nil }
        }
    }

    private static let state = Mutex(State())

    /// The stamp of the database at `path` now: equal to an earlier one when nothing the
    /// watch can see changed in between; nil when changes cannot be seen (keep nothing).
    public static func stamp(of path: String) -> UInt64? {
        state.withLock { state -> UInt64? in
            if state.fd == nil { state.fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
            guard let fd = state.fd, fd >= 0 else { return nil }
            drain(fd, &state)
            if let stamp = state.stamps[path] { return stamp }
            // Not watched yet (or its folder went): watch its folder now.
            let directory = PathText.deletingLastComponent(path)
            let base = String(path.split(separator: "/").last ?? "")
            guard !base.isEmpty else { return nil }
            let mask = UInt32(IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD)
            let wd = inotify_add_watch(fd, directory.isEmpty ? "." : directory, mask)
            guard wd >= 0 else { return nil }
            state.folders[wd, default: []].append(Watched(path: path, base: base, names: [base, base + "-wal", base + "-journal"]))
            state.changed(path)
            return state.stamps[path]
        }
    }

    /// Reads every queued event (usually one read(2) that finds none) into the stamps.
    private static func drain(_ fd: Int32, _ state: inout State) {
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer in
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                for event in events(UnsafeRawBufferPointer(rebasing: buffer[0..<n])) {
                    apply(event, fd: fd, to: &state)
                }
            }
        }
    }

    private static func apply(_ event: Event, fd: Int32, to state: inout State) {
        if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
            // Events were lost: any database may have changed.
            for path in state.stamps.keys { state.changed(path) }
            return
        }
        if event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT) != 0 {
            // The folder is gone or elsewhere: its path is watched anew when next asked.
            if event.mask & UInt32(IN_MOVE_SELF) != 0 { inotify_rm_watch(fd, event.wd) }
            state.unwatch(event.wd)
            return
        }
        // A touch of the database file itself is `committed`'s signal; other attribute
        // changes (SQLite setting a new log's owner) are not changes.
        let attributesOnly = event.mask & UInt32(IN_ATTRIB) != 0 && event.mask & UInt32(IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) == 0
        for watched in state.folders[event.wd] ?? [] where attributesOnly ? event.name == watched.base : watched.names.contains(event.name) {
            state.changed(watched.path)
        }
    }

    /// Says that a commit to the database at `path` is now visible (called from SQLite's WAL
    /// hook, which runs once the commit's index header is written): touches the file's times,
    /// an event every watch sees after the commit can be read. The write's own events come
    /// earlier, during the commit, while a reader still gets the old data; without this, a
    /// reader in that moment could keep the old data under the new stamp.
    /// The path as a C string: the hook has it so, and runs at every commit.
    public static func committed(_ path: UnsafePointer<CChar>) {
        _ = utimensat(AT_FDCWD, path, nil, 0)
    }

    struct Event: Equatable {
        let wd: Int32
        let mask: UInt32
        let name: String
    }

    /// The events in what one read(2) of an inotify descriptor returned.
    static func events(_ bytes: UnsafeRawBufferPointer) -> [Event] {
        var events: [Event] = []
        var offset = 0
        let header = 16  // int wd; uint32 mask, cookie, len
        while offset + header <= bytes.count {
            func word(_ at: Int) -> UInt32 {
                UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
            }
            let nameStart = offset + header
            let nameEnd = min(nameStart + Int(word(offset + 12)), bytes.count)
            let name = String(decoding: bytes[nameStart..<nameEnd].prefix { $0 != 0 }, as: UTF8.self)
            events.append(Event(wd: Int32(bitPattern: word(offset)), mask: word(offset + 4), name: name))
            offset = nameEnd
        }
        return events
    }
}
