import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A command's local standard streams that the engine reads and writes itself: the
/// descriptors a client handed over (`termind exec` inside `serve` passes its own with
/// SCM_RIGHTS, as OpenSSH's ControlMaster does). Each is borrowed: the channel works on a
/// copy of its own, closed when the channel ends.
public struct ChannelDescriptors: Sendable, Equatable {
    public var input: Int32?
    public var output: Int32?
    public var error: Int32?

    public init(input: Int32? = nil, output: Int32? = nil, error: Int32? = nil) {
        self.input = input
        self.output = output
        self.error = error
    }
}

/// One local descriptor on the engine thread, which must never block on it, without
/// changing a file description other processes share with us (a shell's pipe, a terminal):
/// a pipe or a terminal is opened again through /proc with a non-blocking description of
/// its own (a terminal without becoming anyone's controlling terminal, and not at all where
/// /proc cannot open it), a socket is used with MSG_DONTWAIT, a regular file never blocks
/// anyway. Only another kind (a character device such as /dev/null, a pipe without /proc)
/// has O_NONBLOCK set on the shared description, as OpenSSH does, and its flags put back
/// when the channel ends.
struct LocalDescriptor {
    enum Kind: Equatable { case file, ownNonBlocking, socket, shared(restore: Int32) }
    let fd: Int32
    let kind: Kind

    /// A copy of `fd` for reading (`writing` false) or writing; throws when `fd` is not open.
    static func adopt(_ fd: Int32, writing: Bool, role: String) throws -> LocalDescriptor {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw TermindError(.sshLocalDescriptor, "The \(role) handed to termind (descriptor \(fd)) is not open: \(String(cString: strerror(errno))).")
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG, S_IFBLK:
            return LocalDescriptor(fd: try duplicate(fd, role: role), kind: .file)
        case S_IFSOCK:
            return LocalDescriptor(fd: try duplicate(fd, role: role), kind: .socket)
        case S_IFCHR where isatty(fd) == 1:
            // A terminal is never made non-blocking under the shell that shares it (it would
            // read EAGAIN while termind is suspended, or for good after a crash).
            let own = open("/proc/self/fd/\(fd)", (writing ? O_WRONLY : O_RDONLY) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            guard own >= 0 else {
                throw TermindError(.sshLocalDescriptor, "The \(role) handed to termind (a terminal) cannot be opened again on its own: \(String(cString: strerror(errno))).")
            }
            return LocalDescriptor(fd: own, kind: .ownNonBlocking)
        case S_IFIFO:
            let own = open("/proc/self/fd/\(fd)", (writing ? O_WRONLY : O_RDONLY) | O_NONBLOCK | O_CLOEXEC)
            if own >= 0 { return LocalDescriptor(fd: own, kind: .ownNonBlocking) }
            fallthrough  // no /proc: share the description, as for a device
        default:
            let copy = try duplicate(fd, role: role)
            let flags = fcntl(copy, F_GETFL)
            if flags & O_NONBLOCK != 0 { return LocalDescriptor(fd: copy, kind: .ownNonBlocking) }
            _ = fcntl(copy, F_SETFL, flags | O_NONBLOCK)
            return LocalDescriptor(fd: copy, kind: .shared(restore: flags))
        }
    }

    private static func duplicate(_ fd: Int32, role: String) throws -> Int32 {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else {
            throw TermindError(.sshLocalDescriptor, "Cannot use the \(role) handed to termind: \(String(cString: strerror(errno))).")
        }
        return copy
    }

    /// read(2) that never blocks (but for a regular file): -1 with EAGAIN when nothing waits.
    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        kind == .socket ? recv(fd, buffer, count, Int32(MSG_DONTWAIT)) : Glibc.read(fd, buffer, count)
    }

    /// write(2) that never blocks; a reader that went away is EPIPE (MSG_NOSIGNAL for a
    /// socket; for a pipe the engine thread blocks SIGPIPE for itself).
    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> Int {
        kind == .socket ? send(fd, buffer, count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) : Glibc.write(fd, buffer, count)
    }

    /// Whether poll() is needed before the next attempt (a regular file is always ready).
    var pollable: Bool { kind != .file }

    func close() {
        if case .shared(let flags) = kind { _ = fcntl(fd, F_SETFL, flags) }
        _ = Glibc.close(fd)
    }
}
