import Foundation

/// The CPU time a live process has used so far, all its threads (those that already exited
/// included), in seconds to the nanosecond: its process CPU clock (`clock_getcpuclockid`),
/// where /proc/PID/stat counts 10 ms ticks. 0 when the process is gone.
public enum ProcessCPU {
    public static func seconds(of pid: pid_t) -> Double {
        var clock = clockid_t()
        var now = timespec()
        guard clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &now) == 0 else { return 0 }
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// The calling thread's CPU time so far.
    public static func thisThread() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// A process's CPU time with that of the children it reaped (what a server's finished
    /// sessions used joins it so), from /proc/PID/stat's utime, stime, cutime and cstime
    /// (10 ms ticks); nil when the process is gone.
    public static func withReapedChildren(of pid: pid_t) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        // After the name: state is field 3, utime/stime/cutime/cstime are fields 14-17.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 14 else { return nil }
        return fields[11...14].compactMap { Double($0) }.reduce(0, +) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
