import Foundation

/// The remote side of a monitor: one POSIX `sh` loop, sent as one command and left running
/// for as long as the monitor samples. It installs nothing, writes nothing and needs no root:
/// it only reads procfs and sysfs, runs `df -P` and `nvidia-smi -q -x` when asked, and
/// prints them between marker lines.
///
/// termind drives it: each line on its standard input asks for one snapshot — `b` the base
/// data, with `d` also processes and filesystems (only while someone views the host's
/// detail), with `g` also the GPUs. So the interval is termind's (no remote `sleep`), a slow
/// snapshot is never overtaken by the next, and closing the channel (EOF) ends the loop.
///
/// The command line is `exec /bin/sh -c '…'` with the script on one line and no single
/// quote in it, so any login shell (bash, zsh, fish, tcsh) passes it through unchanged;
/// `LC_ALL=C` keeps `df`'s output parseable. Whatever a shell start-up file prints before
/// the header line is skipped (`SnapshotReader`).
public enum RemoteScript {
    /// Marker lines start with ASCII RS (0x1E), which procfs never begins a line with.
    public static let marker: UInt8 = 0x1E
    /// The header's first word: the protocol's version is the second.
    public static let header = "termind-metrics"
    public static let version = 1

    /// What the script prints per snapshot, in order; `df`, `procs`, `gpu` only when asked.
    /// The procfs files come in one section, `files`, each line prefixed with its path
    /// (`/proc/uptime:…`); the reader files each line under its own section.
    public enum Section: String, CaseIterable, Sendable {
        case files, uptime, loadavg, stat, meminfo, netdev, virtual, diskstats, block, df, procs, gpu

        /// Sections key the reader's tables once per line it reads: hashed and compared by
        /// case, not by the raw value's string (which is what an enum with raw values
        /// otherwise uses: String hashing was a fifth of a snapshot's framing).
        public static func == (a: Section, b: Section) -> Bool { a.ordinal == b.ordinal }
        public func hash(into hasher: inout Hasher) { hasher.combine(ordinal) }
        private var ordinal: Int {
            switch self {
            case .files: 0
            case .uptime: 1
            case .loadavg: 2
            case .stat: 3
            case .meminfo: 4
            case .netdev: 5
            case .virtual: 6
            case .diskstats: 7
            case .block: 8
            case .df: 9
            case .procs: 10
            case .gpu: 11
            }
        }

        /// The procfs files of the `files` section, in the order grep reads them.
        public static let procfs: [Section] = [.uptime, .loadavg, .stat, .meminfo, .netdev, .diskstats]

        /// A file's path on the host, for those the `files` section holds.
        public var path: String {
            switch self {
            case .uptime: "/proc/uptime"
            case .loadavg: "/proc/loadavg"
            case .stat: "/proc/stat"
            case .meminfo: "/proc/meminfo"
            case .netdev: "/proc/net/dev"
            case .diskstats: "/proc/diskstats"
            default: ""
            }
        }

        /// Bytes a section may hold; beyond it the section is dropped and reported by size.
        public var limit: Int {
            switch self {
            case .files: 4 << 20          // the sum of its files' bounds, and their path prefixes
            case .uptime, .loadavg: 256
            case .stat: 512 << 10      // without intr and softirq: ~110 bytes per core
            case .meminfo: 64 << 10
            case .netdev: 512 << 10    // ~140 bytes per interface
            case .virtual, .block: 256 << 10
            case .diskstats: 1 << 20
            case .df: 512 << 10
            case .procs: 8 << 20       // ~250 bytes per process
            case .gpu: 4 << 20         // nvidia-smi -q -x: ~10-40 KiB per GPU
            }
        }
    }

    /// The command to run on the host.
    public static var command: String {
        let lines = [
            "export LC_ALL=C",
            "p=$(getconf PAGESIZE 2>/dev/null) || p=4096",
            "t=$(getconf CLK_TCK 2>/dev/null) || t=100",
            "g=0",
            "command -v nvidia-smi >/dev/null 2>&1 && g=1",
            // A marker starts on a line of its own even after output without a final newline.
            "m() { printf \"\\n\\036%s\\n\" \"$1\"; }",
            "m \"\(header) \(version) $p $t $g\"",
            // The snapshot is collected, then written at once: one SSH packet or a few, not
            // one per command, so the client wakes once per snapshot.
            "while read -r r; do",
            "s=$(",
            "m snapshot",
            // One process reads every procfs file; grep names each line's file (several files).
            "m files; grep -v -e \"^intr \" -e \"^softirq \" \(Section.procfs.map(\.path).joined(separator: " ")) 2>/dev/null",
            "m virtual; for i in /sys/devices/virtual/net/*; do printf \"%s\\n\" \"${i##*/}\"; done",
            "m block; for i in /sys/block/*; do printf \"%s\\n\" \"${i##*/}\"; done",
            "case $r in *d*) m df; df -P -k 2>/dev/null; m procs; cat /proc/[0-9]*/stat 2>/dev/null;; esac",
            "case $r$g in *g*1) m gpu; nvidia-smi -q -x 2>/dev/null;; esac",
            "m end",
            ")",
            "printf \"%s\\n\" \"$s\"",
            "done",
        ]
        let script = lines.map { line in
            // Compound openers take no `;` after them.
            line.hasSuffix(" do") || line.hasSuffix("; do") || line.hasSuffix("$(") ? line + " " : line + "; "
        }.joined().replacingOccurrences(of: "; ); ", with: " ); ")
        precondition(!script.contains("'"), "the remote script must not contain a single quote")
        return "exec /bin/sh -c '\(script)'"
    }

    /// The request line for one snapshot.
    public static func request(detail: Bool, gpu: Bool) -> String {
        "b" + (detail ? "d" : "") + (gpu ? "g" : "") + "\n"
    }
}
