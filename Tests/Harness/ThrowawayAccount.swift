import Foundation
import TermindCore

/// A local account made for one test, as root: sshd delivers channel signals only to
/// unprivileged users' sessions, password logins need an account with a known password,
/// and its /bin/sh starts without root's shell start-up files (root's .bashrc here costs
/// about 100 ms an exec). `remove()` ends whatever still runs as it, then deletes it:
/// userdel refuses an account that has processes, which used to leave accounts behind.
public final class ThrowawayAccount: @unchecked Sendable {
    public let name: String
    private let lock = NSLock()
    private var removed = false

    public enum Password: Sendable {
        /// No password that works, but not locked ("*", not "!"): sshd refuses locked
        /// accounts even for key logins.
        case unusable
        /// An empty password (for PermitEmptyPasswords).
        case empty
        case value(String)
    }

    /// `shell` is its login shell; `home`, when given, a folder made for it (owned by it) with
    /// `files` (name → text) in it — start-up files of the shell under test, say.
    public init(password: Password = .unusable, shell: String = "/bin/sh", home: String? = nil, files: [String: String] = [:]) throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd") else {
            throw TermindError(code: "fixture.account", message: "needs root to create a throwaway account")
        }
        name = "tmd\(UInt32.random(in: 100_000...999_999))"
        let made = try ProcessRunner.run("/usr/sbin/useradd", (home.map { ["-d", $0] } ?? ["-M"]) + ["-s", shell, name])
        if made.status == 0, let home {
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            for (file, text) in files { try text.write(toFile: (home as NSString).appendingPathComponent(file), atomically: true, encoding: .utf8) }
            _ = try ProcessRunner.run("/bin/chown", ["-R", name, home])
        }
        guard made.status == 0 else { throw TermindError(code: "fixture.account", message: "useradd \(name) failed: \(made.stderr)") }
        let set = switch password {
        case .unusable: try ProcessRunner.run("/usr/sbin/usermod", ["-p", "*", name])
        case .empty: try ProcessRunner.run("/usr/bin/passwd", ["-d", name])
        case .value(let password): try ProcessRunner.run("/usr/sbin/chpasswd", [], stdin: "\(name):\(password)\n")
        }
        guard set.status == 0 else {
            remove()
            throw TermindError(code: "fixture.account", message: "setting the password of \(name) failed: \(set.stderr)")
        }
    }

    deinit { remove() }

    public func remove() {
        let first = lock.withLock { () -> Bool in defer { removed = true }; return !removed }
        guard first else { return }
        for _ in 0..<50 {
            _ = try? ProcessRunner.run("/usr/bin/pkill", ["-KILL", "-u", name])
            if let result = try? ProcessRunner.run("/usr/sbin/userdel", [name]), result.status == 0 { return }
            usleep(100_000)
        }
    }
}
