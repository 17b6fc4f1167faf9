import Foundation

/// The peak resident memory of a process that is still running, from /proc, for the
/// benchmarks' PEAK RSS columns. (A process that runs to its end is measured by starting it
/// `measured`: see `SpawnedProcess`.)
public enum ProcessMemory {
    /// Its peak resident memory (VmHWM) in MiB, since it started or since `resetPeak`; nil
    /// once it is gone.
    public static func peakMiB(of pid: pid_t) -> Double? {
        field("VmHWM", of: pid)
    }

    /// The largest peak (VmHWM) among `pid` and its descendants now running, in MiB (autossh
    /// and the ssh it runs; a shell and its command).
    public static func treePeakMiB(of pid: pid_t) -> Double? {
        guard var largest = peakMiB(of: pid) else { return nil }
        var pending = children(of: pid)
        while let child = pending.popLast() {
            largest = max(largest, peakMiB(of: child) ?? 0)
            pending += children(of: child)
        }
        return largest
    }

    /// Sets its peak back to what it holds now (`clear_refs` 5), so that the next reading is
    /// the peak from here on: a row's own, not the largest since the server started.
    public static func resetPeak(of pid: pid_t) {
        let fd = open("/proc/\(pid)/clear_refs", O_WRONLY)
        guard fd >= 0 else { return }
        _ = write(fd, "5", 1)
        close(fd)
    }

    /// The command that runs `program` under GNU time, writing the program's own peak
    /// (ru_maxrss of a child GNU time forked, in KiB) to a file of its own: the program and
    /// arguments to start, and the file for `peakMiB(in:)` (nil, and the command unchanged,
    /// when GNU time is not installed). wait4's ru_maxrss of a child started here with
    /// posix_spawn would count this process's memory too (vfork shares it until exec).
    public static func measuredCommand(_ program: String, _ arguments: [String]) -> (program: String, arguments: [String], peakFile: String?) {
        guard access(timePath, X_OK) == 0 else { return (program, arguments, nil) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("termind-peak-\(UUID().uuidString)").path
        return (timePath, ["-q", "-f", "%M", "-o", file, program] + arguments, file)
    }

    /// The peak GNU time wrote to `file` (MiB), which is then removed.
    public static func peakMiB(in file: String) -> Double? {
        defer { unlink(file) }
        guard let text = try? String(contentsOfFile: file, encoding: .utf8),
              let kib = text.split(separator: "\n").last.flatMap({ Double($0.trimmingCharacters(in: .whitespaces)) }) else { return nil }
        return kib / 1024
    }

    static let timePath = "/usr/bin/time"

    static func field(_ name: String, of pid: pid_t) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }),
              let kib = Double(line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces).prefix { $0.isNumber }) else { return nil }
        return kib / 1024
    }

    static func children(of pid: pid_t) -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.flatMap { task in
            ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { pid_t($0) }
        }
    }
}
