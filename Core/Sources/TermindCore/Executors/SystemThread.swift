#if canImport(Glibc)
import Glibc
#endif

/// A detached system thread (pthread) that runs one closure: what Foundation's `Thread`
/// gave Core, without Foundation. Named threads take their name where the system shows it
/// (`/proc/…/task/*/comm`, top, gdb; its first 15 bytes), so that a thread shows which
/// executor or loop it belongs to rather than its creator's name.
public final class SystemThread: Sendable {
    private let name: String?
    private let body: @Sendable () -> Void

    public init(name: String? = nil, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }

    /// A thread named `name`; not started.
    public static func named(_ name: String, _ body: @escaping @Sendable () -> Void) -> SystemThread {
        SystemThread(name: name, body)
    }

    /// Starts the thread (detached, the system's default stack). The thread holds this object
    /// until its closure returns. A thread the system cannot make stops the process, as
    /// Foundation's `Thread.start` does: nothing that asked for one can go on without it.
    public func start() {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { raw in
            let started = Unmanaged<SystemThread>.fromOpaque(raw!).takeRetainedValue()
            if let name = started.name { SystemThread.nameCurrent(name) }
            started.body()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<SystemThread>.fromOpaque(context).release()
            fatalError("termind: no thread could be started (\(name ?? "unnamed")): error \(result)")
        }
        pthread_detach(thread)
    }

    /// Gives the running thread `name` where the system shows it (written to
    /// /proc/thread-self/comm: pthread_setname_np and prctl are not callable from Swift's
    /// Glibc here, one being a GNU extension and the other variadic).
    static func nameCurrent(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}
