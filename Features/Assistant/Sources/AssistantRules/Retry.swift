import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// When a turn's request is sent again (the same logical request; what was shown of the
/// failed attempt is discarded): connection failures before any byte, 408, 409, 429, 5xx
/// and 529, an overloaded or unavailable provider mid-stream, and a stream cut before its
/// end — five more times, 1, 2, 4, 8 and 16 s apart, or after the server's Retry-After
/// (at most 60 s). A spent budget or quota is never retried.
public enum RetryRule {
    public static let delays: [Double] = [1, 2, 4, 8, 16]
    public static let retryAfterLimit: Double = 60

    /// How long to wait before attempt `attempt + 1` (attempt 0 is the first try); nil:
    /// no more attempts.
    public static func delay(after attempt: Int, retryAfter: Double?) -> Double? {
        guard attempt >= 0, attempt < delays.count else { return nil }
        if let retryAfter, retryAfter.isFinite, retryAfter >= 0 { return min(retryAfter, retryAfterLimit) }
        return delays[attempt]
    }

    /// Error codes that mean "not now, not ever with this account" although a server may
    /// send them with 429.
    static let permanent: Set<String> = ["enforced_spend_limit_reached", "insufficient_quota", "billing_hard_limit_reached", "billing_not_active"]

    /// Whether an HTTP status (with the error code its body named) is worth trying again.
    public static func isTransient(status: Int, code: String?) -> Bool {
        if let code, permanent.contains(code) { return false }
        return [408, 409, 429, 529].contains(status) || (500...599).contains(status)
    }

    /// Whether an error a provider reported inside a stream is worth trying again.
    public static func isTransient(streamError type: String) -> Bool {
        if permanent.contains(type) { return false }
        return ["overloaded_error", "api_error", "rate_limit_error", "too_many_requests", "server_error", "rate_limit_exceeded", "UNAVAILABLE",
                "RESOURCE_EXHAUSTED", "INTERNAL", "DEADLINE_EXCEEDED"].contains(type)
    }
}

/// What may be said of a provider's error message: it can echo what was sent (a key in
/// full, a token), so long runs of key-like characters and every secret given are cut out,
/// and it is kept short.
public enum Redaction {
    public static func scrub(_ text: String, secrets: [String], limit: Int = 300) -> String {
        var text = text
        for secret in secrets where secret.count >= 4 { text = text.replacingUTF8(secret, with: "[redacted]") }
        var out = ""
        var run = ""
        // A long run of key characters that mixes letters and digits looks like a key or a
        // token; a long word of letters alone (an error code) does not.
        func flush() {
            let keyLike = run.count >= 16 && run.contains(where: \.isNumber) && run.contains(where: \.isLetter)
            out += keyLike ? "[redacted]" : run
            run = ""
        }
        for character in text {
            if character.isLetter && character.isASCII || character.isNumber && character.isASCII || "-_.+/=".contains(character) {
                run.append(character)
            } else {
                flush()
                out.append(character.isNewline ? " " : character)
            }
        }
        flush()
        out = out.trimmedWhitespace
        return out.count > limit ? String(out.prefix(limit)) + "…" : out
    }

    /// The error's type and message in a provider's JSON error body (OpenAI, Anthropic,
    /// Gemini shapes), if it has them.
    public static func providerError(in body: Data) -> (code: String?, message: String?) {
        guard let object = try? JSONCoding.parse(body, source: "an error body"), case .object = object else { return (nil, nil) }
        var error = object
        if case .object? = object["error"], let inner = object["error"] { error = inner }
        let code = error["code"]?.stringValue ?? error["type"]?.stringValue ?? error["status"]?.stringValue
        return (code, error["message"]?.stringValue)
    }
}
