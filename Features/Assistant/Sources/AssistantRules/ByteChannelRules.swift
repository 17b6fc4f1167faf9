import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// MCP's byte channels (docs/mcp.md, "Files"), pure: a capability's lifetime and limits, the
/// one Range form a download takes, and what an upload's resume must say.
public enum ByteChannelRules {
    /// A capability lives ten minutes from its creation.
    public static let lifetime: Double = 600
    /// Finished records stay queryable this long.
    public static let keptFor: Double = 1800
    /// Bytes moving at once, over both directions.
    public static let activeSlots = 4
    /// Per direction: unfinished and finished records at most.
    public static let unfinishedLimit = 64
    public static let finishedLimit = 256
    /// What a download pulls from the host after each send.
    public static let piece = 65536
    /// The header that carries a capability (never a query string).
    public static let header = "termind-capability"

    public enum Direction: String, Sendable, Equatable, Codable { case upload, download }

    /// Where a download starts: 0 without a Range header; N for exactly one `bytes=N-`;
    /// nil (answered 416, the capability not consumed) for anything else — a closed range, a
    /// suffix range, several ranges, another unit, N past `size` when it is known.
    public static func rangeStart(_ header: String?, size: UInt64? = nil) -> UInt64?? {
        guard let header else { return .some(0) }
        let value = header.trimmedWhitespace
        guard value.lowercased().hasPrefix("bytes="), !value.contains(",") else { return .some(nil) }
        let spec = value.dropFirst(6)
        guard spec.hasSuffix("-"), let start = UInt64(spec.dropLast()), spec.dropLast().allSatisfy(\.isASCII) else { return .some(nil) }
        if let size, start > size || (start == size && size > 0) { return .some(nil) }
        return .some(start)
    }

    /// Whether an upload request may go on: the offset it says (`Upload-Offset`, absent: 0)
    /// must be the acknowledged one, and its length exactly what is left.
    public static func uploadProblem(said offset: String?, length: String?, acknowledged: UInt64, size: UInt64) -> String? {
        let claimed: UInt64
        if let offset {
            guard let value = UInt64(offset.trimmedWhitespace) else { return "Upload-Offset is a byte count" }
            claimed = value
        } else {
            claimed = 0
        }
        guard claimed == acknowledged else { return "Upload-Offset must be \(acknowledged), the bytes the host has acknowledged (not \(claimed))" }
        guard let length, let count = UInt64(length.trimmedWhitespace) else { return "an upload says its Content-Length" }
        guard count == size - acknowledged else { return "Content-Length must be \(size - acknowledged), the bytes left of \(size) (not \(count))" }
        return nil
    }

    /// A 64-hex-digit SHA-256, lowercased; nil when it is not one.
    public static func sha256(_ text: String) -> String? {
        let lower = text.lowercased()
        return lower.count == 64 && lower.allSatisfy { $0.isHexDigit } ? lower : nil
    }
}
