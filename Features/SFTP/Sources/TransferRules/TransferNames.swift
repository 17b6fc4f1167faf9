/// Names and paths inside a recursive transfer, as bytes (a remote name need not be UTF-8).
public enum TransferNames {
    /// Why a directory entry's name cannot become a destination name (nil: it can): a
    /// server (or a local directory) could otherwise steer a write outside the destination.
    public static func problem(child name: [UInt8]) -> String? {
        if name.isEmpty { return "an empty name" }
        if name == [0x2E] || name == [0x2E, 0x2E] { return "'\(String(decoding: name, as: UTF8.self))' is not a name inside the directory" }
        if name.contains(0x2F) { return "a name holding '/'" }
        if name.contains(0) { return "a name holding a NUL byte" }
        return nil
    }

    /// The `attempt`th "keep both" name: `report.txt` → `report (1).txt`; `.bashrc` →
    /// `.bashrc (1)`; a directory's whole name gets the suffix.
    public static func keepBoth(_ name: [UInt8], attempt: Int, isDirectory: Bool) -> [UInt8] {
        let suffix = Array(" (\(attempt))".utf8)
        guard !isDirectory, let dot = name.lastIndex(of: 0x2E), dot > 0 else { return name + suffix }
        return Array(name[..<dot]) + suffix + Array(name[dot...])
    }

    /// `digits` random hexadecimal digits (at most 16) for a temporary name: from the
    /// system's generator (getrandom), not `UUID()`, which opens /dev/urandom each time.
    public static func randomToken(digits: Int = 6) -> String {
        let text = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String((String(repeating: "0", count: max(0, 16 - text.count)) + text).suffix(digits))
    }

    /// The temporary name a file is written under before it is renamed into place: in the
    /// same directory (so the rename stays on one file system), hidden, and naming termind.
    public static func temporary(_ name: [UInt8], token: String) -> [UInt8] {
        // Long names are cut so the temporary one stays within NAME_MAX (255).
        let kept = name.count > 200 ? Array(name.prefix(200)) : name
        return Array(".".utf8) + kept + Array(".termind-\(token).part".utf8)
    }

    /// `path` made of normalized components ("a//b/./c/" → "a/b/c"); `..` stays (it is
    /// never resolved textually: a link may stand before it).
    public static func normalized(_ path: [UInt8]) -> [UInt8] {
        let absolute = path.first == 0x2F
        let parts = path.split(separator: 0x2F).filter { $0 != [0x2E] }
        let joined = parts.map(Array.init).joined(separator: [0x2F])
        return (absolute ? [0x2F] : []) + Array(joined)
    }

    /// Whether `path` lies strictly inside `ancestor` (both absolute or both relative to the
    /// same place, normalized): `/a/b` is inside `/a`, `/ab` and `/a` are not.
    public static func isStrictlyInside(_ path: [UInt8], _ ancestor: [UInt8]) -> Bool {
        let p = normalized(path), a = normalized(ancestor)
        guard p.count > a.count, p.starts(with: a) else { return false }
        return a == [0x2F] || p[a.count] == 0x2F
    }

    public static func isSame(_ path: [UInt8], _ other: [UInt8]) -> Bool { normalized(path) == normalized(other) }
}
