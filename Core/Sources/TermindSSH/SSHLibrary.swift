internal import CLibSSH2
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The libssh2 library in use, initialised once per process before any session exists.
/// This module is the only one that imports CLibSSH2.
public enum SSHLibrary {
    /// The version libssh2 reports at run time (termind needs 1.11.1 or newer).
    public static var version: String { String(cString: termind_ssh2_version()) }

    /// Initialises libssh2 (idempotent; thread-safe through Swift's lazy globals).
    public static func initialize() { _ = initialized }

    private static let initialized: Bool = {
        precondition(libssh2_init(0) == 0, "libssh2_init failed")
        return true
    }()
}
