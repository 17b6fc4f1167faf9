import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// Field rules shared by every Vault write. Each failure names the field and the value's
/// problem, never a secret.
enum VaultValidation {
    static func address(_ value: String) throws -> String {
        let v = value.trimmedWhitespace
        guard !v.isEmpty else { throw TermindError.badRequest("address: must not be empty.") }
        guard v.utf8.count <= 253, !v.hasPrefix("-"),
              v.unicodeScalars.allSatisfy({ $0.isAlphanumericScalar || ".-_:%[]".unicodeScalars.contains($0) }) else {
            throw TermindError.badRequest("address: '\(v)' is not a host name or IP address.")
        }
        if v.hasPrefix("[") != v.hasSuffix("]") { throw TermindError.badRequest("address: '\(v)' has an unbalanced bracket.") }
        return v.hasPrefix("[") ? String(v.dropFirst().dropLast()) : v
    }

    static func port(_ value: Int) throws -> Int {
        guard (1...65_535).contains(value) else { throw TermindError.badRequest("port: \(value) is not a TCP port (1–65535).") }
        return value
    }

    static func user(_ value: String, field: String = "user") throws -> String {
        guard !value.isEmpty, value.utf8.count <= 255,
              !value.unicodeScalars.contains(where: { $0.isWhitespaceOrNewlineScalar || $0.isControlScalar }) else {
            throw TermindError.badRequest("\(field): '\(value)' is not a user name (no spaces or control characters, at most 255 bytes).")
        }
        return value
    }

    static func label(_ value: String) throws -> String {
        let v = value.trimmedWhitespace
        guard v.utf8.count <= 128, !v.unicodeScalars.contains(where: { $0.isControlScalar || $0.isNewlineScalar }) else {
            throw TermindError.badRequest("label: at most 128 bytes on one line.")
        }
        return v
    }

    static func tags(_ values: [String]) throws -> [String] {
        var seen = Set<String>()
        return try values.compactMap { raw in
            let tag = raw.trimmedWhitespace
            guard !tag.isEmpty else { return nil }
            guard tag.utf8.count <= 64, tag.unicodeScalars.allSatisfy({ $0.isAlphanumericScalar || "._:=@/+-".unicodeScalars.contains($0) }) else {
                throw TermindError.badRequest("tags: '\(tag)' may use letters, digits and . _ : = @ / + - (at most 64 bytes).")
            }
            return seen.insert(tag).inserted ? tag : nil
        }
    }

    /// A route is at most eight hosts including the target.
    static let maximumRoute = RouteLimits.maxHosts
}

/// Record ids: a kind prefix and 48 random bits ("host_1a2b3c4d5e6f").
enum RecordID {
    static func make(_ prefix: String) -> String { prefix + "_" + SecureRandom.bytes(6).hexEncoded }
}
