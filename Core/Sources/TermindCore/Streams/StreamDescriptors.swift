import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A client's own standard streams, handed to a stream that declares `acceptsDescriptors`:
/// over the control socket as SCM_RIGHTS with the stream's open line (OpenSSH's
/// ControlMaster does the same), in-process as copies. The operation then reads and
/// writes them itself, so bulk data never travels as events or input lines.
///
/// The session owns them: they are closed once the stream's handler has returned, so a
/// handler that hands them on (to an SSH channel, say) gives it copies or waits for it.
public struct StreamDescriptors: Sendable, Equatable {
    /// The roles a client may hand over, in the order their descriptors travel.
    public static let roles = ["stdin", "stdout", "stderr"]

    public let stdin: Int32?
    public let stdout: Int32?
    public let stderr: Int32?

    public init(stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil) {
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
    }

    /// `fds[i]` has role `roles[i]`; nil unless `roles` are distinct known roles in
    /// `StreamDescriptors.roles` order, one per descriptor.
    public init?(roles: [String], fds: [Int32]) {
        // Equal to the known roles it contains, in their order: known, ordered and distinct.
        guard !roles.isEmpty, roles.count == fds.count, roles == Self.roles.filter(roles.contains) else { return nil }
        let given = Dictionary(uniqueKeysWithValues: zip(roles, fds))
        self.init(stdin: given["stdin"], stdout: given["stdout"], stderr: given["stderr"])
    }

    /// The roles given, in travelling order.
    public var roles: [String] { zip(Self.roles, [stdin, stdout, stderr]).compactMap { $0.1 == nil ? nil : $0.0 } }
    /// The descriptors, in the order of `roles`.
    public var fds: [Int32] { [stdin, stdout, stderr].compactMap { $0 } }

    package func closeAll() {
        for fd in fds { close(fd) }
    }
}
