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
}
