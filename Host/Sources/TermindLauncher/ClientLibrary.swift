#if canImport(Glibc)
import Glibc
#endif

/// The full client, `libTermindClient.so` beside the executable (found through
/// /proc/self/exe, so a symlink to an installed termind works): loaded only when the
/// command runs in this process, so a command a server runs never pays for Foundation,
/// ICU, SQLite, OpenSSL or termind's own libraries.
enum ClientLibrary {
    static let name = "libTermindClient.so"
    static let entry = "termind_client_main"

    static func run() -> Never {
        let path = directory() + "/" + name
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown reason"
            LauncherTerminal.write("termind: cannot load the client library \(path): \(reason). Reinstall termind (make install) or rebuild it (make build).\n", to: STDERR_FILENO)
            exit(3)
        }
        guard let symbol = dlsym(handle, entry) else {
            LauncherTerminal.write("termind: \(path) has no \(entry): it is not this termind's client library.\n", to: STDERR_FILENO)
            exit(3)
        }
        typealias Main = @convention(c) () -> Void
        unsafeBitCast(symbol, to: Main.self)()
        exit(0)  // the entry exits with the command's code; never reached
    }

    /// The folder of the running executable.
    static func directory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return "." }
        let path = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
