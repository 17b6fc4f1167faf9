import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The remote side of a monitor: one POSIX `sh` loop, sent as one command and left running
/// for as long as the monitor samples. It installs nothing and needs no root: it reads
/// procfs and sysfs, runs `df -P` and `nvidia-smi -q -x` when asked (their output in a
/// private temporary folder it removes at exit, the only thing it writes), and prints them
/// between marker lines.
///
/// termind drives it: each line on its standard input asks for one snapshot — `b` the base
/// data, with `d` also processes and filesystems (only while someone views the host's
/// detail), with `g` also the GPUs. So the interval is termind's (no remote `sleep` between
/// snapshots), a slow snapshot is never overtaken by the next, a hanging probe never holds
/// up the base data, and closing the channel (EOF) ends the loop.
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

    /// What the script prints per snapshot, in order; `df`, `procs`, `gpu` only when asked,
    /// `probes` only when a probe asked for has no result to show (late, or not run).
    /// The procfs files come in one section, `files`, each line prefixed with its path
    /// (`/proc/uptime:…`); the reader files each line under its own section.
    public enum Section: String, CaseIterable, Sendable {
        case files, uptime, loadavg, stat, meminfo, netdev, virtual, diskstats, block, df, procs, gpu, probes

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
            case .probes: 12
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
            case .probes: 4 << 10      // a line per late probe
            }
        }
    }

    /// Seconds a snapshot waits for a probe it starts (a fresh result when it answers in time).
    public static let probeWait = 1
    /// Seconds after which a probe still running is late: its section is left out and the
    /// snapshot's `probes` section names it, until it answers.
    public static let probeBound = 10
    /// Seconds a probe's result may be shown for after it was taken: at least the longest
    /// interval (60 s) and its wait, and a detail viewed again after a longer pause never
    /// shows the filesystems of the last time.
    public static let probeFreshness = 70

    /// The command to run on the host.
    ///
    /// The probes — `df` (detail) and `nvidia-smi` (GPUs), commands that can hang (a dead
    /// NFS mount, a wedged driver) where procfs does not — never block the loop: `q` runs one
    /// in the background, its output to a private folder (`mktemp -d`, made when a probe
    /// first runs, removed at exit), and waits for it at most `probeWait` seconds (a `sleep`
    /// in the background signals the loop, which a trapped signal wakes from `wait`, even
    /// from a child in uninterruptible sleep). A probe that answers later is read by a later
    /// snapshot; one running longer than `probeBound` is late and named in `probes`
    /// (`NAME late SECONDS`, or `NAME skipped` without a folder); a probe still running is
    /// never started again. The base procfs data is read in every snapshot regardless.
    public static var command: String {
        let lines = [
            "export LC_ALL=C",
            "p=$(getconf PAGESIZE 2>/dev/null) || p=4096",
            "t=$(getconf CLK_TCK 2>/dev/null) || t=100",
            "g=0",
            "command -v nvidia-smi >/dev/null 2>&1 && g=1",
            "d=",
            // A marker starts on a line of its own even after output without a final newline.
            #"m() { printf "\n\036%s\n" "$1"; }"#,
            // The remote uptime in whole seconds, in u (builtins only).
            #"n() { read u x </proc/uptime; u=${u%.*}; }"#,
            // At exit: probes still running are ended, their folder removed.
            #"z() { kill $j_df $j_gpu 2>/dev/null; case $d in /*) rm -rf "$d";; esac; }"#,
            "trap z EXIT",
            #"trap "exit 1" HUP PIPE TERM"#,
            "trap : USR1",
            // q NAME COMMAND…: sets o_NAME to the file of the result to show, or l_NAME to why there is none.
            "q() {",
            "k=$1",
            "shift",
            #"eval "j=\$j_$k c=\${c_$k:-0} b=\$b_$k f=\$f_$k e=\$e_$k""#,
            "o=",
            "l=",
            #"[ -n "$d" ] || d=$(mktemp -d 2>/dev/null) || d=-"#,
            #"if [ "$d" = - ]; then"#,
            "l=skipped",
            "else",
            // The probe running since the last snapshot has answered: its result is the latest.
            #"if [ -n "$j" ]; then"#,
            #"x=; read x w 2>/dev/null <"$d/$k.e""#,
            #"if [ "$x" = "$c" ]; then"#,
            #"wait $j 2>/dev/null; j=; f=$d/$k.$((c % 2)); e=$w"#,
            "fi",
            "fi",
            // None running: start one (its output to the file the latest result is not in), wait a little.
            #"if [ -z "$j" ]; then"#,
            "c=$((c + 1)); n; b=$u",
            #"( "$@" >"$d/$k.$((c % 2))" 2>/dev/null; n; echo "$c $u" >"$d/$k.e" ) </dev/null >/dev/null 2>&1 &"#,
            "j=$!",
            #"( sleep \#(probeWait); x=; read x w <"$d/$k.e"; [ "$x" = "$c" ] || kill -s USR1 $$ ) </dev/null >/dev/null 2>&1 &"#,
            "v=$!",
            "wait $j",
            "kill $v 2>/dev/null; wait $v 2>/dev/null",
            #"x=; read x w 2>/dev/null <"$d/$k.e""#,
            #"if [ "$x" = "$c" ]; then"#,
            #"wait $j 2>/dev/null; j=; f=$d/$k.$((c % 2)); e=$w"#,
            "fi",
            "fi",
            "n",
            #"if [ -n "$j" ] && [ $((u - b)) -gt \#(probeBound) ]; then"#,
            "l=\"late $((u - b))\"",
            #"elif [ -n "$f" ] && [ $((u - e)) -le \#(probeFreshness) ]; then"#,
            "o=$f",
            "fi",
            "fi",
            #"eval "j_$k=\$j c_$k=\$c b_$k=\$b f_$k=\$f e_$k=\$e o_$k=\$o l_$k=\$l""#,
            "}",
            #"m "\#(header) \#(version) $p $t $g""#,
            // termind asks; the probes run first, then the snapshot is collected and written at
            // once: one SSH packet or a few, not one per command, so the client wakes once per snapshot.
            "while read -r r; do",
            "o_df= l_df= o_gpu= l_gpu=",
            "case $r in *d*) q df df -P -k;; esac",
            "case $r$g in *g*1) q gpu nvidia-smi -q -x;; esac",
            "s=$(",
            "m snapshot",
            // One process reads every procfs file; grep names each line's file (several files).
            #"m files; grep -v -e "^intr " -e "^softirq " \#(Section.procfs.map(\.path).joined(separator: " ")) 2>/dev/null"#,
            #"m virtual; for i in /sys/devices/virtual/net/*; do printf "%s\n" "${i##*/}"; done"#,
            #"m block; for i in /sys/block/*; do printf "%s\n" "${i##*/}"; done"#,
            #"case $r in *d*) [ -z "$o_df" ] || { m df; cat "$o_df"; }; m procs; cat /proc/[0-9]*/stat 2>/dev/null;; esac"#,
            #"[ -z "$o_gpu" ] || { m gpu; cat "$o_gpu"; }"#,
            #"[ -z "$l_df$l_gpu" ] || { m probes; for i in df gpu; do eval "x=\$l_$i"; [ -z "$x" ] || printf "%s %s\n" $i "$x"; done; }"#,
            "m end",
            ")",
            #"printf "%s\n" "$s""#,
            "done",
        ]
        let script = lines.map { line in
            // Compound openers take no `;` after them, nor does a command put in the background.
            [" do", " then", "else", " {", "$(", " &"].contains { line.hasSuffix($0) } ? line + " " : line + "; "
        }.joined().replacingUTF8("; ); ", with: " ); ")
        precondition(!script.contains("'"), "the remote script must not contain a single quote")
        return "exec /bin/sh -c '\(script)'"
    }

    /// The request line for one snapshot.
    public static func request(detail: Bool, gpu: Bool) -> String {
        "b" + (detail ? "d" : "") + (gpu ? "g" : "") + "\n"
    }
}
