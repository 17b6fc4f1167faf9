import TermindCore

/// The control socket's codes: the server's notices and refusals, the client's failures.
extension ErrorCode {
    public static let envelopeMalformed: ErrorCode = "envelope.malformed"
    public static let envelopeTooLarge: ErrorCode = "envelope.too_large"
    /// What the client reports for a server's error reply that carries no code.
    public static let unknown: ErrorCode = "unknown"
    /// The server has `ControlServer.maximumClients` already.
    public static let socketBusy: ErrorCode = "socket.busy"
    /// The server closed a connection that sent nothing for its idle timeout.
    public static let socketIdle: ErrorCode = "socket.idle"
    public static let socketClosed: ErrorCode = "socket.closed"
    /// The peer does not run as this user.
    public static let socketPeerRejected: ErrorCode = "socket.peer_rejected"
    public static let socketConnectFailed: ErrorCode = "socket.connect_failed"
    public static let socketCreateFailed: ErrorCode = "socket.create_failed"
    public static let socketBindFailed: ErrorCode = "socket.bind_failed"
    public static let socketListenFailed: ErrorCode = "socket.listen_failed"
    public static let socketDirectory: ErrorCode = "socket.directory"
    /// The socket's folder is not a 0700 folder of this user's.
    public static let socketDirectoryUnsafe: ErrorCode = "socket.directory_unsafe"
    public static let socketInUse: ErrorCode = "socket.in_use"
    public static let socketPathInUse: ErrorCode = "socket.path_in_use"
    public static let socketPathTooLong: ErrorCode = "socket.path_too_long"
}
