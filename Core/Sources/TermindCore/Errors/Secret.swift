/// A secret value in memory (password, passphrase, token, private key text).
///
/// It never prints itself: `description`, `debugDescription` and reflection all show
/// `<redacted>`, so interpolating a value that holds one into a log line, an error
/// message or test output cannot leak it. It still encodes as its plain value, because
/// contracts must carry it to the feature that uses it; features keep it out of
/// anything they persist or log.
public struct Secret: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private let value: String

    public init(_ value: String) { self.value = value }

    public init(from decoder: any Decoder) throws {
        value = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }

    /// The plain text, for the one call that must hand it to a library.
    public func withPlaintext<R>(_ body: (String) throws -> R) rethrows -> R { try body(value) }

    public var isEmpty: Bool { value.isEmpty }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
