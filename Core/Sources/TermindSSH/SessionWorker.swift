import CLibSSH2
import Dispatch
import Foundation
import TermindCore

/// The one owner of a libssh2 session and its socket. Every libssh2 call runs on this
/// worker's serial queue, in non-blocking mode: a call that returns EAGAIN is repeated with
/// the same arguments after poll() reports the directions libssh2 is blocked on, until it
/// completes, the deadline passes, or the operation is cancelled. The raw pointers never
/// leave this object; it frees them in `shutdown()`/deinit.
final class SessionWorker: @unchecked Sendable {
    private let queue: DispatchQueue
    let fd: Int32
    private(set) var session: OpaquePointer?
    private let cancelled = ManagedAtomicFlag()
    let endpoint: String

    init(fd: Int32, endpoint: String) throws {
        SSHLibrary.initialize()
        self.fd = fd
        self.endpoint = endpoint
        queue = DispatchQueue(label: "termind.ssh.session")
        guard let session = termind_ssh2_session_init() else {
            close(fd)
            throw SSHError.make("ssh.session_failed", "Could not create an SSH session for \(endpoint).")
        }
        libssh2_session_set_blocking(session, 0)
        self.session = session
    }

    deinit { teardown() }

    /// Runs `body` on the worker's queue.
    func perform<T: Sendable>(_ body: @escaping @Sendable (SessionWorker) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body(self) }) }
        }
    }

    /// Wakes whatever waits on this session; the current call fails with `ssh.cancelled`.
    func cancel() { cancelled.set() }

    /// Repeats `call` while it returns EAGAIN, waiting for socket readiness in between.
    /// Must run on the worker's queue.
    func retry(_ what: String, deadline: DispatchTime, _ call: (OpaquePointer) -> Int32) throws -> Int32 {
        guard let session else { throw SSHError.make("ssh.closed", "The SSH connection to \(endpoint) is closed.") }
        while true {
            let rc = call(session)
            guard rc == termind_ssh2_error_eagain() else { return rc }
            try waitForSocket(what, deadline: deadline)
        }
    }

    /// As `retry`, for calls that return a pointer and report EAGAIN through last_errno.
    func retryPointer<T>(_ what: String, deadline: DispatchTime, _ call: (OpaquePointer) -> T?) throws -> T? {
        guard let session else { throw SSHError.make("ssh.closed", "The SSH connection to \(endpoint) is closed.") }
        while true {
            if let value = call(session) { return value }
            guard libssh2_session_last_errno(session) == termind_ssh2_error_eagain() else { return nil }
            try waitForSocket(what, deadline: deadline)
        }
    }

    /// poll() on the directions libssh2 is blocked on, in slices so cancellation is seen.
    func waitForSocket(_ what: String, deadline: DispatchTime) throws {
        guard let session else { return }
        while true {
            if cancelled.isSet { throw SSHError.make("ssh.cancelled", "\(what) on \(endpoint) was cancelled.") }
            let now = DispatchTime.now()
            guard now < deadline else {
                throw SSHError.make("ssh.timeout", "\(what) on \(endpoint) timed out; the server did not answer in time.")
            }
            let directions = libssh2_session_block_directions(session)
            var events: Int16 = 0
            if directions & LIBSSH2_SESSION_BLOCK_INBOUND != 0 { events |= Int16(POLLIN) }
            if directions & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0 { events |= Int16(POLLOUT) }
            if events == 0 { events = Int16(POLLIN) }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let remainingMs = Int32(min(100, max(1, (deadline.uptimeNanoseconds - now.uptimeNanoseconds) / 1_000_000)))
            let ready = poll(&pfd, 1, remainingMs)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR {
                throw SSHError.make("ssh.socket", "Waiting on the connection to \(endpoint) failed: \(String(cString: strerror(errno))).")
            }
        }
    }

    /// libssh2's last error message for this session (never contains secrets).
    func lastError() -> String {
        guard let session else { return "the session is closed" }
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        libssh2_session_last_error(session, &message, &length, 0)
        return message.map { String(cString: $0) } ?? "unknown error"
    }

    /// Sends a disconnect (one non-blocking attempt: a full socket just skips the courtesy)
    /// and frees the session and socket. Runs after any operation in flight, which a
    /// preceding `cancel()` ends promptly.
    func shutdown() async {
        _ = try? await perform { worker in
            if let session = worker.session { _ = termind_ssh2_session_disconnect(session, "termind closing") }
            worker.teardown()
        }
    }

    private func teardown() {
        if let session {
            libssh2_session_free(session)
            self.session = nil
            close(fd)
        }
    }
}

/// A set-once flag readable from any thread.
final class ManagedAtomicFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

enum SSHError {
    static func make(_ code: String, _ message: String) -> TermindError { TermindError(code: code, message: message) }
}
