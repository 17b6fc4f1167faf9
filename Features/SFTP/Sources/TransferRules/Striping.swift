/// How many channels one big file's requests spread over (issue 40: extra channels only where
/// they help). A channel moves at most its window per round trip: on loopback or a LAN that
/// is far above what the link carries, so one channel is enough and every extra one is an
/// sftp-server and a window the server keeps for nothing; at a long round trip the window is
/// the limit, and each added channel adds its window.
public enum Striping {
    /// What one file aims for where the link allows it (loopback moves about this much).
    public static let targetBytesPerSecond = 512.0 * 1024 * 1024
    /// The window OpenSSH's sshd gives a session channel (64 packets of 32 KiB): the most one
    /// channel's uploads have in flight. Downloads have the window termind offers.
    public static let serverWindow = 2 << 20

    /// Channels for one file: up to `most`, as many as it takes for `window` bytes per
    /// `roundTrip` seconds to reach the target; `most` when the round trip is not known.
    public static func channels(upTo most: Int, roundTrip: Double?, window: Int) -> Int {
        guard most > 1 else { return 1 }
        guard let roundTrip, roundTrip.isFinite, roundTrip >= 0 else { return most }
        let needed = (targetBytesPerSecond * roundTrip / Double(max(window, 1))).rounded(.up)
        return Int(min(Double(most), max(1, needed)))
    }
}
