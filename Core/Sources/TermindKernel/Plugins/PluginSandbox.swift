import CTermindSystem
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

extension ErrorCode {
    /// A plugin process's sandbox could not be set up as its manifest declares.
    public static let pluginSandbox: ErrorCode = "plugin.sandbox"
}

/// The sandbox `termind-plugin-host` puts itself in, from the plugin's manifest, before it
/// opens the plugin's library: resource limits, no new privileges, Landlock (files; TCP and
/// signals where the kernel's ABI has them) and a seccomp filter. What this kernel cannot
/// enforce is reported (`termind features`), never pretended.
enum PluginSandbox {
    struct Report: Sendable {
        var enforced: [String] = []
        var notEnforced: [String] = []
    }

    static func apply(_ m: FeatureManifest, protected: [String]) throws -> Report {
        var report = Report()
        let access = m.access ?? .init()
        let memory = m.limits?.memoryMiB ?? FeatureManifest.Limits.defaultMemoryMiB
        let files = m.limits?.openFiles ?? FeatureManifest.Limits.defaultOpenFiles
        try checkProtected(m, access: access, protected: protected)
        // Landlock restricts the calling thread (seccomp takes every thread along): there
        // must be no other yet.
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
        guard threads == 1 else {
            throw TermindError(.pluginSandbox, "plugin '\(m.id)': its process had \(threads) threads before its sandbox; it was not started.")
        }

        var address = rlimit(rlim_cur: rlim_t(memory) << 20, rlim_max: rlim_t(memory) << 20)
        guard setrlimit(Int32(RLIMIT_AS.rawValue), &address) == 0 else { throw failure(m, "the memory limit (\(memory) MiB)") }
        var open = rlimit(rlim_cur: rlim_t(files), rlim_max: rlim_t(files))
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &open) == 0 else { throw failure(m, "the open-file limit (\(files))") }
        report.enforced.append("memory \(memory) MiB, \(files) open files")

        guard termind_sandbox_drop_capabilities() == 0 else { throw failure(m, "dropping its capabilities") }
        guard termind_sandbox_no_new_privs() == 0 else { throw failure(m, "no_new_privs") }
        report.enforced.append("no capabilities, no new privileges")

        let abi = termind_landlock_abi()
        if abi > 0 {
            let reads = readable(m, protected: protected) + access.read
            var failed: UnsafePointer<CChar>?
            let rc = withCStrings(reads) { read in
                withCStrings(access.write) { write in
                    termind_landlock_restrict(abi, read, Int32(reads.count), write, Int32(access.write.count), access.tcp ? 1 : 0, &failed)
                }
            }
            guard rc == 0 else { throw failure(m, "Landlock (\(failed.map { String(cString: $0) } ?? "the ruleset"))") }
            report.enforced.append("Landlock ABI \(abi): files beneath the declared paths only (and /proc)")
            if abi >= 4 { report.enforced.append(access.tcp ? "TCP allowed (declared)" : "no TCP (Landlock)") } else if !access.tcp {
                report.notEnforced.append("TCP by port (Landlock ABI \(abi) has no network rules; seccomp refuses TCP sockets instead)")
            }
            report.notEnforced.append("other processes of this user (not termind, which is made undumpable) can be read through /proc (a PID namespace would close it)")
            if abi >= 6 { report.enforced.append("no signals or abstract sockets outside its process") } else {
                report.notEnforced.append("signal and abstract-socket scoping (Landlock ABI \(abi) < 6)")
            }
        } else {
            report.notEnforced.append("file access (this kernel offers no Landlock)")
        }

        guard termind_sandbox_seccomp(access.tcp ? 1 : 0) == 0 else { throw failure(m, "the seccomp filter") }
        report.enforced.append("seccomp: no ptrace, mount, bpf, keyctl, perf_event_open, userfaultfd, process_vm_*, Unix sockets\(access.tcp ? "" : ", TCP sockets")")
        return report
    }

    /// A declared path that holds termind's database or secret store is refused: a plugin
    /// gets data only through the contracts it calls.
    private static func checkProtected(_ m: FeatureManifest, access: FeatureManifest.Access, protected: [String]) throws {
        let guarded = protected.map { resolved($0) }
        for path in access.read + access.write {
            let declared = resolved(path)
            if let hit = guarded.first(where: { $0 == declared || $0.hasPrefix(declared == "/" ? "/" : declared + "/") }) {
                throw TermindError(.pluginSandbox, "plugin '\(m.id)' declares access to \(path), which holds termind's own store (\(hit)); declare a narrower path.")
            }
        }
    }

    private static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return PathText.standardized(path) }
        defer { free(real) }
        return String(cString: real)
    }

    /// What every plugin process reads: its own folder, the libraries already mapped (the
    /// Swift runtime, libTermindCore) and the system's library folders, the loader's cache,
    /// the CPU count, and /proc — libdispatch reads each of its threads' /proc/TID/stat and
    /// ends the process when it cannot. Other processes' environment, descriptors and memory
    /// stay out of reach there: Landlock refuses ptrace-mode access to any process outside
    /// the sandbox (what /proc/PID/environ, fd and mem require).
    private static func readable(_ m: FeatureManifest, protected: [String]) -> [String] {
        var paths: Set<String> = [PathText.deletingLastComponent(m.libraryPath), "/usr/lib", "/lib", "/lib64", "/usr/lib64", "/usr/local/lib",
                                  "/etc/ld.so.cache", "/sys/devices/system/cpu", "/sys/fs/cgroup", "/dev/null", "/dev/urandom", "/proc"]
        // The folders of the libraries already mapped: regular files only (never a
        // `/memfd:…` mapping, whose folder would be `/`).
        if let maps = procText("/proc/self/maps") {
            for line in maps.split(separator: "\n") {
                guard let slash = line.firstIndex(of: "/") else { continue }
                let file = String(line[slash...])
                var info = stat()
                guard stat(file, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                let folder = PathText.deletingLastComponent(file)
                if folder != "/" { paths.insert(folder) }
            }
        }
        // Never a folder that holds termind's database or secret store.
        let guarded = protected.map { resolved($0) }
        return paths.sorted().filter { path in
            let folder = resolved(path)
            return !guarded.contains { $0 == folder || $0.hasPrefix(folder == "/" ? "/" : folder + "/") }
        }
    }

    /// A /proc file's text (they report no size: read to the end).
    private static func procText(_ path: String) -> String? {
        FileText.read(path).map { String(decoding: $0, as: UTF8.self) }
    }

    private static func failure(_ m: FeatureManifest, _ what: String) -> TermindError {
        TermindError(.pluginSandbox, "plugin '\(m.id)': its process could not set up \(what): \(String(cString: strerror(errno))); it was not started.")
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
        let pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        defer { pointers.forEach { free($0) } }
        return pointers.map { UnsafePointer($0) }.withUnsafeBufferPointer { body($0.baseAddress) }
    }
}
